"""What `toolgate mcp-proxy` adds to a tools/call, and how fast toolgate.client answers waits.

Usage::

    .venv/bin/python ops/bench/mcp_proxy_bench.py [--calls 200] [--concurrency 1 10 100]
        [--linger-ms 20] [--waits 1000] [--in-process]

On the local broker (TOOLGATE_BOOTSTRAP, default 127.0.0.1:19092), private topics, a
``toolgate run`` subprocess (``--linger-ms`` passed to it) on the contract
``toolgate contracts import-mcp`` writes for the upstream's tool:

1. **Added latency.** The same MCP host (the SDK's client) calls the same upstream tool
   (an SDK server) directly and through the proxy, each a process of its own over stdio, as
   hosts start them (``--in-process``: all three in this process, plus the median of each phase
   of a proxied call), interleaved per concurrency level (1, 10, 100 calls at once;
   ``--calls`` calls each); printed: p50 and p99 of each and their
   difference. Target at 10 concurrent: added p50 <= 15 ms and p99 <= 50 ms.
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
from aiokafka import TopicPartition  # noqa: E402
from mcp import Client as McpClient  # noqa: E402
from mcp.server import Server  # noqa: E402
from toolgate._config import Config, Topics  # noqa: E402
from toolgate.client import Client  # noqa: E402
from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.gate._mcp import definition_digest  # noqa: E402
from toolgate.mcp._import import fetch_listing, import_listing  # noqa: E402
from toolgate.mcp._proxy import Proxy, ProxyOptions  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics, partition_of  # noqa: E402

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


class Phases:
    """Per-call phase timings (ms) of the proxied calls: request record acknowledged, result
    acknowledged, and from that acknowledgement to the decided envelope."""

    def __init__(self, client: Client) -> None:
        self.samples: dict[str, list[float]] = {
            "request record ack": [],
            "result ack": [],
            "decision after result": [],
        }
        issue, publish, answer = client.issue, client.publish_result, client.answer

        async def timed_issue(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await issue(*args, **kwargs)
            finally:
                self.samples["request record ack"].append((time.perf_counter() - start) * 1000)

        async def timed_publish(*args: Any, **kwargs: Any) -> None:
            start = time.perf_counter()
            await publish(*args, **kwargs)
            self.samples["result ack"].append((time.perf_counter() - start) * 1000)
            self._published = time.perf_counter()

        async def timed_answer(request: Any) -> Any:
            start = time.perf_counter()
            try:
                return await answer(request)
            finally:
                self.samples["decision after result"].append((time.perf_counter() - start) * 1000)

        client.issue = timed_issue  # type: ignore[method-assign]
        client.publish_result = timed_publish  # type: ignore[method-assign]
        client.answer = timed_answer  # type: ignore[method-assign]

    def take(self) -> dict[str, float]:
        out = {name: statistics.median(values) for name, values in self.samples.items() if values}
        for values in self.samples.values():
            values.clear()
        return out


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
        phases = Phases(client)
        async with McpClient(proxy.mcp_server()) as host:
            await timed_calls(host, 20, 1)  # warm-up: connections, metadata, the worker's first batches
            await timed_calls(direct, 20, 1)
            phases.take()
            for level in levels:
                plain: list[float] = []
                proxied: list[float] = []
                for _ in range(2):  # interleaved halves: the machine's noise lands on both
                    plain += await timed_calls(direct, calls // 2, level)
                    proxied += await timed_calls(host, calls // 2, level)
                figures[level] = {
                    **{f"phase {name}": value for name, value in phases.take().items()},
                    "direct_p50": statistics.median(plain),
                    "direct_p99": pct(plain, 0.99),
                    "proxy_p50": statistics.median(proxied),
                    "proxy_p99": pct(proxied, 0.99),
                }
    return figures


async def latency_processes(
    config: Config, contracts: Path, calls: int, levels: list[int]
) -> dict[int, dict[str, float]]:
    """The shape MCP hosts run: the host here starts the upstream server, or `toolgate
    mcp-proxy` (which starts the upstream server), each a process of its own over stdio."""
    from mcp import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(TOOLGATE_BOOTSTRAP=config.bootstrap, PYTHONPATH=str(ROOT / "worker"), **config.topics.env())
    serve = f"{sys.executable} {__file__} --serve-upstream"
    direct_server = StdioServerParameters(
        command=sys.executable, args=[__file__, "--serve-upstream"], env=env
    )
    proxy_server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m", "toolgate", "mcp-proxy", "--server", "deployer", "--contracts", str(contracts),
            "--upstream-command", serve, "--max-concurrent", "128",
        ],
        env=env,
        cwd=str(ROOT),
    )  # fmt: skip
    figures: dict[int, dict[str, float]] = {}
    async with McpClient(direct_server) as direct, McpClient(proxy_server) as host:
        await timed_calls(host, 20, 1)
        await timed_calls(direct, 20, 1)
        for level in levels:
            plain: list[float] = []
            proxied: list[float] = []
            for _ in range(2):
                plain += await timed_calls(direct, calls // 2, level)
                proxied += await timed_calls(host, calls // 2, level)
            figures[level] = {
                "direct_p50": statistics.median(plain),
                "direct_p99": pct(plain, 0.99),
                "proxy_p50": statistics.median(proxied),
                "proxy_p99": pct(proxied, 0.99),
            }
    return figures


async def _serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = upstream()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def review(contracts: Path, tools: list[dict[str, Any]]) -> None:
    """What a reviewer does last: the imported drafts (which decide nothing) become active,
    each pinned to the definition listed (where import did not pin it already)."""
    by_name = {tool["name"]: tool for tool in tools}
    for path in contracts.glob("*/v*/contract.yaml"):
        text = path.read_text().replace("\nstatus: draft\n", "\nstatus: active\n")
        if "\n  definition:" not in text:
            tool = by_name[path.parent.parent.name.removeprefix("deployer.")]
            (path.parent / "input.schema.json").write_text(json.dumps(tool["inputSchema"]))
            pinned = (
                f"  definition:\n    digest: {definition_digest(tool)}\n    input_schema: input.schema.json\n"
            )
            text = text.replace("\nmcp:\n", "\nmcp:\n" + pinned, 1)
        path.write_text(text)


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


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per concurrency level and path")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--linger-ms", type=int, default=20, help="the worker's --linger-ms")
    parser.add_argument("--waits", type=int, default=1000)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="host, proxy and upstream in this process (adds the per-phase medians)",
    )
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
        review(contracts, tools)
        worker, _port = start_worker(config, contracts, args.linger_ms)
        try:
            measure = latency if args.in_process else latency_processes
            figures = await measure(config, contracts, args.calls, args.concurrency)
            client_rate, floor_rate = await answers_per_second(config, args.waits)
        finally:
            worker.terminate()
            worker.wait(30)
            await delete_topics(config)
    shape = "host, proxy and upstream in one process" if args.in_process else "separate processes, stdio"
    print(
        f"mcp-proxy added latency ({shape}; worker --linger-ms {args.linger_ms}, "
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
    if args.in_process:
        print("proxied calls, median per phase (the request record is written while the upstream works):")
    for level, f in figures.items() if args.in_process else ():
        parts = [f"{name[6:]} {value:.1f} ms" for name, value in f.items() if name.startswith("phase ")]
        print(f"{level:>11} concurrent: " + ", ".join(parts))
    ten = figures.get(10)
    if ten is not None:
        p50 = ten["proxy_p50"] - ten["direct_p50"]
        p99 = ten["proxy_p99"] - ten["direct_p99"]
        print(f"target at 10 concurrent: added p50 {p50:.1f} ms <= 15: {'met' if p50 <= 15 else 'not met'}")
        print(f"target at 10 concurrent: added p99 {p99:.1f} ms <= 50: {'met' if p99 <= 50 else 'not met'}")
    print(
        f"toolgate.client, {args.waits} concurrent waits (median of 5): {client_rate:,.0f} answers/s; "
        f"a bare read_committed consumer reading them live beside it: {floor_rate:,.0f} records/s "
        f"({client_rate / floor_rate:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-upstream"]:  # the upstream process of the default shape
        asyncio.run(_serve_stdio())
        sys.exit(0)
    sys.exit(asyncio.run(main()))
