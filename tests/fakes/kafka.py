"""An in-memory Kafka behind toolgate's Kafka seam, for unit tests of the worker loop.

:class:`FakeBroker` holds topics with partitions, transactions whose records become
visible to ``read_committed`` readers only on commit (an abort hides them; each commit
or abort writes a control marker that takes an offset, as Kafka's do, so offsets have
gaps), producer fencing by transactional id (a new ``start`` with the same id fences
the previous producer and aborts its open transaction), committed group offsets, group
membership with rebalance listeners, and injectable failures (:meth:`FakeBroker.fail`)
and stalls (:meth:`FakeBroker.stall`). :class:`FakeClients` is the factory the worker
is given instead of the real one. An empty poll waits, at most its ``timeout_ms``, for
the next write or unstall (an event, not a sleep).

Fencing is the broker's, as Kafka's: a transaction begun or committed by a producer
whose epoch is no longer its transactional id's current one is refused with
``ProducerFenced``. A commit can fail with its outcome unknown to the client
(``fail("commit", after=True)``: committed, then the answer is lost), and the broker
can abort an open transaction on its own (:meth:`FakeBroker.expire`, a transaction
timeout): the producer's next request in it fails.

For the deterministic simulation (tests/simulation/), every asynchronous client call
first awaits :attr:`FakeBroker.hook`, when set, with the operation's name, the node
(the :class:`FakeClients` that built the client) and the client: the hook decides
latencies, faults and the order of concurrent calls. Unset, a call never suspends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError, ProducerFenced
from aiokafka.partitioner import murmur2
from toolgate.service._kafka import Admin, BatchBuilder, Consumer, NewTopic, Producer, RebalanceListener


@dataclass
class FakeRecord:
    """One log entry: a data record or a control marker (``control``)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]
    timestamp: int
    txn: int | None = None  # the transaction that wrote it
    control: bool = False


@dataclass
class _Txn:
    id: int
    state: str = "open"  # open, committed, aborted
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    group: str | None = None
    transactional_id: str = ""
    epoch: int = 0  # the producer epoch that began it
    expired: bool = False  # aborted by the broker (transaction timeout), not by its producer


# (operation, node, client) -> awaited before every asynchronous client call
Hook = Callable[[str, Any, Any], Awaitable[None]]


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner picks for ``key``."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


