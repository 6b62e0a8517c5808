"""The pinned broker and aiokafka agree on transactions.

toolgate commits its outputs and its input offsets in one Kafka transaction; this
module proves the pieces it relies on against the real broker: atomic commit of
records plus group offsets, invisibility of aborted records to ``read_committed``
readers, and fencing of a zombie producer that shares a transactional id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import ProducerFenced

TopicFactory = Callable[..., Awaitable[str]]
N_RECORDS = 200
DRAIN_TIMEOUT_S = 30.0


def _uid(label: str) -> str:
    return f"tg-test-{label}-{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def _producer(bootstrap: str, **kwargs: object) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kwargs)
    await producer.start()
    try:
        yield producer
    finally:
        await producer.stop()


@asynccontextmanager
async def _reader(
    bootstrap: str, topic: str, isolation_level: str, partitions: int
) -> AsyncIterator[AIOKafkaConsumer]:
    """A group-less consumer assigned to all ``partitions`` of ``topic``, from the start."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        await consumer.seek_to_beginning()
        yield consumer
    finally:
        await consumer.stop()


async def _drain(consumer: AIOKafkaConsumer) -> list[ConsumerRecord]:
    """Every record visible to ``consumer`` up to the current end of its partitions.

    The end is the high watermark for ``read_uncommitted`` and the last stable
    offset for ``read_committed``; reaching it in every partition means nothing
    visible is left, so "exactly these records" is checked without waiting on time.
    """
    assigned = consumer.assignment()
    ends = await consumer.end_offsets(list(assigned))
    records: list[ConsumerRecord] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DRAIN_TIMEOUT_S
    while [tp for tp in assigned if await consumer.position(tp) < ends[tp]]:
        assert loop.time() < deadline, f"could not read up to {ends} in {DRAIN_TIMEOUT_S}s"
        batch = await consumer.getmany(timeout_ms=500)
        for tp_records in batch.values():
            records.extend(tp_records)
    return records


async def _values(bootstrap: str, topic: str, isolation_level: str, partitions: int = 1) -> list[bytes]:
    async with _reader(bootstrap, topic, isolation_level, partitions) as consumer:
        return [r.value for r in await _drain(consumer)]


async def _seed(bootstrap: str, topic: str, count: int) -> None:
    async with _producer(bootstrap, acks="all") as producer:
        futures = [await producer.send(topic, f"in-{i}".encode(), key=str(i).encode()) for i in range(count)]
        await asyncio.gather(*futures)


class TestCommittedTransaction:
    """A committed transaction publishes its records and its group offsets together."""

    async def test_records_and_offsets_commit_atomically(
        self, bootstrap: str, admin: AIOKafkaAdminClient, topic_factory: TopicFactory
    ) -> None:
        """read_committed sees exactly the N outputs; the group resumes after its N inputs."""
        intake = await topic_factory("intake", partitions=2)
        output = await topic_factory("output", partitions=2)
        group = _uid("group")
        await _seed(bootstrap, intake, N_RECORDS)

        consumer = AIOKafkaConsumer(
            intake,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await consumer.start()
        try:
            inputs: list[ConsumerRecord] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DRAIN_TIMEOUT_S
            while len(inputs) < N_RECORDS:
                assert loop.time() < deadline, f"read {len(inputs)}/{N_RECORDS} inputs"
                for tp_records in (await consumer.getmany(timeout_ms=500)).values():
                    inputs.extend(tp_records)
            assert len(inputs) == N_RECORDS

            next_offsets: dict[TopicPartition, int] = {}
            for rec in inputs:
                tp = TopicPartition(rec.topic, rec.partition)
                next_offsets[tp] = max(next_offsets.get(tp, 0), rec.offset + 1)

            async with _producer(bootstrap, transactional_id=_uid("txn")) as producer:
                async with producer.transaction():
                    futures = [
                        await producer.send(output, b"out-" + rec.value, key=rec.key) for rec in inputs
                    ]
                    await producer.send_offsets_to_transaction(next_offsets, group)
                await asyncio.gather(*futures)
        finally:
            await consumer.stop()

        got = await _values(bootstrap, output, "read_committed", partitions=2)
        assert sorted(got) == sorted(b"out-in-%d" % i for i in range(N_RECORDS))

        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: om.offset for tp, om in committed.items()} == next_offsets
        assert sum(next_offsets.values()) == N_RECORDS


class TestAbortedTransaction:
    """An aborted transaction leaves nothing a read_committed reader can see."""

    async def test_aborted_records_are_invisible_to_read_committed(
        self, bootstrap: str, topic_factory: TopicFactory
    ) -> None:
        """Only the committed batch reaches read_committed; read_uncommitted sees both."""
        topic = await topic_factory("aborted")
        async with _producer(bootstrap, transactional_id=_uid("txn")) as producer:
            await producer.begin_transaction()
            aborted = [await producer.send(topic, b"aborted-%d" % i) for i in range(50)]
            await asyncio.gather(*aborted)  # really written to the log before the abort
            await producer.abort_transaction()

            async with producer.transaction():
                committed = [await producer.send(topic, b"committed-%d" % i) for i in range(10)]
            await asyncio.gather(*committed)

        want_committed = [b"committed-%d" % i for i in range(10)]
        assert await _values(bootstrap, topic, "read_committed") == want_committed
        # The control: the aborted records are in the log, so the check above can fail.
        assert await _values(bootstrap, topic, "read_uncommitted") == [
            *(b"aborted-%d" % i for i in range(50)),
            *want_committed,
        ]


class TestZombieFencing:
    """A producer re-initialised under the same transactional id fences the old one."""

    async def test_commit_of_fenced_producer_fails(
        self, bootstrap: str, admin: AIOKafkaAdminClient, topic_factory: TopicFactory
    ) -> None:
        """The zombie's commit raises ProducerFenced; its records and offsets never land."""
        intake = await topic_factory("intake")
        output = await topic_factory("output")
        group = _uid("group")
        txn_id = _uid("txn")
        tp_in = TopicPartition(intake, 0)

        async with _producer(bootstrap, transactional_id=txn_id) as zombie:
            await zombie.begin_transaction()
            sent = await zombie.send(output, b"zombie")
            await sent  # the partition is part of the zombie's open transaction
            await zombie.send_offsets_to_transaction({tp_in: 42}, group)

            async with _producer(bootstrap, transactional_id=txn_id) as successor:
                # Initialising the successor bumped the epoch and aborted the zombie's
                # open transaction on the broker.
                with pytest.raises(ProducerFenced):
                    await zombie.commit_transaction()

                async with successor.transaction():
                    done = await successor.send(output, b"successor")
                    await successor.send_offsets_to_transaction({tp_in: 7}, group)
                await done

        assert await _values(bootstrap, output, "read_committed") == [b"successor"]
        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: om.offset for tp, om in committed.items()} == {tp_in: 7}

    async def test_send_of_fenced_producer_fails(self, bootstrap: str, topic_factory: TopicFactory) -> None:
        """After the successor starts, the zombie's next send fails with ProducerFenced."""
        topic = await topic_factory("output")
        txn_id = _uid("txn")

        async with _producer(bootstrap, transactional_id=txn_id) as zombie:
            await zombie.begin_transaction()
            await (await zombie.send(topic, b"zombie-1"))

            async with _producer(bootstrap, transactional_id=txn_id):
                with pytest.raises(ProducerFenced):
                    await (await zombie.send(topic, b"zombie-2"))

        assert await _values(bootstrap, topic, "read_committed") == []
