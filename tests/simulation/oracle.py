"""The oracle: the verdict every intake record must get, from the gate alone.

The simulation knows what it wrote. For each committed decision the oracle computes the
verdict the pure gate (:func:`~toolgate.gate._batch.decide_batch`) gives the record, over a
reference model of requests and answers that shares no code with the worker's state
(``toolgate.service._store``):

- **requests**: the requests log as written. The request a decision must see is the fold
  (in offset order: a record replaces the request, a tombstone ends it) of the log's
  records the deciding node had applied when it decided, extended by every record it
  *must* have applied by then: those below the end offsets at its partition's restore and
  at its last request catch-up that said it had caught up (``catch_up`` returning True
  promises everything written before the call).
- **answers**: the attempts with a committed acceptance, read from the committed audit
  events of earlier transactions, plus those accepted before the record in its own
  transaction (one transaction decides one partition's records in offset order).
- **now**: the decision's own ``decided_at`` (the worker's virtual clock);
- **contracts**: the contract set the node decided with (a published set once it loaded
  it); whether that set was the one it must have had is invariant 17's to say.

The committed decision must be that verdict: outcome, code, request id and attempt.
"""

from __future__ import annotations

import collections
import contextvars
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka.errors import KafkaError
from toolgate.gate._batch import AcceptedView, decide_batch
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message, Origin, RequestRecord, Verdict, decode_request
from toolgate.service._kafka import TopicPartition

from tests.fakes.kafka import FakeBroker, partition_for

# Set in the task that awaited a request catch-up that timed out: an unknown request is
# then the worker's bounded wait running out, not a bug (docs/simulation.md, The oracle).
waited_out: contextvars.ContextVar[bool] = contextvars.ContextVar("waited_out", default=False)
# The client calls that failed during the request catch-up the task is in (None: in none);
# the world notes each failure it raises into a call (``world.note_failure``).
wait_failures: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "wait_failures", default=None
)
# Set in the task whose last request catch-up returned although a call of it failed (a
# refused end-offsets lookup, an outage): the worker must decide nothing after it, neither
# "caught up" nor "timed out" (docs/simulation.md, invariant 15).
failed_wait: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("failed_wait", default=())


@dataclass(frozen=True)
class Seen:
    """The request a node must have decided one record with, whether its wait for its
    requests had timed out, the gate (contract set) it decided with, and whether its
    contract source could not be read to its end during its last contracts catch-up."""

    request: RequestRecord | None
    waited_out: bool
    gate: Gate | None = None
    behind: bool = False


