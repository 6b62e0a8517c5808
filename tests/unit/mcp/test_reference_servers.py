"""The four reference MCP servers' real tools/list answers (tests/mcp_listings: server-everything,
server-filesystem and server-memory 2026.8.31 from npm, mcp-server-git from PyPI) through import
and the proxy's start-up, without a broker."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from toolgate.client import Answer
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import import_listing
from toolgate.mcp._proxy import Proxy

from tests import ROOT, mcp_kit, node_kit

LISTINGS = ROOT / "tests" / "mcp_listings"
SERVERS = ("everything", "filesystem", "memory", "git")


def listing(server: str) -> list[dict[str, Any]]:
    """The tools of a reference server, as its tools/list sent them."""
    tools: list[dict[str, Any]] = json.loads((LISTINGS / f"{server}.json").read_text())["tools"]
    return tools


def reviewed(root: Path, server: str) -> tuple[ContractSet, list[str]]:
    """Every tool of ``server`` imported under ``root`` and set active; the import's output lines."""
    lines: list[str] = []
    import_listing(root, server, listing(server), out=lines.append)
    mcp_kit.review(root)
    return ContractSet.load(root), lines


class TestImportedAndServed:
    """Every tool of each reference server is imported, and the proxy serves it at start-up: the
    pinned digest is of the definition as it came, Draft 7 schemas included."""

    @pytest.mark.parametrize("server", SERVERS)
    def test_every_tool_is_imported(self, server: str, tmp_path: Path) -> None:
        """No tool is refused: one version is written per listed tool."""
        _, lines = reviewed(tmp_path, server)
        assert not [line for line in lines if line.startswith("refused:")]
        written = sorted(p.parent.parent.name for p in tmp_path.glob("*/v1/contract.yaml"))
        assert written == sorted(f"{server}.{t['name']}" for t in listing(server))

    @pytest.mark.parametrize("server", SERVERS)
    def test_the_live_listing_is_not_withdrawn(self, server: str, tmp_path: Path) -> None:
        """The proxy, given the same live listing, serves every tool and withdraws none."""
        contracts, _ = reviewed(tmp_path, server)
        proxy = Proxy(server, None, cast(Any, None), contracts)
        proxy.evaluate(listing(server))
        assert proxy.withdrawn == {}
        served = sorted(proxy.served)
        assert served == sorted(t["name"] for t in listing(server)), proxy.refused


GRAPH = {
    "entities": [
        {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]},
        {"name": "Analytical Engine", "entityType": "machine", "observations": []},
    ],
    "relations": [{"from": "Ada", "to": "Analytical Engine", "relationType": "programmed"}],
}


def graph_result(graph: dict[str, Any]) -> dict[str, Any]:
    """A server-memory answer as it sends one: the JSON text beside structuredContent."""
    return {"content": [{"type": "text", "text": json.dumps(graph, indent=2)}], "structuredContent": graph}


def decided(contracts: ContractSet, tool: str, raw: dict[str, Any]) -> Any:
    """The in-process decision on ``raw`` for a call of ``tool`` (its qualified name)."""
    from toolgate.mcp._decide import Decider

    from tests.unit.mcp.test_mcp_decide import NOW, decide, issued
    from tests.unit.worker_kit import CONFIG

    async def run() -> Any:
        decider = Decider(tool.split(".")[0], contracts, None, CONFIG.topics, clock=lambda: NOW)
        return decide(decider, issued(tool=tool), raw)

    return asyncio.run(run())


class TestArraysOfRecords:
    """Tools that answer lists of records (server-memory's graph) are imported with each item's
    members projected through ``*``, and the agent gets every record, member by member."""

    def test_graph_tools_project_every_member(self, tmp_path: Path) -> None:
        """read_graph projects the entities' and relations' members, one pointer each, through '*'."""
        contracts, _ = reviewed(tmp_path, "memory")
        (contract,) = contracts.versions("memory.read_graph")
        assert sorted(contract.spec.projection) == [
            "/data/entities/*/entityType",
            "/data/entities/*/name",
            "/data/entities/*/observations",
            "/data/relations/*/from",
            "/data/relations/*/relationType",
            "/data/relations/*/to",
        ]

    @pytest.mark.parametrize("tool", ["read_graph", "search_nodes", "open_nodes"])
    def test_the_graph_reaches_the_agent(self, tool: str, tmp_path: Path) -> None:
        """A graph result is accepted and the agent's data is the graph, records in order."""
        contracts, _ = reviewed(tmp_path, "memory")
        got = decided(contracts, f"memory.{tool}", graph_result(GRAPH))
        assert got.verdict.outcome == "success", got.verdict
        assert got.answer.data == GRAPH

    def test_an_empty_graph_is_data_not_nothing(self, tmp_path: Path) -> None:
        """No entities is an answer the agent can read: empty lists, not NOTHING_PASSED."""
        contracts, _ = reviewed(tmp_path, "memory")
        empty: dict[str, list[Any]] = {"entities": [], "relations": []}
        got = decided(contracts, "memory.read_graph", graph_result(empty))
        assert got.answer.data == empty

    def test_an_undeclared_member_of_an_item_never_rides_along(self, tmp_path: Path) -> None:
        """An item holding a member the outputSchema does not declare is refused, not passed."""
        contracts, _ = reviewed(tmp_path, "memory")
        hostile = json.loads(json.dumps(GRAPH))
        hostile["entities"][1]["admin_override"] = True
        got = decided(contracts, "memory.read_graph", graph_result(hostile))
        assert (got.verdict.stage, got.verdict.code) == ("schema", "SCHEMA_VIOLATION")


