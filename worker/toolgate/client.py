"""toolgate.client: the platform's and the adapter's side of toolgate, async, over Kafka.

The **platform** issues a request record and awaits the decided answer::

    async with toolgate.client.Client(config) as client:
        request = await client.issue("deployer.deploy_status", bind={"environment": "staging"})
        ...  # the adapter calls the tool and publishes its result
        answer = await client.answer(request)   # Answer, or AnswerTimeout
        if answer.outcome == "failure" and answer.retryable:
            request = await client.next_attempt(request)

The **adapter** publishes a raw result, or an MCP ``CallToolResult``, for one attempt of
one request, with every header the gate reads and a v2 signature::

    signer = toolgate.client.Signer.from_keyring("keyring.toml", "deploy-adapter-2026")
    await client.publish_result(request.request_id, request.attempt, result,
                                tool=request.tool, adapter_version="1.0.0", signer=signer)

One client serves thousands of concurrent waits: it reads the agent topic with a single
``read_committed`` consumer (assigned every partition, from their end at start) and
hands each envelope to the future waiting on its request id; a wait ends with the
answer, or with :class:`AnswerTimeout` once its deadline (the request's expiry plus a
grace, or the caller's timeout) has passed by the client's clock. Request records and
results are sent to the partition Kafka's default partitioner (murmur2) gives their key
(the request id), the one the worker expects (README, Partitioning), whatever partitioner
the caller's other Kafka clients use.

An envelope is the answer of the request's attempt in progress: ``INVALID_RESPONSE``
(``answer.rejected``) may later be followed by a success for the same request, after an
operator replays the quarantined result; a client that still waits then sees the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import msgspec

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError, ToolgateError
from toolgate.gate._records import SAFE_ID, BindValue
from toolgate.gate._signing import Key, Keyring, signed_message_v2
from toolgate.gate._trace_context import from_headers
from toolgate.service._kafka import (
    AiokafkaClients,
    Consumer,
    KafkaClients,
    Producer,
    TopicPartition,
    partition_of,
    partitions_of,
)

__all__ = [
    "DEFAULT_MAX_PENDING",
    "Answer",
    "AnswerTimeout",
    "Client",
    "ClientClosed",
    "Request",
    "Signer",
    "call_tool_result_bytes",
]

_log = logging.getLogger("toolgate.client")

# At most this many answers awaited at once per client; beyond it `issue` waits for a slot
# (backpressure). A wait holds a future, a heap entry and its request (well under 1 KB), so
# the bound keeps a flooded client within a few MB while leaving room for ten times the
# thousand concurrent waits a busy platform process holds.
DEFAULT_MAX_PENDING = 10_000
# How long past the request's expiry a wait goes on: a result sent just before the expiry
# is decided (REQUEST_EXPIRED or not) and its envelope committed within it.
EXPIRY_GRACE_S = 5.0
# The reader's poll: how late, at most, an expired wait is noticed.
POLL_MS = 100
# The agent consumer's long poll at the broker (aiokafka's default is 500 ms).
FETCH_WAIT_MS = 20
# A request record or result not acknowledged within this is an outage for the caller.
SEND_TIMEOUT_S = 10.0
INVALID_RESPONSE = "INVALID_RESPONSE"


class AnswerTimeout(ToolgateError):
    """No decided envelope arrived for the request's attempt within its deadline."""

    def __init__(self, request_id: str, attempt: int, waited_s: float) -> None:
        self.request_id = request_id
        self.attempt = attempt
        self.waited_s = waited_s
        super().__init__(
            f"no answer for request {request_id} (attempt {attempt}) within {waited_s:.1f} s: "
            "no result was decided for it (is a worker running, did the adapter publish?)"
        )


class ClientClosed(ToolgateError):
    """The client was closed while the request still waited."""


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