class Oracle:
    """Reference requests and answers, and the gate's verdict for each committed decision."""

    def __init__(self, broker: FakeBroker, gate: Gate, topics: Any, max_record_bytes: int) -> None:
        self.broker = broker
        self.gate = gate
        self.topics = topics
        self.max_record_bytes = max_record_bytes
        self.seen: dict[tuple[int, str], Seen] = {}  # (node, origin) -> its view when deciding
        self.checked = 0  # committed decisions compared with the gate's verdict
        self.codes: collections.Counter[str] = collections.Counter()  # their codes (rejections)
        self.ruled: set[str] = set()  # origins whose verdict is a cel rule's RULE_FAILED
        self.committed: dict[str, Seen] = {}  # origin -> the committing node's view

    # --- requests ----------------------------------------------------------------------

    def request(self, partition: int, offsets: Iterable[int], key: str) -> RequestRecord | None:
        """The request ``key`` after the requests log records at ``offsets`` of ``partition``."""
        log = self.broker.logs[self.topics.requests][partition]
        wanted = key.encode()
        held: RequestRecord | None = None
        for offset in sorted(offsets):
            if offset >= len(log):
                continue
            record = log[offset]
            if record.control or record.key != wanted:
                continue
            held = None if record.value is None else decode_request(record.value)
        return held

    def request_ends(self) -> dict[int, int]:
        """The end offset of every requests partition now."""
        return {p: len(log) for p, log in enumerate(self.broker.logs[self.topics.requests])}

    def capture(
        self,
        node: int,
        tp: TopicPartition,
        records: list[Any],
        keys: list[str],
        applied: set[int],
        must: int,
        gate: Gate | None = None,
        behind: bool = False,
    ) -> None:
        """A node decides ``records`` of ``tp`` with ``gate``, having applied the requests
        offsets ``applied``, and owing every one below ``must``: remember what each must
        see (``behind``: its contract source could not be read to its end)."""
        offsets = applied | set(range(must))
        out = waited_out.get()
        count = len(self.broker.logs[self.topics.intake])
        for record, key in zip(records, keys, strict=True):
            origin = f"{tp.topic}/{tp.partition}/{record.offset}"
            request = None
            if key and (record.key is None or partition_for(record.key, count) == tp.partition):
                request = self.request(tp.partition, offsets, key)
            self.seen[(node, origin)] = Seen(request, out, gate, behind)

    # --- verdicts ----------------------------------------------------------------------

    def verdicts(
        self,
        node: int | None,
        events: list[dict[str, Any]],
        answered: Callable[[str, int], bool],
        fail: Callable[[str, str], Any],
    ) -> None:
        """Check the decision events of one committed transaction (by ``node``) against
        the gate's verdicts; ``answered`` says which attempts had a committed acceptance
        before the transaction."""
        view = AcceptedView(answered)
        for event in sorted(events, key=lambda e: _offset(e["origin"])):
            origin = event["origin"]
            seen = self.seen.get((node, origin)) if node is not None else None
            if seen is None:
                fail(
                    "every committed decision is the gate's verdict",
                    f"{origin} committed by node {node}, which was never seen deciding it",
                )
                return
            expected = self._verdict(origin, seen, datetime.fromisoformat(event["decided_at"]), view)
            got = (event["outcome"], event.get("code"), event.get("request_id"), event.get("attempt"))
            want = (expected.result, expected.code, expected.request_id, expected.attempt)
            self.checked += 1
            if expected.code is not None and not expected.accepted:
                self.codes[expected.code] += 1
                if expected.code == "RULE_FAILED":
                    self.ruled.add(origin)
            if got != want:
                request = seen.request
                held = "unknown" if request is None else f"{request.request_id} attempt {request.attempt}"
                fail(
                    "every committed decision is the gate's verdict",
                    f"{origin}: committed {_show(got)} but the gate decides {_show(want)} "
                    f"(request {held}"
                    f", attempts answered before it: {_answered(view, event.get('request_id'))})",
                )
            self.committed[origin] = seen

    def sanctioned(self, origin: str, attempt: int, *, named: bool = False) -> bool:
        """Whether the committed decision of ``origin`` could not answer ``attempt``: its
        node's view held no request after a timed-out wait, or an earlier attempt. A result
        that names its attempt (``named``: ``tg-attempt``) makes a node holding an earlier
        one read the requests topic on before deciding: only that read running out
        excuses it."""
        seen = self.committed.get(origin)
        if seen is None:
            return False
        if seen.request is None or (named and seen.request.attempt != attempt):
            return seen.waited_out
        return seen.request.attempt != attempt

    def _verdict(self, origin: str, seen: Seen, now: datetime, view: AcceptedView) -> Verdict:
        topic, partition, offset = origin.rsplit("/", 2)
        record = self.broker.logs[topic][int(partition)][int(offset)]
        message = Message(
            key=record.key,
            value=record.value,
            headers=record.headers or (),
            origin=Origin(topic, int(partition), int(offset)),
        )
        request = seen.request
        batch = decide_batch(
            seen.gate or self.gate,
            [message],
            lambda key: request if request is not None and key == request.request_id else None,
            view,
            now,
            topics=self.topics,
            max_record_bytes=self.max_record_bytes,
        )
        return batch.decisions[0].verdict


def catching_up(
    reader: Any, ends: Callable[[], dict[int, int]], reached: Callable[[dict[int, int]], None]
) -> None:
    """Watch ``reader.catch_up``: when it says it caught up, every requests record below the
    end offsets at its call is owed (``reached``); when it times out, the task notes it;
    when it returns although one of its calls failed, the task notes that (``failed_wait``)."""
    original = reader.catch_up

    async def catch_up(wait_seconds: float, partitions: set[int] | None = None) -> bool:
        # A catch-up of some partitions (a batch waits for its own) owes only theirs.
        before = {p: end for p, end in ends().items() if partitions is None or p in partitions}
        failures: list[str] = []
        token = wait_failures.set(failures)
        try:
            done: bool = await original(wait_seconds, partitions)
        except KafkaError:
            failed_wait.set(())
            raise
        finally:
            wait_failures.reset(token)
        # A wait one of whose reads failed, and which returned all the same: what it says
        # is not what it read (a retry that then succeeded says True, which the oracle's
        # floor checks; False after a failure is the wait giving up on the cluster).
        failed_wait.set(tuple(failures) if failures and not done else ())
        if done:
            reached(before)
        waited_out.set(not done)
        return done

    reader.catch_up = catch_up


def _answered(view: AcceptedView, request_id: str | None) -> list[int]:
    return [a for a in range(1, 4) if request_id is not None and view.committed(request_id, a)]


def _offset(origin: str) -> int:
    return int(origin.rsplit("/", 1)[1])


def _show(v: tuple[Any, Any, Any, Any]) -> str:
    outcome, code, request_id, attempt = v
    return f"{outcome}{'/' + code if code else ''} ({request_id} attempt {attempt})"
