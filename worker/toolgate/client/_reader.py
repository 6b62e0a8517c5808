"""The platform's answers: one ``read_committed`` consumer of the agent topic for every wait.

The consumer is assigned every partition from their end at start, and each envelope goes to
the future waiting on its request id; a heap of deadlines is checked after every poll, and a
wait past its deadline ends with :class:`AnswerTimeout`. At most ``max_pending`` waits are
open at once: a caller beyond them waits for a slot (backpressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec

from toolgate._config import Config
from toolgate.client._errors import AnswerTimeout, ClientClosed
from toolgate.service._kafka import Consumer, KafkaClients, TopicPartition

_log = logging.getLogger("toolgate.client")

# At most this many answers awaited at once per client; beyond it `issue` waits for a slot
# (backpressure). A wait holds a future, a heap entry and its request (well under 1 KB), so
# the bound keeps a flooded client within a few MB while leaving room for ten times the
# thousand concurrent waits a busy platform process holds.
DEFAULT_MAX_PENDING = 10_000
# The reader's poll: how late, at most, an expired wait is noticed.
POLL_MS = 100
# The agent consumer's long poll at the broker (aiokafka's default is 500 ms).
FETCH_WAIT_MS = 20
INVALID_RESPONSE = "INVALID_RESPONSE"


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """The decided envelope of one request, as the agent reads it."""

    request_id: str
    tool: str | None
    outcome: Literal["success", "failure"]
    data: dict[str, Any] | None = None  # the projected result (success)
    untrusted_text: dict[str, str] | None = None  # display text, bounded and marked untrusted
    code: str | None = None  # failure: the upstream's code, or INVALID_RESPONSE
    retryable: bool = False
    traceparent: str | None = None  # the decision's trace context, when the record had one

    @property
    def rejected(self) -> bool:
        """The result was rejected by the gate (the fixed ``INVALID_RESPONSE``)."""
        return self.outcome == "failure" and self.code == INVALID_RESPONSE


class _Error(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    code: str
    retryable: bool


class _Envelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tool: str | None
    request_id: str | None
    outcome: Literal["success", "failure"]
    data: dict[str, Any] | None = None
    error: _Error | None = None
    untrusted_text: dict[str, str] | None = None


_envelope = msgspec.json.Decoder(_Envelope)


def answer_of(request_id: str, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Answer | None:
    """The :class:`Answer` an agent record (an envelope, its headers) holds for ``request_id``;
    None when it is no envelope, or another request's."""
    try:
        envelope = _envelope.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        _log.warning("agent record for %s is not an envelope: %s", request_id, exc)
        return None
    if envelope.request_id != request_id:
        return None
    traceparent = next((v.decode("ascii", "replace") for n, v in headers if n == "traceparent"), None)
    return Answer(
        request_id=request_id,
        tool=envelope.tool,
        outcome=envelope.outcome,
        data=envelope.data,
        untrusted_text=envelope.untrusted_text,
        code=envelope.error.code if envelope.error else None,
        retryable=envelope.error.retryable if envelope.error else False,
        traceparent=traceparent,
    )


class Wait:
    """One open wait: the attempt it is for, its future and its deadline (client clock)."""

    __slots__ = ("attempt", "deadline", "future", "started")

    def __init__(self, future: asyncio.Future[Answer], attempt: int, deadline: float, started: float) -> None:
        self.future = future
        self.attempt = attempt
        self.deadline = deadline
        self.started = started


