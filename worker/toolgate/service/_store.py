"""State the worker holds for the intake partitions it owns: outstanding requests and
accepted attempts.

* :class:`RequestTable` from the compacted requests topic (co-partitioned with intake,
  read by a :class:`TopicReader` in owned mode): strict decoding, a tombstone ends a
  request, expired requests are evicted on the injected clock, and a cap bounds memory
  (oldest first out, counted and logged when hit). Each validated request is held with
  its home partition (read once, when applied): the newest decoded, the older ones in a
  compact packed form rebuilt on lookup.
* :class:`AcceptedLedger` from the state changelog (compacted, co-partitioned with intake):
  which attempts of each live request already had a result accepted, so "one accepted
  result per request attempt" survives restarts and rebalances. The owner of an intake
  partition is the only writer of the same state partition (its transactional producer
  fences the previous owner), so the partition is read once, by :func:`restore_partitions`,
  up to the end offsets read at assignment; after that the worker's committed batches
  keep it. An entry leaves with its request (expiry or tombstone).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import logging
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Protocol, cast

import msgspec
from aiokafka.errors import KafkaError

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


# The packed form of a validated request (everything but its id, which is the table's key):
# expires_at and issued_at as datetime's own 10-byte state (their wall time, from which datetime
# rebuilds itself directly) and their UTC offsets in minutes, attempt, max_attempts, the home
# partition (-1: not known), the tool name's length; then the tool name (UTF-8) and the bind
# mapping as JSON (nothing when empty).
_PACK = struct.Struct("<10s10shhHHiB")
_EXPIRES = struct.Struct("<10s10xh")  # expires_at and its offset
_HOME = struct.Struct("<28xi")  # the home partition
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MINUTE = timedelta(minutes=1)
_bind_encode = msgspec.json.encode
_bind_decode = msgspec.json.Decoder().decode  # the packed bind was validated when applied
# datetime(state, tzinfo): the constructor's path for its 10-byte state (the one pickle uses).
_from_state = cast("Callable[[bytes, tzinfo], datetime]", datetime)

# A request as held: the decoded record and its home partition, the intake partition number
# its key's requests partition has (-1: not known, read outside a partition).
Held = tuple[RequestRecord, int]
Stored = bytes | Held  # packed, or held decoded (the newest, and those the packing cannot hold)


def _offset_minutes(moment: datetime) -> int | None:
    """The UTC offset in whole minutes; None when it is not one (the record is then kept as is)."""
    offset = moment.utcoffset()
    if offset is None or offset % _ONE_MINUTE:
        return None
    minutes = offset // _ONE_MINUTE
    return minutes if -32768 <= minutes <= 32767 else None


def _zone(offset_minutes: int) -> timezone:
    return UTC if not offset_minutes else timezone(timedelta(minutes=offset_minutes))


def pack_request(record: RequestRecord, home: int = -1) -> Stored:
    """The compact form of a validated request and its home partition; the pair itself
    when a field does not fit."""
    issued_at, expires_at = record.issued_at, record.expires_at
    issued_off = 0 if issued_at.tzinfo is UTC else _offset_minutes(issued_at)
    expires_off = 0 if expires_at.tzinfo is UTC else _offset_minutes(expires_at)
    tool = record.tool.encode()
    if (
        record.answered  # rare (a request an MCP proxy answered): kept as it is
        or issued_off is None
        or expires_off is None
        or len(tool) > 255
        or not (record.attempt <= 65535 and record.max_attempts <= 65535)
        or not -1 <= home <= 0x7FFFFFFF
    ):
        return (record, home)
    head = _PACK.pack(
        expires_at.__reduce__()[1][0],
        issued_at.__reduce__()[1][0],
        expires_off,
        issued_off,
        record.attempt,
        record.max_attempts,
        home,
        len(tool),
    )
    return b"".join((head, tool, _bind_encode(record.bind))) if record.bind else head + tool


def unpack_held(request_id: str, stored: Stored) -> Held:
    """The request and home partition a :func:`pack_request` form holds (the request equal,
    field for field, to the one packed)."""
    if type(stored) is not bytes:
        return stored  # type: ignore[return-value]
    expires, issued, expires_off, issued_off, attempt, max_attempts, home, tool_len = _PACK.unpack_from(
        stored
    )
    end = _PACK.size + tool_len
    record = RequestRecord(
        request_id=request_id,
        tool=stored[_PACK.size : end].decode(),
        issued_at=_from_state(issued, UTC if not issued_off else _zone(issued_off)),
        expires_at=_from_state(expires, UTC if not expires_off else _zone(expires_off)),
        bind=_bind_decode(stored[end:]) if len(stored) > end else {},
        attempt=attempt,
        max_attempts=max_attempts,
    )
    return record, home


def unpack_request(request_id: str, stored: Stored) -> RequestRecord:
    """The request a :func:`pack_request` form holds."""
    return unpack_held(request_id, stored)[0]


def _expires_at(stored: Stored) -> datetime:
    if type(stored) is bytes:
        state, offset = _EXPIRES.unpack_from(stored)
        return _from_state(state, UTC if not offset else _zone(offset))
    return cast("Held", stored)[0].expires_at


def _home(stored: Stored) -> int:
    if type(stored) is bytes:
        return cast("int", _HOME.unpack_from(stored)[0])
    return cast("Held", stored)[1]


def _minute(moment: datetime) -> int:
    """Minutes since the epoch, floored: the expiry index's bucket."""
    delta = moment - _EPOCH
    return delta.days * 1440 + delta.seconds // 60


