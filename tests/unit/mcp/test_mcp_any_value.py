"""MCP 2026-07-28: ``structuredContent`` may be any JSON value. A tool whose ``outputSchema``
does not say ``"type": "object"`` is imported with ``structured_content: value``: its
contract's ``data`` is ``{"value": structuredContent}``, decided as any other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from toolgate._errors import RejectedInput
from toolgate.authoring._fixtures import fixtures_keyring, iter_outcomes
from toolgate.gate._contracts import ContractSet
from toolgate.gate._mcp import read_result
from toolgate.mcp._import import import_listing

from tests import mcp_kit

SERVER = "vals"
ENTITY = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
    "required": ["name"],
}
TOOLS: list[dict[str, Any]] = [
    {
        "name": "list_files",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "array", "items": {"$ref": "#/$defs/entry"}, "$defs": {"entry": ENTITY}},
    },
    {
        "name": "read_file",
        "inputSchema": {"type": "object"},
        "outputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "string"},
    },
    {"name": "count", "inputSchema": {"type": "object"}, "outputSchema": {"type": "integer"}},
    {
        "name": "tags",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": {"$ref": "#/definitions/tag"},
            "definitions": {"tag": {"type": "string", "maxLength": 8}},
        },
    },
]
READ: dict[str, Any] = {**mcp_kit.READ, "text_max_length": 100}


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    lines: list[str] = []
    import_listing(tmp_path, SERVER, TOOLS, out=lines.append)
    return tmp_path


def _fixture(root: Path, tool: str, kind: str, name: str, value: Any, **expect: Any) -> None:
    folder = root / f"{SERVER}.{tool}" / "v1" / "fixtures" / kind
    body: dict[str, Any] = {"description": name, "value": value}
    if expect:
        body["expect"] = expect
    (folder / f"{name}.json").write_text(json.dumps(body))


class TestImportWrapsAnyValue:
    """An outputSchema that is not an object schema is imported, not refused: data wraps the value."""

    def test_every_tool_is_written_with_structured_content_value(self, imported: Path) -> None:
        """Each tool gets a contract saying structured_content: value, projecting under /data/value."""
        contracts = ContractSet.load(imported)
        assert contracts.tools == [f"{SERVER}.{t}" for t in ("count", "list_files", "read_file", "tags")]
        for contract in contracts:
            assert contract.spec.mcp is not None
            assert contract.spec.mcp.structured_content == "value"
        projections = {c.spec.tool: list(c.spec.projection) for c in contracts}
        assert projections[f"{SERVER}.list_files"] == ["/data/value/*/name", "/data/value/*/size"]
        assert projections[f"{SERVER}.read_file"] == ["/data/value"]
        assert projections[f"{SERVER}.count"] == ["/data/value"]
        assert projections[f"{SERVER}.tags"] == ["/data/value"]

    def test_the_fixtures_decide_as_written(self, imported: Path) -> None:
        """Generated fixtures pass, arrays, strings and numbers are accepted and the wrong shape refused."""
        _fixture(
            imported, "list_files", "accept", "two", {"content": [], "structuredContent": [{"name": "a"}]}
        )
        _fixture(imported, "read_file", "accept", "text", {"content": [], "structuredContent": "hello"})
        _fixture(imported, "count", "accept", "n", {"content": [], "structuredContent": 3})
        _fixture(imported, "tags", "accept", "tags", {"content": [], "structuredContent": ["a", "b"]})
        _fixture(
            imported, "tags", "reject", "long", {"content": [], "structuredContent": ["a" * 9]},
            stage="schema", code="SCHEMA_VIOLATION",
        )  # fmt: skip
        _fixture(
            imported, "count", "reject", "object", {"content": [], "structuredContent": {"value": 3}},
            stage="schema", code="SCHEMA_VIOLATION",
        )  # fmt: skip
        for path in imported.glob("*/v*/contract.yaml"):
            spec = yaml.safe_load(path.read_text())
            path.write_text(yaml.safe_dump({**spec, "status": "active"}, sort_keys=False))
        contracts = ContractSet.load(imported)
        outcomes = list(iter_outcomes(contracts, fixtures_keyring(imported)))
        assert [o.problem for o in outcomes if not o.ok] == []
        added = ("two.json", "text.json", "n.json", "tags.json")
        data = {
            o.case.path.name: json.loads(o.verdict.agent)["data"]
            for o in outcomes
            if o.case.path.name in added
        }
        assert data == {
            "two.json": {"value": [{"name": "a"}]},
            "text.json": {"value": "hello"},
            "n.json": {"value": 3},
            "tags.json": {"value": ["a", "b"]},
        }


class TestTheGateReadsAnyValue:
    """With structured_content value, structuredContent of any JSON type is data's value;
    without, only an object is read."""

    @pytest.mark.parametrize("value", [[1, 2], "text", 3, 2.5, True, None, {"a": 1}])
    def test_wrapped(self, value: Any) -> None:
        """The envelope's data is {"value": structuredContent}."""
        read = read_result({"content": [], "structuredContent": value}, **READ, wrap_value=True)
        assert read.envelope["data"] == {"value": value}

    def test_a_text_that_is_the_value_is_the_same_view(self) -> None:
        """A text block holding the value's JSON, or the string itself, is dropped, not passed."""
        read = read_result({"content": [{"type": "text", "text": "[1,2]"}], "structuredContent": [1, 2]},
                           **READ, wrap_value=True)  # fmt: skip
        assert read.text is None
        read = read_result({"content": [{"type": "text", "text": "hi"}], "structuredContent": "hi"},
                           **READ, wrap_value=True)  # fmt: skip
        assert read.text is None

    def test_an_object_contract_still_refuses_an_array(self) -> None:
        """A contract of an object outputSchema keeps MALFORMED_ENVELOPE for another type."""
        with pytest.raises(RejectedInput) as raised:
            read_result({"content": [], "structuredContent": [1]}, **READ)
        assert raised.value.code == "MALFORMED_ENVELOPE"