class Reader:
    """Reads the agent topic and resolves the waits on it."""

    def __init__(
        self,
        config: Config,
        clients: KafkaClients,
        *,
        clock: Callable[[], float],
        max_pending: int,
        poll_ms: int,
    ) -> None:
        self.config = config
        self._clients = clients
        self.clock = clock
        self.max_pending = max_pending
        self._poll_ms = poll_ms
        self._slots = asyncio.Semaphore(max_pending)
        self._waits: dict[str, Wait] = {}
        self._deadlines: list[tuple[float, str, int]] = []
        self._consumer: Consumer | None = None
        self._task: asyncio.Task[None] | None = None
        self.answered = 0  # envelopes handed to a waiting request

    async def start(self, tps: Sequence[TopicPartition]) -> None:
        """Read ``tps`` from their end: every envelope committed after this returns is seen."""
        # A short fetch wait: an envelope is handed over as soon as its transaction commits,
        # not when the broker's default 500 ms long poll ends.
        consumer = self._clients.consumer(
            isolation_level="read_committed", enable_auto_commit=False, fetch_max_wait_ms=FETCH_WAIT_MS
        )
        self._consumer = consumer  # set before starting: close() stops it whatever happens
        await consumer.start()
        consumer.assign(list(tps))
        await consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end positions now: later envelopes are all read
            await consumer.position(tp)
        self._task = asyncio.create_task(self._read(tps), name="toolgate-client-reader")

    async def close(self) -> None:
        """Stop reading; every wait still open fails with :class:`ClientClosed`."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for request_id in list(self._waits):
            self.fail(request_id, ClientClosed(f"the client closed while request {request_id} waited"))
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    @property
    def pending(self) -> int:
        return len(self._waits)

    def waiting_on(self, request_id: str) -> bool:
        return request_id in self._waits

    async def open(
        self,
        request_id: str,
        attempt: int,
        future: asyncio.Future[Answer],
        wait_s: float | None,
        expiry: float,
    ) -> Wait:
        """Register a wait (after a free slot), superseding an earlier attempt's wait; its
        deadline is ``wait_s`` seconds from now, else ``expiry`` (client clock)."""
        await self._slots.acquire()
        old = self._waits.pop(request_id, None)
        if old is not None:  # the previous attempt's wait ends here
            self._slots.release()
            if not old.future.done():
                old.future.set_exception(
                    ClientClosed(f"request {request_id} moved on to attempt {attempt} before an answer")
                )
                old.future.exception()  # retrieved: nobody need await the superseded attempt
        started = self.clock()
        deadline = started + wait_s if wait_s is not None else expiry
        wait = Wait(future, attempt, deadline, started)
        self._waits[request_id] = wait
        heapq.heappush(self._deadlines, (deadline, request_id, attempt))
        return wait

    def drop(self, request_id: str, wait: Wait) -> None:
        """Forget ``wait`` (its record was not sent), when it is still the open one."""
        if self._waits.get(request_id) is wait:
            del self._waits[request_id]
            self._slots.release()

    def fail(self, request_id: str, error: BaseException) -> None:
        wait = self._waits.pop(request_id)
        self._slots.release()
        if not wait.future.done():
            wait.future.set_exception(error)
            wait.future.exception()  # retrieved: a wait nobody awaits is not an error to log

    async def _read(self, tps: Sequence[TopicPartition]) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            try:
                batches = await consumer.getmany(*tps, timeout_ms=self._poll_ms)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the consumer retries on its own; say so once per poll
                _log.warning("reading the agent topic: %s", exc)
                batches = {}
                await asyncio.sleep(self._poll_ms / 1000)
            for records in batches.values():
                for record in records:
                    self._deliver(record.key, record.value, record.headers)
            self._expire()

    def _deliver(self, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> None:
        if key is None or value is None:
            return
        rid = key.decode("utf-8", "replace")
        wait = self._waits.get(rid)
        if wait is None:
            return  # another platform's request, or one no longer awaited
        answer = answer_of(rid, value, headers)
        if answer is None:
            return
        del self._waits[rid]
        self._slots.release()
        self.answered += 1
        if not wait.future.done():
            wait.future.set_result(answer)

    def _expire(self) -> None:
        now = self.clock()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _deadline, rid, attempt = heapq.heappop(heap)
            wait = self._waits.get(rid)
            if wait is not None and wait.attempt == attempt and wait.deadline <= now:
                self.fail(rid, AnswerTimeout(rid, attempt, now - wait.started))
