"""Helpers for worker tests on the real broker: private topics, traffic, read-back, subprocess workers."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from toolgate._config import Config, Partitions, Topics
from toolgate.gate._signing import Keyring
from toolgate.operations._traffic import Sample, TrafficGenerator
from toolgate.service._kafka import (
    AiokafkaClients,
    client_settings,
    delete_topics,
    ensure_topics,
    partitions_of,
)

from tests import ROOT

CONTRACTS = ROOT / "contracts"
KEYRING = CONTRACTS / "fixtures-keyring.toml"


async def private_config(bootstrap: str, *, partitions: int = 3) -> Config:
    """A configuration with uniquely named topics (created) and group, so tests never meet."""
    tag = uuid.uuid4().hex[:10]
    topics = Topics.under(f"tg-t-{tag}")
    config = Config(
        bootstrap=bootstrap,
        group_id=f"tg-t-{tag}",
        topics=topics,
        partitions=Partitions(
            requests=partitions, intake=partitions, agent=partitions, quarantine=1, audit=partitions
        ),
        contracts_dir=str(CONTRACTS),
        keyring=str(KEYRING),
    )
    await ensure_topics(config)
    return config


async def drop_topics(config: Config) -> None:
    """Delete a private configuration's topics."""
    await delete_topics(config)


def samples(count: int, *, seed: int = 11) -> list[Sample]:
    """``count`` samples of the realistic mix, fresh against the real clock."""
    traffic = TrafficGenerator(Keyring.load(KEYRING, environ={}), seed=seed, run_id=uuid.uuid4().hex[:8])
    return list(traffic.mix(count, datetime.now(UTC)))


def retry(sample: Sample) -> Sample:
    """The next attempt of a sample: its request record at attempt 2, its result saying so."""
    assert sample.request is not None
    headers = [*sample.message.headers, ("tg-attempt", b"2")]
    return dataclasses.replace(
        sample,
        request={**sample.request, "attempt": 2},
        message=msgspec.structs.replace(sample.message, headers=headers),
    )


async def publish(
    config: Config,
    items: list[Sample],
    *,
    requests: bool = True,
    results: bool = True,
    backlog: list[Sample] | None = None,
) -> None:
    """Write the request records, then the results (keys = request ids), as the client
    ``config.security`` names. ``backlog``: request records written first, in the same
    flush, so that a worker's request reader is behind when the results come."""
    producer = AIOKafkaProducer(**client_settings(config), acks="all", linger_ms=5)
    await producer.start()
    try:
        if requests:
            for sample in [*(backlog or []), *items]:
                raw = sample.request_bytes()
                if raw is not None:
                    await producer.send(config.topics.requests, raw, key=sample.request_id.encode())
        if results:
            for sample in items:
                await producer.send(
                    config.topics.intake,
                    sample.message.value,
                    key=sample.message.key,
                    headers=list(sample.message.headers),
                )
        await producer.flush()
    finally:
        await producer.stop()


@dataclass
class Record:
    """A record read back, with its transaction-visible identity."""

    topic: str
    partition: int
    offset: int
    key: str
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)


async def topic_partitions(config: Config, topic: str, seconds: float = 30) -> list[TopicPartition]:
    """Every partition of ``topic`` as the controller describes it (a client's metadata can
    lack a fresh topic, or leave out a partition whose leader it does not know yet)."""
    clients = AiokafkaClients(config)
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        tps = await partitions_of(clients, topic)
        if tps or asyncio.get_running_loop().time() > deadline:
            if not tps:
                raise AssertionError(f"topic {topic} has no partitions after {seconds:g} s")
            return tps
        await asyncio.sleep(0.1)  # polling the cluster until the topic is described