@dataclass(frozen=True, slots=True)
class Request:
    """A request record (contracts/wire/request.schema.json) as issued, and its awaited answer."""

    request_id: str
    tool: str
    issued_at: datetime
    expires_at: datetime
    bind: dict[str, BindValue]
    attempt: int
    max_attempts: int
    answer: asyncio.Future[Answer] = field(repr=False, compare=False)

    def record(self) -> bytes:
        """The record's value on the requests topic."""
        return json.dumps(
            {
                "request_id": self.request_id,
                "tool": self.tool,
                "issued_at": _rfc3339(self.issued_at),
                "expires_at": _rfc3339(self.expires_at),
                "bind": self.bind,
                "attempt": self.attempt,
                "max_attempts": self.max_attempts,
            },
            separators=(",", ":"),
        ).encode()


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Signer:
    """Signs results (scheme v2) with one key of a keyring file toolgate reads
    (``hmac-sha256`` with its secret, ``ed25519`` with its private key)."""

    def __init__(self, key: Key) -> None:
        self.key = key
        self.adapter = key.adapter  # the tg-adapter the key vouches for

    @classmethod
    def from_keyring(cls, path: str | Path, key_id: str, environ: dict[str, str] | None = None) -> Signer:
        """The key ``key_id`` of the keyring TOML file ``path``.

        Raises:
            ConfigError: the file cannot be read, or holds no such key.
        """
        key = Keyring.load(path, environ).get(key_id)
        if key is None:
            raise ConfigError(f"{path}: no key {key_id!r} in the keyring (--keyring or TOOLGATE_KEYRING)")
        return cls(key)

    def sign(self, request_id: str, attempt: int, raw: bytes) -> bytes:
        """The ``tg-signature`` header value: base64 of the v2 signature."""
        import base64

        return base64.b64encode(self.key.sign(signed_message_v2(request_id, attempt, raw)))


def call_tool_result_bytes(result: Any) -> bytes:
    """The JSON bytes of an MCP ``CallToolResult`` (an SDK model, or its wire form as a dict)."""
    if isinstance(result, bytes):
        return result
    if hasattr(result, "model_dump"):
        result = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _Wait:
    __slots__ = ("attempt", "deadline", "future", "started")

    def __init__(self, future: asyncio.Future[Answer], attempt: int, deadline: float, started: float) -> None:
        self.future = future
        self.attempt = attempt
        self.deadline = deadline
        self.started = started


