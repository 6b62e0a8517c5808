"""The Kafka seam: every consumer, producer and admin client of the project is built here.

Code that talks to a broker asks a :class:`KafkaClients` factory for a client and uses it
through the small protocols below (:class:`Consumer`, :class:`Producer`, :class:`Admin`).
:class:`AiokafkaClients` is the real factory; the unit tests run the worker loop on an
in-memory one. Security settings (SASL PLAIN/SCRAM, TLS) are applied here, the same way
for every client. Only public aiokafka APIs are used (a unit test checks the tree).
"""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Awaitable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, MessageSizeTooLargeError, TopicAlreadyExistsError, for_code
from aiokafka.producer import sender as aiokafka_sender

from toolgate._config import Config
from toolgate._errors import BrokerError
from toolgate.service._transport import check_connection, tls_context

__all__ = [
    "Admin",
    "AiokafkaClients",
    "BatchBuilder",
    "Consumer",
    "KafkaClients",
    "NewTopic",
    "Outgoing",
    "Producer",
    "RebalanceListener",
    "Record",
    "TopicPartition",
    "TopicReport",
    "client_settings",
    "ensure_topics",
    "murmur2",
    "partition_for",
    "partition_of",
    "partitions_of",
    "send_records",
    "topic_plan",
]


def client_settings(config: Config) -> dict[str, Any]:
    """Keyword arguments common to every aiokafka client."""
    sec = config.security
    settings: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap,
        "client_id": config.client_id,
        "security_protocol": sec.protocol,
    }
    if sec.sasl_mechanism:
        settings["sasl_mechanism"] = sec.sasl_mechanism
        settings["sasl_plain_username"] = sec.sasl_username
        settings["sasl_plain_password"] = sec.sasl_password
    if sec.protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = tls_context(sec)
    return settings


class Record(Protocol):
    """A consumed record (aiokafka's ConsumerRecord has these)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Called by a group consumer when partitions are revoked and assigned."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions this member gives up (before the new assignment)."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Partitions this member now owns."""


class Consumer(Protocol):
    """What toolgate uses of a consumer."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None: ...
    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def assignment(self) -> set[TopicPartition]: ...
    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]: ...
    async def topics(self) -> set[str]: ...
    def partitions_for_topic(self, topic: str) -> set[int] | None: ...
    async def position(self, partition: TopicPartition) -> int: ...
    def highwater(self, partition: TopicPartition) -> int | None: ...
    def last_stable_offset(self, partition: TopicPartition) -> int | None: ...
    async def committed(self, partition: TopicPartition) -> int | None: ...
    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...
    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...
    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, Any]: ...
    def seek(self, partition: TopicPartition, offset: int) -> None: ...
    def pause(self, *partitions: TopicPartition) -> None: ...
    def resume(self, *partitions: TopicPartition) -> None: ...
    async def seek_to_beginning(self, *partitions: TopicPartition) -> Any: ...
    async def seek_to_end(self, *partitions: TopicPartition) -> Any: ...


class BatchBuilder(Protocol):
    """A batch of records for one topic partition, filled before it is handed to the producer
    (aiokafka's ``BatchBuilder``)."""

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = ...,
    ) -> Any:
        """Add a record; None when the batch is full (a fresh batch takes any one record)."""
        ...