class TestTheProxyServesAnyValue:
    """Through mcp-proxy, deciding in process, a tool answering an array structuredContent is
    served: the host gets the projected data, {"value": [...]}, never MALFORMED_ENVELOPE."""

    async def test_an_array_reaches_the_host_wrapped(self, gate: Any, tmp_path: Path) -> None:
        """deploy_list's [deployment] is decided and answered as {"value": [deployment]}."""
        from mcp import Client as McpClient
        from toolgate.client import Client
        from toolgate.mcp._decide import Decider
        from toolgate.mcp._proxy import Proxy

        from tests import hostile_mcp
        from tests.unit.mcp.test_mcp_hostile import hook, hostile
        from tests.unit.worker_kit import CONFIG, World

        world = World()
        world.gate = gate
        hook()
        import_listing(tmp_path, mcp_kit.SERVER, [hostile_mcp.VALUES_TOOL], out=lambda _line: None)
        mcp_kit.pin(tmp_path, [hostile_mcp.VALUES_TOOL])
        mcp_kit.review(tmp_path)
        contracts = ContractSet.load(tmp_path)
        (contract,) = list(contracts)
        assert contract.spec.mcp is not None
        assert contract.spec.mcp.structured_content == "value"
        decider = Decider(mcp_kit.SERVER, contracts, None, CONFIG.topics)
        async with (
            Client(CONFIG, clients=world.clients, answers=False) as client,
            McpClient(hostile("values")) as up,
        ):
            proxy = Proxy(mcp_kit.SERVER, up, client, contracts, decider=decider)
            assert await proxy.load_tools() == ["deploy_list"]
            async with McpClient(proxy.mcp_server()) as host:
                listed = {tool.name: tool for tool in (await host.list_tools()).tools}
                result = await host.call_tool("deploy_list", {})
        assert not result.is_error, result
        assert result.structured_content == {"value": [hostile_mcp.GOOD]}
        schema = listed["deploy_list"].output_schema
        assert schema is not None
        assert schema["type"] == "object"
        assert set(schema["properties"]) == {"value"}