class Client:
    """Issue requests, publish results, await answers. Use ``async with`` (or ``start``/``close``).

    ``clients`` is the Kafka seam (default: aiokafka with the configuration's connection and
    security settings); ``clock`` gives the time in seconds since the epoch (request
    timestamps and wait deadlines); ``max_pending`` bounds the concurrent waits.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        clients: KafkaClients | None = None,
        clock: Callable[[], float] = time.time,
        max_pending: int = DEFAULT_MAX_PENDING,
        poll_ms: int = POLL_MS,
        send_timeout_s: float = SEND_TIMEOUT_S,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.config = config or Config()
        self._clients = clients or AiokafkaClients(self.config)
        self.clock = clock
        self.max_pending = max_pending
        self._poll_ms = poll_ms
        self._send_timeout_s = send_timeout_s
        self._slots = asyncio.Semaphore(max_pending)
        self._waits: dict[str, _Wait] = {}
        self._deadlines: list[tuple[float, str, int]] = []
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._reader: asyncio.Task[None] | None = None
        self._partitions: dict[str, int] = {}
        self._closed = False
        self.answered = 0  # envelopes handed to a waiting request

    # --- life cycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect, start reading the agent topic from its end, and return once reading.

        Raises:
            BrokerError: the broker cannot be reached, or the agent topic does not exist.
        """
        topic = self.config.topics.agent
        producer = self._clients.producer(acks="all", enable_idempotence=True)
        # A short fetch wait: an envelope is handed over as soon as its transaction commits,
        # not when the broker's default 500 ms long poll ends.
        consumer = self._clients.consumer(
            isolation_level="read_committed", enable_auto_commit=False, fetch_max_wait_ms=FETCH_WAIT_MS
        )
        try:
            tps = await partitions_of(self._clients, topic, timeout_ms=int(self._send_timeout_s * 1000))
            if not tps:
                raise BrokerError(
                    f"{self.config.bootstrap}: topic {topic!r} does not exist (run: toolgate topics ensure)",
                    retriable=False,
                )
            await producer.start()
            self._producer = producer
            await consumer.start()
            self._consumer = consumer
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:  # resolve the end positions now: later envelopes are all read
                await consumer.position(tp)
        except BaseException as exc:
            await self.close()
            if isinstance(exc, BrokerError) or not _is_kafka_error(exc):
                raise
            raise BrokerError(f"{self.config.bootstrap}: {exc}", retriable=True) from exc
        self._reader = asyncio.create_task(self._read(tps), name="toolgate-client-reader")

    async def close(self) -> None:
        """Stop reading; every request still waiting fails with :class:`ClientClosed`."""
        self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        for request_id in list(self._waits):
            self._fail(request_id, ClientClosed(f"the client closed while request {request_id} waited"))
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        if consumer is not None:
            await consumer.stop()
        if producer is not None:
            await producer.stop()

    # --- platform side ------------------------------------------------------------------

    async def issue(
        self,
        tool: str,
        *,
        bind: Mapping[str, BindValue] | None = None,
        ttl: float | timedelta = 300.0,
        expires_at: datetime | None = None,
        max_attempts: int = 1,
        request_id: str | None = None,
        wait_s: float | None = None,
    ) -> Request:
        """Write a request record (attempt 1) and start waiting for its answer.

        ``ttl`` (seconds or a timedelta) or ``expires_at`` sets the expiry; the wait ends
        ``wait_s`` seconds from now, else at the expiry plus :data:`EXPIRY_GRACE_S`.
        Waits for a free slot when :attr:`max_pending` answers are awaited already.

        Raises:
            ValueError: an invalid field (named).
            BrokerError: the record was not acknowledged within the send timeout.
        """
        now = self._now()
        if expires_at is None:
            seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
            expires_at = now + timedelta(seconds=seconds)
        request = Request(
            # Letters and digits only: contract schemas commonly pattern request ids as
            # ^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$ (the bundled and imported ones do).
            request_id=request_id or f"req.{secrets.token_hex(10)}",
            tool=tool,
            issued_at=now,
            expires_at=expires_at,
            bind=dict(bind or {}),
            attempt=1,
            max_attempts=max_attempts,
            answer=asyncio.get_running_loop().create_future(),
        )
        _check_request(request)
        await self._write_request(request, wait_s)
        return request

    async def next_attempt(self, request: Request, *, wait_s: float | None = None) -> Request:
        """Move ``request`` to its next attempt (the record rewritten) and wait for that answer.

        Raises:
            ValueError: the request has no attempts left.
            BrokerError: the record was not acknowledged within the send timeout.
        """
        if request.attempt >= request.max_attempts:
            raise ValueError(
                f"request {request.request_id} is at attempt {request.attempt} of {request.max_attempts}"
            )
        following = replace(
            request, attempt=request.attempt + 1, answer=asyncio.get_running_loop().create_future()
        )
        await self._write_request(following, wait_s)
        return following

    async def answer(self, request: Request) -> Answer:
        """The decided envelope of the request's current attempt.

        Raises:
            AnswerTimeout: none arrived by the wait's deadline.
            ClientClosed: the client was closed meanwhile.
        """
        return await asyncio.shield(request.answer)

    async def end(self, request: Request) -> None:
        """End the request: a tombstone on the requests topic (results for it are then
        ``UNKNOWN_REQUEST``); a wait still open fails with :class:`ClientClosed`."""
        if request.request_id in self._waits:
            self._fail(request.request_id, ClientClosed(f"request {request.request_id} was ended"))
        await self._send(self.config.topics.requests, request.request_id, None, [])

    @property
    def pending(self) -> int:
        """Answers awaited now."""
        return len(self._waits)

    async def _write_request(self, request: Request, wait_s: float | None) -> None:
        if self._closed or self._producer is None:
            raise ClientClosed("the client is not started (use async with, or start())")
        await self._slots.acquire()
        rid = request.request_id
        old = self._waits.pop(rid, None)
        if old is not None:  # the previous attempt's wait ends here
            self._slots.release()
            if not old.future.done():
                old.future.set_exception(
                    ClientClosed(f"request {rid} moved on to attempt {request.attempt} before an answer")
                )
                old.future.exception()  # retrieved: nobody need await the superseded attempt
        started = self.clock()
        expiry = request.expires_at.timestamp() + EXPIRY_GRACE_S
        deadline = started + wait_s if wait_s is not None else expiry
        wait = _Wait(request.answer, request.attempt, deadline, started)
        # Registered before the record is sent: an envelope can only follow the record.
        self._waits[rid] = wait
        heapq.heappush(self._deadlines, (deadline, rid, request.attempt))
        try:
            await self._send(self.config.topics.requests, rid, request.record(), [])
        except BaseException:
            if self._waits.get(rid) is wait:
                del self._waits[rid]
                self._slots.release()
            raise

    # --- adapter side -------------------------------------------------------------------

    async def publish_result(
        self,
        request_id: str,
        attempt: int,
        result: bytes | Mapping[str, Any] | Any,
        *,
        tool: str,
        adapter_version: str,
        adapter: str | None = None,
        signer: Signer | None = None,
        content_type: str = "application/json",
        source: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
    ) -> None:
        """Publish one result to intake: raw bytes, or an MCP ``CallToolResult`` (an SDK
        model or its wire form), keyed by the request id, with ``tg-tool``,
        ``tg-request-id``, ``tg-attempt``, ``tg-adapter``, ``tg-adapter-version``,
        ``tg-content-type`` (and ``tg-source``, ``traceparent``, ``tracestate`` when given)
        and, with a ``signer``, ``tg-signature`` (scheme v2; ``tg-adapter`` is the key's).

        Raises:
            ValueError: a header value that the gate would refuse.
            BrokerError: the result was not acknowledged within the send timeout.
        """
        raw = call_tool_result_bytes(result)
        if attempt < 1:
            raise ValueError("attempt starts at 1")
        if signer is not None:
            if adapter is not None and adapter != signer.adapter:
                raise ValueError(f"the key {signer.key.key_id} belongs to adapter {signer.adapter!r}")
            adapter = signer.adapter
        headers: list[tuple[str, bytes]] = [
            ("tg-tool", tool.encode()),
            ("tg-request-id", request_id.encode()),
            ("tg-attempt", str(attempt).encode()),
            ("tg-adapter-version", adapter_version.encode()),
            ("tg-content-type", content_type.encode()),
        ]
        if adapter is not None:
            headers.append(("tg-adapter", adapter.encode()))
        if source is not None:
            headers.append(("tg-source", source.encode()))
        if traceparent is not None:
            context = from_headers([("traceparent", traceparent.encode())])
            if context is not None:  # an invalid one would be dropped by the worker anyway
                headers.append(("traceparent", traceparent.encode()))
                if tracestate:
                    headers.append(("tracestate", tracestate.encode()))
        if signer is not None:
            headers.append(("tg-signature", signer.sign(request_id, attempt, raw)))
        for name, value in headers:
            if len(value) > 1024 or any(b < 0x20 or b == 0x7F for b in value):
                raise ValueError(f"header {name}: more than 1024 bytes or a control character")
        await self._send(self.config.topics.intake, request_id, raw, headers)

    # --- Kafka --------------------------------------------------------------------------

    async def _send(
        self, topic: str, key: str, value: bytes | None, headers: list[tuple[str, bytes]]
    ) -> None:
        producer = self._producer
        if producer is None:
            raise ClientClosed("the client is not started (use async with, or start())")
        try:
            async with asyncio.timeout(self._send_timeout_s):
                count = self._partitions.get(topic)
                if count is None:
                    count = self._partitions[topic] = len(await producer.partitions_for(topic))
                partition = partition_of(key.encode(), count)  # murmur2, as the worker expects
                delivery = await producer.send(
                    topic, value, key=key.encode(), partition=partition, headers=headers
                )
                await delivery
        except TimeoutError as exc:
            raise BrokerError(
                f"{self.config.bootstrap}: topic {topic!r}: no acknowledgement within "
                f"{self._send_timeout_s:g} s (is the broker running?)",
                retriable=True,
            ) from exc
        except Exception as exc:
            if not _is_kafka_error(exc):
                raise
            raise BrokerError(f"{self.config.bootstrap}: topic {topic!r}: {exc}", retriable=True) from exc

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
        try:
            envelope = _envelope.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            _log.warning("agent record for %s is not an envelope: %s", rid, exc)
            return
        if envelope.request_id != rid:
            return
        traceparent = next((v.decode("ascii", "replace") for n, v in headers if n == "traceparent"), None)
        answer = Answer(
            request_id=rid,
            tool=envelope.tool,
            outcome=envelope.outcome,
            data=envelope.data,
            untrusted_text=envelope.untrusted_text,
            code=envelope.error.code if envelope.error else None,
            retryable=envelope.error.retryable if envelope.error else False,
            traceparent=traceparent,
        )
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
                self._fail(rid, AnswerTimeout(rid, attempt, now - wait.started))

    def _fail(self, request_id: str, error: BaseException) -> None:
        wait = self._waits.pop(request_id)
        self._slots.release()
        if not wait.future.done():
            wait.future.set_exception(error)
            wait.future.exception()  # retrieved: a wait nobody awaits is not an error to log

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)


def _check_request(request: Request) -> None:
    """What the worker's strict decoder would refuse, refused here with the field named."""
    if not SAFE_ID.fullmatch(request.request_id):
        raise ValueError(
            f"request_id {request.request_id!r} is not a plain identifier (1-128 of A-Za-z0-9_.:-)"
        )
    if request.max_attempts < 1:
        raise ValueError("max_attempts starts at 1")
    if request.expires_at <= request.issued_at:
        raise ValueError("expires_at must be after issued_at (a positive ttl)")
    for name, value in request.bind.items():
        ok = isinstance(value, str | int | bool) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
        if not ok:
            raise ValueError(f"bind[{name!r}]: a string, integer, boolean or list of strings")


def _is_kafka_error(exc: BaseException) -> bool:
    from aiokafka.errors import KafkaError

    return isinstance(exc, KafkaError)
