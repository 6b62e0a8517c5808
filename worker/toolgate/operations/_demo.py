"""``toolgate demo``: publish sample traffic to a running worker and show what it decided.

Writes request records, then results (as the platform writes a request before it
calls the adapter), waits for the audit events of this run (``read_committed``) and prints decisions by tool,
outcome and code, and whether each matched what the sample expected.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from toolgate._config import Config
from toolgate.gate._signing import Keyring
from toolgate.operations._traffic import Sample, TrafficGenerator
from toolgate.service._kafka import AiokafkaClients, Producer


async def publish(config: Config, samples: list[Sample], *, early: int = 0) -> None:
    """Write the samples' request records and results.

    ``early`` results are written before any request record: they race the request
    reader, so each may be accepted or, if the reader was already caught up, be
    ``UNKNOWN_REQUEST`` (tests use this; the demo does not).
    """
    producer = AiokafkaClients(config).producer(acks="all", linger_ms=5)
    try:
        await producer.start()
        first, rest = samples[:early], samples[early:]
        for sample in first:
            await _send_result(producer, config, sample)
        await producer.flush()
        for sample in samples:
            raw = sample.request_bytes()
            if raw is not None:
                await producer.send(config.topics.requests, raw, key=sample.request_id.encode())
        await producer.flush()
        for sample in rest:
            await _send_result(producer, config, sample)
        await producer.flush()
    finally:
        await producer.stop()


async def _send_result(producer: Producer, config: Config, sample: Sample) -> None:
    message = sample.message
    await producer.send(config.topics.intake, message.value, key=message.key, headers=list(message.headers))


async def collect(config: Config, request_ids: set[str], wait_seconds: float) -> dict[str, dict[str, object]]:
    """Audit events of these request ids, waiting at most ``wait_seconds`` for all of them."""
    consumer = AiokafkaClients(config).consumer(
        config.topics.audit,
        group_id=None,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()  # a failed start leaves its connections open
        raise
    found: dict[str, dict[str, object]] = {}
    deadline = time.monotonic() + wait_seconds
    try:
        while len(found) < len(request_ids) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            for records in batches.values():
                for record in records:
                    key = (record.key or b"").decode("utf-8", "replace")
                    if key in request_ids:
                        found[key] = json.loads(record.value or b"{}")
    finally:
        await consumer.stop()
    return found


def report(samples: list[Sample], decisions: dict[str, dict[str, object]], out: TextIO) -> int:
    """Print the decision table; return how many samples were decided other than expected."""
    table: collections.Counter[tuple[str, str, str]] = collections.Counter()
    unexpected = missing = 0
    for sample in samples:
        event = decisions.get(sample.request_id)
        if event is None:
            missing += 1
            continue
        outcome, code = str(event.get("outcome")), str(event.get("code") or "-")
        table[(sample.tool, outcome, code)] += 1
        got = None if outcome != "rejected" else (event.get("stage"), event.get("code"))
        if got != sample.expect:
            unexpected += 1
            if unexpected <= 10:
                print(
                    f"unexpected: {sample.kind} {sample.request_id}: expected {sample.expect}, got {got}",
                    file=out,
                )
    width = max((len(t) for t, _, _ in table), default=4)
    print(f"{'tool':<{width}}  {'outcome':<9} {'code':<24} count", file=out)
    for (tool, outcome, code), count in sorted(table.items()):
        print(f"{tool:<{width}}  {outcome:<9} {code:<24} {count:>5}", file=out)
    print(
        f"\n{len(samples)} results sent, {len(samples) - missing} decided, {missing} not decided yet, "
        f"{unexpected} decided other than expected",
        file=out,
    )
    return unexpected + missing


async def run_demo(
    config: Config, keyring: Keyring, *, count: int, wait_seconds: float, seed: int, out: TextIO = sys.stdout
) -> int:
    """Publish ``count`` samples, wait for their decisions, print the table."""
    now = datetime.now(UTC)
    traffic = TrafficGenerator(keyring, seed=seed, run_id=now.strftime("d%H%M%S"))
    samples = list(traffic.mix(count, now))
    await publish(config, samples)
    print(f"published {len(samples)} results and their request records to {config.bootstrap}", file=out)
    decisions = await collect(config, {s.request_id for s in samples}, wait_seconds)
    return report(samples, decisions, out)


def main_demo(config: Config, keyring: Keyring, count: int, wait_seconds: float, seed: int) -> int:
    """Run the demo and return a process exit code."""
    problems = asyncio.run(run_demo(config, keyring, count=count, wait_seconds=wait_seconds, seed=seed))
    print(
        f"metrics: http://127.0.0.1:{config.metrics_port}/metrics   "
        f"quarantine: topic {config.topics.quarantine}   audit: topic {config.topics.audit}"
    )
    return 1 if problems else 0
