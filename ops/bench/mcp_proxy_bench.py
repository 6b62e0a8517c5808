"""What `toolgate mcp-proxy` adds to a tools/call, deciding in process and through the
workers, beside the floors; and how fast toolgate.client answers waits.

Usage::

    .venv/bin/python ops/bench/mcp_proxy_bench.py [--calls 200] [--concurrency 1 10 100]
        [--linger-ms 20] [--waits 1000] [--in-process | --baseline CHECKOUT]

On the local broker (TOOLGATE_BOOTSTRAP, default 127.0.0.1:19092), private topics, a
``toolgate run`` subprocess (``--linger-ms`` passed to it) on the contract
``toolgate contracts import-mcp`` writes for the upstream's tool. The upstream is a real
published MCP server, ``mcp-server-time`` from PyPI (a dev dependency; its
``get_current_time`` tool, which has an output schema), run over stdio as hosts run it
(``python -m mcp_server_time``); the host is the MCP SDK's client.

1. **Added latency, both modes.** The same host calls the same upstream program directly,
   through the proxy deciding in process (``--decide proxy``, the default) and through the
   proxy awaiting a worker (``--decide worker``), interleaved in halves per concurrency level
   (1, 10, 100 calls at once; ``--calls`` calls each, at least two per lane) in the same run;
   added = proxy minus direct, p50 and p99. Beside them the floors of a relay: a bare MCP relay
   (an MCP server of the same SDK passing tools/call on, deciding nothing) and a raw relay
   (``ops/bench/raw_relay.py``: JSON-RPC lines passed on unchanged by an asyncio process, no
   SDK; processes only). By default each proxy is `toolgate mcp-proxy`
   over stdio, a process of its own starting its upstream, as hosts run it; ``--in-process``
   runs both proxies in this process (the upstreams still processes over stdio) and adds the
   breakdown of each step of a proxied call: the request record's acknowledgement and the
   upstream call (overlapped: the record is written while the upstream works), then, in
   process, the decision and the decision's records' acknowledgement, through a worker the
   result record's acknowledgement and the read of the decided answer.
2. **The floors, same run.** An idempotent ``acks=all`` produce round trip of a decision's
   three records (requests, agent, audit: what the proxy deciding in process waits for) and
   of one record, interleaved with the calls at each level (the same machine noise); after
   the calls, one at a time, that one record's and a Kafka transaction's round trip (begin,
   one record, commit: what a worker's answer waits for).
3. **Targets** (deciding in process): added p50 <= 2 ms and p99 <= 5 ms at 1 concurrent call;
   at 10 concurrent, added p50 no more than the bare relay's added p50 + 2 ms (the writer
   does not serialise calls behind one another's acknowledgement). The worker mode's rows,
   and with ``--baseline`` another checkout's proxy (before), are printed beside them.
4. **Client answers per second.** ``--waits`` requests issued and awaited at once by one
   client; the same number of envelopes committed to the agent topic in one transaction
   (as the worker writes them); printed: answers per second from the commit to the last
   future resolved, beside a bare ``read_committed`` consumer reading the same records
   in the same run (the floor).

Prints figures, the machine's load (others' CPUs) and met / not met; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve()
ROOT = BENCH.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

from aiokafka import TopicPartition  # noqa: E402
from mcp import Client as McpClient  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402
from toolgate._config import Config, Topics  # noqa: E402
from toolgate.client import Client  # noqa: E402
from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.gate._mcp import definition_digest  # noqa: E402
from toolgate.mcp._decide import Decider  # noqa: E402
from toolgate.mcp._import import fetch_listing, import_listing  # noqa: E402
from toolgate.mcp._options import ProxyOptions  # noqa: E402
from toolgate.mcp._proxy import Proxy  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics, partition_of  # noqa: E402

from ops.bench.measure import (  # noqa: E402
    Load,
    at_most,
    both,
    broker_pid,
    descendants,
    lanes,
    percentiles,
    print_targets,
    process_cpu,
    target,
)

SERVER = "time"  # the proxy's name for the upstream server
TOOL = "get_current_time"
TARGET_ADDED_P50_MS = 2.0  # deciding in process, at 1 and at 10 concurrent calls
TARGET_ADDED_P99_MS = 5.0
TARGET_OVER_RELAY_MS = 2.0  # at 10 concurrent: added p50 at most the bare relay's added p50 + this
MODES = ("proxy", "worker")  # --decide
SETTLE_S = 0.3  # between two paths' parts: what one left running ends before the next is measured
# The steps after the overlapped request record and upstream call, one after the other.
LATER_STEPS = ("decide", "records ack", "result ack", "answer read")
STEPS = ("request record ack", "upstream call", *LATER_STEPS)


def upstream_server(env: dict[str, str]) -> StdioServerParameters:
    """``mcp-server-time`` over stdio, as an MCP host starts it."""
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_time"], env=env)


def upstream_command() -> str:
    return f"{sys.executable} -m mcp_server_time"


def raw_relay_server(env: dict[str, str]) -> StdioServerParameters:
    """The raw relay (``ops/bench/raw_relay.py``, no MCP SDK) in front of mcp-server-time:
    the floor of any relay process over stdio."""
    upstream = upstream_server(env)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "ops.bench.raw_relay", "--", upstream.command, *upstream.args],
        env=env,
        cwd=str(ROOT),
    )


# --------------------------------------------------------------------- per-call steps


@dataclass
class CallSteps:
    """One proxied call: when each step started and ended (perf_counter seconds)."""

    spans: dict[str, tuple[float, float]] = field(default_factory=dict)


_CURRENT: contextvars.ContextVar[CallSteps | None] = contextvars.ContextVar("call_steps", default=None)


def _timed(name: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``call`` with its start and end recorded as step ``name`` of the current call."""

    async def timed(*args: Any, **kwargs: Any) -> Any:
        steps = _CURRENT.get()
        start = time.perf_counter()
        try:
            return await call(*args, **kwargs)
        finally:
            if steps is not None:
                steps.spans[name] = (start, time.perf_counter())

    return timed


