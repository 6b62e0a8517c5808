"""What `toolgate mcp-proxy` adds to a tools/call, and how fast toolgate.client answers waits.

Usage::

    .venv/bin/python ops/bench/mcp_proxy_bench.py [--calls 200] [--concurrency 1 10 100]
        [--linger-ms 20] [--waits 1000] [--in-process] [--timezone Europe/Paris]

On the local broker (TOOLGATE_BOOTSTRAP, default 127.0.0.1:19092), private topics, a
``toolgate run`` subprocess (``--linger-ms`` passed to it) on the contract
``toolgate contracts import-mcp`` writes for the upstream's tool. The upstream is a real
published MCP server, ``mcp-server-time`` from PyPI (a dev dependency; its
``get_current_time`` tool, which has an output schema), run over stdio as hosts run it
(``python -m mcp_server_time``); the host is the MCP SDK's client.

1. **Added latency.** The same host calls the same upstream program directly and through
   the proxy, interleaved in halves per concurrency level (1, 10, 100 calls at once;
   ``--calls`` calls each, at least two per lane; :func:`ops.bench.measure.interleaved`),
   in the same run; added = proxy minus direct, p50 and p99. By default the proxy is
   `toolgate mcp-proxy` over stdio, a process of its own starting its upstream, as hosts
   run it; ``--in-process`` runs the proxy in this process (the upstream still a process
   over stdio) and adds the breakdown of each step of a proxied call: the request record's
   acknowledgement and the upstream call (overlapped: the record is written while the
   upstream works), the result record's acknowledgement, and the read of the decided
   answer (the worker's decision and transaction, and the client's read), timed per call
   around the proxy's calls into ``toolgate.client`` and the upstream.
   Targets at 1 and 10 concurrent: added p50 <= 10 ms and p99 <= 30 ms. At 100 concurrent,
   no call should wait for another's transaction: printed as the p50 at 100 over the p50
   at 1: of the answer read with ``--in-process`` (the step such a wait lands in), else of
   the added latency; about 2 or more means a call waits for a whole other transaction.
2. **Client answers per second.** ``--waits`` requests issued and awaited at once by one
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

from aiokafka import TopicPartition  # noqa: E402
from mcp import Client as McpClient  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402
from toolgate._config import Config, Topics  # noqa: E402
from toolgate.client import Client  # noqa: E402
from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.gate._mcp import definition_digest  # noqa: E402
from toolgate.mcp._import import fetch_listing, import_listing  # noqa: E402
from toolgate.mcp._proxy import Proxy, ProxyOptions  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics, partition_of  # noqa: E402

from ops.bench.measure import (  # noqa: E402
    Load,
    at_most,
    both,
    broker_pid,
    descendants,
    interleaved,
    lanes,
    percentiles,
    print_targets,
    ratio,
    target,
)

SERVER = "time"  # the proxy's name for the upstream server
TOOL = "get_current_time"
TARGET_ADDED_P50_MS = 10.0  # at 1 and at 10 concurrent calls
TARGET_ADDED_P99_MS = 30.0
TARGET_WAIT_RATIO = 2.0  # p50 at 100 concurrent over p50 at 1: below, no call waited a whole transaction
STEPS = ("request record ack", "upstream call", "result ack", "answer read")


def upstream_server(env: dict[str, str]) -> StdioServerParameters:
    """``mcp-server-time`` over stdio, as an MCP host starts it."""
    return StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_time"], env=env)


def upstream_command() -> str:
    return f"{sys.executable} -m mcp_server_time"


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


class Breakdown:
    """The steps of each proxied call, timed around the proxy's calls into the client and the
    upstream (the proxy exposes no timings of its own; nothing in it is changed)."""

    def __init__(self, proxy: Proxy, client: Client) -> None:
        self.calls: list[CallSteps] = []
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
            if all(name in spans for name in (*STEPS, "proxied call")):
                # The call's time outside its steps: waiting for a slot, the event loop, the
                # host's and the proxy's MCP sessions (all in this process).
                path = max(spans["request record ack"][1], spans["upstream call"][1]) - min(
                    spans["request record ack"][0], spans["upstream call"][0]
                )
                path += sum(spans[name][1] - spans[name][0] for name in ("result ack", "answer read"))
                whole = spans["proxied call"][1] - spans["proxied call"][0]
                rows["rest"].append(max(0.0, whole - path) * 1000)
        self.calls.clear()
        return {name: percentiles(values) for name, values in rows.items() if values}


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


async def measure_levels(
    direct: McpClient,
    host: McpClient,
    arguments: dict[str, Any],
    calls: int,
    levels: list[int],
    breakdown: Breakdown | None,
    broker: int | None,
) -> dict[int, dict[str, Any]]:
    """Direct and proxied calls, interleaved, at each concurrency level: their percentiles,
    the steps of the proxied ones and the others' CPUs meanwhile."""
    figures: dict[int, dict[str, Any]] = {}
    plain_call, proxied_call = caller(direct, arguments), caller(host, arguments)
    await lanes(proxied_call, 20, 1)  # warm-up: connections, metadata, the worker's first batches
    await lanes(plain_call, 20, 1)
    if breakdown is not None:
        breakdown.take()
    for level in levels:
        load = Load(broker, *descendants(os.getpid()))  # the worker, proxy and upstreams are ours
        # Every lane busy in both halves: at least two calls per lane and path.
        plain, proxied = await interleaved(plain_call, proxied_call, max(calls, 2 * level), level)
        load.stop()
        figures[level] = {
            "direct": percentiles(plain),
            "proxy": percentiles(proxied),
            "steps": breakdown.take() if breakdown is not None else {},
            "others": load.others(),
        }
    return figures


