"""toolgate contracts import-mcp: contracts from an MCP server's tool listing (in-process SDK server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate._errors import ConfigError
from toolgate.gate._contracts import ContractSet, compile_schema, load_contract
from toolgate.tools._mcp_import import (
    check_loopback,
    close_schema,
    fetch_listing,
    import_listing,
    listing_from_json,
    read_listing,
)

from tests import mcp_kit
from tests.properties import DERANDOMIZED


@pytest.fixture(scope="module")
def tools() -> list[dict[str, Any]]:
    """The tools/list answer of the in-process server, fetched by the import's own client."""
    return anyio.run(fetch_listing, mcp_kit.server())


def _import(root: Path, tools: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    lines: list[str] = []
    import_listing(root, mcp_kit.SERVER, tools, out=lines.append, **kwargs)
    return lines


def test_imports_every_tool_with_an_output_schema(tmp_path: Path, tools: list[dict[str, Any]]) -> None:
    lines = _import(tmp_path, tools)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deployer.deploy_status", "deployer.job-runs.list"]
    assert any(line.startswith("skipped: tool 'echo': no outputSchema") for line in lines)
    contracts = ContractSet.load(tmp_path)  # loads: names, mcp section, schema compiles
    deploy = contracts.versions("deployer.deploy_status")[0]
    assert deploy.spec.mcp is not None
    assert (deploy.spec.mcp.server, deploy.spec.mcp.tool) == ("deployer", "deploy_status")
    assert deploy.spec.status == "active"
    assert deploy.spec.projection == ("/data/environment", "/data/revision", "/data/state", "/data/note")
    data = deploy.schema["$defs"]["structuredContent"]
    assert data["additionalProperties"] is False
    assert data["properties"]["note"]["maxLength"] == 1024
    runs = contracts.versions("deployer.job-runs.list")[0].schema["$defs"]["structuredContent"]
    assert runs["properties"]["runs"]["items"] == {"$ref": "#/$defs/structuredContent/$defs/run"}
    assert runs["properties"]["runs"]["maxItems"] == 100
    assert runs["$defs"]["run"]["additionalProperties"] is False


def test_imported_contract_passes_lint(tmp_path: Path, tools: list[dict[str, Any]]) -> None:
    """After closing, nothing is left for lint to report on these tools."""
    from toolgate.tools._lint import lint_contracts

    lines = _import(tmp_path, tools)
    assert lint_contracts(ContractSet.load(tmp_path)) == []
    assert lines.count("  lint: clean") == 2


def test_lint_findings_still_to_settle_are_printed(tmp_path: Path) -> None:
    """What closing cannot settle (a free-form map, an untyped value) is printed for a person."""
    tool = {
        "name": "labels",
        "outputSchema": {
            "type": "object",
            "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "raw": {},
            },
        },
    }
    lines = _import(tmp_path, [tool])
    assert "  lint: 2 findings to settle" in lines
    assert any("free-form-map" in line for line in lines)
    assert any("untyped-value" in line for line in lines)


def test_never_overwrites_writes_next_version_and_shows_diff(
    tmp_path: Path, tools: list[dict[str, Any]]
) -> None:
    _import(tmp_path, tools, only=["deploy_status"])
    v1 = tmp_path / "deployer.deploy_status" / "v1"
    before = {p: p.read_bytes() for p in v1.rglob("*") if p.is_file()}
    changed = json.loads(json.dumps(tools))
    deploy = next(t for t in changed if t["name"] == "deploy_status")
    deploy["outputSchema"]["properties"]["state"]["enum"].append("paused")
    lines = _import(tmp_path, changed, only=["deploy_status"])
    assert {p: p.read_bytes() for p in v1.rglob("*") if p.is_file()} == before
    v2 = load_contract(tmp_path / "deployer.deploy_status" / "v2")
    assert v2.spec.status == "shadow"  # evaluated beside v1, never deciding until promoted
    assert f"  toolgate contracts diff {v1} {v2.folder}" in lines
    assert any("paused" in line and line.strip().startswith("widens") for line in lines)


def test_saved_listing_and_jsonrpc_response(tmp_path: Path, tools: list[dict[str, Any]]) -> None:
    saved = tmp_path / "tools.json"
    saved.write_text(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}))
    assert read_listing(saved) == tools
    saved.write_text("[1]")
    with pytest.raises(ConfigError, match="not a tools/list answer"):
        read_listing(saved)
    saved.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        read_listing(saved)
    assert listing_from_json({"tools": []}, "x") == []


def test_bad_names_are_refused(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    lines = _import(
        tmp_path, [{"name": "has space", "outputSchema": schema}, {"name": "x" * 129, "outputSchema": schema}]
    )
    assert sum(line.startswith("skipped:") for line in lines) == 2
    with pytest.raises(ConfigError, match="--server"):
        import_listing(tmp_path, "Bad.Server", [], out=lambda _l: None)
    with pytest.raises(ConfigError, match="no such tool"):
        import_listing(tmp_path, "deployer", [], only=["missing"], out=lambda _l: None)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/mcp", "http://localhost/mcp", "https://[::1]:9/mcp", "http://127.9.9.9/"]
)
def test_loopback_urls_pass(url: str) -> None:
    check_loopback(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/mcp",
        "http://example.com/mcp",
        "ftp://127.0.0.1/",
        "http://127.0.0.1.example.com/",
        "file:///etc/passwd",
    ],
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match=url.split("/")[0]):
        check_loopback(url)


