"""toolgate mcp-proxy without a broker: its answers, bounds and options, over the fake Kafka seam."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client as McpClient
from mcp.server import Server
from toolgate._errors import ConfigError
from toolgate.client import Answer, Client
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import import_listing
from toolgate.mcp._proxy import (
    Proxy,
    ProxyOptions,
    call_arguments_bind,
    host_result,
    no_tools_served,
    parse_listen,
    upstream_target,
)

from tests import mcp_kit
from tests.unit.worker_kit import CONFIG, World

T = CONFIG.topics


class Upstream:
    """A real MCP server of the SDK (tests/mcp_kit.py's tools and results), connected in-process
    with the SDK's client: ``tools`` is what it lists (change it to change a definition),
    ``release`` holds its tool calls, ``fail`` makes them a protocol error."""

    def __init__(self) -> None:
        self.tools: list[types.Tool] = list(mcp_kit.TOOLS)
        self.release = asyncio.Event()
        self.release.set()
        self.calls = 0
        self.fail: str | None = None

    def server(self) -> Server[Any]:
        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.tools)

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> Any:
            self.calls += 1
            await self.release.wait()
            if self.fail is not None:
                raise ValueError(self.fail)
            return mcp_kit._result(str((params.arguments or {}).get("case", "ok")))

        return Server(mcp_kit.SERVER, on_list_tools=list_tools, on_call_tool=call_tool)

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[McpClient]:
        async with McpClient(self.server()) as client:
            yield client


def imported(root: Path, only: list[str], *, pin: bool = True, review: bool = True) -> ContractSet:
    """mcp_kit's tools imported under ``root``, pinned to their listed definitions, reviewed."""
    import_listing(root, mcp_kit.SERVER, mcp_kit.listing_json(), only=only, out=lambda _line: None)
    if pin:
        mcp_kit.pin(root, mcp_kit.listing_json())
    if review:
        mcp_kit.review(root)
    return ContractSet.load(root)


@pytest.fixture
def proxy_contracts(tmp_path: Path) -> ContractSet:
    return imported(tmp_path, ["deploy_status"])


@pytest.fixture
def world(gate: Any) -> World:
    w = World()
    w.gate = gate
    return w


def answer_all(world: World) -> int:
    """Play the worker: an accepted envelope for every result on intake not answered yet."""
    answered = {r.key for p in world.broker.logs[T.agent] for r in p}
    count = 0
    for partition in world.broker.logs[T.intake]:
        for record in partition:
            if record.key in answered:
                continue
            rid = (record.key or b"").decode()
            envelope = {"tool": "deployer.deploy_status", "request_id": rid, "outcome": "success",
                        "data": mcp_kit.GOOD}  # fmt: skip
            world.broker.append(T.agent, json.dumps(envelope).encode(), key=record.key)
            count += 1
    return count


async def answering(world: World, stop: asyncio.Event) -> None:
    while not stop.is_set():
        answer_all(world)
        await world.broker.wait_for_change(0.05)


def intake_records(world: World) -> list[Any]:
    return [r for p in world.broker.logs[T.intake] for r in p]


def code_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    code: str = json.loads(block.text)["error"]["code"]
    return code


class TestCalls:
    """The proxy's answers come from envelopes; its own failures are fixed codes."""

    async def test_listing_and_a_call_answered_from_the_envelope(
        self, world: World, proxy_contracts: ContractSet
    ) -> None:
        """Only the contracted tool is listed, with its closed schema; the answer is the envelope's."""
        upstream = Upstream()
        stop = asyncio.Event()
        async with Client(CONFIG, clients=world.clients) as client, upstream.connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, proxy_contracts)
            assert await proxy.load_tools() == ["deploy_status"]
            (tool,) = proxy.tools()
            assert tool.output_schema["additionalProperties"] is False
            worker = asyncio.create_task(answering(world, stop))
            result = await proxy.call("deploy_status", {"case": "ok"}, {"traceparent": mcp_kit.TRACEPARENT})
            stop.set()
            await worker
        assert result.structured_content == mcp_kit.GOOD
        (intake,) = intake_records(world)
        assert dict(intake.headers)["traceparent"] == mcp_kit.TRACEPARENT.encode()
        assert dict(intake.headers)["tg-adapter"] == b"mcp-proxy"

    async def test_a_text_only_tool_is_served_without_a_schema_and_answered_with_text(
        self, world: World, tmp_path: Path
    ) -> None:
        """Reviewed, the text-only tool is listed with no output schema; its answer is the
        envelope's untrusted text only, not the envelope's empty data."""
        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients) as client, upstream.connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, imported(tmp_path, ["echo"]))
            assert await proxy.load_tools() == ["echo"]
            (tool,) = proxy.tools()
            assert tool.output_schema is None
            call = asyncio.create_task(proxy.call("echo", {"text": "hi"}, None))
            while not intake_records(world):
                await world.broker.wait_for_change(0.05)
            (intake,) = intake_records(world)
            rid = (intake.key or b"").decode()
            envelope = {"tool": "deployer.echo", "request_id": rid, "outcome": "success", "data": {},
                        "untrusted_text": {"content": "hi"}}  # fmt: skip
            world.broker.append(T.agent, json.dumps(envelope).encode(), key=intake.key)
            result = await call
        assert result.structured_content is None
        assert [b.text for b in result.content] == ["hi"]

    async def test_fixed_codes_for_what_the_gate_never_saw(
        self, world: World, proxy_contracts: ContractSet
    ) -> None:
        """Unknown tool, upstream error, no decision in time: fixed codes only."""
        upstream = Upstream()
        options = ProxyOptions(wait_s=0.01, upstream_timeout_s=5)
        async with Client(CONFIG, clients=world.clients) as client, upstream.connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, proxy_contracts, options=options)
            await proxy.load_tools()
            unknown = await proxy.call("no_such_tool", {}, None)
            upstream.fail = "upstream secret text"
            failed = await proxy.call("deploy_status", {}, None)
            upstream.fail = None
            slow = await proxy.call("deploy_status", {}, None)  # no worker: the wait ends
        assert [code_of(r) for r in (unknown, failed, slow)] == [
            "UNKNOWN_TOOL",
            "UPSTREAM_ERROR",
            "GATE_TIMEOUT",
        ]
        assert "secret" not in failed.model_dump_json()
        assert proxy.stats.by_code == {"UNKNOWN_TOOL": 1, "UPSTREAM_ERROR": 1, "GATE_TIMEOUT": 1}

    async def test_calls_beyond_the_bounds_are_busy_at_once(
        self, world: World, proxy_contracts: ContractSet
    ) -> None:
        """One in flight and one queued: a third call is PROXY_BUSY without waiting."""
        upstream = Upstream()
        upstream.release.clear()
        options = ProxyOptions(max_concurrent=1, max_queued=1, wait_s=0.01)
        async with Client(CONFIG, clients=world.clients) as client, upstream.connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, proxy_contracts, options=options)
            await proxy.load_tools()
            first = asyncio.create_task(proxy.call("deploy_status", {}, None))
            second = asyncio.create_task(proxy.call("deploy_status", {}, None))
            while upstream.calls < 1:  # noqa: ASYNC110 - the upstream has no event for it
                await asyncio.sleep(0)
            third = await proxy.call("deploy_status", {}, None)
            block = third.content[0]
            assert isinstance(block, types.TextContent)
            assert json.loads(block.text)["error"] == {"code": "PROXY_BUSY", "retryable": True}
            upstream.release.set()
            await asyncio.gather(first, second)
        assert upstream.calls == 2

    async def test_broker_outage_is_a_fixed_code(self, world: World, proxy_contracts: ContractSet) -> None:
        """The request record cannot be sent: BROKER_UNAVAILABLE, and the upstream is not left running."""
        from aiokafka.errors import KafkaConnectionError

        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients) as client, upstream.connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, proxy_contracts)
            await proxy.load_tools()
            world.broker.fail("send", KafkaConnectionError("down"))
            result = await proxy.call("deploy_status", {}, None)
        assert code_of(result) == "BROKER_UNAVAILABLE"

    async def test_a_signed_contract_without_its_key_is_refused(
        self, world: World, proxy_contracts: ContractSet, tmp_path: Path
    ) -> None:
        """A contract that requires a signature the keyring cannot make stops the start, naming the key."""
        path = tmp_path / "deployer.deploy_status" / "v1" / "contract.yaml"
        text = "signature:\n  algorithm: hmac-sha256\n  key_id: nowhere-2026\n"
        await asyncio.to_thread(lambda: path.write_text(path.read_text() + text))
        async with Client(CONFIG, clients=world.clients) as client, Upstream().connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, ContractSet.load(tmp_path))
            with pytest.raises(ConfigError, match=r"'nowhere-2026'.*--keyring or TOOLGATE_KEYRING"):
                await proxy.load_tools()