async def latency_in_process(
    config: Config, contracts: Path, env: dict[str, str], calls: int, levels: list[int]
) -> dict[int, dict[str, Any]]:
    """Host and proxy in this process, the upstream a process over stdio (one for the
    proxy, one for the direct path)."""
    async with (
        Client(config) as client,
        McpClient(upstream_server(env)) as up,
        McpClient(upstream_server(env)) as direct,
    ):
        proxy = Proxy(
            SERVER, up, client, ContractSet.load(contracts), options=ProxyOptions(max_concurrent=128)
        )
        if TOOL not in await proxy.load_tools():
            raise SystemExit(f"the proxy serves no {TOOL}: the imported contract was not loaded")
        breakdown = Breakdown(proxy, client)
        async with McpClient(proxy.mcp_server()) as host:
            return await measure_levels(
                direct, host, arguments(), calls, levels, breakdown, broker_pid(config.bootstrap)
            )


async def latency_processes(
    config: Config, contracts: Path, env: dict[str, str], calls: int, levels: list[int]
) -> dict[int, dict[str, Any]]:
    """The shape MCP hosts run: the host here starts the upstream server, or `toolgate
    mcp-proxy` (which starts the upstream server), each a process of its own over stdio."""
    proxy_server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m", "toolgate", "mcp-proxy", "--server", SERVER, "--contracts", str(contracts),
            "--upstream-command", upstream_command(), "--max-concurrent", "128",
        ],
        env=env,
        cwd=str(ROOT),
    )  # fmt: skip
    async with McpClient(upstream_server(env)) as direct, McpClient(proxy_server) as host:
        return await measure_levels(
            direct, host, arguments(), calls, levels, None, broker_pid(config.bootstrap)
        )


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


def added(f: dict[str, Any], key: str) -> float:
    value: float = f["proxy"][key] - f["direct"][key]
    return value


