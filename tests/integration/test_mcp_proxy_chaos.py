"""The MCP proxy deciding in process, under crashes, on a broker of the test's own (chaos kit).

The proxy answers a host only after the broker acknowledged the decision's records
(docs/design.md, Exactly once on the proxy path). Two crashes in the middle of calls:

* the broker SIGKILLed while calls wait on the upstream: each held call is answered once,
  ``BROKER_UNAVAILABLE`` (never a verdict whose records were not acknowledged), and calls
  after the broker's restart are answered with their records;
* the proxy process SIGKILLed while its writes wait on a broker stopped with SIGSTOP: the
  host gets no answer for those calls, every call answered before has its records, and no
  request has two envelopes whatever reached the broker.

Run as ``python -m tests.integration.test_mcp_proxy_chaos RELEASE RETURNED`` it is the
upstream of the second test: mcp_kit's server whose ``hold`` case appends a line to
RETURNED.received, waits until the file RELEASE exists, then answers and appends a line to
RETURNED.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import msgspec
import pytest
from mcp import Client as McpClient
from mcp.server import Server
from toolgate._config import Config
from toolgate.client import Client
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._decide import Decider
from toolgate.mcp._options import ProxyOptions
from toolgate.mcp._proxy import Proxy

from tests import ROOT, mcp_kit
from tests.integration.chaos_kit import PrivateBroker
from tests.integration.proxy_kit import free_port, host_env, listening, proxy_command, until
from tests.integration.test_mcp_proxy import Upstream, error_of, proxy_contracts, request_id_of
from tests.integration.worker_kit import private_config, read_all, topic_partitions

# proxy_contracts: the module fixture, shared with test_mcp_proxy
__all__ = ["proxy_contracts"]

pytestmark = pytest.mark.chaos

HELD = 6
HOLD_BOUND_S = 120.0  # the upstream's hold ends by itself after this long


async def own_config(broker: PrivateBroker, contracts: Path) -> Config:
    """Private topics on ``broker``, once its metadata names them (a fresh broker's lag)."""
    config = await private_config(broker.bootstrap)
    for topic in config.topics.names():
        assert await topic_partitions(config, topic), topic
    return msgspec.structs.replace(config, contracts_dir=str(contracts))


def envelopes_by_request(records: list[Any]) -> collections.Counter[str]:
    return collections.Counter(r.key for r in records)


class TestBrokerKilledMidCall:
    """The broker killed while calls are in flight: one answer each, a verdict only with its records."""

    async def test_held_calls_answer_broker_unavailable_and_later_calls_their_verdict(
        self, own_broker: PrivateBroker, proxy_contracts: Path
    ) -> None:
        """Calls held at the upstream when the broker dies are each answered BROKER_UNAVAILABLE
        once; after the restart a call is answered with its verdict, and every verdict answered
        has exactly one envelope and one audit event on the broker."""
        cfg = await own_config(own_broker, proxy_contracts)
        upstream = Upstream()
        contracts = ContractSet.load(proxy_contracts)
        answered: dict[str, str] = {}  # request id -> outcome the host read
        async with (
            Client(cfg, answers=False, send_timeout_s=5) as client,
            McpClient(upstream.server()) as up,
        ):
            decider = Decider(mcp_kit.SERVER, contracts, None, cfg.topics)
            proxy = Proxy(
                mcp_kit.SERVER, up, client, contracts, options=ProxyOptions(max_attempts=1), decider=decider
            )
            await proxy.load_tools()
            async with McpClient(proxy.mcp_server()) as host:
                before = await host.call_tool("deploy_status", {"case": "ok", "environment": "staging"})
                answered[request_id_of(before)] = "success"
                held = [
                    asyncio.create_task(
                        host.call_tool("deploy_status", {"case": "hold", "environment": "staging"})
                    )
                    for _ in range(HELD)
                ]

                async def all_held() -> bool:
                    return upstream.calls == HELD + 1

                await until(all_held, 30, "every held call reached the upstream")
                await asyncio.to_thread(own_broker._sigkill)
                upstream.release.set()
                results = await asyncio.gather(*held)
                await own_broker.start()
                for topic in cfg.topics.names():  # the restarted broker leads them again
                    assert await topic_partitions(cfg, topic), topic
                tries: list[str] = []
                for _ in range(20):  # the producer reconnects to the restarted broker
                    after = await host.call_tool("deploy_status", {"case": "ok", "environment": "staging"})
                    if not after.is_error:
                        break
                    tries.append(error_of(after)["code"])
                print(f"\nafter the restart: {len(tries)} calls refused {sorted(set(tries))} first")
        assert [error_of(r) for r in results] == [{"code": "BROKER_UNAVAILABLE", "retryable": True}] * HELD
        assert after.structured_content == mcp_kit.GOOD
        answered[request_id_of(after)] = "success"
        agent = envelopes_by_request(await read_all(cfg, cfg.topics.agent))
        audit = collections.Counter(
            (r.key, json.loads(r.value or b"")["outcome"]) for r in await read_all(cfg, cfg.topics.audit)
        )
        assert all(count == 1 for count in agent.values()), agent  # no request answered twice
        for rid, outcome in answered.items():  # no verdict answered without its records
            assert agent[rid] == 1
            assert audit[(rid, outcome)] == 1
        held_ids = {request_id_of(r) for r in results}
        assert not held_ids & set(answered)


def proxy_process(
    cfg: Config, port: int, release: Path, returned: Path, log: Path
) -> subprocess.Popen[bytes]:
    """``toolgate mcp-proxy`` (deciding in process) over streamable HTTP, the holding upstream behind it."""
    upstream = f"{sys.executable} -m tests.integration.test_mcp_proxy_chaos {release} {returned}"
    command = proxy_command(cfg.contracts_dir, "--listen", f"http://127.0.0.1:{port}/mcp", upstream=upstream)
    with log.open("ab") as handle:
        return subprocess.Popen(
            command,
            env=host_env(cfg.bootstrap, cfg.topics),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=handle,
        )


class TestProxyKilledMidWrite:
    """The proxy killed while its decisions' records wait for the broker's acknowledgement."""

    async def test_no_answer_without_records_and_none_twice(
        self, own_broker: PrivateBroker, proxy_contracts: Path, tmp_path: Path
    ) -> None:
        """Calls answered before the kill have their records; the calls in the middle of their
        write get no answer; no request has two envelopes; a new proxy answers with records."""
        cfg = await own_config(own_broker, proxy_contracts)
        release, returned = tmp_path / "release", tmp_path / "returned"
        port = free_port()
        proxy = proxy_process(cfg, port, release, returned, tmp_path / "proxy.log")
        answered: list[str] = []
        held_answers: list[types.CallToolResult] = []  # what the host read for a held call

        async def held_call(host: McpClient) -> None:
            result = await host.call_tool("deploy_status", {"case": "hold", "environment": "staging"})
            held_answers.append(result)

        try:
            await listening(port, proxy)
            try:
                async with McpClient(f"http://127.0.0.1:{port}/mcp") as host:
                    for _ in range(3):
                        result = await host.call_tool(
                            "deploy_status", {"case": "ok", "environment": "staging"}
                        )
                        answered.append(request_id_of(result))
                    held = [asyncio.create_task(held_call(host)) for _ in range(HELD)]

                    received = returned.with_suffix(".received")

                    async def all_held() -> bool:  # every held call waits at the upstream
                        return received.exists() and len(received.read_text().splitlines()) == HELD

                    await until(all_held, 60, "the held calls at the upstream")
                    pid = own_broker.pid()
                    os.kill(pid, signal.SIGSTOP)  # writes now wait for an acknowledgement
                    try:
                        release.touch()

                        async def all_returned() -> bool:
                            return returned.exists() and len(returned.read_text().splitlines()) == HELD

                        await until(all_returned, 30, "the upstream answered every held call")
                        proxy.kill()  # SIGKILL, the decisions' records in flight
                        proxy.wait()
                    finally:
                        os.kill(pid, signal.SIGCONT)
                    await asyncio.gather(*held, return_exceptions=True)
            except BaseExceptionGroup:  # the host's session with the killed proxy ends in errors
                if proxy.poll() is None:
                    raise
        finally:
            if proxy.poll() is None:
                proxy.kill()
                proxy.wait()
        assert len(answered) == 3
        assert held_answers == []  # nothing answered whose records were not acknowledged
        restarted = proxy_process(
            cfg, port, tmp_path / "release", tmp_path / "returned2", tmp_path / "proxy2.log"
        )
        try:
            await listening(port, restarted)
            async with McpClient(f"http://127.0.0.1:{port}/mcp") as host:
                result = await host.call_tool("deploy_status", {"case": "ok", "environment": "staging"})
            answered.append(request_id_of(result))
        finally:
            restarted.terminate()
            restarted.wait()
        agent = envelopes_by_request(await read_all(cfg, cfg.topics.agent))
        audit = envelopes_by_request(await read_all(cfg, cfg.topics.audit))
        assert all(count == 1 for count in agent.values()), agent  # none answered twice
        for rid in answered:  # every answer has its records
            assert (agent[rid], audit[rid]) == (1, 1), rid
        in_flight = len(agent) - len(answered)  # decided, written, never answered: allowed
        print(f"\nkilled mid-write: {HELD} calls, {in_flight} of them with their records on the broker")


# --- the holding upstream (run as a module by the proxy of TestProxyKilledMidWrite) ----


def holding_server(release: Path, returned: Path) -> Server[Any]:
    """mcp_kit's tools; ``hold`` answers the good result once ``release`` exists."""

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_kit.TOOLS)

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> Any:
        case = str((params.arguments or {}).get("case", "ok"))
        if case == "hold":
            with returned.with_suffix(".received").open("a") as out:
                out.write("held\n")
            with anyio.fail_after(HOLD_BOUND_S):
                while not release.exists():  # noqa: ASYNC110, ASYNC240 - another process's file
                    await anyio.sleep(0.02)
            with returned.open("a") as out:
                out.write("returned\n")
            case = "ok"
        return mcp_kit._result(case)

    return Server(mcp_kit.SERVER, on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve(release: Path, returned: Path) -> None:
    from mcp.server.stdio import stdio_server

    app = holding_server(release, returned)
    async with stdio_server() as (read, write):
        await app.run(read, write, app.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_serve, Path(sys.argv[1]), Path(sys.argv[2]))
