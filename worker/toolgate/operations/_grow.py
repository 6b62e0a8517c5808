"""Grow intake, requests and state together: ``toolgate topics grow --partitions N``.

A request id's request record, accepted attempts and results must sit in the same partition
number of requests, state and intake (the default partitioner: murmur2 of the key modulo the
count). Growing the count moves keys: a live request written under the old count sits where
the new count does not look. So the growth is drain-and-grow
(docs/design.md, Growing the intake partitions):

1. refuse while the worker group has members (the workers are stopped first) or an intake
   partition holds a record no worker has decided yet (the intake is drained first, with the
   adapters and the platform paused);
2. add partitions to requests and state, then to intake;
3. move every live record of requests and state whose key now belongs to another partition:
   copied there (value and headers unchanged), then tombstoned where it was.

Each step is idempotent, so a run that stopped half-way is finished by running it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka.errors import KafkaError

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError
from toolgate.service._kafka import (
    AiokafkaClients,
    Consumer,
    KafkaClients,
    TopicPartition,
    partition_of,
    partitions_of,
)

Clock = Callable[[], float]


class GrowRefused(Exception):
    """The growth would lose or misdecide a request: the message says what to do first."""


@dataclass
class GrowReport:
    """What ``grow_topics`` found and did."""

    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    moved: dict[str, int] = field(default_factory=dict)  # topic -> live records moved


async def grow_topics(
    config: Config,
    partitions: int,
    *,
    clients: KafkaClients | None = None,
    wait_s: float = 30.0,
    clock: Clock = time.monotonic,
) -> GrowReport:
    """Grow intake, requests and state to ``partitions`` and move the live records.

    Raises:
        ConfigError: fewer partitions than the topics have, or a topic is missing.
        GrowRefused: the group has members or the intake is not drained.
        BrokerError: the cluster could not be reached or refused a step.
    """
    clients = clients or AiokafkaClients(config)
    t = config.topics
    names = [t.requests, t.state, t.intake]
    try:
        report = GrowReport(before={n: len(await partitions_of(clients, n)) for n in names})
        for name, count in report.before.items():
            if not count:
                raise ConfigError(f"topic {name!r} does not exist (run: toolgate topics ensure)")
            if count > partitions:
                raise ConfigError(
                    f"--partitions {partitions}: {name} already has {count} partitions "
                    "(Kafka cannot remove partitions)"
                )
        admin = clients.admin()
        await admin.start()
        try:
            members = await admin.group_members(config.group_id)
            if members:
                raise GrowRefused(
                    f"consumer group {config.group_id!r} has {members} members: stop every worker first "
                    "(a stopped static member leaves after TOOLGATE_SESSION_TIMEOUT_MS)"
                )
            await _check_drained(config, clients, report.before[t.intake], wait_s, clock)
            grow = {n: partitions for n in names if report.before[n] < partitions}
            # Requests and state first: an intake partition never exists before its state does.
            for name in (t.requests, t.state, t.intake):
                if name in grow:
                    await admin.create_partitions({name: partitions})
        finally:
            await admin.close()
        report.after = await _counts_reach(clients, names, partitions, wait_s, clock)
        for name in (t.requests, t.state):
            report.moved[name] = await _move_keys(clients, name, partitions, wait_s, clock)
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    return report


async def _counts_reach(
    clients: KafkaClients, names: list[str], partitions: int, wait_s: float, clock: Clock
) -> dict[str, int]:
    """The topics' counts once the cluster's metadata shows the new ones (bounded)."""
    deadline = clock() + wait_s
    backoff = 0.05
    while True:
        counts = {n: len(await partitions_of(clients, n)) for n in names}
        if all(count >= partitions for count in counts.values()):
            return counts
        if clock() > deadline:
            raise BrokerError(
                f"the partitions of {', '.join(names)} were not all {partitions} within {wait_s:g} s",
                retriable=True,
            )
        await asyncio.sleep(backoff)  # the metadata of a grown topic propagates
        backoff = min(backoff * 2, 1.0)


async def _check_drained(
    config: Config, clients: KafkaClients, count: int, wait_s: float, clock: Clock
) -> None:
    """Every intake partition is decided up to its last stable offset: reading read_committed
    from the group's committed offset finds no record (transaction markers are no records)."""
    topic = config.topics.intake
    tps = [TopicPartition(topic, p) for p in range(count)]
    # Group-less except for reading the group's offsets: assign() never joins the group.
    consumer = clients.consumer(
        group_id=config.group_id, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        consumer.assign(tps)
        stable = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
        pending = {}
        for tp in tps:
            committed = await consumer.committed(tp) or 0
            if committed < stable[tp]:
                consumer.seek(tp, committed)
                pending[tp] = committed
        deadline = clock() + wait_s
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=200, max_records=1)
            for tp, records in batches.items():
                if records and await _offset_settled_past(consumer, tp, records[0].offset, deadline, clock):
                    pending[tp] = await consumer.committed(tp) or 0
                    consumer.seek(tp, pending[tp])  # decided: its offset was still being shown
                    continue
                if records:
                    raise GrowRefused(
                        f"{topic} partition {tp.partition} has records no worker decided yet (from offset "
                        f"{pending[tp]}): pause the adapters and the platform, let the workers drain the "
                        "intake, stop them, then grow"
                    )
            for tp in list(pending):
                if await consumer.position(tp) >= stable[tp]:
                    del pending[tp]
            if pending and clock() > deadline:
                raise BrokerError(f"{topic}: not read to its end offsets within {wait_s:g} s", retriable=True)
    finally:
        await consumer.stop()


