"""Replay throughput: select, dry-run and apply N quarantined results (default 100,000).

Fills a private quarantine topic (and the requests topic the dry run reads) on the
local broker with N rejected review_status results, then times, in one run:

* ``select``  reading the whole quarantine topic and filtering it;
* ``dry-run`` the above plus loading requests and the ledger and re-evaluating all;
* ``apply``   the above plus re-publishing every selected record to intake.

Usage: .venv/bin/python ops/bench/replay_bench.py [--messages N] [--json]
Topics are named bench-replay-<uuid>.* and deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from toolgate._config import Config, Partitions, Topics  # noqa: E402
from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.gate._gate import Gate  # noqa: E402
from toolgate.operations._replay import Selection, run_replay  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, ensure_topics  # noqa: E402

from ops.bench.reviews import review_headers, review_request, review_result  # noqa: E402


async def fill(config: Config, count: int) -> None:
    """N request records and N quarantine records as the worker writes them."""
    now = datetime.now(UTC)
    producer = AiokafkaClients(config).producer(acks="all", linger_ms=20, max_batch_size=256 * 1024)
    await producer.start()
    try:
        for i in range(count):
            rid = f"req.rb{i:010d}"
            request = review_request(rid, now, f"CR-{i + 1}", lifetime=timedelta(hours=1))
            value = review_result(rid, f"CR-{i + 1}")
            headers = [
                *review_headers(rid),
                ("tg-error-stage", b"schema"),
                ("tg-error-code", b"SCHEMA_VIOLATION"),
                ("tg-error-detail", b'{"keyword":"additionalProperties"}'),
                ("tg-origin", f"{config.topics.intake}/0/{i}".encode()),
                ("tg-raw-sha256", b"0" * 64),
                ("tg-contract", b"review_status@v1"),
                ("tg-worker-version", b"bench"),
                ("tg-rejected-at", now.isoformat().encode()),
                ("tg-replay-count", b"0"),
            ]
            await producer.send(config.topics.requests, json.dumps(request).encode(), key=rid.encode())
            await producer.send(
                config.topics.quarantine, json.dumps(value).encode(), key=rid.encode(), headers=headers
            )
        await producer.flush()
    finally:
        await producer.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    topics = Topics.under(f"bench-replay-{tag}")
    config = Config(
        bootstrap=args.bootstrap,
        topics=topics,
        partitions=Partitions(requests=3, intake=3, agent=3, quarantine=3, audit=3),
    )
    await ensure_topics(config)
    gate = Gate(ContractSet.load(ROOT / "contracts"))
    selection = Selection(codes=frozenset({"SCHEMA_VIOLATION"}))
    figures: dict[str, float] = {}
    try:
        started = time.perf_counter()
        await fill(config, args.messages)
        figures["fill_seconds"] = time.perf_counter() - started
        for mode in ("dry-run", "apply"):
            out = io.StringIO()
            started = time.perf_counter()
            await run_replay(
                config,
                gate,
                selection,
                apply_it=mode == "apply",
                max_replays=3,
                now=datetime.now(UTC),
                out=out,
            )
            figures[f"{mode}_seconds"] = time.perf_counter() - started
            if f"selected {args.messages} of {args.messages}" not in out.getvalue():
                raise SystemExit(f"{mode}: unexpected selection:\n{out.getvalue()[:500]}")
    finally:
        admin = AiokafkaClients(config).admin()
        await admin.start()
        await admin.delete_topics(topics.names())
        await admin.close()
    n = args.messages
    if args.json:
        print(json.dumps({"messages": n, **figures}))
        return
    print(f"replay of {n:,} quarantined results (local broker, one process):")
    for mode in ("dry-run", "apply"):
        seconds = figures[f"{mode}_seconds"]
        print(
            f"  {mode:<8} {seconds:7.1f} s   {n / seconds:9,.0f} records/s "
            "(read + select"
            + (" + requests/ledger + re-evaluate)" if mode == "dry-run" else " + re-publish to intake)")
        )


if __name__ == "__main__":
    asyncio.run(main())
