"""What `toolgate mcp-proxy` adds to a tools/call, and how fast toolgate.client answers waits.

Usage::

    .venv/bin/python ops/bench/mcp_proxy_bench.py [--calls 200] [--concurrency 1 10 100]
        [--linger-ms 20] [--waits 1000]

On the local broker (TOOLGATE_BOOTSTRAP, default 127.0.0.1:19092), private topics, a
``toolgate run`` subprocess (``--linger-ms`` passed to it) on the contract
``toolgate contracts import-mcp`` writes for the upstream's tool:

1. **Added latency.** The same MCP host (the SDK's client) calls the same upstream tool
   (an in-process SDK server) directly and through the proxy, interleaved per
   concurrency level (1, 10, 100 calls at once; ``--calls`` calls each); printed: p50
   and p99 of each and their difference. Target at 10 concurrent: added p50 <= 15 ms and
   p99 <= 50 ms.
2. **Client answers per second.** ``--waits`` requests issued and awaited at once by one
   client; the same number of envelopes committed to the agent topic in one transaction
   (as the worker writes them); printed: answers per second from the commit to the last
   future resolved, beside a bare ``read_committed`` consumer reading the same records
   in the same run (the floor).

Prints figures and met / not met; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "worker"))

import mcp.types as types  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from mcp import Client as McpClient  # noqa: E402
from mcp.server import Server  # noqa: E402
from toolgate._config import Config, Topics  # noqa: E402
from toolgate.client import Client  # noqa: E402
from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.service._kafka import client_settings, delete_topics, ensure_topics, partition_of  # noqa: E402
from toolgate.tools._mcp_import import fetch_listing, import_listing  # noqa: E402
from toolgate.tools._mcp_proxy import Proxy, ProxyOptions  # noqa: E402

GOOD = {"environment": "staging", "revision": "a83f19c", "state": "healthy"}
TOOL = types.Tool(
    name="deploy_status",
    description="Health of one deployment.",
    input_schema={"type": "object", "properties": {"environment": {"type": "string"}}},
    output_schema={
        "type": "object",
        "properties": {
            "environment": {"type": "string", "enum": ["staging", "production"]},
            "revision": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
            "state": {"type": "string", "enum": ["healthy", "degraded", "failed"]},
        },
        "required": ["environment", "revision", "state"],
    },
)


def upstream() -> Server[Any]:
    async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[TOOL])

    async def call_tool(_ctx: Any, _params: Any) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(GOOD))], structured_content=GOOD
        )

    return Server("deployer", on_list_tools=list_tools, on_call_tool=call_tool)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed_calls(host: McpClient, calls: int, concurrency: int) -> list[float]:
    """Latency (ms) of ``calls`` calls, ``concurrency`` at a time."""
    out: list[float] = []
    queue = iter(range(calls))

    async def lane() -> None:
        for _ in queue:
            start = time.perf_counter()
            result = await host.call_tool("deploy_status", {"environment": "staging"})
            out.append((time.perf_counter() - start) * 1000)
            if result.is_error:
                raise SystemExit(f"a call through the proxy failed: {result.content}")

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return out


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


async def latency(
    config: Config, contracts: Path, calls: int, levels: list[int]
) -> dict[int, dict[str, float]]:
    figures: dict[int, dict[str, float]] = {}
    async with Client(config) as client, McpClient(upstream()) as up, McpClient(upstream()) as direct:
        proxy = Proxy(
            "deployer", up, client, ContractSet.load(contracts), options=ProxyOptions(max_concurrent=128)
        )
        await proxy.load_tools()
        async with McpClient(proxy.mcp_server()) as host:
            await timed_calls(host, 20, 1)  # warm-up: connections, metadata, the worker's first batches
            await timed_calls(direct, 20, 1)
            for level in levels:
                plain: list[float] = []
                proxied: list[float] = []
                for _ in range(2):  # interleaved halves: the machine's noise lands on both
                    plain += await timed_calls(direct, calls // 2, level)
                    proxied += await timed_calls(host, calls // 2, level)
                figures[level] = {
                    "direct_p50": statistics.median(plain),
                    "direct_p99": pct(plain, 0.99),
                    "proxy_p50": statistics.median(proxied),
                    "proxy_p99": pct(proxied, 0.99),
                }
    return figures


async def answers_per_second(config: Config, waits: int) -> tuple[float, float]:
    """(client answers/s, bare read_committed consumer records/s) over the same records."""
    agent = config.topics.agent
    async with Client(config) as client:
        requests = await asyncio.gather(*(client.issue("bench.tool", ttl=120) for _ in range(waits)))
        producer = AIOKafkaProducer(
            **client_settings(config), transactional_id=f"bench-{uuid.uuid4().hex[:8]}"
        )
        await producer.start()
        try:
            count = len(await producer.partitions_for(agent))
            start_offsets = {}
            probe = AIOKafkaConsumer(**client_settings(config), isolation_level="read_committed")
            await probe.start()
            tps = [TopicPartition(agent, p) for p in range(count)]
            start_offsets = await probe.end_offsets(tps)
            await probe.stop()
            async with producer.transaction():
                for request in requests:
                    envelope = {
                        "tool": "bench.tool",
                        "request_id": request.request_id,
                        "outcome": "success",
                        "data": {},
                    }
                    key = request.request_id.encode()
                    await producer.send(
                        agent, json.dumps(envelope).encode(), key=key, partition=partition_of(key, count)
                    )
            committed = time.perf_counter()
            await asyncio.gather(*(client.answer(r) for r in requests))
            client_s = time.perf_counter() - committed
        finally:
            await producer.stop()
    reader = AIOKafkaConsumer(**client_settings(config), isolation_level="read_committed")
    await reader.start()
    try:
        reader.assign(tps)
        for tp, offset in start_offsets.items():
            reader.seek(tp, offset)
        start, seen = time.perf_counter(), 0
        while seen < waits:
            batches = await reader.getmany(timeout_ms=100)
            seen += sum(len(v) for v in batches.values())
        floor_s = time.perf_counter() - start
    finally:
        await reader.stop()
    return waits / client_s, waits / floor_s


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per concurrency level and path")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--linger-ms", type=int, default=20, help="the worker's --linger-ms")
    parser.add_argument("--waits", type=int, default=1000)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    config = Config(
        bootstrap=os.environ.get("TOOLGATE_BOOTSTRAP", "127.0.0.1:19092"),
        group_id=f"tg-bench-{tag}",
        topics=Topics.under(f"tg-bench-{tag}"),
    )
    await ensure_topics(config)
    with tempfile.TemporaryDirectory() as folder:
        contracts = Path(folder)
        tools = await fetch_listing(upstream())
        import_listing(contracts, "deployer", tools, out=lambda _line: None)
        worker, _port = start_worker(config, contracts, args.linger_ms)
        try:
            figures = await latency(config, contracts, args.calls, args.concurrency)
            client_rate, floor_rate = await answers_per_second(config, args.waits)
        finally:
            worker.terminate()
            worker.wait(30)
            await delete_topics(config)
    print(
        f"mcp-proxy added latency (worker --linger-ms {args.linger_ms}, "
        f"{args.calls} calls per level and path)"
    )
    heads = ("concurrent", "direct p50", "proxy p50", "added p50", "direct p99", "proxy p99", "added p99")
    print(" ".join(f"{h:>11}" for h in heads))
    for level, f in figures.items():
        cells = (
            f["direct_p50"],
            f["proxy_p50"],
            f["proxy_p50"] - f["direct_p50"],
            f["direct_p99"],
            f["proxy_p99"],
            f["proxy_p99"] - f["direct_p99"],
        )
        print(f"{level:>11} " + " ".join(f"{c:>9.1f}ms" for c in cells))
    ten = figures.get(10)
    if ten is not None:
        p50 = ten["proxy_p50"] - ten["direct_p50"]
        p99 = ten["proxy_p99"] - ten["direct_p99"]
        print(f"target at 10 concurrent: added p50 {p50:.1f} ms <= 15: {'met' if p50 <= 15 else 'not met'}")
        print(f"target at 10 concurrent: added p99 {p99:.1f} ms <= 50: {'met' if p99 <= 50 else 'not met'}")
    print(
        f"toolgate.client, {args.waits} concurrent waits: {client_rate:,.0f} answers/s; "
        f"a bare read_committed consumer of the same records: {floor_rate:,.0f} records/s "
        f"({client_rate / floor_rate:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