class FakeBroker:
    """Topics, transactions, group offsets and membership, in memory."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.logs: dict[str, list[list[FakeRecord]]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.txns: dict[int, _Txn] = {}
        self._txn_ids = itertools.count(1)
        self.epochs: dict[str, int] = {}  # transactional id -> current epoch
        self.open_txn: dict[str, int] = {}  # transactional id -> its open transaction
        self.group_offsets: dict[tuple[str, TopicPartition], int] = {}
        self.members: dict[str, list[FakeConsumer]] = collections.defaultdict(list)
        self.now_ms = now_ms
        self._failures: dict[str, list[tuple[BaseException, bool]]] = collections.defaultdict(list)
        self.stalled: set[str] = set()  # topics whose reads return nothing
        self.calls: collections.Counter[str] = collections.Counter()
        self.rebalances = 0
        self._changed = asyncio.Event()
        self.hook: Hook | None = None
        # False: a rebalance runs every member's listeners at once, revoking everywhere before
        # assigning anywhere (the eager protocol without delays). True: each member runs its
        # own listeners at its own polls, as in Kafka's eager protocol: every member revokes
        # at its next poll, and only when all have, the partitions are assigned (a member that
        # never polls again blocks the group until it leaves: its session times out).
        self.own_listeners = False
        # Every commit: (transactional id, the committing producer's epoch, the id's epoch then).
        self.commits: list[tuple[str, int, int]] = []

    # --- set-up and inspection -------------------------------------------------------

    def create_topic(self, name: str, partitions: int, **config: str) -> None:
        """A topic with ``partitions`` empty partitions."""
        self.logs.setdefault(name, [[] for _ in range(partitions)])
        self.configs[name] = dict(config)

    def fail(
        self, operation: str, error: BaseException | None = None, times: int = 1, *, after: bool = False
    ) -> None:
        """The next ``times`` calls of ``operation`` raise ``error`` (a connection error by default).

        Operations: ``init`` (transactional producer start), ``commit``, ``send``,
        ``send_offsets``, ``committed``, ``end_offsets``, ``fetch`` (a group consumer's
        poll), ``read`` (a group-less consumer's poll), ``admin``. ``after`` (``commit``
        only): the call takes effect and then raises, as a commit whose answer was lost.
        """
        for _ in range(times):
            self._failures[operation].append((error or KafkaError(f"injected {operation} failure"), after))

    async def io(self, operation: str, node: Any, client: Any) -> None:
        """Await the simulation's hook, if any, before a client call."""
        if self.hook is not None:
            await self.hook(operation, node, client)

    def stall(self, topic: str) -> None:
        """Reads of ``topic`` return nothing until :meth:`unstall`."""
        self.stalled.add(topic)

    def unstall(self, topic: str) -> None:
        """Reads of ``topic`` go on."""
        self.stalled.discard(topic)
        self.changed()

    def changed(self) -> None:
        """Wake the pollers waiting for data."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self, seconds: float) -> None:
        """Until the next write or unstall, at most ``seconds``."""
        event = self._changed
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()

    def check(self, operation: str) -> None:
        """Raise the next injected failure of ``operation``, if any."""
        self.calls[operation] += 1
        pending = self._failures.get(operation)
        if pending and not pending[0][1]:
            raise pending.pop(0)[0]

    def _lost_answer(self, operation: str) -> BaseException | None:
        """The next injected failure of ``operation`` that comes after its effect, if due."""
        pending = self._failures.get(operation)
        if pending and pending[0][1]:
            return pending.pop(0)[0]
        return None

    def append(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
        txn: int | None = None,
        control: bool = False,
    ) -> FakeRecord:
        """Write one record (committed at once unless it belongs to ``txn``)."""
        log = self.logs[topic]
        if partition is None:
            partition = partition_for(key, len(log)) if key is not None else 0
        entries = log[partition]
        record = FakeRecord(
            topic, partition, len(entries), key, value, list(headers), self.now_ms, txn, control
        )
        entries.append(record)
        self.changed()
        return record

    def visible(self, record: FakeRecord, isolation: str) -> bool:
        """Whether a reader at ``isolation`` sees ``record``."""
        if record.control:
            return False
        if record.txn is None or isolation != "read_committed":
            return True
        return self.txns[record.txn].state == "committed"

    def stable_end(self, tp: TopicPartition) -> int:
        """The last stable offset: the first offset of a still open transaction, else the end."""
        for record in self.logs[tp.topic][tp.partition]:
            if record.txn is not None and self.txns[record.txn].state == "open":
                return int(record.offset)
        return len(self.logs[tp.topic][tp.partition])

    def committed_values(self, topic: str) -> list[FakeRecord]:
        """Every record of ``topic`` a read_committed reader sees, partition by partition."""
        return [r for part in self.logs[topic] for r in part if self.visible(r, "read_committed")]

    # --- transactions ----------------------------------------------------------------

    def init_transactions(self, transactional_id: str) -> int:
        """Fence the previous producer of this id and abort its open transaction."""
        self.check("init")
        open_id = self.open_txn.pop(transactional_id, None)
        if open_id is not None:
            self._end(open_id, "aborted")
        self.epochs[transactional_id] = self.epochs.get(transactional_id, 0) + 1
        return self.epochs[transactional_id]

    def begin(self, transactional_id: str, epoch: int | None = None) -> int:
        """Open a transaction; ``epoch`` is the producer's (None: the id's current one)."""
        current = self.epochs.get(transactional_id, 0)
        if epoch is not None and epoch != current:
            raise ProducerFenced()
        txn = _Txn(next(self._txn_ids), transactional_id=transactional_id, epoch=current)
        self.txns[txn.id] = txn
        self.open_txn[transactional_id] = txn.id
        return txn.id

    def fenced(self, txn_id: int) -> bool:
        """Whether the producer that began ``txn_id`` has been fenced since."""
        txn = self.txns[txn_id]
        return self.epochs.get(txn.transactional_id, 0) != txn.epoch

    def expire(self, transactional_id: str) -> bool:
        """Abort the id's open transaction on the broker's own (a transaction timeout);
        False when none was open."""
        open_id = self.open_txn.pop(transactional_id, None)
        if open_id is None:
            return False
        self.txns[open_id].expired = True
        self._end(open_id, "aborted")
        return True

    def _end(self, txn_id: int, state: str) -> None:
        txn = self.txns[txn_id]
        if txn.state != "open":
            return
        txn.state = state
        touched = {
            (r.topic, r.partition)
            for part in itertools.chain.from_iterable(self.logs.values())
            for r in part
            if r.txn == txn_id
        }
        for topic, partition in sorted(touched):
            self.append(topic, None, partition=partition, txn=txn_id, control=True)
        if state == "committed" and txn.group is not None:
            for tp, offset in txn.offsets.items():
                self.group_offsets[(txn.group, tp)] = offset

    def commit(self, transactional_id: str, txn_id: int) -> None:
        self.check("commit")
        txn = self.txns[txn_id]
        if self.fenced(txn_id):
            raise ProducerFenced()
        if txn.state == "aborted":
            raise KafkaError(f"transaction {txn_id} was aborted by the broker (transaction timeout)")
        self.open_txn.pop(transactional_id, None)
        self.commits.append((transactional_id, txn.epoch, self.epochs.get(transactional_id, 0)))
        self._end(txn_id, "committed")
        lost = self._lost_answer("commit")
        if lost is not None:
            raise lost

    def abort(self, transactional_id: str, txn_id: int) -> None:
        self.open_txn.pop(transactional_id, None)
        self._end(txn_id, "aborted")

    # --- groups ----------------------------------------------------------------------

    async def rebalance(self, group: str, topics: list[str]) -> None:
        """Revoke everything from every member, then assign the partitions round-robin."""
        self.rebalances += 1
        members = [m for m in self.members[group] if m.started]
        if self.own_listeners:
            for member in members:
                member.rebalance_pending = False
                member.must_revoke = True
                member.next_assignment = None
            return
        for member in members:
            old = member._assigned
            member._assigned = set()
            member.rebalance_pending = False
            if member.listener is not None:
                await member.listener.on_partitions_revoked(set(old))
        tps = [TopicPartition(t, p) for t in topics for p in range(len(self.logs.get(t, [])))]
        plan: dict[int, set[TopicPartition]] = {i: set() for i in range(len(members))}
        for i, tp in enumerate(tps):
            plan[i % max(len(members), 1)].add(tp)
        for i, member in enumerate(members):
            member._assigned = plan.get(i, set())
            member.paused.clear()
            for tp in member._assigned:
                member._positions.pop(tp, None)
            if member.listener is not None:
                await member.listener.on_partitions_assigned(set(member._assigned))

    def sync_group(self, group: str, topics: list[str]) -> None:
        """own_listeners: once every member has revoked, hand out the partitions round-robin."""
        members = [m for m in self.members[group] if m.started]
        if any(m.must_revoke or m.rebalance_pending for m in members):
            return
        tps = [TopicPartition(t, p) for t in topics for p in range(len(self.logs.get(t, [])))]
        for i, member in enumerate(members):
            member.next_assignment = {tp for j, tp in enumerate(tps) if j % len(members) == i}


class _Future:
    """An already resolved send result, awaitable like aiokafka's."""

    def __init__(self, record: FakeRecord) -> None:
        self.record = record

    def __await__(self) -> Any:
        if False:  # pragma: no cover - makes this a generator
            yield
        return self.record


