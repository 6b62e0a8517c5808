"""Known bugs, planted one at a time, that the simulation must find.

Each is a subclass of the simulated worker or of its owned partition that overrides one
step with a wrong version of it. They live here, in the tests: the production classes
carry no switch for them (``Worker.partition_class`` is the one seam, a class attribute
read once per assigned partition).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError
from toolgate.gate._batch import AcceptedView, Batch, decide_batch
from toolgate.gate._records import Message, Origin
from toolgate.service._kafka import Producer

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
        self.node.worker.world.before_decision(self.node, self)
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
}