class TestHostResult:
    """The host's CallToolResult is built from the envelope alone."""

    def test_success_failure_and_display_text(self) -> None:
        """Data and its JSON; a failure's fixed code; display text as its own block."""
        ok = host_result(Answer(request_id="req.a1", tool="t", outcome="success", data={"a": 1},
                                untrusted_text={"content": "shown"}))  # fmt: skip
        assert ok.structured_content == {"a": 1}
        assert [b.text for b in ok.content] == ['{"a":1}', "shown"]
        bad = host_result(Answer(request_id="req.a1", tool="t", outcome="failure", code="INVALID_RESPONSE"))
        assert bad.is_error
        assert json.loads(bad.content[0].text) == {"error": {"code": "INVALID_RESPONSE", "retryable": False}}
        assert isinstance(bad, types.CallToolResult)

    def test_text_only_success_is_its_bounded_text_alone(self) -> None:
        """A text-only contract's envelope (``data: {}`` and untrusted_text): no structuredContent,
        no ``{}`` block, only the gate's text."""
        answer = Answer(request_id="req.a1", tool="t", outcome="success", data={},
                        untrusted_text={"content": "shown"})  # fmt: skip
        got = host_result(answer, structured=False)
        assert got.structured_content is None
        assert [b.text for b in got.content] == ["shown"]
        assert not got.is_error
        bare = host_result(
            Answer(request_id="req.a1", tool="t", outcome="success", data={}), structured=False
        )
        assert bare.content == []
        assert bare.structured_content is None

    def test_nothing_served_says_what_to_do(self, tmp_path: Path) -> None:
        """Drafts only: name them and the review step; a wrong --server: name the servers there
        are, the folder whole, and a server name import would take."""
        import_listing(tmp_path, mcp_kit.SERVER, mcp_kit.listing_json(), out=lambda _line: None)
        contracts = ContractSet.load(tmp_path)
        drafts = no_tools_served(contracts, mcp_kit.SERVER, "contracts")
        assert "only drafts (deployer.deploy_status, deployer.echo, deployer.job-runs.list)" in drafts
        assert "set status: active" in drafts
        other = no_tools_served(contracts, "billing", str(tmp_path))
        assert other.startswith(f"{tmp_path.resolve()}: no contract of MCP server 'billing'")
        assert "the servers there are: deployer" in other
        assert "import-mcp --server billing" in other
        bad = no_tools_served(contracts, "My.Time", "contracts")
        assert "a server name matches" in bad
        assert "import-mcp" not in bad
        assert str(Path("contracts").resolve()) in bad

    def test_bind_takes_only_what_a_request_record_can_hold(self) -> None:
        """Strings, integers, booleans and lists of strings; nothing nested."""
        got = call_arguments_bind(
            {"a": "x", "b": 2, "c": True, "d": ["p"], "e": {"n": 1}, "f": [1], "g": 1.5}
        )
        assert got == {"a": "x", "b": 2, "c": True, "d": ["p"]}