async def high_watermarks(config: Config, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The partitions' high watermarks (a ``read_uncommitted`` consumer's end offsets)."""
    consumer = AIOKafkaConsumer(
        **client_settings(config), group_id=None, isolation_level="read_uncommitted", enable_auto_commit=False
    )
    await consumer.start()
    try:
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return ends
    finally:
        await consumer.stop()


async def read_all(config: Config, topic: str, *, isolation: str = "read_committed") -> list[Record]:
    """Every record of ``topic`` visible at this isolation level, up to the end offsets now.

    The end is the high watermark, not the last stable offset: a commit's answer comes before its
    markers reach the partitions, so right after a worker's last commit the last stable offset can
    still be short of its records. A ``read_committed`` read waits (bounded, 30 s) until the
    transactions below the high watermark are settled; a transaction left open longer (a killed
    producer's, until the broker's transaction timeout) ends the read with what is settled.
    """
    consumer = AIOKafkaConsumer(
        **client_settings(config),
        group_id=None,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    out: list[Record] = []
    try:
        tps = await topic_partitions(config, topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        stable = await consumer.end_offsets(tps)
        ends = await high_watermarks(config, tps) if isolation == "read_committed" else stable
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= ends[tp] for tp in tps):
                break
            if asyncio.get_running_loop().time() > deadline and all(
                positions[tp] >= stable[tp] for tp in tps
            ):
                break  # a transaction still open: what is settled is the answer
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            for tp, records in batches.items():
                for r in records:
                    out.append(
                        Record(
                            topic,
                            tp.partition,
                            r.offset,
                            (r.key or b"").decode(),
                            r.value,
                            dict(r.headers or ()),
                        )
                    )
    finally:
        await consumer.stop()
    return out


async def wait_for_count(config: Config, topic: str, count: int, seconds: float) -> int:
    """Poll until ``topic`` holds ``count`` committed records (or time is up); return the count.

    On the audit topic only decision events count (sampled shadow events do not).
    """
    deadline = asyncio.get_running_loop().time() + seconds
    seen = 0
    while asyncio.get_running_loop().time() < deadline:
        records = await read_all(config, topic)
        if topic == config.topics.audit:
            records = [r for r in records if is_decision(r)]
        seen = len(records)
        if seen >= count:
            break
        await asyncio.sleep(0.2)  # polling a broker, not waiting for time to pass
    return seen


def log_tail(log: Path) -> str:
    """The end of a worker's log, for a failure's message."""
    return log.read_text()[-3000:]


async def kill_mid_stream_then_drain(
    start: Callable[..., subprocess.Popen[bytes]],
    worker: Config,
    watch: Config,
    *,
    kill_at: int,
    total: int,
    log: Path,
    kill_within: float = 90,
    drain_within: float = 180,
) -> None:
    """A worker (``start(worker, *args, log=log)``, in batches of 25) SIGKILLed once ``watch``'s
    audit topic holds ``kill_at`` decisions (within ``kill_within`` s), then a ``--burst`` worker
    run to the end (within ``drain_within`` s); asserts the kill landed mid-stream of the
    ``total`` results and the burst exited 0 (else the end of ``log``)."""
    first = start(worker, "--batch-size", "25", log=log)
    try:
        seen = await wait_for_count(watch, watch.topics.audit, kill_at, kill_within)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
    assert kill_at <= seen < total, f"the kill did not land mid-stream ({seen} decided)"
    second = start(worker, "--burst", log=log)
    try:
        assert second.wait(drain_within) == 0, log_tail(log)
    finally:
        if second.poll() is None:
            second.kill()


def is_decision(record: Record) -> bool:
    """An audit record of the one decision event every intake message gets."""
    return bool(json.loads(record.value or b"{}").get("kind", "decision") == "decision")


def count_by_key(records: list[Record]) -> collections.Counter[str]:
    """How many records each key has."""
    return collections.Counter(r.key for r in records)


def worker_env(config: Config) -> dict[str, str]:
    """Environment that points a ``toolgate run`` subprocess at a private configuration."""
    t = config.topics
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(
        {
            "TOOLGATE_BOOTSTRAP": config.bootstrap,
            "TOOLGATE_GROUP_ID": config.group_id,
            **t.env(),
            "TOOLGATE_CONTRACTS_DIR": str(CONTRACTS),
            "TOOLGATE_KEYRING": str(KEYRING),
            "TOOLGATE_METRICS_PORT": "0",
        }
    )
    return env


def start_worker(
    config: Config,
    *args: str,
    log: Path,
    launcher: str = "toolgate.cli",
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A ``toolgate run`` subprocess on a private configuration, logging to ``log``
    (``launcher``: the module run with ``-m``; ``env``: variables added to the worker's)."""
    with log.open("ab") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", launcher, "run", *args],
            cwd=ROOT,
            env={**worker_env(config), **(env or {})},
            stdout=handle,
            stderr=subprocess.STDOUT,
        )


def expected_rejections(items: list[Sample]) -> dict[str, tuple[str, str]]:
    """Request id -> (stage, code) for the samples that must be rejected."""
    return {s.request_id: s.expect for s in items if s.expect is not None}


def check_exactly_once(
    items: list[Sample], agent: list[Record], quarantine: list[Record], audit: list[Record]
) -> dict[str, Any]:
    """The invariants of docs/design.md (Exactly once), as counts: one agent envelope and one audit event per
    result, a quarantine record for exactly the rejected ones."""
    ids = [s.request_id for s in items]
    decisions = [r for r in audit if is_decision(r)]
    agent_n, audit_n, quarantine_n = count_by_key(agent), count_by_key(decisions), count_by_key(quarantine)
    rejected = expected_rejections(items)
    return {
        "results": len(ids),
        "agent_missing": sum(1 for i in ids if agent_n[i] == 0),
        "agent_duplicates": sum(max(0, agent_n[i] - 1) for i in ids),
        "audit_missing": sum(1 for i in ids if audit_n[i] == 0),
        "audit_duplicates": sum(max(0, audit_n[i] - 1) for i in ids),
        "quarantine_wrong": sum(1 for i in ids if quarantine_n[i] != (1 if i in rejected else 0)),
        "strays": len(set(agent_n) - set(ids)),
    }


CLEAN = {
    "agent_missing": 0,
    "agent_duplicates": 0,
    "audit_missing": 0,
    "audit_duplicates": 0,
    "quarantine_wrong": 0,
    "strays": 0,
}