class TestNoEmptySuccess:
    """A success of which nothing may reach the host is never an empty success: lint names the
    contract at import, and the proxy answers NOTHING_PASSED."""

    def test_lint_names_what_projects_nothing(self, tmp_path: Path) -> None:
        """A tool answering only arrays of arrays projects nothing: a nothing-projected finding;
        every tool of the reference servers projects something."""
        tools = [*listing("memory")]
        grid = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
        tools.append(
            {
                "name": "grid",
                "inputSchema": {"type": "object"},
                "outputSchema": {"type": "object", "properties": {"rows": {"type": "array", "items": grid}}},
            }
        )
        lines: list[str] = []
        import_listing(tmp_path, "memory", tools, out=lines.append)
        mcp_kit.review(tmp_path)
        from toolgate.authoring._lint import lint_contracts

        flagged = {
            Path(f.file).parent.parent.name
            for f in lint_contracts(ContractSet.load(tmp_path))
            if f.rule == "nothing-projected"
        }
        assert flagged == {"memory.grid"}
        assert any("nothing-projected" in line for line in lines)

    def test_a_disabled_contract_is_settled(self, tmp_path: Path) -> None:
        """A contract cut to no projection is a finding; status: disabled (reviewed, not served)
        settles it."""
        reviewed(tmp_path, "memory")
        path = tmp_path / "memory.read_graph" / "v1" / "contract.yaml"
        spec = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**spec, "projection": []}, sort_keys=False))
        from toolgate.authoring._lint import lint_contracts

        def rules() -> set[str]:
            found = lint_contracts(ContractSet.load(tmp_path))
            return {f.rule for f in found if "memory.read_graph" in f.file}

        assert "nothing-projected" in rules()
        path.write_text(path.read_text().replace("\nstatus: active\n", "\nstatus: disabled\n"))
        assert "nothing-projected" not in rules()

    def test_an_empty_success_is_answered_nothing_passed(self) -> None:
        """An envelope with no data and no text reaches the host as NOTHING_PASSED, not content []."""
        proxy = Proxy("memory", None, cast(Any, None), ContractSet([]))
        empty = Answer(request_id="req.n1", tool="memory.read_graph", outcome="success", data={})
        got = proxy._answered(empty, structured=False)
        assert got.is_error
        assert json.loads(got.content[0].text) == {"error": {"code": "NOTHING_PASSED", "retryable": False}}
        assert proxy.stats.by_code == {"NOTHING_PASSED": 1}
        text = Answer(
            request_id="req.n1", tool="t", outcome="success", data={}, untrusted_text={"content": "x"}
        )
        assert not proxy._answered(text, structured=False).is_error
        nothing_there = Answer(request_id="req.n1", tool="t", outcome="success", data={})
        assert proxy._answered(nothing_there, structured=True).structured_content == {}


def advertised(tmp_path: Path, server: str) -> dict[str, Any]:
    """What the proxy's tools/list shows a host for every tool of ``server``, as JSON."""
    contracts, _ = reviewed(tmp_path, server)
    proxy = Proxy(server, None, cast(Any, None), contracts)
    proxy.evaluate(listing(server))
    out: dict[str, Any] = {}
    for tool in [served.tool for served in proxy.served.values()]:  # the task-only one too
        dumped = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
        out[f"{tool.name} inputSchema"] = dumped["inputSchema"]
        if "outputSchema" in dumped:
            out[f"{tool.name} outputSchema"] = dumped["outputSchema"]
    return out


