"""One owned intake partition: its producer, offsets, restore state and transaction.

Each intake partition a worker owns is an :class:`OwnedPartition`, as a Kafka Streams
task or a quix-streams checkpoint owns its partition: the transactional producer whose
``init_transactions`` fenced the previous owner, the offset to continue from, whether its
state is still being restored, the state tombstones due with its next transaction and
the transaction in flight. Its operations are the four the exactly-once scheme has:

- :meth:`take_over`: fence the previous producer, then read the committed offset and
  move the consumer to it (a take-over retried after the assignment's failed restores the
  state again: the assignment's restore read it before any fence);
- :meth:`decide_and_commit`: decide a batch and commit the records, the state updates and
  the consumed offset in one transaction;
- :meth:`abort`: after a failed transaction, back off, retire the producer and take the
  partition over again (the committed offset says what the failed commit did; one that
  moved since this owner last knew it may be another owner's: its state is restored again);
  a partition revoked meanwhile decides nothing more;
- :meth:`fence`: another owner's producer took the transactional id: stop deciding.

The poll loop does not wait for them: it hands the partition the records fetched for it
(:meth:`OwnedPartition.offer`), and the partition's one task (while it has work) takes
everything queued as a batch, decides and commits it, and takes the next, so its
transactions run one after the other while the loop polls and other partitions decide.
Past ``queue_bound`` records the partition is paused in the consumer; :meth:`release`
(revoked, stopping) starts no further batch and waits for the transaction in flight.

It sees the worker only through :class:`Collaborators`: a request lookup and the
request reader's catch-up, the decision's inputs (gate, accepted ledger, clock), an
output builder, and listeners for a commit, an abort and a fence. It imports nothing
of the worker (``toolgate.service._service``), which keeps the poll loop, the
assignment, the signals and health.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka.errors import KafkaError, ProducerFenced

from toolgate._config import Topics
from toolgate.gate._batch import Batch, ShadowSampler, decide_batch
from toolgate.gate._gate import Gate
from toolgate.gate._outputs import OutRecord
from toolgate.gate._records import Message, Origin, request_key
from toolgate.service._kafka import Consumer, KafkaClients, Outgoing, Producer, TopicPartition, send_records
from toolgate.service._metrics import Metrics
from toolgate.service._otel_spans import DecisionTracer
from toolgate.service._phases import COMMIT, DECIDE, METRICS, SEND, Phases
from toolgate.service._store import AcceptedLedger, StateUpdate

log = logging.getLogger("toolgate.worker")

# (partition, its batch's records, their request keys) -> the request lookup for the batch
RequestLookup = Callable[[TopicPartition, list[Any], list[str]], Callable[[str], Any]]
# (producer, partition, the decisions' records, state updates, tombstones) -> what to send
OutputBuilder = Callable[
    [Producer, TopicPartition, Sequence[OutRecord], list[StateUpdate], set[str]], Awaitable[list[Outgoing]]
]
# (batch, its state updates, records decided, seconds) after the batch's transaction committed
CommitListener = Callable[[Batch, list[StateUpdate], int, float], None]


@dataclass(frozen=True)
class PartitionSettings:
    """The numbers and names an owned partition works with."""

    group_id: str
    topics: Topics
    transactional_prefix: str = "toolgate"
    max_record_bytes: int = 1024 * 1024
    producer_batch_bytes: int = 512 * 1024
    request_wait_seconds: float = 5.0
    # A batch is everything queued, up to this many records.
    batch_size: int = 500
    # Past this many queued records the partition is paused in the consumer (no more
    # fetched for it), and resumed once its queue is taken into a batch.
    queue_bound: int = 1000


@dataclass
class Collaborators:
    """What an owned partition uses of the worker around it, each a narrow callable.

    The worker builds one for all its partitions; a unit test builds one over the
    in-memory broker.
    """

    settings: PartitionSettings
    clients: KafkaClients  # builds the partition's transactional producer
    consumer: Callable[[], Consumer]  # the group consumer (seek, committed offsets)
    held: Callable[[str], bool]  # whether a request id's request record has been read
    lookup: RequestLookup
    # Wait, bounded, until the requests of this intake partition number written before now
    # have been read; False on timeout (raises KafkaError when the cluster does not answer).
    catch_up: Callable[[int, float], Awaitable[bool]]
    gate: Callable[[], Gate]  # the gate now (a contract reload swaps it between batches)
    # A batch with results of an unknown tool or version, or naming a newer contract set:
    # catch up on the contracts (bounded) and return the batch decided again (raises
    # KafkaError when the contracts topic's cluster does not answer).
    contracts_behind: Callable[[Batch, Callable[[], Batch]], Awaitable[Batch]]
    ledger: AcceptedLedger
    clock: Callable[[], datetime]
    expires_of: Callable[[str], datetime | None]
    outputs: OutputBuilder
    # Called with a new producer before the committed offset is read at a take-over.
    prepare: Callable[[Producer], Awaitable[None]]
    # A take-over again read a committed offset this owner did not know (another owner may
    # have committed since), or took the partition over after its state was read unfenced:
    # read the partition's accepted ledger and requests again, as at assignment, before it
    # decides (its ``restoring`` is set meanwhile).
    restore: Callable[[OwnedPartition], Awaitable[None]]
    committed: CommitListener
    # A transaction of the partition failed: count it; returns the backoff to wait.
    aborted: Callable[[TopicPartition, Exception], float]
    # The partition was fenced: the worker forgets it (and counts the abort).
    fenced: Callable[[OwnedPartition], None]
    owns: Callable[[OwnedPartition], bool]  # still the worker's partition
    # The partition's task ended with an error that is not the cluster's (a bug): the
    # worker raises it from its loop.
    crashed: Callable[[BaseException], None]
    sleep: Callable[[float], Awaitable[None]]
    metrics: Metrics
    phases: Phases
    sampler: ShadowSampler | None = None
    tracer: DecisionTracer | None = None


@dataclass
class OpenTransaction:
    """The transaction in flight: its batch, what it writes besides the decisions, and the
    offset it commits (-1: it commits none, state tombstones only).

    Its tombstones go back to the partition when it aborts (they are written with the
    next one); its state updates join the accepted ledger only once it committed. When
    its commit failed with the outcome unknown (a timeout), it stays open until the next
    take-over reads the committed offset, which says whether it committed.
    """

    batch: Batch | None
    updates: list[StateUpdate]
    tombstones: set[str]
    next_offset: int
    size: int = 0
    seconds: float = 0.0


@dataclass
class OwnedPartition:
    """An intake partition this worker owns (see the module docstring)."""

    tp: TopicPartition
    uses: Collaborators
    # None: owned, but taking it over failed (the cluster did not answer) and is retried
    # before its next batch; a stopped producer is never used again.
    producer: Producer | None = None
    # The offset to continue from: records a fetch returned from before a seek
    # (assignment, abort) are dropped, never decided twice. None until taken over.
    next_offset: int | None = None
    # The committed offset as this owner last knew it (read at its take-over, or moved by
    # its own commit): a take-over again that reads another restores its state first.
    known_offset: int | None = None
    restoring: bool = False  # its requests and accepted attempts are being read
    # Its state was read (restored) before a producer of this owner fenced the previous
    # owner: the assignment's take-over failed and its restore ran anyway. The take-over
    # that succeeds restores it again.
    unfenced_state: bool = False
    # State tombstones due: requests that ended (expired or tombstoned) with an entry in
    # the changelog; written with the next batch, or by the sweep when it is idle.
    tombstones: set[str] = field(default_factory=set)
    open: OpenTransaction | None = None
    # Records fetched for it, waiting for the transaction in flight to end (bounded: the
    # partition is paused in the consumer past ``queue_bound``).
    queue: list[Any] = field(default_factory=list)
    paused: bool = False  # paused in the consumer (its queue is full)
    # Released (revoked, fenced or stopping): it starts no further batch.
    closing: bool = False
    tombstones_requested: bool = False  # write the tombstones due when idle (the sweep)
    # The partition's one task, while it has work: it decides and commits its batches one
    # after the other, so a transaction starts only once the previous one ended.
    task: asyncio.Task[None] | None = None

    @property
    def owned(self) -> bool:
        """Still this worker's: not revoked or fenced since it was assigned."""
        return self.uses.owns(self)

    @property
    def idle(self) -> bool:
        """Nothing queued and no transaction in flight."""
        return self.task is None and not self.queue

    # --- the pipeline ------------------------------------------------------------------

    def offer(self, records: list[Any]) -> None:
        """Queue records the consumer fetched for this partition and start its task if idle.

        Called by the poll loop, which does not wait: the partition decides and commits
        them in its own task while the loop polls again and other partitions decide. Only
        records past the last one queued join (a fetch after a rewind returns some again).
        """
        if self.closing or not records:
            return
        queue = self.queue
        if queue:
            last = queue[-1].offset
            if records[0].offset <= last:
                records = [r for r in records if r.offset > last]
        queue.extend(records)
        if len(queue) >= self.uses.settings.queue_bound and not self.paused:
            self._pause(True)
        self.kick()

    def kick(self) -> None:
        """Start the partition's task when it has work and none runs (one at a time).

        Not while it is being taken over and restored (the assignment's own take-over runs
        then; the worker kicks it once restored): records queued meanwhile wait.
        """
        if self.task is None and not self.closing and not self.restoring and self._has_work():
            self.task = asyncio.get_running_loop().create_task(
                self._drive(), name=f"partition:{self.tp.partition}"
            )
            self.task.add_done_callback(self._ended)

    def request_tombstones(self) -> None:
        """Write the tombstones due in a transaction of their own once idle (the sweep)."""
        if self.tombstones:
            self.tombstones_requested = True
            self.kick()

    def _has_work(self) -> bool:
        return (
            bool(self.queue) or self.producer is None or (self.tombstones_requested and bool(self.tombstones))
        )

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self.task is task:
            self.task = None
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                self.uses.crashed(error)

    async def _drive(self) -> None:
        """Decide and commit the queued records batch after batch, each batch everything
        queued (capped), until nothing is left: at low load a batch is one result, and
        batches grow with the load while each transaction is in flight."""
        try:
            await self._batches()
        finally:
            # Here, not in a done callback: a record offered between this return and the
            # callback would find a task that takes no more records, and wait.
            if self.task is asyncio.current_task():
                self.task = None

    async def _batches(self) -> None:
        settings = self.uses.settings
        while not self.closing:
            if self.producer is None:
                # Taking it over failed earlier: again now (the queue goes: the consumer
                # reads again from the committed offset).
                self._drop_queue()
                try:
                    await self.take_over()
                except KafkaError as exc:
                    await self.abort(exc)
                if self.producer is None:
                    return  # the loop kicks it again before its next batch
                continue
            queue = self.queue
            if queue:
                cap = settings.batch_size
                if len(queue) <= cap:
                    batch, self.queue = queue, []
                else:
                    batch, self.queue = queue[:cap], queue[cap:]
                if self.paused and len(self.queue) < settings.queue_bound:
                    self._pause(False)
                await self.decide_and_commit(batch)
            elif self.tombstones_requested:
                self.tombstones_requested = False
                await self.write_tombstones()
            else:
                return

    def _pause(self, paused: bool) -> None:
        """Pause or resume fetching this partition (no longer assigned: nothing to do)."""
        self.paused = paused
        consumer = self.uses.consumer()
        with contextlib.suppress(KafkaError):
            if paused:
                consumer.pause(self.tp)
            else:
                consumer.resume(self.tp)

    def _drop_queue(self) -> None:
        self.queue = []
        if self.paused:
            self._pause(False)

    # --- take-over ---------------------------------------------------------------------

    async def take_over(self) -> None:
        """Own the partition from its committed offset, fencing its previous producer first.

        A new transactional producer's ``init_transactions`` fences the previous producer
        of this partition and settles its open transaction, so the committed offset read
        after it is final. Raises KafkaError when the cluster does not answer; the
        partition then stays owned without a producer (None).

        Taking it over again (after an abort) re-initialises the producer, which fences
        any owner the group gave the partition to meanwhile: when the committed offset is
        not the one this owner last knew, that owner may have committed since, and the
        state this one decides with (its accepted ledger) would miss what the other
        accepted, so it is restored again first (``restore``). So is a partition whose
        state was read before this owner fenced anyone (``unfenced_state``: the
        assignment's take-over failed and its restore ran anyway): the previous owner's
        open transaction may have committed in between.
        """
        self.producer = None
        self.next_offset = None
        known = self.known_offset
        producer = await self._start_producer()
        try:
            committed = await self._committed_offset(producer)
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        self.next_offset = committed
        self.producer = producer
        # The consumer reads again from the committed offset: what was queued comes again.
        self._drop_queue()
        self._settle(committed)
        self.known_offset = committed
        if self.unfenced_state:
            # Its state was read before this owner fenced the previous one, whose open
            # transaction may have committed acceptances since (before this fence): the
            # accepted ledger would miss them. Read it again now that nobody else commits.
            log.info(
                "partition taken over after its state was read; restoring its state again",
                extra={"partition": self.tp.partition, "committed": committed},
            )
            self.unfenced_state = False
            await self.uses.restore(self)
        elif known is not None and committed != known:
            # Moved since this owner last knew it committed: by its own commit whose answer
            # was lost, or by another owner (the offset cannot tell them apart, even where
            # both decided the same records: with other requests or ledgers, other verdicts).
            # The state changelog can: decide nothing with the state of before.
            log.info(
                "committed offset moved while the partition's commit was in doubt; restoring its state",
                extra={"partition": self.tp.partition, "known": known, "committed": committed},
            )
            await self.uses.restore(self)

    def _settle(self, committed: int) -> None:
        """The transaction whose commit failed: committed when the committed offset (final
        after the fence) reached its offset, else aborted."""
        txn, self.open = self.open, None
        if txn is None:
            return
        if txn.batch is not None and committed >= txn.next_offset:
            # The commit went through and only its answer was lost (a timeout): its
            # acceptances are the ledger's, or a duplicate result would be accepted again.
            self.uses.committed(txn.batch, txn.updates, txn.size, txn.seconds)
        else:
            self.tombstones |= txn.tombstones  # written with the next transaction

    @property
    def transactional_id(self) -> str:
        """``<prefix>.<topic>.<partition>``: the same for every owner of the partition, so each
        new owner's producer fences the previous one."""
        return f"{self.uses.settings.transactional_prefix}.{self.tp.topic}.{self.tp.partition}"

    async def _start_producer(self) -> Producer:
        settings = self.uses.settings
        producer = self.uses.clients.producer(
            enable_idempotence=True,
            acks="all",
            max_request_size=settings.max_record_bytes,
            max_batch_size=min(settings.producer_batch_bytes, settings.max_record_bytes),
            # No wait for more records: a transaction's records are handed over together
            # (send_records), and a batch of one result leaves at once.
            linger_ms=0,
            transactional_id=self.transactional_id,
        )
        # start() runs init_transactions: fences the previous owner and settles its
        # open transaction, so the committed offset read next is final.
        try:
            await producer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()  # a failed start leaves its client open
            raise
        return producer

    async def _committed_offset(self, producer: Producer) -> int:
        """Read the committed offset (final once the previous producer is fenced) and seek to it."""
        await self.uses.prepare(producer)
        consumer = self.uses.consumer()
        committed = await consumer.committed(self.tp)
        if committed is None:
            committed = (await consumer.beginning_offsets([self.tp]))[self.tp]
        consumer.seek(self.tp, committed)  # IllegalStateError (a KafkaError): not assigned
        return committed

    # --- decide and commit ---------------------------------------------------------------

    async def decide_and_commit(self, records: list[Any]) -> None:
        """Decide one batch and commit it in one transaction (or take over, abort, fence)."""
        producer = self.producer
        if producer is None:
            return  # taken over again first (the partition's task); the records come again
        records = self._fresh(records)
        if not records:
            return
        uses = self.uses
        held = uses.held
        # Read once per record: the wait below, the misrouted filter and the gate use them.
        keys = [request_key(r.key) for r in records]
        if not all(map(held, keys)) and not await self._read_requests():  # membership: nothing rebuilt
            return
        phases = uses.phases
        phases.enter(DECIDE)
        batch = self._decide(records, keys)
        if batch.requests_behind:  # a retry's result read before its request's newer record
            if not await self._read_requests():
                return
            batch = self._decide(records, keys)
        if batch.behind:
            try:
                batch = await uses.contracts_behind(batch, lambda: self._decide(records, keys))
            except KafkaError as exc:  # an outage: decide nothing rather than call them unknown
                await self.abort(exc)
                return
        phases.enter(SEND)
        # The changelog records of what the batch accepted, and the tombstones due in this
        # partition, go in the same transaction as the decisions.
        updates = uses.ledger.updates(batch.view, uses.expires_of)
        next_offset = records[-1].offset + 1
        txn = self.open = OpenTransaction(batch, updates, self.tombstones, next_offset, len(records))
        self.tombstones = set()
        started = time.perf_counter()
        try:
            await self._commit(producer, batch, txn)
        except ProducerFenced:
            self.open = None
            await self.fence()
            return
        except (KafkaError, AssertionError) as exc:
            # AssertionError: aiokafka's transaction manager in an invalid state after a
            # failure mid-transaction. The take-over after it says whether it committed;
            # if not, the batch is decided again.
            txn.seconds = time.perf_counter() - started
            await self.abort(exc)
            return
        phases.enter(METRICS)
        self.open = None
        self.next_offset = self.known_offset = txn.next_offset
        uses.committed(batch, updates, len(records), time.perf_counter() - started)

    def _fresh(self, records: list[Any]) -> list[Any]:
        """The records at or after the offset to continue from (a gap is logged)."""
        expected = self.next_offset
        if expected is None:
            return records
        records = [r for r in records if r.offset >= expected]
        if records and records[0].offset != expected:
            # Compacted or aborted-transaction gaps are normal in read_committed; log once.
            log.debug(
                "offset gap",
                extra={"partition": self.tp.partition, "expected": expected, "got": records[0].offset},
            )
        return records

    async def _read_requests(self) -> bool:
        """Let the requests reader reach the topic's end for this partition (bounded by
        ``request_wait_seconds``). False: the cluster did not answer within the request
        timeout (an outage), and the batch is aborted: decide nothing now rather than call
        requests unknown or results stale."""
        uses = self.uses
        try:
            caught_up = await uses.catch_up(self.tp.partition, uses.settings.request_wait_seconds)
        except KafkaError as exc:
            await self.abort(exc)
            return False
        uses.metrics.request_waits.labels("caught_up" if caught_up else "timeout").inc()
        return True

    def _decide(self, records: list[Any], keys: list[str]) -> Batch:
        """The gate's decisions on ``records`` (``keys``: the request key of each) and the
        records they produce."""
        uses = self.uses
        tp = self.tp
        messages = [
            Message(
                key=r.key,
                value=r.value,
                headers=r.headers or (),
                origin=Origin(tp.topic, tp.partition, r.offset),
            )
            for r in records
        ]
        return decide_batch(
            uses.gate(),
            messages,
            uses.lookup(tp, records, keys),
            uses.ledger.batch(),
            uses.clock(),
            topics=uses.settings.topics,
            max_record_bytes=uses.settings.max_record_bytes,
            sampler=uses.sampler,
            tracer=uses.tracer,
            keys=keys,
        )

    async def _commit(self, producer: Producer, batch: Batch, txn: OpenTransaction) -> None:
        """One transaction: the decisions' records, the state records, then the offset."""
        uses = self.uses
        outgoing = await uses.outputs(producer, self.tp, batch.records, txn.updates, txn.tombstones)
        async with producer.transaction():
            await send_records(producer, outgoing)
            # After the records' acknowledgement, not beside it: sent while they were in
            # flight, the offsets' requests made the live worker's transactions longer
            # (ops/bench/worker_bench.py latency, measured both ways).
            uses.phases.enter(COMMIT)
            await producer.send_offsets_to_transaction({self.tp: txn.next_offset}, uses.settings.group_id)

    async def write_tombstones(self) -> None:
        """Write the state tombstones due, in a transaction of their own (an idle partition)."""
        producer = self.producer
        if not self.tombstones or producer is None or self.restoring:
            return
        uses = self.uses
        txn = self.open = OpenTransaction(None, [], self.tombstones, -1)
        self.tombstones = set()
        try:
            outgoing = await uses.outputs(producer, self.tp, (), [], txn.tombstones)
            async with producer.transaction():
                await send_records(producer, outgoing)
        except ProducerFenced:
            self.open = None
            await self.fence()
        except (KafkaError, AssertionError) as exc:
            await self.abort(exc)
        else:
            uses.metrics.state_tombstones.inc(len(txn.tombstones))
            self.open = None

    # --- abort and fence -----------------------------------------------------------------

    async def abort(self, exc: Exception) -> None:
        """Abort path: count, log once per state change, back off, take the partition over again.

        The producer is replaced because after a failed commit or abort its transaction
        state is unknown; the new one's ``init_transactions`` settles whatever the old one
        left open, and only then is the committed offset read and the consumer moved back
        to it (so a commit whose answer was lost is not decided twice, and its acceptances
        join the accepted ledger: :meth:`_settle`). The failed producer is retired even
        when the partition was revoked, fenced or stopped during the backoff: a batch begun
        on it would commit an offset past the failed batch's records. While the cluster
        does not answer, the partition stays owned without a producer and is taken over
        again before its next batch: a stopped producer is never used again (a
        transaction on it waits forever).
        """
        uses = self.uses
        backoff = uses.aborted(self.tp, exc)
        await uses.sleep(backoff)  # back off before retrying a failing cluster
        # The failed producer goes, and the offset to continue from with it, whether or not
        # the partition is still ours: a batch begun on it would commit an offset past the
        # failed batch's records, which are not queued again (they would never be decided).
        old, self.producer = self.producer, None
        self.next_offset = None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.stop()
        if not self.owned or self.closing:
            # No longer ours (revoked, fenced or stopping during the backoff): its task
            # starts no further batch, and the next owner decides the failed batch again.
            self.closing = True
            return
        try:
            await self.take_over()
        except KafkaError as start_exc:
            log.debug(
                "taking the partition over again failed; retried before its next batch",
                extra={"partition": self.tp.partition, "error": repr(start_exc)[:300]},
            )

    async def fence(self) -> None:
        """Another owner started a producer with this partition's transactional id: we are a
        zombie for it. Stop deciding it; the group's next assignment settles it."""
        log.warning(
            "producer fenced: partition moved to another worker", extra={"partition": self.tp.partition}
        )
        self.closing = True
        self.queue = []
        self.open = None
        self.uses.fenced(self)
        self.next_offset = self.known_offset = None
        self.tombstones = set()
        fenced, self.producer = self.producer, None
        if fenced is not None:
            with contextlib.suppress(Exception):
                await fenced.stop()

    async def release(self) -> None:
        """Give the partition up (revoked, or the worker stopping): start no further batch,
        wait for the transaction in flight to end (committed, or aborted: the next owner
        decides its records again), then stop the producer.

        Waiting, not cancelling: a transaction cancelled mid-commit leaves its outcome
        unknown to this worker, and its producer stopped under it would wait forever.
        The wait is bounded by the client's request timeouts and the request wait.
        """
        self.closing = True
        self.queue = []
        self.tombstones_requested = False
        task = self.task
        if task is not None and task is not asyncio.current_task():
            await asyncio.wait([task])
        self.next_offset = None
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop()