async def _offset_settled_past(
    consumer: Consumer, tp: TopicPartition, offset: int, deadline: float, clock: Clock
) -> bool:
    """The group's committed offset of ``tp`` moved past ``offset`` within a short settle time.

    A worker's transaction commits its consumed offset with its records, but the group
    coordinator shows that offset only once the transaction's markers are written, a moment
    after the commit returned: a record found just after a worker stopped may be decided
    already. Asked again for up to 3 s (bounded by the drain deadline) before refusing.
    """
    settle = min(deadline, clock() + 3.0)
    while True:
        committed = await consumer.committed(tp) or 0
        if committed > offset:
            return True
        if clock() >= settle:
            return False
        await asyncio.sleep(0.1)


async def _move_keys(clients: KafkaClients, topic: str, count: int, wait_s: float, clock: Clock) -> int:
    """Copy each live record whose key belongs to another partition under ``count`` there, then
    tombstone it where it was; the number moved."""
    latest = await _latest_per_key(clients, topic, count, wait_s, clock)
    moves = [
        (partition, key, value, headers)
        for (partition, key), (value, headers) in sorted(latest.items())
        if value is not None and partition_of(key, count) != partition
    ]
    if not moves:
        return 0
    producer = clients.producer(enable_idempotence=True, acks="all")
    await producer.start()
    try:
        # The copies are acknowledged before any tombstone is sent: a stop in between leaves
        # a record in both places, never in none (the next run tombstones the old copy).
        copies = [
            await producer.send(topic, value, key=key, partition=partition_of(key, count), headers=headers)
            for partition, key, value, headers in moves
        ]
        await asyncio.gather(*copies)
        tombstones = [await producer.send(topic, None, key=key, partition=p) for p, key, _, _ in moves]
        await asyncio.gather(*tombstones)
    finally:
        await producer.stop()
    return len(moves)


async def _latest_per_key(
    clients: KafkaClients, topic: str, count: int, wait_s: float, clock: Clock
) -> dict[tuple[int, bytes], tuple[bytes | None, list[tuple[str, bytes]]]]:
    """The last record (value, headers) of every key in every partition, read_committed up to the
    end offsets read now. Holds the topic's live keys in memory: what the workers hold anyway."""
    tps = [TopicPartition(topic, p) for p in range(count)]
    consumer: Consumer = clients.consumer(
        group_id=None, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    latest: dict[tuple[int, bytes], tuple[bytes | None, list[tuple[str, bytes]]]] = {}
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        pending = {tp for tp in tps if end[tp] > 0}
        deadline = clock() + wait_s
        while pending:
            batches = await consumer.getmany(*pending, timeout_ms=200, max_records=1000)
            for tp, records in batches.items():
                for record in records:
                    if record.key is not None:
                        latest[(tp.partition, record.key)] = (record.value, list(record.headers or ()))
            for tp in list(pending):
                if await consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
            if pending and clock() > deadline:
                raise BrokerError(f"{topic}: not read to its end offsets within {wait_s:g} s", retriable=True)
    finally:
        await consumer.stop()
    return latest


def describe(report: GrowReport) -> list[str]:
    """The report as lines for the terminal."""
    lines = [f"{name}: {report.before[name]} -> {report.after[name]} partitions" for name in report.before]
    lines += [
        f"{name}: {moved} live records moved to their new partition" for name, moved in report.moved.items()
    ]
    return lines
