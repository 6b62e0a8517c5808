"""The platform's side: issue a request record, await the decided answer of its attempt, move
to the next attempt, end the request."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from toolgate._config import Config
from toolgate.client._errors import ClientClosed
from toolgate.client._reader import Answer, Reader
from toolgate.client._sender import Sender
from toolgate.client._values import MAX_ATTEMPTS, MAX_TTL_S, bind_values, moment, seconds, whole
from toolgate.gate._records import SAFE_ID, BindValue

# How long past the request's expiry a wait goes on: a result sent just before the expiry
# is decided (REQUEST_EXPIRED or not) and its envelope committed within it.
EXPIRY_GRACE_S = 5.0
# A request record over this is refused before sending (a broker's default record limit).
MAX_RECORD_BYTES = 1024 * 1024


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
    # The current attempt has its accepted answer, decided by the caller (an MCP proxy
    # deciding in process): a further result for it is a duplicate.
    answered: bool = False

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
                **({"answered": True} if self.answered else {}),
            },
            separators=(",", ":"),
        ).encode()


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class PlatformSide:
    """Issue requests and await their answers (a part of :class:`toolgate.client.Client`)."""

    config: Config
    clock: Callable[[], float]
    _sends: Sender
    _reader: Reader
    _closed: bool
    _answers: bool

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

        ``ttl`` (seconds or a timedelta) or ``expires_at`` sets the expiry, at most a week
        ahead; the wait ends ``wait_s`` seconds from now (at most a week), else at the expiry
        plus :data:`EXPIRY_GRACE_S`. Waits for a free slot when :attr:`max_pending` answers
        are awaited already, and for room among the sends in progress.

        Raises:
            ValueError: an invalid field, or a number not finite or out of range (named).
            TypeError: a field of the wrong type (named).
            BrokerError: the record was not acknowledged within the send timeout.
        """
        request = self.request_record(
            tool, bind=bind, ttl=ttl, expires_at=expires_at, max_attempts=max_attempts, request_id=request_id
        )
        await self.send_request(request, wait_s=wait_s)
        return request

    def request_record(
        self,
        tool: str,
        *,
        bind: Mapping[str, BindValue] | None = None,
        ttl: float | timedelta = 300.0,
        expires_at: datetime | None = None,
        max_attempts: int = 1,
        request_id: str | None = None,
    ) -> Request:
        """The request record :meth:`issue` writes, built and checked but not sent: whatever
        would refuse it is raised here, before anything is written or called.

        Raises:
            ValueError: an invalid field, or a number not finite or out of range (named).
            TypeError: a field of the wrong type (named).
        """
        now = self._now()
        if expires_at is None:
            expires_at = now + timedelta(seconds=seconds("ttl", ttl))
        else:
            moment("expires_at", expires_at, after=now)
        request = Request(
            # Letters and digits only: contract schemas commonly pattern request ids as
            # ^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$ (the bundled and imported ones do).
            request_id=request_id or f"req.{secrets.token_hex(10)}",
            tool=tool,
            issued_at=now,
            expires_at=expires_at,
            bind=bind_values(bind),
            attempt=1,
            max_attempts=whole("max_attempts", max_attempts, low=1, high=MAX_ATTEMPTS),
            answer=asyncio.get_running_loop().create_future(),
        )
        _check_request(request)
        return request

    async def send_request(self, request: Request, *, wait_s: float | None = None) -> None:
        """Write a record of :meth:`request_record` and start waiting for its answer.

        Raises:
            ValueError: ``wait_s`` out of range.
            BrokerError: the record was not acknowledged within the send timeout.
        """
        await self._write_request(request, _wait_seconds(wait_s))

    async def next_attempt(self, request: Request, *, wait_s: float | None = None) -> Request:
        """Move ``request`` to its next attempt (the record rewritten) and wait for that answer.

        Raises:
            ValueError: the request has no attempts left, or ``wait_s`` is out of range.
            BrokerError: the record was not acknowledged within the send timeout.
        """
        if request.attempt >= request.max_attempts:
            raise ValueError(
                f"request {request.request_id} is at attempt {request.attempt} of {request.max_attempts}"
            )
        wait = _wait_seconds(wait_s)
        following = replace(
            request,
            attempt=request.attempt + 1,
            answer=asyncio.get_running_loop().create_future(),
            answered=False,
        )
        await self._write_request(following, wait)
        return following

    async def answer(self, request: Request) -> Answer:
        """The decided envelope of the request's current attempt.

        Raises:
            AnswerTimeout: none arrived by the wait's deadline.
            ClientClosed: the client was closed meanwhile.
            ValueError: the client reads no answers (``Client(answers=False)``).
        """
        if not self._answers:
            raise ValueError("this client reads no answers (Client(answers=False)): its caller decides")
        return await asyncio.shield(request.answer)

    async def end(self, request: Request) -> None:
        """End the request: a tombstone on the requests topic (results for it are then
        ``UNKNOWN_REQUEST``); a wait still open fails with :class:`ClientClosed`."""
        if self._reader.waiting_on(request.request_id):
            self._reader.fail(request.request_id, ClientClosed(f"request {request.request_id} was ended"))
        await self._sends.send(self.config.topics.requests, request.request_id, None, [])

    @property
    def pending(self) -> int:
        """Answers awaited now."""
        return self._reader.pending

    @property
    def answered(self) -> int:
        """Envelopes handed to a waiting request so far."""
        return self._reader.answered

    async def _write_request(self, request: Request, wait_s: float | None) -> None:
        if self._closed:
            raise ClientClosed("the client is not started (use async with, or start())")
        rid = request.request_id
        if not self._answers:  # the caller decides: nothing to wait for
            await self._sends.send(self.config.topics.requests, rid, request.record(), [])
            return
        expiry = request.expires_at.timestamp() + EXPIRY_GRACE_S
        # Registered before the record is sent: an envelope can only follow the record.
        wait = await self._reader.open(rid, request.attempt, request.answer, wait_s, expiry)
        try:
            await self._sends.send(self.config.topics.requests, rid, request.record(), [])
        except BaseException:
            self._reader.drop(rid, wait)
            raise

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)


def _wait_seconds(wait_s: float | None) -> float | None:
    return None if wait_s is None else seconds("wait_s", wait_s, high=MAX_TTL_S)


def _check_request(request: Request) -> None:
    """What the worker's strict decoder would refuse, refused here with the field named."""
    if not isinstance(request.request_id, str) or not SAFE_ID.fullmatch(request.request_id):
        raise ValueError(
            f"request_id {request.request_id!r} is not a plain identifier (1-128 of A-Za-z0-9_.:-)"
        )
    if not isinstance(request.tool, str) or not request.tool:
        raise ValueError(f"tool {request.tool!r}: a tool name")
    size = len(request.record())
    if size > MAX_RECORD_BYTES:
        raise ValueError(f"bind: the request record would be {size} bytes, over {MAX_RECORD_BYTES}")
