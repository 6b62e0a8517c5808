"""Known bugs, planted one at a time, that the simulation must find.

Each is a subclass of the simulated worker or of its owned partition that overrides one
step with a wrong version of it. They live here, in the tests: the production classes
carry no switch for them (``Worker.partition_class`` is the one seam, a class attribute
read once per assigned partition).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import msgspec
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, RequestTimedOutError
from toolgate.gate._batch import AcceptedView, Batch, decide_batch
from toolgate.gate._records import CONTRACT_SET_HEADER, Message, Origin
from toolgate.service._kafka import Producer, TopicPartition
from toolgate.service._partition import OpenTransaction
from toolgate.service._store import AcceptedLedger, TopicReader

from tests.simulation.world import SimPartition, SimWorker


class _LedgerBeforeCommit(SimPartition):
    """The batch's acceptances join the ledger before its transaction commits."""

    async def _commit(self, producer: Producer, batch: Batch, txn: Any) -> None:
        self.uses.ledger.commit(txn.updates)
        await super()._commit(producer, batch, txn)


class _NoFenceOnTakeOver(SimPartition):
    """Each owner's producer has a transactional id of its own: starting it fences nothing,
    and the previous owner's open transaction can still commit."""

    @property
    def transactional_id(self) -> str:
        return f"{super().transactional_id}.node{self.node.index}"


class _DecideWhileRestoring(SimWorker):
    """A restore attempt that failed counts as done: the partition is decided unrestored."""

    async def _restore_once(self, partitions: set[int]) -> str | None:
        await super()._restore_once(partitions)
        return None


class _StaleRecordsDecided(SimPartition):
    """Records a fetch returned from before the offset to continue from are decided."""

    def _fresh(self, records: list[Any]) -> list[Any]:
        return records


class _AmbiguousCommitAsAborted(SimPartition):
    """A commit that timed out is taken as aborted: the consumer goes back to the batch's
    first offset with the same producer, without reading the committed offset."""

    async def abort(self, exc: Exception) -> None:
        txn = self.open
        if txn is None or txn.batch is None or not isinstance(exc, (KafkaTimeoutError, RequestTimedOutError)):
            await super().abort(exc)
            return
        self.open = None
        self.tombstones |= txn.tombstones
        consumer = self.uses.consumer()
        first = txn.next_offset - txn.size
        consumer.seek(self.tp, first)
        self.next_offset = first


class _AnswerWithoutLedger(SimPartition):
    """Results are decided without the accepted ledger: a second result for an attempt
    that has its answer gets an envelope too."""

    def _decide(self, records: list[Any], keys: list[str]) -> Batch:
        self.node.worker.world.before_decision(self.node, self, records, keys)
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
            AcceptedView(lambda request_id, attempt: False),
            uses.clock(),
            topics=uses.settings.topics,
            max_record_bytes=uses.settings.max_record_bytes,
            keys=keys,
        )


class _TwoTransactionsAtOnce(SimPartition):
    """Records that arrive while a transaction is in flight start a second task of the
    partition: its next transaction begins before the previous one ended."""

    def kick(self) -> None:
        if self.task is not None and self.queue and not self.closing:
            self.task = asyncio.get_running_loop().create_task(self._drive())
            return
        super().kick()


class _QueueKeptAcrossTakeOver(SimPartition):
    """A take-over (after a failed transaction) keeps the records queued behind the failed
    batch: the consumer reads again from the committed offset, the records before the
    queued ones are taken for already queued, and the next commit passes over them."""

    def _drop_queue(self) -> None:
        if self.paused:
            self._pause(False)


class _ReleasedWithoutWaiting(SimPartition):
    """A revoked partition is given up at once: its task goes on deciding and committing
    what it had queued, after the revoke returned."""

    async def release(self) -> None:
        self.next_offset = None


class _RefetchedQueuedAgain(SimPartition):
    """Records a fetch returns again (after a rewind) join the queue a second time."""

    def offer(self, records: list[Any]) -> None:
        if self.closing or not records:
            return
        self.queue.extend(records)
        self.kick()


class _Retried(SimPartition):
    """Remembers the requests whose state records an aborted transaction carried."""

    retried: frozenset[str] = frozenset()

    async def abort(self, exc: Exception) -> None:
        txn = self.open
        if txn is not None and txn.batch is not None:
            self.retried |= {update.request_id for update in txn.updates}
        await super().abort(exc)


class _RetryDropsStateRecords(_Retried):
    """The batch decided again after an aborted transaction writes no state records for
    the requests the aborted one carried (taken for written), while its acceptances join
    the ledger: the changelog loses them, and the next owner's restore with it."""

    async def _commit(self, producer: Producer, batch: Batch, txn: OpenTransaction) -> None:
        kept = [u for u in txn.updates if u.request_id not in self.retried]
        if len(kept) == len(txn.updates):
            await super()._commit(producer, batch, txn)
            return
        await super()._commit(producer, batch, dataclasses.replace(txn, updates=kept))
        self.retried = frozenset()


