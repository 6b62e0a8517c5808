"""The hostile-input corpus (tests/corpus) through the real gate: each file its stage and code."""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import time
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

import msgspec
import pytest
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import STAGES, Gate
from toolgate.gate._records import Message, RequestRecord
from toolgate.gate._signing import signed_message_for

from tests import ROOT
from tests.unit.builders import CONTRACTS

CORPUS = ROOT / "tests" / "corpus"
MANIFEST: dict[str, Any] = json.loads((CORPUS / "manifest.json").read_bytes())
CASES: list[dict[str, Any]] = MANIFEST["cases"]
NOW = datetime.fromisoformat(MANIFEST["now"])
REQUEST_ID: str = MANIFEST["request_id"]
TIME_BOUND_S = 0.5  # CPU seconds per case, gate only; the slowest case takes a few milliseconds
INVALID = {"code": "INVALID_RESPONSE", "retryable": False}
# The parse-policy codes (docs/security.md, Parse policy for hostile input): the corpus exercises each.
PARSE_CODES = {
    "DUPLICATE_KEY",
    "MALFORMED_JSON",
    "NUMBER_OUT_OF_RANGE",
    "NESTING_TOO_DEEP",
    "UNSUPPORTED_CONTENT_TYPE",
    "TEXT_EXTRACTION_FAILED",
}


def corpus_contracts() -> ContractSet:
    """The bundled contracts plus the corpus-only ones (tests/corpus/contracts) and the
    hardening probes (tests/corpus/probes)."""
    return ContractSet(
        [
            *ContractSet.load(CONTRACTS),
            *ContractSet.load(CORPUS / "contracts"),
            *ContractSet.load(CORPUS / "probes"),
        ]
    )


def corpus_message(gate: Gate, case: dict[str, Any], raw: bytes) -> Message:
    """The intake message of a case: its tool's default headers, the case's, a signature
    where the tool's contract asks for one (scheme v2 over the attempt the gate binds,
    unless the case's ``sign`` names another attempt or scheme), then the case's
    ``extra_headers`` pairs as they are (duplicates and case variants)."""
    tool = case["tool"]
    headers: dict[str, str | None] = {"tg-tool": tool, "tg-request-id": REQUEST_ID}
    headers.update(MANIFEST["tools"][tool]["headers"])
    headers.update(case.get("headers", {}))
    contract = gate.contracts.select(tool, headers.get("tg-adapter-version"))
    if contract is not None and contract.spec.signature is not None:
        key = gate.keyring.get(contract.spec.signature.key_id)
        assert key is not None
        sign = case.get("sign", {})
        attempt = int(headers.get("tg-attempt") or corpus_request(case).attempt)
        signed = signed_message_for(
            sign.get("scheme", "v2"), REQUEST_ID, int(sign.get("attempt", attempt)), raw
        )
        headers["tg-signature"] = base64.b64encode(key.sign(signed)).decode()
    pairs = [(k, v.encode()) for k, v in headers.items() if v is not None]
    pairs += [(k, v.encode()) for k, v in case.get("extra_headers", [])]
    return Message(key=REQUEST_ID.encode(), value=raw, origin="corpus/0/0", headers=pairs)


def corpus_request(case: dict[str, Any]) -> RequestRecord:
    """The outstanding request the case answers, so correlation passes where it is reached
    (``request`` in the case changes its attempt or when it was issued)."""
    tool = case["tool"]
    changes = case.get("request", {})
    return RequestRecord(
        request_id=REQUEST_ID,
        tool=tool,
        issued_at=datetime.fromisoformat(changes["issued_at"])
        if "issued_at" in changes
        else NOW - timedelta(minutes=1),
        expires_at=NOW + timedelta(minutes=5),
        bind=MANIFEST["tools"][tool]["bind"],
        attempt=changes.get("attempt", 1),
        max_attempts=3,
    )