class Producer(Protocol):
    """What toolgate uses of a producer (transactional or not)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def transaction(self) -> AbstractAsyncContextManager[Any]: ...
    async def begin_transaction(self) -> None: ...
    async def commit_transaction(self) -> None: ...
    async def abort_transaction(self) -> None: ...
    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Awaitable[Any]: ...
    def create_batch(self) -> BatchBuilder: ...
    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Awaitable[Any]: ...
    async def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, int], group_id: str
    ) -> None: ...
    async def partitions_for(self, topic: str) -> set[int]: ...
    async def flush(self) -> None: ...


# One record to send: (topic, partition, key, value, headers).
Outgoing = tuple[str, int, bytes | None, bytes | None, Sequence[tuple[str, bytes]]]


async def send_records(producer: Producer, records: Iterable[Outgoing]) -> None:
    """Send ``records`` as one batch per topic partition (more when one fills up) and wait
    until the broker has them all.

    One future per batch instead of one per record: the records of a transaction are
    appended to batches here and handed to the producer together, so they leave in as
    few produce requests as the batch size allows. The order of the records of one
    partition is kept. Inside a transaction, each batch's partition joins the
    transaction as a single ``send`` would make it.

    Raises:
        KafkaError: a batch was not delivered (the transaction must abort), or one record
            alone is larger than a batch may be.
    """
    open_batches: dict[tuple[str, int], BatchBuilder] = {}
    ready: list[tuple[BatchBuilder, str, int]] = []  # in the order they filled up
    create = producer.create_batch
    for topic, partition, key, value, headers in records:
        if type(headers) is not list:  # aiokafka's compiled batch builder takes a list only
            headers = list(headers)
        slot = (topic, partition)
        batch = open_batches.get(slot)
        if batch is None:
            batch = open_batches[slot] = create()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
            ready.append((batch, topic, partition))
            batch = open_batches[slot] = create()
            if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
                raise MessageSizeTooLargeError(f"a record of {len(value or b'')} bytes fits no batch")
    ready.extend((batch, topic, partition) for (topic, partition), batch in open_batches.items())
    # A full batch goes before the next one of its partition: send_batch waits while an
    # earlier batch of the same partition is queued, so their order is kept.
    futures = [await producer.send_batch(batch, topic, partition=p) for batch, topic, p in ready]
    await asyncio.gather(*futures)


class Admin(Protocol):
    """What toolgate uses of an admin client, plus raw requests (ACLs, group deletion)."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def list_topics(self) -> list[str]: ...
    async def create_topics(self, topics: list[NewTopic], timeout_ms: int | None = None) -> Any: ...
    async def describe_topics(self, topics: list[str] | None = None) -> list[dict[str, Any]]: ...
    async def delete_topics(self, topics: list[str]) -> Any: ...
    async def send(self, request: Any) -> Any: ...
    async def send_to_coordinator(self, group_id: str, request: Any) -> Any: ...
    async def create_partitions(self, counts: dict[str, int]) -> None: ...
    async def group_members(self, group_id: str) -> int: ...


class KafkaClients(Protocol):
    """Builds the clients: the one place a Kafka client is constructed.

    ``options`` are client settings (aiokafka's names: ``isolation_level``,
    ``transactional_id``, ``acks``, ...); the connection and security settings are the
    factory's own.
    """

    def consumer(self, *topics: str, **options: Any) -> Consumer: ...
    def producer(self, **options: Any) -> Producer: ...
    def admin(self, *, timeout_ms: int = 30000) -> Admin: ...
    async def check_connection(self, within_s: float) -> None:
        """Connect once and say in one line why that failed (TLS, protocol, login)."""
        ...


class _AiokafkaAdmin:
    """aiokafka's admin client, with the raw requests it has no method for sent through a
    plain client (CreateAcls, DescribeAcls, DeleteGroups)."""

    def __init__(self, settings: dict[str, Any], timeout_ms: int) -> None:
        self._admin = AIOKafkaAdminClient(**settings, request_timeout_ms=timeout_ms)
        self._settings = settings
        self._timeout_ms = timeout_ms
        self._raw: Any = None

    async def start(self) -> None:
        await self._admin.start()

    async def close(self) -> None:
        try:
            await self._admin.close()
        finally:
            if self._raw is not None:
                await self._raw.close()
                self._raw = None

    async def list_topics(self) -> list[str]:
        return list(await self._admin.list_topics())

    async def create_topics(self, topics: list[NewTopic], timeout_ms: int | None = None) -> Any:
        return await self._admin.create_topics(topics, timeout_ms=timeout_ms)

    async def describe_topics(self, topics: list[str] | None = None) -> list[dict[str, Any]]:
        return list(await self._admin.describe_topics(topics))

    async def delete_topics(self, topics: list[str]) -> Any:
        return await self._admin.delete_topics(topics)

    async def _raw_client(self) -> Any:
        if self._raw is None:
            raw = AIOKafkaClient(**self._settings, request_timeout_ms=self._timeout_ms)
            try:
                await raw.bootstrap()
            except BaseException:
                await raw.close()
                raise
            self._raw = raw
        return self._raw

    async def send(self, request: Any) -> Any:
        client = await self._raw_client()
        return await client.send(client.get_random_node(), request)

    async def send_to_coordinator(self, group_id: str, request: Any) -> Any:
        node = await self._admin.find_coordinator(group_id)
        client = await self._raw_client()
        return await client.send(node, request)

    async def create_partitions(self, counts: dict[str, int]) -> None:
        """Grow each topic to its count; a refusal raises the broker's error for that topic."""
        response = await self._admin.create_partitions({name: NewPartitions(n) for name, n in counts.items()})
        for name, code, message in response.topic_errors:
            if code:
                error = for_code(code)
                raise BrokerError(
                    f"growing topic {name!r}: {message or error.__name__}", retriable=error.retriable
                )

    async def group_members(self, group_id: str) -> int:
        """How many members the consumer group has now (static members count until they leave)."""
        (described,) = await self._admin.describe_consumer_groups([group_id])
        (group,) = described.groups
        return len(group[5])  # error_code, group, state, protocol_type, protocol, members


