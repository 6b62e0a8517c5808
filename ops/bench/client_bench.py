"""toolgate.client under a flood of issues: N issue() calls started together, against the same
calls in batches of 500, on private topics of the local broker (TOOLGATE_BOOTSTRAP, else
127.0.0.1:19092).

    .venv/bin/python ops/bench/client_bench.py [--count N] [--rounds N] [--max-sends N ...]

Prints, per bound of the sends handed to the producer at once (``max_sends``), the median time
of ``--rounds`` rounds and the calls that failed, and whether the targets are met: no call fails
when all start together, and starting them together takes at most 1.5 times the batched time.
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
sys.path.insert(0, str(ROOT / "worker"))

from toolgate._config import Config, Partitions, Topics  # noqa: E402
from toolgate.client import DEFAULT_MAX_SENDS, Client  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics, partitions_of  # noqa: E402

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
    sys.exit(asyncio.run(main(parser.parse_args())))