class _RetryForgetsLedger(_Retried):
    """The batch decided again after an aborted transaction writes its state records, but
    its acceptances of the requests the aborted one carried never join the ledger (taken
    for joined already): the owner decides on with less than its changelog holds."""

    async def _commit(self, producer: Producer, batch: Batch, txn: OpenTransaction) -> None:
        await super()._commit(producer, batch, txn)
        if self.retried:
            # The same list the commit's listener adds to the ledger once this returns.
            txn.updates[:] = [u for u in txn.updates if u.request_id not in self.retried]
            self.retried = frozenset()


class _AttemptBlindLedger(AcceptedLedger):
    """The accepted ledger answers "this attempt has an answer" for any attempt of a
    request that has an accepted one: the attempt number is ignored."""

    def __call__(self, request_id: str, attempt: int) -> bool:
        return request_id in self._live


class _LedgerIgnoresAttempt(SimWorker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger.__class__ = _AttemptBlindLedger


class _CaughtUpOneEarly(TopicReader):
    """The request reader's "caught up" test is off by one: a partition counts as read up
    to its end offset when its position is one short of it."""

    async def _reach(self, tps: list[TopicPartition], wait_seconds: float) -> bool:
        assert self._offsets is not None
        if not tps:
            return True
        targets = await self._offsets.end_offsets(tps)

        def reached() -> bool:
            return all(self._positions.get(tp, 0) >= end - 1 for tp, end in targets.items())

        async with self._progress:
            try:
                await asyncio.wait_for(self._progress.wait_for(reached), wait_seconds)
            except TimeoutError:
                return False
        return True


class _CatchUpOffByOne(SimWorker):
    reader_class = _CaughtUpOneEarly


class _ReadFailureAnswered(TopicReader):
    """A wait whose end-offsets lookup failed returns ``answer`` instead of raising."""

    answer = False

    async def _reach(self, tps: list[TopicPartition], wait_seconds: float) -> bool:
        try:
            return await super()._reach(tps, wait_seconds)
        except KafkaError:
            return self.answer


class _GivesUpOnFailedRead(_ReadFailureAnswered):
    """A wait whose end-offsets lookup failed (an outage, a refused call) gives up as if
    its bound had run out: the result is decided ``UNKNOWN_REQUEST`` instead of waiting
    for the cluster."""


class _WaitGivesUpOnError(SimWorker):
    reader_class = _GivesUpOnFailedRead


class _FailedReadCaughtUp(_ReadFailureAnswered):
    """A wait (catch-up or restore) whose end-offsets lookup failed counts as caught up."""

    answer = True


class _FailedReadAsCaughtUp(SimWorker):
    reader_class = _FailedReadCaughtUp


class _StaleWithoutReading(SimPartition):
    """A result naming a later attempt than the request the node holds is decided at once
    (``STALE_RESULT``): no read of the requests topic for the newer record first."""

    def _decide(self, records: list[Any], keys: list[str]) -> Batch:
        batch = super()._decide(records, keys)
        batch.requests_behind.clear()
        return batch


class _UnknownWithoutCatchingUp(SimWorker):
    """A result of a tool or version the worker's set lacks is decided at once with that
    set: no catch-up on the contract source first."""

    async def _contracts_behind(self, batch: Batch, decide: Callable[[], Batch]) -> Batch:
        return batch


class _StaleEndReader(TopicReader):
    """The contracts catch-up reads to the end offsets it saw the first time (at start-up),
    not to those of now: a set published since is not waited for."""

    _stale: dict[TopicPartition, int] | None = None

    async def _reach(self, tps: list[TopicPartition], wait_seconds: float) -> bool:
        offsets = self._offsets
        assert offsets is not None
        if self._stale is None:
            self._stale = await offsets.end_offsets(tps)
        self._offsets = _Ends(self._stale)  # type: ignore[assignment]
        try:
            return await super()._reach(tps, wait_seconds)
        finally:
            self._offsets = offsets


class _Ends:
    """End offsets as they were once read."""

    def __init__(self, ends: dict[TopicPartition, int]) -> None:
        self.ends = ends

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self.ends


class _CatchUpToStaleEnd(SimWorker):
    contracts_reader_class = _StaleEndReader


class _HeaderNamesTakeOverSet(SimPartition):
    """The records of a decision name the contract set the partition was taken over with,
    not the set that decided the batch (a label cached at the take-over)."""

    label: bytes | None = None

    async def take_over(self) -> None:
        await super().take_over()
        self.label = self.uses.gate().contracts.label.encode()

    def _decide(self, records: list[Any], keys: list[str]) -> Batch:
        batch = super()._decide(records, keys)
        label = self.label
        if label is not None:
            batch.records = [
                msgspec.structs.replace(
                    r, headers=[(k, label if k == CONTRACT_SET_HEADER else v) for k, v in r.headers]
                )
                for r in batch.records
            ]
        return batch


class _OldSetAfterBound(SimWorker):
    """A contracts catch-up that ran out its bound still behind decides with the old set as
    if the issuer had named no generation: a final UNKNOWN_CONTRACT_VERSION where the
    worker knew it was behind and had to answer CONTRACTS_BEHIND (retryable)."""

    async def _contracts_behind(self, batch: Batch, decide: Callable[[], Batch]) -> Batch:
        decided = await super()._contracts_behind(batch, decide)
        if not any(d.verdict.code == "CONTRACTS_BEHIND" for d in decided.decisions):
            return decided
        gate = self.gate
        gate._not_behind = lambda seen: None  # type: ignore[method-assign]
        try:
            return decide()
        finally:
            del gate._not_behind


class _OffsetBeforeFence(SimPartition):
    """The take-over reads the committed offset before its producer's start fences the
    previous owner: a commit of that owner landing in between is not seen, and its batch
    is decided again."""

    async def take_over(self) -> None:
        self.producer = None
        self.next_offset = None
        consumer = self.uses.consumer()
        committed = await consumer.committed(self.tp)
        if committed is None:
            committed = (await consumer.beginning_offsets([self.tp]))[self.tp]
        producer = await self._start_producer()
        await self.uses.prepare(producer)
        consumer.seek(self.tp, committed)
        self.next_offset = committed
        self.producer = producer
        self._drop_queue()
        self._settle(committed)


class _GivesUpAfterOutage(SimPartition):
    """After failing to take partitions over for 15 s on end (a long outage), the worker
    stops trying: its clients are taken for dead and never rebuilt."""

    async def take_over(self) -> None:
        worker = self.node.worker
        world = worker.world
        failing_since = getattr(worker, "failing_since", None)
        if failing_since is not None and world.loop.time() - failing_since > 15.0:
            raise KafkaConnectionError("gave up: the cluster was unreachable for too long")
        try:
            await super().take_over()
        except KafkaError:
            if failing_since is None:
                worker.failing_since = world.loop.time()  # type: ignore[attr-defined]
            raise
        worker.failing_since = None  # type: ignore[attr-defined]


class _RetriedTakeOverKeepsState(SimPartition):
    """A take-over retried after the assignment's failed one decides with the state the
    assignment's restore read before any fence: the previous owner's open transaction,
    committed since, is missing from its ledger."""

    @property
    def unfenced_state(self) -> bool:
        return False

    @unfenced_state.setter
    def unfenced_state(self, value: bool) -> None:
        return None


class _AbortKeepsFailedProducer(SimPartition):
    """An abort that finds its partition revoked during the backoff returns with the failed
    producer and its offset in place: the partition's task decides the next queued records
    on it, and commits an offset past the failed batch."""

    async def abort(self, exc: Exception) -> None:
        backoff = self.uses.aborted(self.tp, exc)
        await self.uses.sleep(backoff)
        if not self.owned or self.closing:
            return
        old, self.producer = self.producer, None
        self.next_offset = None
        if old is not None:
            with contextlib.suppress(Exception):
                await old.stop()
        with contextlib.suppress(KafkaError):
            await self.take_over()


def _worker(partition: type[SimPartition]) -> type[SimWorker]:
    return type(f"Worker{partition.__name__}", (SimWorker,), {"partition_class": partition})


# name -> the worker class that carries the bug
BUGS: dict[str, type[SimWorker]] = {
    "ledger-before-commit": _worker(_LedgerBeforeCommit),
    "no-fence-on-take-over": _worker(_NoFenceOnTakeOver),
    "decide-while-restoring": _DecideWhileRestoring,
    "stale-records-decided": _worker(_StaleRecordsDecided),
    "ambiguous-commit-as-aborted": _worker(_AmbiguousCommitAsAborted),
    "answer-without-ledger": _worker(_AnswerWithoutLedger),
    # the pipelined loop's own
    "two-transactions-at-once": _worker(_TwoTransactionsAtOnce),
    "queue-kept-across-take-over": _worker(_QueueKeptAcrossTakeOver),
    "released-without-waiting": _worker(_ReleasedWithoutWaiting),
    "refetched-queued-again": _worker(_RefetchedQueuedAgain),
    "ledger-ignores-attempt": _LedgerIgnoresAttempt,
    "catch-up-off-by-one": _CatchUpOffByOne,
    "offset-before-fence": _worker(_OffsetBeforeFence),
    "gives-up-after-outage": _worker(_GivesUpAfterOutage),
    # a failed take-over or transaction, and what comes after it
    "retried-take-over-keeps-state": _worker(_RetriedTakeOverKeepsState),
    "abort-keeps-failed-producer": _worker(_AbortKeepsFailedProducer),
    # waits that give up on a failed read, and state lost with an aborted transaction
    "wait-gives-up-on-error": _WaitGivesUpOnError,
    "stale-without-reading": _worker(_StaleWithoutReading),
    "failed-read-as-caught-up": _FailedReadAsCaughtUp,
    "retry-drops-state-records": _worker(_RetryDropsStateRecords),
    "retry-forgets-ledger": _worker(_RetryForgetsLedger),
    # contract publication and the contracts catch-up (the rollout profile)
    "unknown-without-catching-up": _UnknownWithoutCatchingUp,
    "catch-up-to-stale-end": _CatchUpToStaleEnd,
    "header-names-wrong-set": _worker(_HeaderNamesTakeOverSet),
    "old-set-after-bound": _OldSetAfterBound,
}