# A transaction that begins right after the previous one committed finds the broker still
# writing that one's commit markers: AddPartitionsToTxn answers CONCURRENT_TRANSACTIONS and
# aiokafka retries after a fixed 20 ms (its BACKOFF_OVERRIDE, KAFKA-5477). The markers take
# a few milliseconds; 20 ms of sleep was two thirds of every transaction on the worker's
# back-to-back commits (ops/bench/worker_bench.py). Retried every 2 ms instead: a few more
# small requests to the coordinator, a transaction a third as long.
TXN_RETRY_SECONDS = 0.002


def shorten_transaction_retry() -> bool:
    """Set aiokafka's retry wait for CONCURRENT_TRANSACTIONS to :data:`TXN_RETRY_SECONDS`
    (process-wide). False: this aiokafka has no such setting, nothing was changed."""
    if not isinstance(getattr(aiokafka_sender, "BACKOFF_OVERRIDE", None), float):
        return False
    aiokafka_sender.BACKOFF_OVERRIDE = TXN_RETRY_SECONDS
    return True


class AiokafkaClients:
    """The real factory: aiokafka clients with the configuration's connection settings."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.settings = client_settings(config)

    def consumer(self, *topics: str, **options: Any) -> Consumer:
        consumer: Consumer = AIOKafkaConsumer(*topics, **self.settings, **options)
        return consumer

    def producer(self, **options: Any) -> Producer:
        if options.get("transactional_id"):
            shorten_transaction_retry()
        producer: Producer = AIOKafkaProducer(**self.settings, **options)
        return producer

    def admin(self, *, timeout_ms: int = 30000) -> Admin:
        return _AiokafkaAdmin(self.settings, timeout_ms)

    async def check_connection(self, within_s: float) -> None:
        await check_connection(self.config, self.settings, within_s=within_s)


async def delete_topics(config: Config, *, clients: KafkaClients | None = None) -> None:
    """Delete every topic ``config`` names (private topics of a test, a benchmark or a demo)."""
    admin = (clients or AiokafkaClients(config)).admin()
    await admin.start()
    try:
        await admin.delete_topics(config.topics.names())
    finally:
        await admin.close()


async def partitions_of(
    clients: KafkaClients, topic: str, *, timeout_ms: int = 30000
) -> list[TopicPartition]:
    """The partitions of ``topic`` (empty when it does not exist), from the cluster's metadata."""
    admin = clients.admin(timeout_ms=timeout_ms)
    try:
        await admin.start()
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    found = [len(info.get("partitions") or ()) for info in described if info.get("topic") == topic]
    return [TopicPartition(topic, p) for p in range(found[0] if found else 0)]


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes, _m: int = _M, _mask: int = _MASK) -> int:
    """Kafka's murmur2 hash of ``data`` (the Java client's ``Utils.murmur2``, as aiokafka's
    pure-Python one, unsigned 32 bits like it), a 4-byte word at a time instead of a byte."""
    length = len(data)
    h = 0x9747B28C ^ length
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data) if words else ():
        k = (k * _m) & _mask
        k = ((k ^ (k >> 24)) * _m) & _mask
        h = ((h * _m) & _mask) ^ k
    tail = length & 3
    if tail:
        end = length & ~3
        if tail == 3:
            h ^= data[end + 2] << 16
        if tail >= 2:
            h ^= data[end + 1] << 8
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: bytes, count: int) -> int:
    """The partition the Java client's and aiokafka's default partitioner (murmur2) picks for
    ``key`` among ``count``: where a request id's request and results must be."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def partition_for(key: bytes | None, count: int) -> int:
    """The partition aiokafka's default partitioner picks for a record with ``key`` among
    ``count`` partitions: murmur2 of the key, a random one without a key."""
    if key is None:
        return random.randrange(count)  # noqa: S311 - spreading load, not a secret
    return (murmur2(key) & 0x7FFFFFFF) % count


@dataclass
class TopicReport:
    """What ``ensure_topics`` did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Requests or state with another partition count than intake: the worker refuses to start.
    problems: list[str] = field(default_factory=list)