def typed(value: Any) -> Any:
    """``value`` with every number tagged by its type: 1 and 1.0 differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (type(value).__name__, value)
    return value


def load_generator() -> ModuleType:
    """tests/corpus/generate.py as a module (the corpus folder is not a package)."""
    spec = importlib.util.spec_from_file_location("corpus_generate", CORPUS / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus_gate() -> Gate:
    return Gate(corpus_contracts(), fixtures_keyring(CONTRACTS))


class TestCorpusCases:
    @pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
    def test_case_gets_its_stage_and_code(self, corpus_gate: Gate, case: dict[str, Any]) -> None:
        """Each corpus file gets its stage and code in time; a rejection tells the agent INVALID_RESPONSE."""
        raw = (CORPUS / case["file"]).read_bytes()
        message = corpus_message(corpus_gate, case, raw)
        request = corpus_request(case)
        started = time.thread_time()  # this thread's CPU time: other processes' load is left out
        verdict = corpus_gate.evaluate(message, request, NOW, lambda rid, attempt: False)
        elapsed = time.thread_time() - started
        assert (verdict.stage, verdict.code) == (case["stage"], case["code"]), verdict.diagnostics
        assert elapsed < TIME_BOUND_S, f"{case['file']} took {elapsed:.3f}s"
        agent = json.loads(verdict.agent)
        if case["stage"] is None:
            assert verdict.accepted
            assert agent["outcome"] == "success"
            expected = case.get("agent")
            if expected is not None:
                assert agent["data"] == expected["data"]
                assert typed(agent["data"]) == typed(expected["data"])
                assert agent.get("untrusted_text") == expected.get("untrusted_text")
        else:
            assert not verdict.accepted
            tool = case["tool"] if case["tool"] in corpus_gate.contracts.tools else None
            assert agent == {"tool": tool, "request_id": REQUEST_ID, "outcome": "failure", "error": INVALID}
        secret = case.get("never_in_diagnostics")
        if secret is not None:
            assert secret not in json.dumps(msgspec.to_builtins(verdict.diagnostics))


class TestManifest:
    def test_every_file_has_one_entry(self) -> None:
        """Each corpus file has exactly one manifest entry and each entry names an existing file."""
        on_disk = sorted(p.name for p in CORPUS.iterdir() if p.name[:3].isdigit())
        named = [c["file"] for c in CASES]
        assert sorted(named) == on_disk
        assert len(set(named)) == len(named)

    def test_entries_name_known_tools_stages_and_codes(self) -> None:
        """Each entry names a tool with defaults, a gate stage, and a code exactly when it has a stage."""
        for case in CASES:
            assert case["tool"] in MANIFEST["tools"], case["file"]
            assert case["stage"] is None or case["stage"] in STAGES, case["file"]
            assert (case["stage"] is None) == (case["code"] is None), case["file"]
            assert case["source"] in ("hand", "generate.py"), case["file"]

    def test_corpus_covers_the_parse_policy(self) -> None:
        """Every parse-stage code of the parse policy has cases, hand-written ones and generated."""
        parse = {c["code"] for c in CASES if c["stage"] == "parse"}
        assert parse == PARSE_CODES
        assert {c["source"] for c in CASES} == {"hand", "generate.py"}

    def test_generated_files_are_current(self) -> None:
        """generate.py --check finds every generated file and the manifest as it would write them."""
        assert load_generator().main(["--check"]) == 0

    def test_corpus_contracts_are_corpus_only(self) -> None:
        """The corpus-only contracts add tools without shadowing a bundled one."""
        bundled = set(ContractSet.load(CONTRACTS).tools)
        extra = set(ContractSet.load(CORPUS / "contracts").tools)
        assert extra == {"wide_report", "token_check", "rule_check"}
        assert not bundled & extra

    def test_signed_tools_are_signed_with_known_keys(self, corpus_gate: Gate) -> None:
        """The contracts that ask for a signature name keys the corpus keyring holds."""
        signed = {
            c.spec.tool: c.spec.signature.key_id
            for c in corpus_gate.contracts
            if c.spec.signature is not None
        }
        assert set(signed) == {"job_status", "deploy_status"}
        assert all(corpus_gate.keyring.get(key_id) is not None for key_id in signed.values())