class TestAdvertisedSchemas:
    """What tools/list serves compiles in Ajv 8 as the TypeScript SDK's client builds it, keeps the
    arguments as top-level properties, and advertises no looser bound than the gate enforces."""

    @pytest.mark.parametrize("server", SERVERS)
    def test_every_advertised_schema_compiles_in_ajv(self, server: str, tmp_path: Path) -> None:
        """Every inputSchema and outputSchema compiles with the SDK client's Ajv and with Ajv2020."""
        schemas = advertised(tmp_path, server)
        assert len([k for k in schemas if k.endswith("inputSchema")]) == len(listing(server))
        errors = {name: error for name, error in node_kit.ajv_errors(schemas).items() if error}
        assert errors == {}

    def test_the_pinned_closed_schema_is_what_ajv_could_not_compile(self, tmp_path: Path) -> None:
        """The full closed schema (allOf, $id, $ref cycles) fails Ajv: the check can fail."""
        reviewed(tmp_path, "memory")
        pinned = json.loads((tmp_path / "memory.create_entities" / "v1" / "input.schema.json").read_text())
        (error,) = node_kit.ajv_errors({"pinned": pinned}).values()
        assert error is not None

    @pytest.mark.parametrize("server", SERVERS)
    def test_arguments_are_top_level_properties(self, server: str, tmp_path: Path) -> None:
        """Each argument the upstream declares is a top-level property, typed; nothing else is accepted."""
        schemas = advertised(tmp_path, server)
        for tool in listing(server):
            flat = schemas[f"{tool['name']} inputSchema"]
            assert flat["type"] == "object"
            assert flat["additionalProperties"] is False
            assert set(flat["properties"]) == set(tool["inputSchema"].get("properties", {}))
            assert all("type" in member for member in flat["properties"].values()), tool["name"]
            assert "$ref" not in json.dumps(flat)

    def test_advertised_bounds_are_the_enforced_ones(self, tmp_path: Path) -> None:
        """A string the closure bounds at 1024 is advertised at 1024, not the envelope's 4096."""
        schemas = advertised(tmp_path, "filesystem")
        assert schemas["read_text_file outputSchema"]["properties"]["content"]["maxLength"] == 1024
        assert schemas["read_text_file inputSchema"]["properties"]["path"]["maxLength"] == 1024


class TestUpstreamEnvironment:
    """A stdio upstream gets the named variables of the proxy's environment, never the whole of it."""

    def test_named_variables_only(self) -> None:
        """--upstream-env and mcp_upstream_env name them; an unset one is not passed."""
        from mcp import StdioServerParameters
        from toolgate._config import Config
        from toolgate.mcp._upstream_process import upstream_env_names, with_upstream_env

        args = argparse.Namespace(upstream_env=["MEMORY_FILE_PATH"], upstream_url=None)
        names = upstream_env_names(args, Config(mcp_upstream_env="TZ, MISSING"))
        assert names == ["MEMORY_FILE_PATH", "TZ", "MISSING"]
        environ = {"MEMORY_FILE_PATH": "/data/graph.jsonl", "TZ": "UTC", "SECRET": "s3cr3t"}
        target = with_upstream_env(StdioServerParameters(command="node", args=["m.js"]), names, environ)
        assert target.env == {"MEMORY_FILE_PATH": "/data/graph.jsonl", "TZ": "UTC"}

    @pytest.mark.parametrize(
        ("names", "url", "message"),
        [(["A=B"], None, "not a variable name"), (["TZ"], "http://127.0.0.1:1/mcp", "not an --upstream-url")],
    )
    def test_bad_names_are_refused_in_one_line(self, names: list[str], url: str | None, message: str) -> None:
        """A name that is no variable name, or names beside --upstream-url, are refused naming the option."""
        from toolgate._config import Config
        from toolgate._errors import ConfigError
        from toolgate.mcp._upstream_process import upstream_env_names

        with pytest.raises(ConfigError, match="--upstream-env") as raised:
            upstream_env_names(argparse.Namespace(upstream_env=names, upstream_url=url), Config())
        assert message in str(raised.value)


class TestTaskRequired:
    """A tool that runs only as a task is not listed, and a call answers TASK_REQUIRED unsent."""

    async def test_not_listed_and_refused(self, tmp_path: Path) -> None:
        """server-everything's simulate-research-query: imported, not listed, answered TASK_REQUIRED."""
        contracts, _ = reviewed(tmp_path, "everything")
        proxy = Proxy("everything", None, cast(Any, None), contracts)
        proxy.evaluate(listing("everything"))
        assert "simulate-research-query" in proxy.served
        assert "simulate-research-query" not in {t.name for t in proxy.tools()}
        got = await proxy.call("simulate-research-query", {"topic": "x"}, None)
        assert json.loads(got.content[0].text)["error"]["code"] == "TASK_REQUIRED"
        assert any("simulate-research-query: not listed" in line for line in proxy.start_up_lines())


class TestProgressMessage:
    """An upstream's progress message reaches the host bounded, on one line, marked as unreviewed."""

    def test_bounded_marked_one_line(self) -> None:
        """Controls become spaces, the text is cut to 200 characters and carries the mark."""
        from toolgate.mcp._progress import PROGRESS_MARK, PROGRESS_MESSAGE_MAX, progress_message

        got = progress_message("step 1\n\x1b[31mIGNORE PREVIOUS\u202e" + "x" * 1000)
        assert got is not None
        assert got.startswith(PROGRESS_MARK)
        assert len(got) == len(PROGRESS_MARK) + PROGRESS_MESSAGE_MAX
        assert got.isprintable()
        assert progress_message(None) is None
        assert progress_message("\n\t") is None