def _timed_sync(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`_timed` for a plain function."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        steps = _CURRENT.get()
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            if steps is not None:
                steps.spans[name] = (start, time.perf_counter())

    return timed


class Breakdown:
    """The steps of each proxied call, timed around the proxy's calls into the client and the
    upstream (the proxy exposes no timings of its own; nothing in it is changed)."""

    def __init__(self, proxy: Proxy, client: Client) -> None:
        self.calls: list[CallSteps] = []
        decider = proxy.decider
        if decider is not None:
            setattr(decider, "decide", _timed_sync("decide", decider.decide))  # noqa: B010
        setattr(client, "publish_records", _timed("records ack", client.publish_records))  # noqa: B010
        call = proxy.call

        async def traced(*args: Any, **kwargs: Any) -> Any:
            steps = CallSteps()
            _CURRENT.set(steps)  # the call's own task: its sub-tasks copy this context
            start = time.perf_counter()
            try:
                return await call(*args, **kwargs)
            finally:
                steps.spans["proxied call"] = (start, time.perf_counter())
                self.calls.append(steps)

        setattr(proxy, "call", traced)  # noqa: B010
        # The proxy's one private name used here; where it is gone, the step prints as "-".
        upstream_call = getattr(proxy, "_upstream_call", None)
        if upstream_call is None:
            print("note: Proxy._upstream_call is gone: the upstream step is not timed", file=sys.stderr)
        else:
            setattr(proxy, "_upstream_call", _timed("upstream call", upstream_call))  # noqa: B010
        setattr(client, "issue", _timed("request record ack", client.issue))  # noqa: B010
        setattr(client, "publish_result", _timed("result ack", client.publish_result))  # noqa: B010
        setattr(client, "answer", _timed("answer read", client.answer))  # noqa: B010

    def take(self) -> dict[str, dict[str, float]]:
        """Percentiles (ms) of each step over the calls since the last take, with the wait for
        the request record's acknowledgement after the upstream answered."""
        rows: dict[str, list[float]] = {
            name: [] for name in (*STEPS, "ack after upstream", "rest", "proxied call")
        }
        for call in self.calls:
            spans = call.spans
            for name, (start, end) in spans.items():
                rows[name].append((end - start) * 1000)
            if "request record ack" in spans and "upstream call" in spans:
                rows["ack after upstream"].append(
                    max(0.0, spans["request record ack"][1] - spans["upstream call"][1]) * 1000
                )
            if all(name in spans for name in ("upstream call", "proxied call")):
                # The call's time outside its steps: waiting for a slot, the event loop, the
                # host's and the proxy's MCP sessions (all in this process). Deciding in process
                # the request record goes with the decision: no acknowledgement beside the call.
                beside = [spans[name] for name in ("request record ack", "upstream call") if name in spans]
                path = max(end for _start, end in beside) - min(start for start, _end in beside)
                path += sum(spans[name][1] - spans[name][0] for name in LATER_STEPS if name in spans)
                whole = spans["proxied call"][1] - spans["proxied call"][0]
                rows["rest"].append(max(0.0, whole - path) * 1000)
        self.calls.clear()
        return {name: percentiles(values) for name, values in rows.items() if values}


# ------------------------------------------------------------------------- the relay


def relay_server(upstream: McpClient) -> Any:
    """The MCP floor of any proxy: an MCP server that passes ``tools/list`` and ``tools/call``
    to ``upstream`` and its answer back, deciding nothing (the same SDK, the same hop)."""
    import mcp.types as types
    from mcp.server import Server

    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return await upstream.list_tools()

    async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result: types.CallToolResult = await upstream.call_tool(params.name, params.arguments or {})
        return result

    return Server("relay", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_relay() -> None:
    """``--serve-relay``: :func:`relay_server` over stdio in front of mcp-server-time."""
    from mcp.server.stdio import stdio_server

    async with McpClient(upstream_server(dict(os.environ))) as upstream:
        app = relay_server(upstream)
        async with stdio_server() as (read, write):
            await app.run(read, write, app.create_initialization_options())


# ------------------------------------------------------------------------ the worker


def start_worker(config: Config, contracts: Path, linger_ms: int) -> tuple[subprocess.Popen[bytes], int]:
    port = 19500 + os.getpid() % 400
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(
        TOOLGATE_BOOTSTRAP=config.bootstrap,
        TOOLGATE_GROUP_ID=config.group_id,
        TOOLGATE_CONTRACTS_DIR=str(contracts),
        TOOLGATE_METRICS_PORT=str(port),
        **config.topics.env(),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "toolgate", "run", "--linger-ms", str(linger_ms)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return process, port
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit("the worker exited before it was ready")
        time.sleep(0.1)
    raise SystemExit("the worker was not ready within 60 s")


# ------------------------------------------------------------------- added latency


def caller(host: McpClient, arguments: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    """One tools/call of the bench's tool through ``host``; a failed call ends the bench."""

    async def call() -> None:
        result = await host.call_tool(TOOL, arguments)
        if result.is_error:
            raise SystemExit(f"a call failed: {result.content}")

    return call


async def interleaved_paths(
    paths: dict[str, Callable[[], Awaitable[Any]]],
    calls: int,
    concurrency: int,
    halves: int = 4,
    cpu: dict[str, float] | None = None,
    broker: int | None = None,
) -> dict[str, list[float]]:
    """:func:`lanes` of every path in ``halves`` alternating parts each, in a rotating order
    (the same machine noise on all); the milliseconds of each path's calls. ``cpu``, when
    given, gets each path's CPU milliseconds per call: this process, every process it
    started and the ``broker``, over that path's lanes (the others' processes idle
    meanwhile; less sensitive to the machine's load than latency)."""
    out: dict[str, list[float]] = {name: [] for name in paths}
    spent: dict[str, float] = dict.fromkeys(paths, 0.0)
    names = list(paths)
    for part in range(halves):
        # Each part in another order (rotated; every other one reversed): no path always
        # follows the same one, so an order effect of the machine falls on all alike.
        order = names[part % len(names) :] + names[: part % len(names)]
        for name in reversed(order) if part % 2 else order:
            # What the previous path left running (the worker's lingering batches, a process's
            # collection) ends first, or it falls on this one: a settle, not measured.
            await asyncio.sleep(SETTLE_S)
            before = ours_cpu(broker)
            out[name] += await lanes(paths[name], calls // halves, concurrency)
            spent[name] += ours_cpu(broker) - before
    if cpu is not None:
        cpu.update({name: 1000 * spent[name] / max(1, len(out[name])) for name in paths})
    return out


def ours_cpu(broker: int | None) -> float:
    """CPU seconds of this process, the processes below it and the broker so far."""
    return time.process_time() + sum(process_cpu(pid) for pid in (*descendants(os.getpid()), broker))


async def measure_levels(
    config: Config,
    direct: McpClient,
    hosts: dict[str, McpClient],
    calls: int,
    levels: list[int],
    breakdowns: dict[str, Breakdown],
) -> dict[int, dict[str, Any]]:
    """Direct calls and those through ``hosts`` (the relay, each mode), interleaved, at each
    concurrency level: their percentiles, the steps of the proxied ones and the others' CPUs
    meanwhile (the broker of ``config`` apart)."""
    figures: dict[int, dict[str, Any]] = {}
    broker = broker_pid(config.bootstrap)
    paths = {"direct": caller(direct, arguments())} | {
        mode: caller(h, arguments()) for mode, h in hosts.items()
    }
    async with AckFloor(config) as floor:
        # The acknowledgement's floor in the same run, interleaved with the calls: what the
        # proxy deciding in process waits for (its decision's records: three topics, one
        # request), and one record alone.
        paths |= {"floor 3 records": floor.three, "floor 1 record": floor.one}
        for call in paths.values():  # warm-up: connections, metadata, the worker's first batches
            await lanes(call, 20, 1)
        for breakdown in breakdowns.values():
            breakdown.take()
        for level in levels:
            load = Load(broker, *descendants(os.getpid()))  # the worker, proxies and upstreams are ours
            # Every lane busy in every part: at least two calls per lane and path in each.
            cpu: dict[str, float] = {}
            got = await interleaved_paths(paths, max(calls, 8 * level), level, cpu=cpu, broker=broker)
            load.stop()
            figures[level] = {
                **{name: percentiles(got[name]) for name in paths},
                "cpu": cpu,
                "steps": {mode: b.take() for mode, b in breakdowns.items()},
                "others": load.others(),
            }
    return figures


class AckFloor:
    """An idempotent ``acks=all`` producer of this process (linger 0), as the proxy's own:
    :meth:`one` is one record's produce round trip, :meth:`three` the round trip of three
    records on the requests, agent and audit topics sent together (a decision's records)."""

    def __init__(self, config: Config) -> None:
        self.topics = config.topics
        self.producer = AiokafkaClients(config).producer(acks="all", enable_idempotence=True, linger_ms=0)

    async def __aenter__(self) -> AckFloor:
        await self.producer.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.producer.stop()

    async def one(self) -> None:
        key = uuid.uuid4().hex.encode()
        await (await self.producer.send(self.topics.audit, b"{}", key=key))

    async def three(self) -> None:
        key = uuid.uuid4().hex.encode()
        t = self.topics
        sent = [await self.producer.send(topic, b"{}", key=key) for topic in (t.requests, t.agent, t.audit)]
        await asyncio.gather(*sent)


async def latency_in_process(
    config: Config, contracts: Path, env: dict[str, str], calls: int, levels: list[int]
) -> dict[int, dict[str, Any]]:
    """Host and both proxies in this process, the upstream a process over stdio (one per
    proxy, one for the direct path)."""
    loaded = ContractSet.load(contracts)
    options = ProxyOptions(max_concurrent=128)
    async with (
        Client(config, answers=False) as local_client,
        Client(config) as worker_client,
        McpClient(upstream_server(env)) as local_up,
        McpClient(upstream_server(env)) as worker_up,
        McpClient(upstream_server(env)) as direct,
        McpClient(upstream_server(env)) as relay_up,
    ):
        decider = Decider(SERVER, loaded, None, config.topics)
        local = Proxy(SERVER, local_up, local_client, loaded, options=options, decider=decider)
        through_worker = Proxy(SERVER, worker_up, worker_client, loaded, options=options)
        for proxy in (local, through_worker):
            if TOOL not in await proxy.load_tools():
                raise SystemExit(f"the proxy serves no {TOOL}: the imported contract was not loaded")
        breakdowns = {
            "proxy": Breakdown(local, local_client),
            "worker": Breakdown(through_worker, worker_client),
        }
        async with (
            McpClient(local.mcp_server()) as local_host,
            McpClient(through_worker.mcp_server()) as host,
            McpClient(relay_server(relay_up)) as relay,
        ):
            hosts = {"relay": relay, "proxy": local_host, "worker": host}
            return await measure_levels(config, direct, hosts, calls, levels, breakdowns)


async def latency_processes(
    config: Config,
    contracts: Path,
    env: dict[str, str],
    calls: int,
    levels: list[int],
    baseline: Path | None = None,
) -> dict[int, dict[str, Any]]:
    """The shape MCP hosts run: the host here starts the upstream server, a relay (raw or the
    bare MCP one) or `toolgate mcp-proxy` (each of which starts the upstream server), each a
    process of its own over stdio.
    ``baseline``: another checkout (a `git worktree` of main), whose proxy deciding in process
    is called too, interleaved with this one's: before and after in the same run."""

    def proxy_server(mode: str, checkout: Path = ROOT) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=[
                "-m", "toolgate", "mcp-proxy", "--server", SERVER, "--contracts", str(contracts),
                "--upstream-command", upstream_command(), "--max-concurrent", "128", "--decide", mode,
            ],
            env={**env, "PYTHONPATH": str(checkout / "worker")},
            cwd=str(checkout),
        )  # fmt: skip

    relay_params = StdioServerParameters(
        command=sys.executable, args=[str(BENCH), "--serve-relay"], env=env, cwd=str(ROOT)
    )
    async with (
        McpClient(upstream_server(env)) as direct,
        McpClient(raw_relay_server(env)) as raw,
        McpClient(relay_params) as relay,
        McpClient(proxy_server("proxy")) as local_host,
        McpClient(proxy_server("worker")) as host,
        AsyncExitStack() as stack,
    ):
        hosts = {"raw": raw, "relay": relay, "proxy": local_host, "worker": host}
        if baseline is not None:
            hosts["baseline"] = await stack.enter_async_context(McpClient(proxy_server("proxy", baseline)))
        return await measure_levels(config, direct, hosts, calls, levels, {})


def arguments() -> dict[str, Any]:
    return {"timezone": os.environ.get("BENCH_TIMEZONE", "Europe/Paris")}


def review(contracts: Path, tools: list[dict[str, Any]]) -> None:
    """What a reviewer does last: the imported drafts (which decide nothing) become active,
    each pinned to the definition listed (where import did not pin it already)."""
    by_name = {tool["name"]: tool for tool in tools}
    for path in contracts.glob("*/v*/contract.yaml"):
        text = path.read_text().replace("\nstatus: draft\n", "\nstatus: active\n")
        if "\n  definition:" not in text:
            tool = by_name[path.parent.parent.name.removeprefix(f"{SERVER}.")]
            (path.parent / "input.schema.json").write_text(json.dumps(tool["inputSchema"]))
            pinned = (
                f"  definition:\n    digest: {definition_digest(tool)}\n    input_schema: input.schema.json\n"
            )
            text = text.replace("\nmcp:\n", "\nmcp:\n" + pinned, 1)
        path.write_text(text)


# ------------------------------------------------------------------------ the floors


async def floors(config: Config, rounds: int = 200) -> dict[str, dict[str, float]]:
    """One at a time, on the bench's own topic: an idempotent ``acks=all`` produce round trip,
    and a transaction's (begin, one record, commit), ms percentiles of ``rounds`` each."""
    clients = AiokafkaClients(config)
    producer = clients.producer(acks="all", enable_idempotence=True)
    transactional = clients.producer(transactional_id=f"bench-floor-{uuid.uuid4().hex[:8]}")
    topic = config.topics.audit
    await producer.start()
    await transactional.start()
    produce: list[float] = []
    transactions: list[float] = []
    try:
        for i in range(20 + rounds):  # 20 warm-up rounds each
            start = time.perf_counter()
            await (await producer.send(topic, b"{}", key=b"floor"))
            if i >= 20:
                produce.append((time.perf_counter() - start) * 1000)
        for i in range(20 + rounds):
            start = time.perf_counter()
            async with transactional.transaction():
                await transactional.send(topic, b"{}", key=b"floor")
            if i >= 20:
                transactions.append((time.perf_counter() - start) * 1000)
    finally:
        await transactional.stop()
        await producer.stop()
    return {"produce": percentiles(produce), "transaction": percentiles(transactions)}


# ------------------------------------------------------------------ client answers


async def answers_per_second(config: Config, waits: int, rounds: int = 5) -> tuple[float, float]:
    """(client answers/s, bare read_committed consumer records/s), medians of ``rounds``: both
    read live from the agent topic's end when one transaction commits ``waits`` envelopes,
    timed from the commit."""
    agent = config.topics.agent
    client_rates: list[float] = []
    bare_rates: list[float] = []
    async with Client(config) as client:
        clients = AiokafkaClients(config)
        bare = clients.consumer(isolation_level="read_committed", fetch_max_wait_ms=20)
        producer = clients.producer(transactional_id=f"bench-{uuid.uuid4().hex[:8]}")
        await bare.start()
        await producer.start()
        try:
            count = len(await producer.partitions_for(agent))
            tps = [TopicPartition(agent, p) for p in range(count)]
            bare.assign(tps)
            await bare.seek_to_end(*tps)
            for tp in tps:
                await bare.position(tp)
            for _ in range(rounds):
                requests = await asyncio.gather(*(client.issue("bench.tool", ttl=120) for _ in range(waits)))

                async def read_bare() -> float:
                    seen = 0
                    while seen < waits:
                        batches = await bare.getmany(timeout_ms=100)
                        seen += sum(len(v) for v in batches.values())
                    return time.perf_counter()

                async def read_client(requests: list[Any] = requests) -> float:
                    await asyncio.gather(*(client.answer(r) for r in requests))
                    return time.perf_counter()

                readers = asyncio.gather(read_bare(), read_client())
                async with producer.transaction():
                    for request in requests:
                        key = request.request_id.encode()
                        value = json.dumps(
                            {
                                "tool": "bench.tool",
                                "request_id": request.request_id,
                                "outcome": "success",
                                "data": {},
                            }
                        ).encode()
                        await producer.send(agent, value, key=key, partition=partition_of(key, count))
                committed = time.perf_counter()
                bare_done, client_done = await readers
                client_rates.append(waits / (client_done - committed))
                bare_rates.append(waits / (bare_done - committed))
        finally:
            await producer.stop()
            await bare.stop()
    return statistics.median(client_rates), statistics.median(bare_rates)


# ------------------------------------------------------------------------- report


def added(f: dict[str, Any], mode: str, key: str) -> float:
    value: float = f[mode][key] - f["direct"][key]
    return value


def targets(figures: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The proxy's targets (deciding in process), met or not (None where a level was not
    run): at 1 concurrent call added p50 <= 2 ms and p99 <= 5 ms; at 10, added p50 no more than
    the bare relay's + 2 ms. The worker mode's and the baseline's figures on the same rows."""
    out = []

    def note(f: dict[str, Any]) -> str:
        text = (
            f"p99 {added(f, 'proxy', 'p99'):.1f} ms; the bare MCP relay (floor): added p50 "
            f"{added(f, 'relay', 'p50'):.1f}, p99 {added(f, 'relay', 'p99'):.1f} ms; --decide worker: added "
            f"p50 {added(f, 'worker', 'p50'):.1f}, p99 {added(f, 'worker', 'p99'):.1f} ms"
        )
        if "raw" in f:
            text += (
                f"; the raw relay (no SDK): added p50 {added(f, 'raw', 'p50'):.1f}, "
                f"p99 {added(f, 'raw', 'p99'):.1f} ms"
            )
        if "baseline" in f:
            text += (
                f"; baseline (before): added p50 {added(f, 'baseline', 'p50'):.1f}, "
                f"p99 {added(f, 'baseline', 'p99'):.1f} ms"
            )
        return text + f"; others {f['others']:.2f} CPUs"

    one = figures.get(1)
    p50 = added(one, "proxy", "p50") if one else None
    p99 = added(one, "proxy", "p99") if one else None
    out.append(
        target(
            "added latency at 1 concurrent: p50 / p99, ms",
            p50,
            f"p50 <= {TARGET_ADDED_P50_MS:g}, p99 <= {TARGET_ADDED_P99_MS:g}",
            both(at_most(p50, TARGET_ADDED_P50_MS), at_most(p99, TARGET_ADDED_P99_MS)),
            note(one) if one else "not run",
        )
    )
    ten = figures.get(10)
    p50 = added(ten, "proxy", "p50") if ten else None
    bound = added(ten, "relay", "p50") + TARGET_OVER_RELAY_MS if ten else None
    out.append(
        target(
            "added p50 at 10 concurrent, ms",
            p50,
            f"<= the relay's + {TARGET_OVER_RELAY_MS:g}" + (f" ({bound:.1f})" if bound is not None else ""),
            at_most(p50, bound) if bound is not None else None,
            note(ten) if ten else "needs --concurrency 10",
        )
    )
    return out


def print_report(
    figures: dict[int, dict[str, Any]],
    shape: str,
    linger_ms: int,
    calls: int,
    rates: tuple[float, float],
    floor: dict[str, dict[str, float]],
) -> None:
    print(
        f"mcp-proxy added latency (mcp-server-time {TOOL}; {shape}; worker --linger-ms {linger_ms}, "
        f"{calls} calls per level and path; relay = a bare MCP relay, the floor of any proxy; "
        "proxy = --decide proxy, worker = --decide worker)"
    )
    paths = [
        name
        for name in ("raw", "relay", "proxy", "baseline", "worker")
        if any(name in f for f in figures.values())
    ]
    if "raw" in paths:
        print("raw = a raw relay: the same JSON-RPC lines passed on by an asyncio process, no MCP SDK")
    heads = ["direct p50", "direct p99"]
    for name in paths:
        heads += [f"{name[:6]} p50", f"{name[:6]} p99", "added p50", "added p99"]
    print(f"{'concurrent':>10} " + " ".join(f"{h:>11}" for h in heads) + "   others")
    for level, f in figures.items():
        d = f["direct"]
        cells = [d["p50"], d["p99"]]
        for name in paths:
            x = f[name]
            cells += [x["p50"], x["p99"], x["p50"] - d["p50"], x["p99"] - d["p99"]]
        print(f"{level:>10} " + " ".join(f"{c:>9.1f}ms" for c in cells) + f"   {f['others']:.2f}")
    if "baseline" in paths:
        print("baseline = the other checkout's proxy deciding in process (before), beside this one's (after)")
    for level, f in figures.items():
        cpu = f.get("cpu", {})
        if "direct" in cpu:
            print(
                f"CPU per call at {level} concurrent (this process, its children, the broker), ms: "
                + ", ".join(f"{name} {cpu[name]:.2f}" for name in ("direct", *paths) if name in cpu)
                + "; added over direct: "
                + ", ".join(f"{name} {cpu[name] - cpu['direct']:.2f}" for name in paths if name in cpu)
            )
    for level, f in figures.items():
        if "floor 3 records" in f:
            three, one = f["floor 3 records"], f["floor 1 record"]
            print(
                f"acks=all floor at {level} concurrent, interleaved with the calls: a decision's 3 records "
                f"p50 {three['p50']:.2f} / p99 {three['p99']:.2f} ms, one record p50 {one['p50']:.2f} / "
                f"p99 {one['p99']:.2f} ms"
            )
    produce, transaction = floor["produce"], floor["transaction"]
    print(
        "floors, one at a time after the calls: idempotent acks=all produce "
        f"p50 {produce['p50']:.2f} / p99 {produce['p99']:.2f} ms; transaction (begin, one record, "
        f"commit) p50 {transaction['p50']:.2f} / p99 {transaction['p99']:.2f} ms"
    )
    for mode in MODES:
        if not any(f["steps"].get(mode) for f in figures.values()):
            continue
        print()
        print(f"each step of a proxied call (--decide {mode}), ms (p50 / p99); the request record's")
        print("acknowledgement runs beside the upstream call; 'ack after upstream' is how long the result")
        print(
            "waited for it; 'rest' is the call's time outside these steps (slots, event loop, MCP sessions)"
        )
        later = ("decide", "records ack") if mode == "proxy" else ("result ack", "answer read")
        names = ("request record ack", "upstream call", "ack after upstream", *later, "rest", "proxied call")
        print(f"{'concurrent':>11}" + "".join(f"{n:>22}" for n in names))
        for level, f in figures.items():
            steps = [f["steps"].get(mode, {}).get(name) for name in names]
            texts = [f"{s['p50']:>9.2f} / {s['p99']:>8.2f}" if s else f"{'-':>20}" for s in steps]
            print(f"{level:>11}" + "".join(f"{c:>22}" for c in texts))
    print()
    print_targets(targets(figures))
    client_rate, floor_rate = rates
    print(
        f"toolgate.client, concurrent waits (median of 5): {client_rate:,.0f} answers/s; "
        f"a bare read_committed consumer reading them live beside it: {floor_rate:,.0f} records/s "
        f"({client_rate / floor_rate:.2f}x)"
    )


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200, help="calls per concurrency level and path")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--linger-ms", type=int, default=20, help="the worker's --linger-ms")
    parser.add_argument("--waits", type=int, default=1000)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="the proxy in this process (the upstream still over stdio); adds each step's timings",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="CHECKOUT",
        help="another checkout (git worktree add /tmp/main main): its proxy deciding in process is "
        "called too, interleaved, as 'baseline' (processes only, not with --in-process)",
    )
    parser.add_argument("--serve-relay", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_relay:  # the relay path's server process (latency_processes starts it)
        await serve_relay()
        return 0
    if args.calls < 2 or any(level < 1 for level in args.concurrency) or args.waits < 1:
        parser.error("--calls must be at least 2, --concurrency and --waits positive")
    if args.baseline is not None and (
        args.in_process or not (args.baseline / "worker" / "toolgate").is_dir()
    ):
        parser.error("--baseline: a checkout holding worker/toolgate, and not with --in-process")
    tag = uuid.uuid4().hex[:8]
    config = Config(
        bootstrap=os.environ.get("TOOLGATE_BOOTSTRAP", "127.0.0.1:19092"),
        group_id=f"tg-bench-{tag}",
        topics=Topics.under(f"tg-bench-{tag}"),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    # The worker group too: the proxy answers GATE_TIMEOUT at once while its group has no member.
    env.update(
        TOOLGATE_BOOTSTRAP=config.bootstrap,
        TOOLGATE_GROUP_ID=config.group_id,
        PYTHONPATH=str(ROOT / "worker"),
        **config.topics.env(),
    )
    await ensure_topics(config)
    with tempfile.TemporaryDirectory() as folder:
        contracts = Path(folder)
        tools = await fetch_listing(upstream_server(env))
        import_listing(contracts, SERVER, tools, only=[TOOL], out=lambda _line: None)
        review(contracts, tools)
        worker, _port = start_worker(config, contracts, args.linger_ms)
        try:
            if args.in_process:
                figures = await latency_in_process(config, contracts, env, args.calls, args.concurrency)
            else:
                figures = await latency_processes(
                    config, contracts, env, args.calls, args.concurrency, args.baseline
                )
            floor = await floors(config)
            rates = await answers_per_second(config, args.waits)
        finally:
            worker.terminate()
            worker.wait(30)
            await delete_topics(config)
    shape = (
        "proxy in this process, upstream over stdio"
        if args.in_process
        else "host, proxy, upstream: processes, stdio"
    )
    print_report(figures, shape, args.linger_ms, args.calls, rates, floor)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
