"""State the worker reads from topics: outstanding requests and accepted results.

Two in-memory tables, each fed by a :class:`TopicReader`:

* :class:`RequestTable` from the compacted requests topic: strict decoding, a
  tombstone ends a request, expired requests are evicted on the injected clock,
  and a cap bounds memory (oldest first out, counted and logged when hit).
* :class:`AcceptedLedger` from the audit topic: which (request id, attempt) pairs
  already had a result accepted, by any worker, so "one accepted result per
  request attempt" survives restarts and rebalances. Entries older than the
  ledger window (longer than any request lives) are dropped.

Both sit behind :class:`RequestStore`-like small interfaces so a later
co-partitioned store (same key and partition count as intake, each worker
holding only its partitions' requests) can replace the whole-topic table.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

import msgspec

from toolgate._errors import ConfigError
from toolgate.gate._batch import AcceptedView
from toolgate.gate._records import RequestRecord, decode_request
from toolgate.service._kafka import Consumer, KafkaClients, TopicPartition, partition_of, partitions_of

log = logging.getLogger("toolgate.store")


class RequestStore(Protocol):
    """What the loop needs from a request store."""

    def get(self, request_id: str) -> RequestRecord | None:
        """The outstanding request with this id, if known."""
        ...

    def __len__(self) -> int:
        """How many requests are held."""
        ...


class RequestTable:
    """Outstanding requests by id, bounded.

    Args:
        max_requests: the cap; when full, the oldest inserted request is dropped
            (its results then fail closed as ``UNKNOWN_REQUEST``).
        on_full: called once each time the table goes from not full to full.
        on_evict: called for every request dropped to make room.
    """

    def __init__(
        self,
        max_requests: int = 1_000_000,
        on_full: Callable[[int], None] | None = None,
        on_invalid: Callable[[], None] | None = None,
        on_evict: Callable[[], None] | None = None,
    ) -> None:
        self.max_requests = max_requests
        self._requests: dict[str, RequestRecord] = {}
        self._on_full = on_full
        self._on_invalid = on_invalid
        self._on_evict = on_evict
        self._full = False
        self.evicted_for_space = 0
        self.invalid_records = 0

    def get(self, request_id: str) -> RequestRecord | None:
        """The outstanding request with this id, if known."""
        return self._requests.get(request_id)

    def __len__(self) -> int:
        return len(self._requests)

    def drop_partitions(self, partitions: set[int], count: int) -> int:
        """Forget the requests whose key the default partitioner puts in ``partitions`` of
        ``count`` (a revoked intake partition's requests); return how many."""
        doomed = [rid for rid in self._requests if partition_of(rid.encode(), count) in partitions]
        for rid in doomed:
            del self._requests[rid]
        if self._full and len(self._requests) < self.max_requests:
            self._full = False
        return len(doomed)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record of the requests topic (a tombstone ends the request)."""
        if value is None:
            if key is not None:
                self._requests.pop(key.decode("utf-8", "replace"), None)
            return
        try:
            record = decode_request(value)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
            self._invalid(key, "invalid request record skipped", str(exc))
            return
        if key is not None and key != record.request_id.encode():
            self._invalid(key, "request record key differs from its request_id; skipped", "")
            return
        self._requests.pop(record.request_id, None)  # re-insert at the end: newest
        self._requests[record.request_id] = record
        if len(self._requests) > self.max_requests:
            oldest = next(iter(self._requests))
            del self._requests[oldest]
            self.evicted_for_space += 1
            if self._on_evict is not None:
                self._on_evict()
            if not self._full:
                self._full = True
                if self._on_full is not None:
                    self._on_full(self.max_requests)
        elif self._full and len(self._requests) < self.max_requests:
            self._full = False

    def _invalid(self, key: bytes | None, message: str, error: str) -> None:
        """Count and log a record that is not a valid request (its value is never logged)."""
        self.invalid_records += 1
        if self._on_invalid is not None:
            self._on_invalid()
        topic, partition, offset = reading.get() or ("", None, None)
        log.warning(
            message,
            extra={
                "key": None if key is None else key[:256].decode("utf-8", "replace"),
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "error": error[:200],
                "schema": "contracts/wire/request.schema.json",
            },
        )

    def evict_expired(self, now: datetime) -> int:
        """Drop requests whose ``expires_at`` has passed; return how many."""
        expired = [rid for rid, rec in self._requests.items() if rec.expires_at <= now]
        for rid in expired:
            del self._requests[rid]
        if self._full and len(self._requests) < self.max_requests:
            self._full = False
        return len(expired)


class _AuditView(msgspec.Struct, frozen=True):
    """The audit fields the ledger reads (unknown ones ignored: newer workers add fields)."""

    request_id: str | None
    outcome: str
    attempt: int | None
    decided_at: datetime
    kind: str = "decision"


_audit_decoder = msgspec.json.Decoder(_AuditView)


class AcceptedLedger:
    """The one home of "already accepted": (request id, attempt) pairs with an accepted
    result, from the audit topic (any worker) and this worker's committed batches.

    A batch reads and extends it through its own :class:`AcceptedView` (:meth:`batch`);
    :meth:`commit` takes the view's acceptances in once the batch's transaction committed.
    """

    def __init__(self, window: timedelta = timedelta(days=1)) -> None:
        self.window = window
        self._accepted: dict[tuple[str, int], datetime] = {}

    def __call__(self, request_id: str, attempt: int) -> bool:
        return (request_id, attempt) in self._accepted

    def __len__(self) -> int:
        return len(self._accepted)

    def record(self, request_id: str, attempt: int, decided_at: datetime) -> None:
        """Remember an accepted result."""
        self._accepted[(request_id, attempt)] = decided_at

    def batch(self) -> AcceptedView:
        """A view for deciding one batch: this ledger plus the batch's own acceptances."""
        return AcceptedView(self)

    def commit(self, view: AcceptedView, decided_at: datetime) -> None:
        """The view's batch committed: remember what it accepted."""
        for request_id, attempt in view.pending:
            self.record(request_id, attempt, decided_at)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one audit event."""
        if value is None:
            return
        try:
            event = _audit_decoder.decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        if (
            event.kind == "decision"
            and event.outcome != "rejected"
            and event.request_id
            and event.attempt is not None
        ):
            self.record(event.request_id, event.attempt, event.decided_at)

    def evict_older_than(self, cutoff: datetime) -> int:
        """Forget acceptances decided before ``cutoff``."""
        old = [k for k, at in self._accepted.items() if at < cutoff]
        for k in old:
            del self._accepted[k]
        return len(old)


Apply = Callable[[bytes | None, bytes | None], None]
# (topic, partition, offset) of the record a TopicReader is applying, for the appliers' logs.
reading: contextvars.ContextVar[tuple[str, int, int] | None] = contextvars.ContextVar("reading", default=None)


class TopicReader:
    """Reads every partition of one topic into a table, and can say when it has caught up.

    Uses its own consumer with no group (manual assignment), ``read_committed``, from
    the beginning or from a point in time. :meth:`catch_up` snapshots the end offsets
    and waits, bounded, until the reader has applied everything before them.
    """

    def __init__(
        self,
        topic: str,
        apply: Apply,
        clients: KafkaClients,
        *,
        start_ms: int | None = None,
        max_records: int = 2000,
        owned: bool = False,
    ) -> None:
        self.topic = topic
        # owned: start with no partition; the owner adds and removes partitions (own()/disown()).
        self._owned = owned
        self._assign_lock = asyncio.Lock()
        self._has_partitions = asyncio.Event()
        self._apply = apply
        self._clients = clients
        self._start_ms = start_ms
        # Bounded fetches: max_records per poll keeps one poll's memory and pause short.
        self._max_records = max_records
        self._consumer: Consumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._progress = asyncio.Condition()
        self.applied = 0

    async def start(self) -> None:
        """Assign every partition, seek to the start point and begin reading."""
        # A short fetch wait: catch_up()'s offset lookup queues behind the reader's own long
        # poll on the same connection, and a batch waiting for a request waits for both.
        consumer = self._clients.consumer(
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
        )
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()  # a failed start leaves its connections open
            raise
        self._consumer = consumer
        # A group-less consumer has no metadata yet: ask for this topic's partitions.
        tps = await partitions_of(self._clients, self.topic)
        if not tps:
            await consumer.stop()
            self._consumer = None
            raise ConfigError(f"topic {self.topic!r} does not exist (run: toolgate topics ensure)")
        if self._owned:
            self._task = asyncio.create_task(self._run(), name=f"reader:{self.topic}")
            return
        self._has_partitions.set()
        consumer.assign(tps)
        if self._start_ms is None:
            await consumer.seek_to_beginning(*tps)
        else:
            # The end offsets are read before the time lookup: a partition with no record at or
            # after start_ms starts where its end was then, so a record written meanwhile is
            # read (seeking to "the end" later would skip it).
            ends = await consumer.end_offsets(tps)
            found = await consumer.offsets_for_times({tp: self._start_ms for tp in tps})
            for tp in tps:
                hit = found.get(tp)
                consumer.seek(tp, ends[tp] if hit is None else hit.offset)
        for tp in tps:
            self._positions[tp] = await consumer.position(tp)
        self._task = asyncio.create_task(self._run(), name=f"reader:{self.topic}")

    async def _run(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        while True:
            await self._has_partitions.wait()
            async with self._assign_lock:
                batches = await consumer.getmany(timeout_ms=200, max_records=self._max_records)
            for records in batches.values():
                for record in records:
                    reading.set((record.topic, record.partition, record.offset))
                    self._apply(record.key, record.value)
                    self.applied += 1
                reading.set(None)
            async with self._progress:
                for tp in list(self._positions):
                    if tp in consumer.assignment():
                        self._positions[tp] = await consumer.position(tp)
                self._progress.notify_all()

    async def own(self, partitions: set[int]) -> None:
        """Read these partitions too, from their beginning (owned mode)."""
        assert self._consumer is not None
        consumer = self._consumer
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        new = [tp for tp in tps if tp not in self._positions]
        if not new:
            return
        async with self._assign_lock:
            consumer.assign(sorted(set(self._positions) | set(new)))
            await consumer.seek_to_beginning(*new)
            for tp in new:
                self._positions[tp] = await consumer.position(tp)
        self._has_partitions.set()

    async def disown(self, partitions: set[int]) -> None:
        """Stop reading these partitions (owned mode)."""
        assert self._consumer is not None
        gone = {TopicPartition(self.topic, p) for p in partitions}
        async with self._assign_lock:
            for tp in gone:
                self._positions.pop(tp, None)
            self._consumer.assign(sorted(self._positions))
            if not self._positions:
                self._has_partitions.clear()

    async def restore(self, partitions: set[int], wait_seconds: float) -> bool:
        """Wait until these partitions are applied up to their end offsets read now; False on timeout."""
        assert self._consumer is not None
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        targets = await self._consumer.end_offsets(tps)

        def reached() -> bool:
            return all(self._positions.get(tp, 0) >= end for tp, end in targets.items())

        async with self._progress:
            try:
                await asyncio.wait_for(self._progress.wait_for(reached), wait_seconds)
            except TimeoutError:
                return False
        return True

    async def catch_up(self, wait_seconds: float) -> bool:
        """Wait until everything written before now has been applied; False on timeout."""
        assert self._consumer is not None
        targets = await self._consumer.end_offsets(list(self._positions))

        def reached() -> bool:
            return all(self._positions.get(tp, 0) >= end for tp, end in targets.items())

        async with self._progress:
            try:
                await asyncio.wait_for(self._progress.wait_for(reached), wait_seconds)
            except TimeoutError:
                return False
        return True

    def lag(self) -> int:
        """Records known to be behind (from the last poll's positions; cheap)."""
        if self._consumer is None:
            return 0
        total = 0
        for tp, pos in self._positions.items():
            high = self._consumer.highwater(tp)
            if high is not None:
                total += max(0, high - pos)
        return total

    async def stop(self) -> None:
        """Stop reading and close the consumer."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