def copartition_problem(name: str, count: int, intake_name: str, intake: int) -> str:
    """One line for a co-partitioned topic whose count differs from intake's, with the fix."""
    target = max(count, intake)
    return (
        f"{name} has {count} partitions and {intake_name} has {intake}: they must be equal (state is "
        f"restored per intake partition); grow them together: toolgate topics grow --partitions {target}"
    )


def topic_plan(config: Config) -> list[NewTopic]:
    """The eight topics (docs/design.md, Topics and trust boundaries) with partition counts and configs."""
    t, p, rf = config.topics, config.partitions, config.replication_factor
    # Requests are keyed by request id and ended by tombstones: compaction keeps
    # the latest record per outstanding request and drops finished ones.
    compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
    # The state changelog: one record per live request with accepted results, tombstoned when
    # the request ends. The cleaner never compacts the active segment: 10-minute segments and
    # tombstones kept 10 minutes bound what a restore reads beyond the live entries to the
    # requests that ended in the last 10-20 minutes (plus the cleaner's own lag).
    changelog = {
        "cleanup.policy": "compact",
        "segment.ms": "600000",
        "delete.retention.ms": "600000",
        "min.cleanable.dirty.ratio": "0.25",
    }
    return [
        # Co-partitioned with intake: a worker restores only its intake partitions' requests
        # and accepted attempts.
        NewTopic(t.requests, p.intake, rf, topic_configs=compacted),
        NewTopic(t.state, p.intake, rf, topic_configs=changelog),
        NewTopic(t.intake, p.intake, rf),
        NewTopic(t.agent, p.agent, rf),
        NewTopic(t.quarantine, p.quarantine, rf),
        NewTopic(t.audit, p.audit, rf),
        # One partition each: a reader reads the whole topic in order (the set marker last).
        NewTopic(t.contracts, 1, rf, topic_configs={"cleanup.policy": "compact"}),
        NewTopic(t.members, 1, rf, topic_configs=compacted),
    ]


async def ensure_topics(
    config: Config, *, timeout_ms: int = 30000, clients: KafkaClients | None = None
) -> TopicReport:
    """Create the missing topics; report those that already exist. Idempotent.

    Raises:
        BrokerError: the cluster could not be reached or refused a creation.
    """
    report = TopicReport()
    admin = (clients or AiokafkaClients(config)).admin(timeout_ms=timeout_ms)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        plan = topic_plan(config)
        t = config.topics
        if t.intake in existing:
            # Requests and state follow the intake topic as it is (an upgrade adds the state
            # changelog next to an intake topic that may have another count than configured).
            (info,) = await admin.describe_topics([t.intake])
            count = len(info.get("partitions", [])) or config.partitions.intake
            plan = [
                NewTopic(n.name, count, n.replication_factor, topic_configs=n.topic_configs)
                if n.name in (t.requests, t.state)
                else n
                for n in plan
            ]
        missing = [topic for topic in plan if topic.name not in existing]
        report.existing = [topic.name for topic in plan if topic.name in existing]
        for topic in missing:
            # aiokafka's admin client reports per-topic failures in the response, not by raising.
            response = await admin.create_topics([topic], timeout_ms=timeout_ms)
            for name, code, *rest in response.topic_errors:
                if code == 0:
                    report.created.append(name)
                elif code == TopicAlreadyExistsError.errno:  # another process won the race
                    report.existing.append(name)
                else:
                    error = for_code(code)
                    message = rest[0] if rest and rest[0] else error.__name__
                    raise BrokerError(f"creating topic {name!r}: {message}", retriable=error.retriable)
        if report.existing:
            described = await admin.describe_topics(report.existing)
            wanted = {topic.name: topic.num_partitions for topic in plan}
            actual = {info["topic"]: len(info.get("partitions", [])) for info in described}
            intake = actual.get(t.intake, wanted[t.intake])
            for name in (t.requests, t.state):
                if actual.get(name, intake) != intake:
                    report.problems.append(copartition_problem(name, actual[name], t.intake, intake))
            for info in described:
                count = len(info.get("partitions", []))
                if info["topic"] in (t.requests, t.state) and count != intake:
                    continue  # a problem, reported above
                if count != wanted[info["topic"]]:
                    report.warnings.append(
                        f"{info['topic']} has {count} partitions, configuration says "
                        f"{wanted[info['topic']]} (left as it is)"
                    )
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    finally:
        await admin.close()
    return report
