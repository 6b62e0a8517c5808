"""State benchmark: worker start-up and memory against past traffic, restore split, rebalance pause.

On the local broker (127.0.0.1:19092), with private topics of ``--partitions`` (6) partitions:

(a) empty topics: a ``toolgate run`` process from start to ``/readyz`` 200, and its peak RSS (VmHWM);
(b) ``--past`` (2,000,000) past accepted decisions in the audit topic plus ``--live`` (50,000) live
    requests, every second one with an accepted attempt in the state changelog: the same figures;
(c) (b) plus ``--past-state`` (200,000) ended requests whose changelog entry and tombstone the cleaner has
    not removed yet (the changelog between two compactions; at most about an hour and a quarter of
    ended requests in steady state): the same figures, and the restore cost per such record;
then, on (b)'s topics, two workers in one new group: the requests each restored
(``toolgate_outstanding_requests``), and the rebalance pause: from starting the second worker to both
answering ``/readyz`` 200 again. Bytes per live request: the request table's own allocations for the
live requests (tracemalloc, in this process), and (b)'s RSS above (a)'s divided by the live requests.

    .venv/bin/python ops/bench/state_bench.py [--past N] [--live N] [--past-state N] [--partitions N]

Prints figures; asserts nothing. The topics are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "worker"))

from toolgate._config import LOCAL_BOOTSTRAP, Config, Partitions, Topics  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics  # noqa: E402
from toolgate.service._store import RequestTable  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config_for(tag: str, partitions: int, bootstrap: str) -> Config:
    topics = Topics.under(f"tg-sb-{tag}")
    p = partitions
    return Config(
        bootstrap=bootstrap,
        group_id=f"tg-sb-{tag}",
        topics=topics,
        partitions=Partitions(requests=p, intake=p, agent=p, quarantine=1, audit=p),
        contracts_dir=str(ROOT / "contracts"),
        keyring=str(ROOT / "contracts" / "fixtures-keyring.toml"),
    )


def env_for(config: Config, group: str, port: int) -> dict[str, str]:
    t = config.topics
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(
        {
            "TOOLGATE_BOOTSTRAP": config.bootstrap,
            "TOOLGATE_GROUP_ID": group,
            **t.env(),
            "TOOLGATE_CONTRACTS_DIR": config.contracts_dir,
            "TOOLGATE_KEYRING": config.keyring or "",
            "TOOLGATE_METRICS_PORT": str(port),
        }
    )
    return env


class Worker:
    """A ``toolgate run`` process and its metrics port."""

    def __init__(self, config: Config, group: str, log: Path) -> None:
        self.port = free_port()
        self.started = time.monotonic()
        with log.open("ab") as handle:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "toolgate.cli", "run"],
                cwd=ROOT,
                env=env_for(config, group, self.port),
                stdout=handle,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return float("nan")

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def wait_ready(workers: list[Worker], seconds: float = 600) -> float:
    """Seconds until every worker answers /readyz 200 (polled every 50 ms)."""
    started = time.monotonic()
    while not all(w.ready() for w in workers):
        if time.monotonic() - started > seconds:
            raise SystemExit("workers not ready in time")
        for w in workers:
            if w.proc.poll() is not None:
                raise SystemExit(f"worker exited with {w.proc.returncode}")
        time.sleep(0.05)
    return time.monotonic() - started


def request_value(rid: str, now: datetime) -> bytes:
    return json.dumps(
        {
            "request_id": rid,
            "tool": "review_status",
            "issued_at": now.isoformat(),
            "expires_at": (now + timedelta(hours=2)).isoformat(),
            "bind": {"change_id": "CR-1042"},
            "attempt": 1,
            "max_attempts": 3,
        }
    ).encode()


def audit_value(rid: str, now: datetime) -> bytes:
    return json.dumps(
        {
            "kind": "decision",
            "request_id": rid,
            "tool": "review_status",
            "outcome": "success",
            "attempt": 1,
            "decided_at": now.isoformat(),
            "origin": "intake/0/0",
        }
    ).encode()


def state_value(rid: str, expires: datetime) -> bytes:
    return json.dumps(
        {"request_id": rid, "accepted_attempts": [1], "expires_at": expires.isoformat()}
    ).encode()


async def fill(config: Config, past: int, live: int, past_state: int = 0) -> float:
    """Write ``past`` accepted audit events, ``live`` live requests (every second one with a
    changelog entry) and ``past_state`` ended requests' entries and tombstones; return seconds."""
    started = time.monotonic()
    now = datetime.now(UTC)
    producer = AiokafkaClients(config).producer(acks=1, linger_ms=50, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        pending = []
        for i in range(past):
            rid = f"req.past{i:09d}"
            pending.append(await producer.send(config.topics.audit, audit_value(rid, now), key=rid.encode()))
            if len(pending) >= 20000:
                await asyncio.gather(*pending)
                pending.clear()
        for i in range(live):
            rid = f"req.live{i:09d}"
            value = request_value(rid, now)
            pending.append(await producer.send(config.topics.requests, value, key=rid.encode()))
            if i % 2 == 0:
                entry = state_value(rid, now + timedelta(hours=2))
                pending.append(await producer.send(config.topics.state, entry, key=rid.encode()))
        for i in range(past_state):
            rid = f"req.ended{i:09d}"
            entry = state_value(rid, now - timedelta(minutes=1))
            pending.append(await producer.send(config.topics.state, entry, key=rid.encode()))
            pending.append(await producer.send(config.topics.state, None, key=rid.encode()))
            if len(pending) >= 20000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return time.monotonic() - started


def filled_traced(make: Callable[[], Any], values: list[tuple[bytes, bytes]]) -> tuple[Any, float]:
    """A table from ``make`` with every (key, value) applied, and tracemalloc's count of its
    allocations per applied record."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    table = make()
    for key, value in values:
        table.apply(key, value)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return table, (after - before) / len(values)


def table_bytes_per_request(live: int) -> float:
    """The request table's allocations per live request (decoded records and the index)."""
    now = datetime.now(UTC)
    values = [(f"req.live{i:09d}".encode(), request_value(f"req.live{i:09d}", now)) for i in range(live)]
    table, per_request = filled_traced(RequestTable, values)
    assert len(table) == live
    return per_request


def start_up(config: Config, log: Path) -> tuple[float, float]:
    worker = Worker(config, f"{config.group_id}.{uuid.uuid4().hex[:6]}", log)
    try:
        seconds = wait_ready([worker])
        return seconds, worker.peak_rss_mib()
    finally:
        worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", type=int, default=2_000_000, help="past accepted decisions (audit)")
    parser.add_argument("--live", type=int, default=50_000, help="live requests")
    parser.add_argument(
        "--past-state", type=int, default=200_000, help="ended requests not compacted away yet (c)"
    )
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap", default=LOCAL_BOOTSTRAP)
    args = parser.parse_args()
    log = Path(f"/tmp/state_bench-{os.getpid()}.log")
    empty = config_for(uuid.uuid4().hex[:8] + "e", args.partitions, args.bootstrap)
    full = config_for(uuid.uuid4().hex[:8] + "f", args.partitions, args.bootstrap)
    dirty = config_for(uuid.uuid4().hex[:8] + "c", args.partitions, args.bootstrap)
    asyncio.run(ensure_topics(empty))
    asyncio.run(ensure_topics(full))
    asyncio.run(ensure_topics(dirty))
    try:
        a_seconds, a_rss = start_up(empty, log)
        fill_seconds = asyncio.run(fill(full, args.past, args.live))
        b_seconds, b_rss = start_up(full, log)
        asyncio.run(fill(dirty, 0, args.live, args.past_state))
        c_seconds, c_rss = start_up(dirty, log)
        group = f"{full.group_id}.two"
        first = Worker(full, group, log)
        wait_ready([first])
        second = Worker(full, group, log)
        try:
            pause = wait_ready([first, second])
            # Both ready; the gauge is refreshed by each loop turn.
            time.sleep(1)
            counts = [int(w.metric("toolgate_outstanding_requests")) for w in (first, second)]
        finally:
            second.stop()
            first.stop()
        per_request = table_bytes_per_request(args.live)
    finally:
        asyncio.run(delete_topics(empty))
        asyncio.run(delete_topics(full))
        asyncio.run(delete_topics(dirty))
    print(f"partitions {args.partitions}; past decisions {args.past:,}; live requests {args.live:,}")
    print(f"filling (b): {fill_seconds:.1f} s")
    print(f"(a) empty topics:        start to ready {a_seconds:6.2f} s   peak RSS {a_rss:6.1f} MiB")
    print(f"(b) past + live:         start to ready {b_seconds:6.2f} s   peak RSS {b_rss:6.1f} MiB")
    print(f"(b) - (a):               {b_seconds - a_seconds:+6.2f} s            {b_rss - a_rss:+6.1f} MiB")
    print(f"(c) (b) + {args.past_state:,} ended requests not compacted yet:")
    print(f"                         start to ready {c_seconds:6.2f} s   peak RSS {c_rss:6.1f} MiB")
    if args.past_state:
        per_record = (c_seconds - b_seconds) / (2 * args.past_state) * 1e6
        print(
            f"(c) - (b): {c_seconds - b_seconds:+.2f} s, {per_record:.1f} µs per uncompacted changelog record"
        )
    target = "met" if b_seconds - a_seconds <= 3 and b_rss < 150 else "not met"
    print(f"target (b) within 3 s of (a) and under 150 MiB: {target}")
    print(
        f"bytes per live request: request table {per_request:.0f} B (tracemalloc); "
        f"RSS (b)-(a) over live requests {(b_rss - a_rss) * 1024 * 1024 / max(args.live, 1):.0f} B"
    )
    print(f"two workers restored: {counts[0]:,} + {counts[1]:,} = {sum(counts):,} of {args.live:,}")
    print(f"rebalance pause (second worker started -> both ready): {pause:.2f} s")


if __name__ == "__main__":
    main()
