"""toolgate.client's issue and answer paths: N issue() calls started together, against the same
calls in batches of 500, then answers for ``--answers`` waits at once, on private topics of the
local broker (TOOLGATE_BOOTSTRAP, else 127.0.0.1:19092).

    .venv/bin/python ops/bench/client_bench.py [--count N] [--rounds N] [--max-sends N ...]
        [--answers N]

Prints, per bound of the sends handed to the producer at once (``max_sends``), the median time
of ``--rounds`` rounds and the calls that failed, and whether the targets are met: no call fails
when all start together, and starting them together takes at most 1.5 times the batched time.
Then the answer path (the mcp-proxy bench's measurement, ``answers_per_second``): ``--answers``
requests issued and awaited at once by one client, their envelopes committed in one
transaction, answers per second from the commit until every wait resolved, beside a bare
``read_committed`` consumer reading the same records in the same rounds (the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

from toolgate._config import Config, Partitions, Topics  # noqa: E402
from toolgate.client import DEFAULT_MAX_SENDS, Client  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics, partitions_of  # noqa: E402

from ops.bench.mcp_proxy_bench import answers_per_second  # noqa: E402

BATCH = 500


async def flood(config: Config, count: int, batch: int, max_sends: int) -> tuple[float, int]:
    """(seconds, failed calls) for ``count`` issues started ``batch`` at a time."""
    async with Client(config, max_sends=max_sends, max_pending=max(count, 1)) as client:
        started = time.perf_counter()
        failed = 0
        for _ in range(0, count, batch):
            results = await asyncio.gather(
                *(client.issue("bench.tool", ttl=60) for _ in range(min(batch, count))),
                return_exceptions=True,
            )
            failed += sum(isinstance(r, BaseException) for r in results)
        return time.perf_counter() - started, failed


async def main(args: argparse.Namespace) -> int:
    tag = uuid.uuid4().hex[:8]
    config = Config(
        bootstrap=os.environ.get("TOOLGATE_BOOTSTRAP", "127.0.0.1:19092"),
        topics=Topics.under(f"tg-bench-client-{tag}"),
        partitions=Partitions(requests=3, intake=3, agent=3, quarantine=1, audit=3),
    )
    await ensure_topics(config)
    clients = AiokafkaClients(config)
    for _ in range(100):  # a topic just created is described without partitions for a moment
        if await partitions_of(clients, config.topics.agent):
            break
        await asyncio.sleep(0.1)
    met = True
    try:
        for max_sends in args.max_sends:
            figures = {}
            for label, batch in (("at once", args.count), (f"batches of {BATCH}", BATCH)):
                runs = [await flood(config, args.count, batch, max_sends) for _ in range(args.rounds)]
                seconds = statistics.median(s for s, _ in runs)
                failed = max(f for _, f in runs)
                figures[label] = (seconds, failed)
                print(
                    f"max_sends {max_sends:5}: {args.count:,} issues {label:>15}: "
                    f"{seconds:6.2f} s (median of {args.rounds}), {failed} failed",
                    flush=True,
                )
            (together, failed), (batched, _) = figures.values()
            ok = failed == 0 and together <= 1.5 * batched
            met = met and ok
            print(
                f"max_sends {max_sends:5}: no failure at once and at most 1.5x the batched time: "
                f"{'met' if ok else 'not met'} ({together / batched:.2f}x)",
                flush=True,
            )
        if args.answers:
            answered, bare = await answers_per_second(config, args.answers, args.rounds)
            print(
                f"answers: {args.answers:,} waits at once, one transaction of their envelopes: "
                f"client {answered:,.0f} answers/s, bare read_committed consumer {bare:,.0f} records/s "
                f"({answered / bare:.2f}x; medians of {args.rounds})",
                flush=True,
            )
    finally:
        await delete_topics(config)
    return 0 if met else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-sends", type=int, nargs="+", default=[DEFAULT_MAX_SENDS])
    parser.add_argument(
        "--answers",
        type=int,
        default=1000,
        help="waits at once for the answer path, 0 to skip (default 1000)",
    )
    sys.exit(asyncio.run(main(parser.parse_args())))