def test_allof_is_closed_over_the_composition() -> None:
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"type": "object", "properties": {"b": {"type": "integer"}}},
        ]
    }
    closed = close_schema(schema, max_string=10, max_items=5)
    assert closed["unevaluatedProperties"] is False
    assert all("additionalProperties" not in branch for branch in closed["allOf"])
    validator = compile_schema(closed)
    assert validator.is_valid({"a": "x", "b": 1})
    assert not validator.is_valid({"a": "x", "b": 1, "c": 2})


# --- anything the imported contract accepts, the original outputSchema accepts ----------------


def _values(schema: Any, root: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped like ``schema`` (and near misses: extra members, long strings, wrong types)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=4),
    )
    if depth > 6 or not isinstance(schema, dict):
        return scalars
    if "$ref" in schema:
        target = root
        for token in schema["$ref"][2:].split("/"):
            target = target[token]
        return _values(target, root, depth + 1)
    shaped: list[st.SearchStrategy[Any]] = []
    if "enum" in schema:
        shaped.append(st.sampled_from(schema["enum"]))
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        fields = {name: _values(sub, root, depth + 1) for name, sub in props.items()}
        shaped.append(
            st.fixed_dictionaries(
                {n: fields[n] for n in schema.get("required", []) if n in fields},
                optional={
                    **{n: s for n, s in fields.items() if n not in schema.get("required", [])},
                    "unexpected": scalars,
                },
            )
        )
    if kind == "array":
        shaped.append(st.lists(_values(schema.get("items", {}), root, depth + 1), max_size=4))
    if kind == "string" and "enum" not in schema:
        if "pattern" in schema:
            shaped.append(st.from_regex(schema["pattern"]))
        shaped.append(st.text(max_size=20))
        shaped.append(st.text(min_size=1020, max_size=1030))  # around the bound import adds
    if kind in ("integer", "number"):
        shaped.append(st.integers(-5, 5))
    # Mostly shaped values, sometimes a value of another type.
    return st.one_of(*shaped, *shaped, *shaped, scalars) if shaped else scalars


@pytest.mark.parametrize("name", ["deploy_status", "job-runs.list"])
def test_imported_contract_accepts_only_what_the_output_schema_accepts(
    tmp_path: Path, tools: list[dict[str, Any]], name: str
) -> None:
    _import(tmp_path, tools, only=[name])
    contract = ContractSet.load(tmp_path).versions(f"deployer.{name}")[0]
    original = next(t for t in tools if t["name"] == name)["outputSchema"]
    sdk_check = jsonschema.Draft202012Validator(original)  # how the SDK validates: no format
    accepted = 0

    @settings(DERANDOMIZED, max_examples=400)
    @given(_values(original, original))
    def check(value: Any) -> None:
        nonlocal accepted
        envelope = {
            "tool": contract.spec.tool,
            "request_id": "req.mcpimport01",
            "outcome": "success",
            "data": value,
        }
        if contract.validator.is_valid(envelope):
            accepted += 1
            assert sdk_check.is_valid(value), value

    check()
    assert accepted > 0  # the property was exercised, not vacuous


class _Server:
    """The test MCP server over streamable HTTP on 127.0.0.1 (a free port), in a thread."""

    def __init__(self) -> None:
        import threading

        import uvicorn

        app = mcp_kit.server().streamable_http_app()
        started = threading.Event()

        class Server(uvicorn.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                started.set()

        self.server = Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        assert started.wait(30), "the MCP server did not start"
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def test_import_from_a_streamable_http_server_on_the_loopback(tmp_path: Path) -> None:
    """`toolgate contracts import-mcp --url` against the SDK's streamable HTTP server."""
    import subprocess
    import sys

    server = _Server()
    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "toolgate"),
                "contracts",
                "import-mcp",
                "--server",
                "deployer",
                "--url",
                f"http://127.0.0.1:{server.port}/mcp",
                "--contracts",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert "2 contract versions written" in done.stdout
    assert ContractSet.load(tmp_path).tools == ["deployer.deploy_status", "deployer.job-runs.list"]


def test_import_from_a_stdio_command_then_next_version(tmp_path: Path) -> None:
    """`--command` starts the server over stdio; a second import writes v2 and prints the diff."""
    import subprocess
    import sys

    from tests.ops_catalog import ROOT

    argv = [
        str(Path(sys.executable).parent / "toolgate"),
        "contracts",
        "import-mcp",
        "--server",
        "deployer",
        "--command",
        f"{sys.executable} -m tests.mcp_kit",
        "--tool",
        "deploy_status",
        "--contracts",
        str(tmp_path),
    ]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert second.returncode == 0, second.stderr
    folder = tmp_path / "deployer.deploy_status"
    assert f"wrote {folder / 'v2'} (shadow)" in second.stdout
    assert f"toolgate contracts diff {folder / 'v1'} {folder / 'v2'}" in second.stdout
    bad = subprocess.run(
        [*argv[:6], "/nonexistent/server", *argv[7:]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1
    assert "Traceback" not in bad.stderr