def targets(figures: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The proxy's targets, met or not (None where a level was not run)."""
    out = []
    for level in (1, 10):
        f = figures.get(level)
        p50 = added(f, "p50") if f else None
        p99 = added(f, "p99") if f else None
        out.append(
            target(
                f"added latency at {level} concurrent: p50 / p99, ms",
                p50,
                f"p50 <= {TARGET_ADDED_P50_MS:g}, p99 <= {TARGET_ADDED_P99_MS:g}",
                both(at_most(p50, TARGET_ADDED_P50_MS), at_most(p99, TARGET_ADDED_P99_MS)),
                f"p99 {p99:.1f} ms; others {f['others']:.2f} CPUs" if f and p99 is not None else "not run",
            )
        )
    one, hundred = figures.get(1), figures.get(100)
    value, name, note = None, "100 concurrent: added p50 / added p50 at 1", "needs --concurrency 1 ... 100"
    if one and hundred:
        value = ratio(added(hundred, "p50"), added(one, "p50"))
        note = f"added p50 {added(hundred, 'p50'):.1f} ms at 100, {added(one, 'p50'):.1f} ms at 1"
        read_one, read_hundred = one["steps"].get("answer read"), hundred["steps"].get("answer read")
        if read_one and read_hundred:
            # The step a wait for another call's transaction lands in: judged on it alone (the
            # added latency at 100 also holds the upstream's and the host's own queueing).
            value = ratio(read_hundred["p50"], read_one["p50"])
            name = "100 concurrent: answer read p50 / at 1"
            note = (
                f"answer read p50 {read_hundred['p50']:.1f} ms at 100, {read_one['p50']:.1f} ms at 1; " + note
            )
        note += f"; others {hundred['others']:.2f} CPUs"
    out.append(
        target(
            f"{name} (no call waits for another's txn)",
            value,
            f"< {TARGET_WAIT_RATIO:g}",
            None if value is None else value < TARGET_WAIT_RATIO,
            note,
        )
    )
    return out


def print_report(
    figures: dict[int, dict[str, Any]], shape: str, linger_ms: int, calls: int, rates: tuple[float, float]
) -> None:
    print(
        f"mcp-proxy added latency (mcp-server-time {TOOL}; {shape}; worker --linger-ms {linger_ms}, "
        f"{calls} calls per level and path)"
    )
    heads = ("concurrent", "direct p50", "proxy p50", "added p50", "direct p99", "proxy p99", "added p99")
    print(" ".join(f"{h:>11}" for h in heads) + "   others")
    for level, f in figures.items():
        d, p = f["direct"], f["proxy"]
        cells = (d["p50"], p["p50"], p["p50"] - d["p50"], d["p99"], p["p99"], p["p99"] - d["p99"])
        print(f"{level:>11} " + " ".join(f"{c:>9.1f}ms" for c in cells) + f"   {f['others']:.2f}")
    if any(f["steps"] for f in figures.values()):
        print()
        print("each step of a proxied call, ms (p50 / p99); the request record's acknowledgement")
        print("runs beside the upstream call; 'ack after upstream' is how long the result waited for it;")
        print("'rest' is the proxied call's time outside these steps (slots, event loop, MCP sessions)")
        names = (
            "request record ack",
            "upstream call",
            "ack after upstream",
            "result ack",
            "answer read",
            "rest",
        )
        print(f"{'concurrent':>11}" + "".join(f"{n:>22}" for n in (*names, "proxied call")))
        for level, f in figures.items():
            steps = [f["steps"].get(name) for name in (*names, "proxied call")]
            texts = [f"{s['p50']:>9.1f} / {s['p99']:>8.1f}" if s else f"{'-':>20}" for s in steps]
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
    args = parser.parse_args()
    if args.calls < 2 or any(level < 1 for level in args.concurrency) or args.waits < 1:
        parser.error("--calls must be at least 2, --concurrency and --waits positive")
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
            measure = latency_in_process if args.in_process else latency_processes
            figures = await measure(config, contracts, env, args.calls, args.concurrency)
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
    print_report(figures, shape, args.linger_ms, args.calls, rates)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