class TestOptions:
    """Where the proxy listens and what it connects to, refused in one line when wrong."""

    def test_listen(self) -> None:
        """stdio, an HTTP URL on the loopback, and nothing else unless allowed."""
        assert parse_listen("stdio", allow_remote=False).stdio
        http = parse_listen("http://127.0.0.1:8100/mcp", allow_remote=False)
        assert (http.host, http.port, http.path) == ("127.0.0.1", 8100, "/mcp")
        with pytest.raises(ConfigError, match=r"--listen .*loopback.*--allow-remote"):
            parse_listen("http://0.0.0.0:8100/mcp", allow_remote=False)
        assert parse_listen("http://0.0.0.0:8100/mcp", allow_remote=True).host == "0.0.0.0"
        with pytest.raises(ConfigError, match="HOST:PORT"):
            parse_listen("http://localhost/mcp", allow_remote=False)

    def test_upstream(self) -> None:
        """A URL off the loopback is refused; a command is split as a shell would."""
        import argparse

        args = argparse.Namespace(
            upstream_url="http://10.1.2.3:8000/mcp", upstream_command=None, allow_remote=False
        )
        with pytest.raises(ConfigError, match="--upstream-url"):
            upstream_target(args)
        args = argparse.Namespace(
            upstream_url=None, upstream_command="python -m 'my server'", allow_remote=False
        )
        target = upstream_target(args)
        assert (target.command, target.args) == ("python", ["-m", "my server"])

    @pytest.mark.parametrize(
        ("flag", "value"),
        [
            ("--timeout", "0"),
            ("--timeout", "nan"),
            ("--ttl", "nan"),
            ("--ttl", "inf"),
            ("--ttl", "1e12"),
            ("--upstream-timeout", "-inf"),
            ("--max-attempts", "0"),
            ("--max-concurrent", "100000"),
            ("--max-queued", "-1"),
        ],
    )
    def test_bad_numbers_name_their_option(
        self, capsys: pytest.CaptureFixture[str], flag: str, value: str
    ) -> None:
        """`toolgate mcp-proxy --ttl nan` (or out of range, or infinite) is one line naming the
        option, exit 2, before any connection."""
        from toolgate import cli

        argv = ["mcp-proxy", "--server", "s", "--upstream-url", "http://127.0.0.1:1/mcp", f"{flag}={value}"]
        code = cli.main([*argv, "--bootstrap", "127.0.0.1:1"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1
        assert f"{flag}: must be a finite number in" in err[0]