class RequestTable:
    """Outstanding requests by id, bounded, each with its home partition.

    A request is decoded and validated when applied (strictly: an invalid record is
    skipped, counted and logged) and held with its home partition, the requests partition
    it was read from (where its key's murmur2 puts it, checked once, when applied). The
    newest ``decoded`` requests are held as their decoded records, so a result that
    follows its request, as results do, finds it without a rebuild; older ones are packed
    (:func:`pack_request`, about a third of the decoded record's memory) and rebuilt on
    lookup. An index of request ids by expiry minute lets :meth:`evict_expired` visit
    only what may have expired.

    Args:
        max_requests: the cap; when full, the oldest inserted request is dropped
            (its results then fail closed as ``UNKNOWN_REQUEST``).
        on_full: called once each time the table goes from not full to full.
        on_evict: called for every request dropped to make room.
        decoded: how many of the newest requests are held decoded.
    """

    def __init__(
        self,
        max_requests: int = 1_000_000,
        on_full: Callable[[int], None] | None = None,
        on_invalid: Callable[[], None] | None = None,
        on_evict: Callable[[], None] | None = None,
        decoded: int = 32_768,
    ) -> None:
        self.max_requests = max_requests
        self._requests: dict[str, Stored] = {}
        self._on_full = on_full
        self._on_invalid = on_invalid
        self._on_evict = on_evict
        self._full = False
        self.evicted_for_space = 0
        self.invalid_records = 0
        # The ids applied last, oldest first: past ``decoded`` of them, the oldest is packed.
        # An id applied twice is in it twice; its older place packs the newer record early.
        self._decoded = max(0, decoded)
        self._fresh: deque[str] = deque()
        # Expiry index: minute -> ids whose request expired in that minute when applied, and a
        # heap of those minutes. Entries of requests since gone or re-applied stay until their
        # minute is swept or the index is rebuilt (when it holds twice the table and more).
        self._expiry: dict[int, list[str]] = {}
        self._minutes: list[int] = []
        self._indexed = 0

    def get(self, request_id: str) -> RequestRecord | None:
        """The outstanding request with this id, if known."""
        stored = self._requests.get(request_id)
        if stored is None:
            return None
        if type(stored) is tuple:
            return stored[0]
        return unpack_held(request_id, stored)[0]

    def held(self, request_id: str) -> Held | None:
        """The outstanding request with this id and its home partition (-1: not known)."""
        stored = self._requests.get(request_id)
        if stored is None or type(stored) is tuple:
            return stored
        return unpack_held(request_id, stored)

    def in_partition(
        self, partition: int, keys: Sequence[str], raw_keys: Sequence[bytes | None], count: int
    ) -> tuple[dict[str, RequestRecord], set[str]]:
        """The requests a batch of intake ``partition`` (of ``count``) names, and its misrouted ids.

        ``keys`` are the request ids of the batch's results, ``raw_keys`` their Kafka keys. A
        result whose key the default partitioner (murmur2) puts in another partition is
        misrouted: its request is not returned, whichever partition holds it. A held request
        answers that from its home partition; only a key with no request held here (or read
        where its partition was not known) is hashed. ``count`` 0 (not known yet): nothing is
        called misrouted.
        """
        requests = self._requests
        found: dict[str, RequestRecord] = {}
        misrouted: set[str] = set()
        for key, raw in zip(keys, raw_keys, strict=True):
            stored = requests.get(key) if key else None
            if stored is None:
                if count and raw and partition_of(raw, count) != partition:
                    misrouted.add(key)
                continue
            record, home = stored if type(stored) is tuple else unpack_held(key, stored)
            if home != partition and count and (home >= 0 or partition_of(key.encode(), count) != partition):
                misrouted.add(key)
                continue
            found[key] = record
        return found, misrouted

    def __len__(self) -> int:
        return len(self._requests)

    def __contains__(self, request_id: object) -> bool:
        """Whether a request with this id is held (no record rebuilt)."""
        return request_id in self._requests

    def expires_at(self, request_id: str) -> datetime | None:
        """The held request's expiry (read from its stored form; no record rebuilt)."""
        stored = self._requests.get(request_id)
        return None if stored is None else _expires_at(stored)

    def drop_partitions(self, partitions: set[int], count: int) -> int:
        """Forget the requests whose home is one of ``partitions`` of ``count`` (a revoked
        intake partition's requests); return how many. Read from each request's home
        partition: only a request applied where its partition was not known is hashed."""
        doomed = []
        for rid, stored in self._requests.items():
            home = _home(stored)
            if home < 0:
                home = partition_of(rid.encode(), count)
            if home in partitions:
                doomed.append(rid)
        for rid in doomed:
            del self._requests[rid]
        if self._full and len(self._requests) < self.max_requests:
            self._full = False
        self._trim_index()
        return len(doomed)

    def apply(self, key: bytes | None, value: bytes | None, home: int = -1) -> None:
        """Apply one record of the requests topic (a tombstone ends the request).

        ``home``: the requests partition it was read from, when that is its key's (-1: not known).
        """
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
        rid = record.request_id
        requests = self._requests
        requests.pop(rid, None)  # re-insert at the end: newest
        requests[rid] = (record, home)
        fresh = self._fresh
        fresh.append(rid)
        if len(fresh) > self._decoded:
            old = fresh.popleft()
            stored = requests.get(old)
            if type(stored) is tuple:
                requests[old] = pack_request(*stored)  # keeps its place in the order
        self._index(rid, _minute(record.expires_at))
        if len(requests) > self.max_requests:
            oldest = next(iter(requests))
            del requests[oldest]
            self.evicted_for_space += 1
            if self._on_evict is not None:
                self._on_evict()
            if not self._full:
                self._full = True
                if self._on_full is not None:
                    self._on_full(self.max_requests)
        elif self._full and len(requests) < self.max_requests:
            self._full = False
        if self._indexed > 2 * len(requests) + 1024:
            self._trim_index()

    def _index(self, rid: str, minute: int) -> None:
        ids = self._expiry.get(minute)
        if ids is None:
            ids = self._expiry[minute] = []
            heapq.heappush(self._minutes, minute)
        ids.append(rid)
        self._indexed += 1

    def _trim_index(self) -> None:
        """Rebuild the expiry index from the table once stale entries outnumber live ones."""
        if self._indexed <= 2 * len(self._requests) + 1024:
            return
        self._expiry, self._minutes, self._indexed = {}, [], 0
        for rid, stored in self._requests.items():
            self._index(rid, _minute(_expires_at(stored)))

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
        """Drop requests whose ``expires_at`` has passed; return how many.

        Visits the index's minutes up to ``now``'s, not the whole table."""
        now_minute = _minute(now)
        requests = self._requests
        dropped = 0
        while self._minutes and self._minutes[0] <= now_minute:
            minute = self._minutes[0]
            ids = self._expiry[minute]
            keep: list[str] = []
            for rid in ids:
                stored = requests.get(rid)
                if stored is None:
                    continue  # gone already (tombstone, cap, revoked partition, a duplicate entry)
                expires_at = _expires_at(stored)
                if expires_at <= now:
                    del requests[rid]
                    dropped += 1
                elif _minute(expires_at) == minute:
                    keep.append(rid)  # this minute, not yet passed
                # else: re-applied with another expiry, indexed under that minute
            self._indexed -= len(ids) - len(keep)
            if keep:
                self._expiry[minute] = keep
                break  # now's own minute: the later ones are all in the future
            del self._expiry[minute]
            heapq.heappop(self._minutes)
        if self._full and len(self._requests) < self.max_requests:
            self._full = False
        return dropped


class StateEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One record of the state changelog (key: the request id): the attempts of a live
    request that already have an accepted result, and when the request expires.

    Written in the same transaction as the decision that accepted the result, to the
    intake partition's number; a tombstone ends it once the request has ended.
    """

    request_id: str
    accepted_attempts: list[int]
    expires_at: datetime


_state_decoder = msgspec.json.Decoder(StateEntry)
_state_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """A changelog record a batch writes in its transaction (the request's whole entry)."""

    request_id: str
    attempts: frozenset[int]
    expires: float  # expires_at as POSIX seconds

    @property
    def key(self) -> bytes:
        return self.request_id.encode()

    def value(self) -> bytes:
        expires_at = datetime.fromtimestamp(self.expires, UTC)
        entry = StateEntry(
            request_id=self.request_id, accepted_attempts=sorted(self.attempts), expires_at=expires_at
        )
        return _state_encoder.encode(entry)


class AcceptedLedger:
    """The one home of "already accepted": the attempts of each live request that had a
    result accepted, restored from the state changelog and extended by this worker's
    committed batches.

    Bounded by the live requests of the owned partitions: an entry leaves with its
    request (expiry or tombstone) and with its partition (revocation). A batch reads and
    extends it through its own :class:`AcceptedView` (:meth:`batch`); :meth:`updates` are the
    changelog records the batch writes in its transaction, :meth:`commit` takes them in once
    it committed.
    """

    def __init__(self) -> None:
        # request id -> (expires_at as POSIX seconds, accepted attempts in ascending order).
        # Tuples of numbers only: the collector stops tracking them after their first young
        # collection, so a ledger of many live requests adds nothing to the full collections'
        # work (a frozenset stays tracked: 80,000 entries were 160,000 objects to traverse
        # and a 40-100 ms pause per full collection).
        self._live: dict[str, tuple[float, tuple[int, ...]]] = {}
        self.invalid_records = 0

    def __call__(self, request_id: str, attempt: int) -> bool:
        entry = self._live.get(request_id)
        return entry is not None and attempt in entry[1]

    def __len__(self) -> int:
        """How many requests have accepted attempts."""
        return len(self._live)

    def batch(self) -> AcceptedView:
        """A view for deciding one batch: this ledger plus the batch's own acceptances."""
        return AcceptedView(self)

    def updates(self, view: AcceptedView, expires_of: Callable[[str], datetime | None]) -> list[StateUpdate]:
        """The changelog records for what ``view`` accepted: per request, all its accepted
        attempts (compaction keeps the latest record per key). ``expires_of`` gives the
        request's expiry (an accepted result's request is known)."""
        added: dict[str, set[int]] = {}
        for request_id, attempt in view.pending:
            added.setdefault(request_id, set()).add(attempt)
        out = []
        for request_id in sorted(added):
            held = self._live.get(request_id)
            expires_at = expires_of(request_id)
            if expires_at is not None:
                expires = expires_at.timestamp()
            elif held is not None:
                expires = held[0]
            else:  # cannot happen: a result is accepted only for a known request
                raise AssertionError(f"accepted a result for {request_id!r} without its request")
            attempts = frozenset(added[request_id]).union(held[1] if held else ())
            out.append(StateUpdate(request_id, attempts, expires))
        return out

    def commit(self, updates: list[StateUpdate]) -> None:
        """The batch that wrote ``updates`` committed: remember them."""
        for update in updates:
            self._live[update.request_id] = (update.expires, tuple(sorted(update.attempts)))

    def record(self, request_id: str, attempt: int, expires_at: datetime) -> None:
        """Remember one accepted attempt (tools and tests)."""
        held = self._live.get(request_id)
        attempts = {attempt}.union(held[1] if held else ())
        self._live[request_id] = (expires_at.timestamp(), tuple(sorted(attempts)))

    def apply(self, key: bytes | None, value: bytes | None, now: datetime | None = None) -> bool:
        """Apply one changelog record (a tombstone ends the entry); False when the record is
        an entry whose request has expired by ``now`` (not held: its tombstone is due)."""
        if value is None:
            if key is not None:
                self._live.pop(key.decode("utf-8", "replace"), None)
            return True
        try:
            entry = _state_decoder.decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            # Only workers write this topic: a record they cannot read is logged, not trusted.
            self.invalid_records += 1
            topic, partition, offset = reading.get() or ("", None, None)
            log.warning(
                "invalid state record skipped",
                extra={"topic": topic, "partition": partition, "offset": offset, "error": str(exc)[:200]},
            )
            return True
        expires = entry.expires_at.timestamp()
        if now is not None and expires <= now.timestamp():
            self._live.pop(entry.request_id, None)
            return False
        self._live[entry.request_id] = (expires, tuple(sorted(set(entry.accepted_attempts))))
        return True

    def end(self, request_id: str) -> bool:
        """Forget a request that ended (its tombstone); True when it had an entry."""
        return self._live.pop(request_id, None) is not None

    def expired(self, now: datetime) -> list[str]:
        """Forget the entries whose request has expired by ``now``; return their ids."""
        cutoff = now.timestamp()
        gone = [rid for rid, (expires, _) in self._live.items() if expires <= cutoff]
        for rid in gone:
            del self._live[rid]
        return gone

    def drop_partitions(self, partitions: set[int], count: int) -> int:
        """Forget the entries whose key the default partitioner puts in ``partitions`` of ``count``."""
        doomed = [rid for rid in self._live if partition_of(rid.encode(), count) in partitions]
        for rid in doomed:
            del self._live[rid]
        return len(doomed)


Apply = Callable[[bytes | None, bytes | None], object]
# (topic, partition, offset) of the record a TopicReader is applying, for the appliers' logs.
reading: contextvars.ContextVar[tuple[str, int, int] | None] = contextvars.ContextVar("reading", default=None)


async def start_reader_consumer(clients: KafkaClients, *, fetch_max_wait_ms: int = 50) -> Consumer:
    """A started group-less ``read_committed`` consumer for reading state topics.

    ``fetch_max_wait_ms``: how long the broker holds a fetch with nothing to return. It
    does not delay a record written meanwhile (the broker answers the fetch as soon as one
    is readable, a committed transaction's too: ``fetch_min_bytes`` 1), but a broker answers
    one request per connection at a time, so an offset lookup on the same consumer waits
    behind it: 50 ms where the reader's own lookups (restore) follow its fetches.
    """
    consumer = clients.consumer(
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=fetch_max_wait_ms,
        fetch_min_bytes=1,
    )
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()  # a failed start leaves its connections open
        raise
    return consumer


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
        # catch_up()'s end-offset lookups, on connections of their own: on the reader's they
        # would wait behind its long poll (a broker answers one request per connection at a
        # time), and a result waiting for its request would wait for both.
        self._offsets: Consumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._progress = asyncio.Condition()
        self.applied = 0

    async def start(self) -> None:
        """Assign every partition, seek to the start point and begin reading."""
        # 50 ms long polls: a record written is answered at once; own()'s offset reset (a
        # take-over's restore) waits behind at most one.
        consumer = await start_reader_consumer(self._clients)
        self._consumer = consumer
        # A group-less consumer has no metadata yet: ask for this topic's partitions.
        tps = await partitions_of(self._clients, self.topic)
        if not tps:
            await consumer.stop()
            self._consumer = None
            raise ConfigError(f"topic {self.topic!r} does not exist (run: toolgate topics ensure)")
        try:
            self._offsets = await start_reader_consumer(self._clients)
        except BaseException:
            await consumer.stop()
            self._consumer = None
            raise
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
        backoff = 0.0
        while True:
            await self._has_partitions.wait()
            try:
                async with self._assign_lock:
                    batches = await consumer.getmany(timeout_ms=200, max_records=self._max_records)
            except KafkaError as exc:
                # A fetch the client library gave up on: read on after a pause. Ending here
                # would leave every restore and catch-up waiting for a reader that is gone.
                if not backoff:
                    log.warning(
                        "reading failed; retrying", extra={"topic": self.topic, "error": repr(exc)[:300]}
                    )
                backoff = min(max(backoff * 2, 0.1), 5.0)
                await asyncio.sleep(backoff)
                continue
            backoff = 0.0
            for records in batches.values():
                for record in records:
                    reading.set((record.topic, record.partition, record.offset))
                    self._apply(record.key, record.value)
                    self.applied += 1
                reading.set(None)
            async with self._progress:
                # Under the assignment lock: an own() or disown() while position() waits (it
                # does after a seek) would have it raise for a partition no longer assigned.
                async with self._assign_lock:
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
        return await self._reach([TopicPartition(self.topic, p) for p in sorted(partitions)], wait_seconds)

    async def catch_up(self, wait_seconds: float, partitions: set[int] | None = None) -> bool:
        """Wait until everything written before now (to ``partitions`` of those read; None:
        all) has been applied; False on timeout. Several callers may wait at once: each
        reads the end offsets when it is called, and all are woken by the reader's progress."""
        tps = [tp for tp in self._positions if partitions is None or tp.partition in partitions]
        return await self._reach(tps, wait_seconds)

    async def _reach(self, tps: list[TopicPartition], wait_seconds: float) -> bool:
        """Wait until ``tps`` are applied up to their end offsets read now; False on timeout."""
        assert self._offsets is not None
        if not tps:
            return True
        targets = await self._offsets.end_offsets(tps)

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
        if self._offsets is not None:
            await self._offsets.stop()
            self._offsets = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None


async def restore_partitions(
    clients: KafkaClients,
    topic: str,
    partitions: set[int],
    apply: Apply,
    wait_seconds: float,
    *,
    max_records: int = 5000,
) -> bool:
    """Read ``partitions`` of ``topic`` from their beginning up to the end offsets read
    now (``read_committed``: the last stable offsets), applying every record; False when
    that took longer than ``wait_seconds`` (the caller retries; nothing is decided meanwhile).

    Raises:
        KafkaError: the cluster did not answer.
    """
    if not partitions:
        return True
    consumer = await start_reader_consumer(clients)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)

        async def read() -> None:
            behind = [tp for tp in tps if await consumer.position(tp) < ends[tp]]
            while behind:
                batches = await consumer.getmany(*behind, timeout_ms=200, max_records=max_records)
                for records in batches.values():
                    for record in records:
                        if record.offset >= ends[TopicPartition(record.topic, record.partition)]:
                            continue  # written after the assignment: ours to come
                        reading.set((record.topic, record.partition, record.offset))
                        apply(record.key, record.value)
                    reading.set(None)
                behind = [tp for tp in behind if await consumer.position(tp) < ends[tp]]

        try:
            await asyncio.wait_for(read(), wait_seconds)
        except TimeoutError:
            return False
        return True
    finally:
        await consumer.stop()
