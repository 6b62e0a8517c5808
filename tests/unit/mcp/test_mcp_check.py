"""MCP results of the SDK's own server through `toolgate check`, beside the SDK client's verdict.

The contract is the one `toolgate contracts import-mcp` writes for the server's
``deploy_status`` tool. For each result the test records what the MCP SDK's client-side
validation says (``Client.call_tool``) and what toolgate decides; where toolgate is
stricter, :data:`STRICTER` says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from toolgate.authoring._fixtures import fixtures_keyring, iter_outcomes
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import fetch_listing, import_listing

from tests import mcp_kit

TOOLGATE = str(Path(sys.executable).parent / "toolgate")
TOOL = "deployer.deploy_status"
REQUEST_ID = "req.mcpcheck001"
NOW = "2026-05-01T09:15:00Z"
# case -> (SDK client accepts?, toolgate verdict: "success" / "failure" / "<stage>/<code>")
EXPECTED: dict[str, tuple[bool, str]] = {
    "ok": (True, "success"),
    "error": (True, "failure"),
    "banner": (False, "schema/SCHEMA_VIOLATION"),
    "mismatch": (True, "parse/CONFLICTING_VIEWS"),
    "input_required": (False, "parse/RESULT_NOT_COMPLETE"),
    "oversized": (True, "limits/PAYLOAD_TOO_LARGE"),
    "extra": (True, "schema/SCHEMA_VIOLATION"),
    "trace": (True, "success"),
}
STRICTER = {
    "mismatch": "the text block's JSON says failed while structuredContent says healthy: two views "
    "of one result that differ; the SDK never compares them",
    "oversized": "139 KB of text: toolgate bounds the bytes before parsing, the SDK has no size limit",
    "extra": "approve_production is a member the outputSchema leaves open: the imported contract is "
    "closed, the SDK validates the open schema",
}


@pytest.fixture(scope="module")
def contracts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("contracts")
    tools = anyio.run(fetch_listing, mcp_kit.server())
    import_listing(root, mcp_kit.SERVER, tools, only=["deploy_status"], out=lambda _line: None)
    mcp_kit.pass_text(Path(root))
    mcp_kit.review(Path(root))
    return root


def _check(contracts: Path, tmp: Path, value: dict[str, Any]) -> dict[str, Any]:
    return mcp_kit.toolgate_check(contracts, tmp, value, tool=TOOL, request_id=REQUEST_ID, now=NOW)


@pytest.mark.parametrize("case", mcp_kit.CASES)
def test_check_against_the_sdk_verdict(contracts_dir: Path, tmp_path: Path, case: str) -> None:
    wire, sdk_problem = mcp_kit.wire(case)
    sdk_accepts, verdict = EXPECTED[case]
    assert (sdk_problem is None) == sdk_accepts, sdk_problem
    line = _check(contracts_dir, tmp_path, wire)
    got = line["agent"]["outcome"] if line["outcome"] != "rejected" else f"{line['stage']}/{line['code']}"
    assert got == verdict
    if sdk_accepts and line["outcome"] == "rejected":
        assert case in STRICTER  # every case where toolgate is stricter says why
    agent = line["agent"]
    assert "_meta" not in json.dumps(agent)
    if case == "ok":
        assert agent["data"] == mcp_kit.GOOD
        assert "untrusted_text" not in agent  # the JSON text is the same view: dropped
    if case == "error":
        assert agent["error"] == {"code": "TOOL_ERROR", "retryable": False}


def test_generated_fixtures_pass_contracts_test(contracts_dir: Path) -> None:
    contracts = ContractSet.load(contracts_dir)
    outcomes = list(iter_outcomes(contracts, fixtures_keyring(contracts_dir)))
    assert len(outcomes) >= 7
    assert [o.problem for o in outcomes if not o.ok] == []
    kinds = {o.case.path.name for o in outcomes}
    assert {"example.json", "tool-error.json", "conflicting-views.json", "input-required.json"} <= kinds


def test_text_blocks_reach_the_agent_as_bounded_untrusted_text(contracts_dir: Path, tmp_path: Path) -> None:
    value = {
        "content": [{"type": "text", "text": "Deploy is healthy. " * 200}],
        "structuredContent": mcp_kit.GOOD,
    }
    agent = _check(contracts_dir, tmp_path, value)["agent"]
    assert agent["outcome"] == "success"
    assert len(agent["untrusted_text"]["content"]) == 1000
    assert "Deploy is healthy" not in json.dumps(agent["data"])


@pytest.mark.parametrize(
    ("raw", "verdict", "sdk_reads"),
    [
        # the SDK's JSON parse keeps the last duplicate: healthy
        (
            b'{"content":[],"structuredContent":{"environment":"staging","revision":"a83f19c",'
            b'"state":"failed","state":"healthy"}}',
            "parse/DUPLICATE_KEY",
            {"environment": "staging", "revision": "a83f19c", "state": "healthy"},
        ),
        # and takes NaN as a number
        (
            b'{"content":[],"structuredContent":{"environment":"staging","revision":"a83f19c",'
            b'"state":"healthy","score":NaN}}',
            "parse/MALFORMED_JSON",
            None,
        ),
    ],
)
def test_wire_json_the_sdk_parses_and_toolgate_rejects(
    contracts_dir: Path, tmp_path: Path, raw: bytes, verdict: str, sdk_reads: Any
) -> None:
    import mcp.types as types

    parsed = types.CallToolResult.model_validate_json(raw)  # what an SDK client decodes off the wire
    if sdk_reads is not None:
        assert parsed.structured_content == sdk_reads
    request = {
        "request_id": REQUEST_ID,
        "tool": TOOL,
        "issued_at": "2026-05-01T09:14:00Z",
        "expires_at": "2026-05-01T09:20:00Z",
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    (tmp_path / "result.json").write_bytes(raw)
    done = subprocess.run(
        [
            TOOLGATE,
            "check",
            "--contracts",
            str(contracts_dir),
            "--request",
            str(tmp_path / "request.json"),
            "--now",
            NOW,
            str(tmp_path / "result.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = json.loads(done.stdout)
    assert f"{line['stage']}/{line['code']}" == verdict