class FakeConsumer:
    """A consumer: group member (``subscribe``) or group-less (``assign``)."""

    def __init__(self, broker: FakeBroker, *topics: str, **options: Any) -> None:
        self.broker = broker
        self.group: str | None = options.get("group_id")
        self.isolation: str = options.get("isolation_level", "read_uncommitted")
        self.options = options
        self.started = False
        self.listener: RebalanceListener | None = None
        self.subscribed: list[str] = list(topics)
        self.rebalance_pending = False
        # own_listeners: revoke at the next poll; the assignment once every member revoked
        self.must_revoke = False
        self.next_assignment: set[TopicPartition] | None = None
        self._assigned: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self._highwater: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()  # fetched no more until resumed
        # A client stuck after an outage: its polls return nothing, the cluster serving or not.
        self.wedged = False
        self.node: Any = options.get("node")
        if topics:
            self._assigned = {
                TopicPartition(t, p) for t in topics for p in range(len(broker.logs.get(t, [])))
            }

    async def start(self) -> None:
        await self.broker.io("consumer_start", self.node, self)
        self.started = True

    async def stop(self) -> None:
        await self.broker.io("consumer_stop", self.node, self)
        if not self.started:
            return
        self.started = False
        if self.group is not None and self in self.broker.members[self.group]:
            self.broker.members[self.group].remove(self)
            for other in self.broker.members[self.group]:
                other.rebalance_pending = True

    def subscribe(self, topics: list[str], listener: RebalanceListener) -> None:
        assert self.group is not None
        self.subscribed = list(topics)
        self.listener = listener
        self.broker.members[self.group].append(self)
        for member in self.broker.members[self.group]:
            member.rebalance_pending = True

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._assigned = set(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def _position(self, tp: TopicPartition) -> int:
        if tp not in self._positions:
            committed = self.broker.group_offsets.get((self.group or "", tp))
            self._positions[tp] = committed if committed is not None else 0
        return self._positions[tp]

    async def getmany(
        self, *partitions: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        await self.broker.io("fetch" if self.group is not None else "read", self.node, self)
        if self.group is not None and self.rebalance_pending:
            await self.broker.rebalance(self.group, self.subscribed)
        if self.group is not None and self.broker.own_listeners:
            await self._follow_group()
        self.broker.check("fetch" if self.group is not None else "read")
        if self.wedged:
            await asyncio.sleep(timeout_ms / 1000)  # the poll's own timeout, with nothing fetched
            return {}
        out: dict[TopicPartition, list[Any]] = {}
        budget = max_records if max_records is not None else 1 << 30
        for tp in sorted(self._assigned):
            if tp.topic in self.broker.stalled or budget <= 0 or tp in self.paused:
                continue
            entries = self.broker.logs[tp.topic][tp.partition]
            end = self.broker.stable_end(tp) if self.isolation == "read_committed" else len(entries)
            position = self._position(tp)
            taken: list[Any] = []
            while position < end and budget > 0:
                record = entries[position]
                position += 1
                if self.broker.visible(record, self.isolation):
                    taken.append(record)
                    budget -= 1
            self._positions[tp] = position
            self._highwater[tp] = len(entries)
            if taken:
                out[tp] = taken
        if not out:
            await self.broker.wait_for_change(timeout_ms / 1000)
        return out

    async def _follow_group(self) -> None:
        """own_listeners: revoke when the group rebalances; assign once everyone has."""
        assert self.group is not None
        if self.must_revoke:
            old, self._assigned = self._assigned, set()
            if self.listener is not None:
                await self.listener.on_partitions_revoked(set(old))
            self.must_revoke = False
            if self in self.broker.members[self.group]:
                # A member the group dropped (its session timed out) revokes, but hands out
                # nothing: under the eager protocol every assignment follows its member's
                # revoke, and it takes part again only once it rejoins.
                self.broker.sync_group(self.group, self.subscribed)
        if self.next_assignment is not None:
            self._assigned, self.next_assignment = self.next_assignment, None
            self.paused.clear()
            for tp in self._assigned:
                self._positions.pop(tp, None)
            if self.listener is not None:
                await self.listener.on_partitions_assigned(set(self._assigned))

    async def topics(self) -> set[str]:
        await self.broker.io("metadata", self.node, self)
        return set(self.broker.logs)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        log = self.broker.logs.get(topic)
        return set(range(len(log))) if log else None

    async def position(self, partition: TopicPartition) -> int:
        await self.broker.io("position", self.node, self)
        if partition not in self._assigned:
            raise IllegalStateError(f"{partition} is not assigned")
        return self._position(partition)

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._highwater.get(partition)

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        if partition not in self._highwater:
            return None
        return self.broker.stable_end(partition)

    async def committed(self, partition: TopicPartition) -> int | None:
        await self.broker.io("committed", self.node, self)
        self.broker.check("committed")
        return self.broker.group_offsets.get((self.group or "", partition))

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        await self.broker.io("beginning_offsets", self.node, self)
        return {tp: 0 for tp in partitions}

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        await self.broker.io("end_offsets", self.node, self)
        self.broker.check("end_offsets")
        return {
            tp: self.broker.stable_end(tp)
            if self.isolation == "read_committed"
            else len(self.broker.logs[tp.topic][tp.partition])
            for tp in partitions
        }

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        await self.broker.io("offsets_for_times", self.node, self)
        out: dict[TopicPartition, Any] = {}
        for tp, stamp in timestamps.items():
            hit = next((r for r in self.broker.logs[tp.topic][tp.partition] if r.timestamp >= stamp), None)
            out[tp] = None if hit is None else _OffsetAndTimestamp(hit.offset, hit.timestamp)
        return out

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if partition not in self._assigned:
            raise IllegalStateError(f"{partition} is not assigned")
        self._positions[partition] = offset

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            if tp not in self._assigned:
                raise IllegalStateError(f"{tp} is not assigned")
            self.paused.add(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            if tp not in self._assigned:
                raise IllegalStateError(f"{tp} is not assigned")
            self.paused.discard(tp)
        self.broker.changed()  # a poll waiting for records returns what was held back

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self.broker.io("seek", self.node, self)
        for tp in partitions:
            self._positions[tp] = 0

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self.broker.io("seek", self.node, self)
        for tp in partitions:
            self._positions[tp] = len(self.broker.logs[tp.topic][tp.partition])


@dataclass(frozen=True)
class _OffsetAndTimestamp:
    offset: int
    timestamp: int


class _Transaction:
    def __init__(self, producer: FakeProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> _Transaction:
        await self.producer.begin_transaction()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            await self.producer.commit_transaction()
        elif not isinstance(exc, ProducerFenced):
            await self.producer.abort_transaction()


class FakeBatch:
    """aiokafka's ``BatchBuilder``: records for one partition, up to ``size`` bytes (any one
    record fits an empty batch)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self.sent = False
        self.records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> Any:
        assert not self.sent
        if type(headers) is not list:  # as aiokafka's compiled builder: a TypeError
            raise TypeError(f"Argument 'headers' has incorrect type (got {type(headers).__name__})")
        size = len(key or b"") + len(value or b"") + sum(len(n) + len(v) for n, v in headers)
        if self.records and self.used + size > self.size:
            return None
        self.used += size
        self.records.append((key, value, list(headers)))
        return len(self.records)


class FakeProducer:
    """A producer; transactional when given a ``transactional_id``."""

    def __init__(self, broker: FakeBroker, **options: Any) -> None:
        self.broker = broker
        self.options = options
        self.transactional_id: str | None = options.get("transactional_id")
        self.epoch = 0
        self.txn: int | None = None
        self.started = False
        self.stopped = False
        self.node: Any = options.get("node")

    async def start(self) -> None:
        await self.broker.io("init", self.node, self)
        if self.transactional_id is not None:
            self.epoch = self.broker.init_transactions(self.transactional_id)
        self.started = True

    async def stop(self) -> None:
        await self.broker.io("producer_stop", self.node, self)
        self.stopped = True

    def _fenced(self) -> None:
        tid = self.transactional_id
        if tid is not None and self.broker.epochs.get(tid) != self.epoch:
            raise ProducerFenced()
        if self.txn is not None and self.broker.txns[self.txn].expired:
            raise KafkaError(f"transaction {self.txn} was aborted by the broker (transaction timeout)")

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        return _Transaction(self)

    async def begin_transaction(self) -> None:
        assert self.transactional_id is not None
        assert self.txn is None
        await self.broker.io("begin", self.node, self)
        self._fenced()
        self.txn = self.broker.begin(self.transactional_id, self.epoch)

    async def commit_transaction(self) -> None:
        assert self.transactional_id is not None
        assert self.txn is not None
        await self.broker.io("commit", self.node, self)
        txn, self.txn = self.txn, None
        self.broker.commit(self.transactional_id, txn)

    async def abort_transaction(self) -> None:
        assert self.transactional_id is not None
        await self.broker.io("abort", self.node, self)
        if self.txn is not None:
            txn, self.txn = self.txn, None
            if self.broker.epochs.get(self.transactional_id) == self.epoch:
                self.broker.abort(self.transactional_id, txn)

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> Awaitable[Any]:
        assert self.started
        assert not self.stopped
        await self.broker.io("send", self.node, self)
        self._fenced()
        self.broker.check("send")
        if self.transactional_id is not None and self.txn is None:
            raise IllegalStateError("send outside a transaction")
        record = self.broker.append(
            topic, value, key=key, partition=partition, headers=headers or (), txn=self.txn
        )
        return _Future(record)

    def create_batch(self) -> FakeBatch:
        return FakeBatch(int(self.options.get("max_batch_size", 16384)))

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Awaitable[Any]:
        assert isinstance(batch, FakeBatch)
        assert self.started
        assert not self.stopped
        assert not batch.sent, "a batch is sent once"
        await self.broker.io("send", self.node, self)
        self._fenced()
        self.broker.check("send")
        if self.transactional_id is not None and self.txn is None:
            raise IllegalStateError("send outside a transaction")
        assert 0 <= partition < len(self.broker.logs[topic]), "send_batch needs an existing partition"
        batch.sent = True
        record = None
        for key, value, headers in batch.records:
            record = self.broker.append(
                topic, value, key=key, partition=partition, headers=headers, txn=self.txn
            )
        assert record is not None, "an empty batch"
        return _Future(record)

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        assert self.txn is not None
        await self.broker.io("send_offsets", self.node, self)
        self._fenced()
        self.broker.check("send_offsets")
        txn = self.broker.txns[self.txn]
        txn.offsets.update(offsets)
        txn.group = group_id

    async def partitions_for(self, topic: str) -> set[int]:
        await self.broker.io("metadata", self.node, self)
        return set(range(len(self.broker.logs[topic])))

    async def flush(self) -> None:
        await self.broker.io("flush", self.node, self)


class FakeAdmin:
    """Topic creation and listing; raw requests are recorded."""

    def __init__(self, broker: FakeBroker, node: Any = None) -> None:
        self.broker = broker
        self.sent: list[Any] = []
        self.node = node

    async def start(self) -> None:
        await self.broker.io("admin", self.node, self)
        self.broker.check("admin")

    async def close(self) -> None:
        return None

    async def list_topics(self) -> list[str]:
        return sorted(self.broker.logs)

    async def create_topics(self, topics: list[NewTopic], timeout_ms: int | None = None) -> Any:
        errors: list[tuple[str, int, str | None]] = []
        for topic in topics:
            self.broker.create_topic(topic.name, topic.num_partitions, **(topic.topic_configs or {}))
            errors.append((str(topic.name), 0, None))
        return _TopicErrors(errors)

    async def describe_topics(self, topics: list[str] | None = None) -> list[dict[str, Any]]:
        await self.broker.io("admin", self.node, self)
        names = topics if topics is not None else sorted(self.broker.logs)
        return [
            {"topic": n, "partitions": [{"partition": p} for p in range(len(self.broker.logs.get(n, ())))]}
            for n in names
        ]

    async def delete_topics(self, topics: list[str]) -> Any:
        for name in topics:
            self.broker.logs.pop(name, None)

    async def send(self, request: Any) -> Any:
        self.sent.append(request)
        return None

    async def send_to_coordinator(self, group_id: str, request: Any) -> Any:
        self.sent.append(request)
        return None

    async def create_partitions(self, counts: dict[str, int]) -> None:
        for name, count in counts.items():
            log = self.broker.logs[name]
            log.extend([] for _ in range(count - len(log)))

    async def group_members(self, group_id: str) -> int:
        return len([m for m in self.broker.members[group_id] if m.started])


@dataclass
class _TopicErrors:
    topic_errors: list[tuple[str, int, str | None]]


class FakeClients:
    """The Kafka seam's factory over a :class:`FakeBroker`; remembers what it built."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.consumers: list[FakeConsumer] = []
        self.producers: list[FakeProducer] = []

    def consumer(self, *topics: str, **options: Any) -> Consumer:
        consumer = FakeConsumer(self.broker, *topics, node=self, **options)
        self.consumers.append(consumer)
        return consumer

    def producer(self, **options: Any) -> Producer:
        producer = FakeProducer(self.broker, node=self, **options)
        self.producers.append(producer)
        return producer

    def admin(self, *, timeout_ms: int = 30000) -> Admin:
        return FakeAdmin(self.broker, self)

    async def check_connection(self, within_s: float) -> None:
        await self.broker.io("connect", self, None)
        self.broker.check("connect")
