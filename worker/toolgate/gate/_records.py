"""Typed records that cross the gate's boundary: intake messages, request records, verdicts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

import msgspec

from toolgate._codes import Code, Stage
from toolgate.gate._trace_context import TraceContext

BindValue = str | int | bool | list[str]

CONTRACT_SET_HEADER = "tg-contract-set"
"""On every agent, quarantine and audit record a decision writes: the label
(``g<generation>-<digest[:12]>``) of the contract set that made the decision."""
CONTRACT_GENERATION_HEADER = "tg-contract-generation"
"""On an intake or request record, optional: the contract set generation its issuer saw
(decimal). A worker whose set is older catches up before deciding."""


class RequestRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False):
    """An outstanding request, written by the agent platform to the requests topic.

    Decoded strictly: unknown fields, naive timestamps and wrong types are errors.
    ``gc=False``: a record holds only strings, numbers and lists of strings, so it can
    never be part of a reference cycle; a million of them must not slow the collector.
    """

    request_id: str
    tool: str
    issued_at: datetime
    expires_at: datetime
    bind: dict[str, BindValue] = {}
    attempt: int = 1
    max_attempts: int = 1
    # The current attempt has its accepted answer, decided outside the workers (an MCP proxy
    # deciding in process): a further result for it is a duplicate (docs/design.md,
    # "Exactly once on the proxy path").
    answered: bool = False

    def __post_init__(self) -> None:
        if self.issued_at.tzinfo is None or self.expires_at.tzinfo is None:
            raise ValueError("issued_at and expires_at need a UTC offset")
        if not 1 <= self.attempt <= self.max_attempts:
            raise ValueError("attempt must be in 1..max_attempts")
        if self.expires_at <= self.issued_at:
            raise ValueError("expires_at must be after issued_at")
        if not 0 < len(self.request_id) <= 128:
            raise ValueError("request_id must be 1..128 characters")


_request_decoder = msgspec.json.Decoder(RequestRecord)


def decode_request(raw: bytes) -> RequestRecord:
    """Decode a request record.

    Raises:
        msgspec.ValidationError: with the path of the mistake.
        msgspec.DecodeError: not JSON.
    """
    return _request_decoder.decode(raw)


class Origin(msgspec.Struct, frozen=True, gc=False):
    """The Kafka record an intake message was read from."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        """``topic/partition/offset``: the text of ``tg-origin`` and of the audit event's ``origin``."""
        return f"{self.topic}/{self.partition}/{self.offset}"


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One intake record as the gate sees it: no Kafka types.

    ``origin`` is for diagnostics only: the :class:`Origin` of a record read from Kafka,
    or a label (a file's path) for a message that came from no topic, which then has
    no coordinates.
    """

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]] = ()
    origin: Origin | str = ""


SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
"""A plain identifier: what a Kafka key or a claimed id must be to be echoed or looked up."""


def request_key(key: bytes | None) -> str:
    """The request id a Kafka key names: the key as text when it is a plain identifier, else ''.

    Computed once per message (the batch looks the request up with it and hands it
    to the gate); '' names no request (a request id has at least one character).
    """
    if key is None or len(key) > 128:
        return ""
    try:
        text = key.decode("ascii")
    except UnicodeDecodeError:
        return ""
    return text if SAFE_ID.fullmatch(text) else ""


# Verdicts and diagnostics hold only scalars, so they can never be part of a reference
# cycle: gc=False keeps them out of the garbage collector's bookkeeping.
class Diagnostics(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Why a result was rejected, for operators only (never for the agent)."""

    stage: Stage
    code: Code
    message: str = ""
    instance_path: str = ""
    schema_path: str = ""
    keyword: str = ""


class Verdict(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The gate's decision on one intake message.

    ``agent`` is the encoded agent envelope: the projected result, the upstream's
    validated failure, or the fixed ``INVALID_RESPONSE`` failure.
    """

    accepted: bool
    outcome: str  # the agent envelope's outcome: "success" or "failure"
    tool: str | None
    request_id: str | None
    contract: str | None
    stage: Stage | None  # set on rejection
    code: str | None  # operator code on rejection; the upstream failure code when accepted
    attempt: int | None
    agent: bytes
    raw_sha256: str
    projected_sha256: str | None = None
    diagnostics: Diagnostics | None = None
    adapter: str | None = None
    adapter_version: str | None = None
    source: str | None = None
    trace: TraceContext | None = None  # from an MCP result's _meta (intake headers win)

    @property
    def result(self) -> str:
        """``success``, ``failure`` (a valid upstream failure) or ``rejected``: the metric label."""
        return self.outcome if self.accepted else "rejected"
