"""What one decision writes: the agent envelope, the quarantine record, the audit event.

Pure functions of (message, verdict, clock): the Kafka loop only sends what these
return, so their shapes are tested without a broker.

Quarantine records follow Kafka Connect's dead-letter convention: the original
key, value and headers unchanged, plus ``tg-error-*`` diagnostics headers. An
original header that carries one of toolgate's diagnostics names is dropped
(an adapter must not be able to forge the diagnosis operators read); every other
original header is kept as it came. A record that would not fit the broker's
request size keeps its first bytes only, with ``tg-truncated`` giving the
original length; ``tg-raw-sha256`` always covers the whole original value.

So that existing dead-letter tooling reads them, quarantine records also carry Kafka
Connect's ``__connect.errors.*`` headers: the original topic, partition and offset,
the stage, and the code and detail as ``exception.class.name`` and
``exception.message``. The ``tg-*`` headers stay the source of truth; an original
``__connect.errors.*`` header is dropped like a forged ``tg-error-*`` one.

Trace context: the agent, quarantine and audit records carry the intake record's W3C
``traceparent``/``tracestate`` (:mod:`toolgate.gate._trace_context`), validated; with tracing
on, the context of the decision's span instead (same trace). A malformed or repeated
``traceparent`` is dropped, never copied, and so is the original one in the
quarantine copy of the headers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import msgspec

from toolgate._version import __version__
from toolgate.gate._records import CONTRACT_SET_HEADER, Diagnostics, Message, Origin, Verdict
from toolgate.gate._sealing import SEALED_HEADERS, Sealer
from toolgate.gate._trace_context import TRACEPARENT, TRACESTATE, TraceContext, from_headers

DIAGNOSTIC_HEADERS = frozenset(
    {
        "tg-error-stage",
        "tg-error-code",
        "tg-error-detail",
        "tg-origin",
        "tg-raw-sha256",
        "tg-contract",
        "tg-worker-version",
        "tg-rejected-at",
        "tg-replay-count",
        "tg-truncated",
        CONTRACT_SET_HEADER,
        *SEALED_HEADERS,
    }
)
CONNECT_PREFIX = "__connect.errors."
CONNECT_EXECUTING_CLASS = "toolgate.gate.Gate"
_DROPPED_ORIGINALS = DIAGNOSTIC_HEADERS | {TRACEPARENT, TRACESTATE}
_WORKER_VERSION = __version__.encode()
_EXECUTING_CLASS = CONNECT_EXECUTING_CLASS.encode()
_CONNECT_TOPIC = CONNECT_PREFIX + "topic"
_CONNECT_PARTITION = CONNECT_PREFIX + "partition"
_CONNECT_OFFSET = CONNECT_PREFIX + "offset"
_CONNECT_STAGE = CONNECT_PREFIX + "stage"
_CONNECT_CLASS = CONNECT_PREFIX + "class.name"
_CONNECT_EXCEPTION_CLASS = CONNECT_PREFIX + "exception.class.name"
_CONNECT_EXCEPTION_MESSAGE = CONNECT_PREFIX + "exception.message"
# tg-error-detail is json.dumps(diagnostics, ensure_ascii=True, separators=(",", ":")): one
# encoder object for every record instead of one per call.
_encode_detail = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
_encode_json = msgspec.json.encode
_WORKER_VERSION_HEADER = ("tg-worker-version", _WORKER_VERSION)
_CONNECT_CLASS_HEADER = (_CONNECT_CLASS, _EXECUTING_CLASS)
# Original header name -> whether a quarantine record keeps it (see quarantine_record).
_kept_original: dict[str, bool] = {}
_KEPT_ORIGINAL_MAX = 1024
# Room left for headers and record overhead under the producer's max request size.
_QUARANTINE_HEADROOM = 64 * 1024


class OutRecord(msgspec.Struct, frozen=True, gc=False):
    """One record to produce.

    A msgspec struct, not a frozen dataclass: two or three are built per result, and a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``. It
    holds only bytes, text and a list of (text, bytes) pairs: it cannot be part of a
    reference cycle (gc=False).
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]  # shared between a decision's records: never mutated


class AuditEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event per decision: what was decided about which bytes, never the bytes.

    ``kind`` is ``decision`` for the one event every intake message gets, and
    ``shadow`` for a sampled disagreement of a shadow contract version, which then
    carries the shadow verdict in ``shadow`` (readers counting decisions skip it).
    A decision on a result replayed from the quarantine (``toolgate replay --apply``)
    carries its ``tg-replay-count`` in ``replay`` (0: live traffic) and the quarantine
    record it came from in ``replay_of`` (``tg-replay-origin``).
    """

    request_id: str | None
    tool: str | None
    adapter: str | None
    adapter_version: str | None
    source: str | None
    contract: str | None
    outcome: str  # success | failure | rejected
    stage: str | None
    code: str | None
    attempt: int | None
    raw_sha256: str
    projected_sha256: str | None
    origin: str
    decided_at: datetime
    worker_version: str = __version__
    kind: str = "decision"
    shadow: dict[str, str | None] | None = None
    replay: int = 0
    replay_of: str | None = None
    envelope: bool = True  # False: the attempt already had its answer; no agent envelope was written


_encode_audit = msgspec.json.Encoder().encode


def audit_event(verdict: Verdict, origin: str, decided_at: datetime) -> AuditEvent:
    """The audit event of one verdict."""
    return AuditEvent(
        request_id=verdict.request_id,
        tool=verdict.tool,
        adapter=verdict.adapter,
        adapter_version=verdict.adapter_version,
        source=verdict.source,
        contract=verdict.contract,
        outcome=verdict.result,
        stage=verdict.stage,
        code=verdict.code,
        attempt=verdict.attempt,
        raw_sha256=verdict.raw_sha256,
        projected_sha256=verdict.projected_sha256,
        origin=origin,
        decided_at=decided_at,
    )


def shadow_record(
    message: Message,
    decided: Verdict,
    shadow: Verdict,
    *,
    audit_topic: str,
    decided_at: datetime,
    contract_set: Sequence[tuple[str, bytes]] = (),
) -> OutRecord:
    """An audit event showing a shadow version's verdict beside the deciding one."""
    event = msgspec.structs.replace(
        audit_event(decided, str(message.origin), decided_at),
        kind="shadow",
        shadow={
            "contract": shadow.contract,
            "outcome": shadow.result,
            "stage": shadow.stage,
            "code": shadow.code,
        },
    )
    return OutRecord(audit_topic, message.key, _encode_audit(event), contract_set)


def replay_origin(message: Message) -> str | None:
    """The quarantine record a replayed message came from (``tg-replay-origin``), if plain text."""
    for name, value in message.headers:
        if name == "tg-replay-origin":
            try:
                text = (value or b"").decode("ascii")
            except UnicodeDecodeError:
                return None
            return text if text.isprintable() and len(text) <= 300 else None
    return None


_REPLAY_COUNT_LENGTH = len("tg-replay-count")


def replay_count(message: Message) -> int:
    """How many times this message has been replayed from the quarantine (0 if never)."""
    for name, value in message.headers:
        # The length first: most names are not as long as the one sought, and are not lowered.
        if len(name) == _REPLAY_COUNT_LENGTH and name.lower() == "tg-replay-count":
            try:
                return max(0, int(value or b"0"))
            except ValueError:
                return 0
    return 0


def set_headers(label: str) -> tuple[tuple[str, bytes], ...]:
    """The ``tg-contract-set`` header of the set labelled ``label``, built once per batch."""
    return ((CONTRACT_SET_HEADER, label.encode()),)


def outputs(
    message: Message,
    verdict: Verdict,
    *,
    agent_topic: str,
    quarantine_topic: str,
    audit_topic: str,
    decided_at: datetime,
    max_record_bytes: int = 1024 * 1024,
    trace: TraceContext | None = None,
    attempt_has_answer: bool = False,
    replays: int | None = None,
    rejected_at: bytes | None = None,
    contract_set: Sequence[tuple[str, bytes]] = (),
    sealer: Sealer | None = None,
) -> list[OutRecord]:
    """The records one decision produces: the agent envelope, the quarantine record when
    rejected, the audit event always.

    ``contract_set``: :func:`set_headers` of the set that decided; every record carries it.

    ``attempt_has_answer``: the rejected result is for a request attempt that already has its
    accepted answer (docs/design.md, One answer per attempt): no agent envelope is
    written, only the quarantine record and the audit event (``envelope: false``).
    ``trace`` is the decision span's context when tracing is on; otherwise the intake
    record's own (its headers first, then an MCP result's ``_meta``) is carried.
    ``replays``: :func:`replay_count` of the message, when the caller has it already;
    ``rejected_at``: ``decided_at.isoformat()`` encoded, when the caller has it (once per batch).
    ``sealer``: seals the quarantine record (:mod:`toolgate.gate._sealing`); None: written clear.
    """
    if attempt_has_answer and verdict.accepted:
        raise ValueError("an accepted verdict always has its agent envelope")
    if trace is None:
        trace = message_trace(message, verdict)
    shared: Sequence[tuple[str, bytes]] = contract_set if trace is None else (*contract_set, *trace.headers())
    records = [] if attempt_has_answer else [OutRecord(agent_topic, message.key, verdict.agent, shared)]
    if replays is None:
        replays = replay_count(message)
    origin = str(message.origin)
    if not verdict.accepted:
        records.append(
            quarantine_record(
                message,
                verdict,
                quarantine_topic,
                decided_at,
                max_record_bytes,
                trace,
                replays,
                origin=origin,
                rejected_at=rejected_at,
                contract_set=contract_set,
                sealer=sealer,
            )
        )
    event = audit_event(verdict, origin, decided_at)
    if replays:
        event = msgspec.structs.replace(event, replay=replays, replay_of=replay_origin(message))
    if attempt_has_answer:
        event = msgspec.structs.replace(event, envelope=False)
    records.append(OutRecord(audit_topic, message.key, _encode_audit(event), shared))
    return records


def message_trace(message: Message, verdict: Verdict) -> TraceContext | None:
    """The producer's trace context: intake headers first, then the result's ``_meta``."""
    return from_headers(message.headers) or verdict.trace


def connect_headers(
    message: Message, verdict: Verdict, exception_message: str | None = None
) -> list[tuple[str, bytes]]:
    """Kafka Connect's dead-letter headers (``__connect.errors.*``) of a rejection
    (``exception_message``: instead of the diagnostics' message, which a sealed record holds
    encrypted)."""
    origin = message.origin
    if isinstance(origin, Origin):
        topic, partition, offset = origin.topic, str(origin.partition), str(origin.offset)
    else:  # a label (an offline check): no coordinates, never a guess
        topic = partition = offset = ""
    message_text = verdict.diagnostics.message if verdict.diagnostics is not None else ""
    if exception_message is not None:
        message_text = exception_message
    return [
        (_CONNECT_TOPIC, topic.encode()),
        (_CONNECT_PARTITION, partition.encode()),
        (_CONNECT_OFFSET, offset.encode()),
        (_CONNECT_STAGE, (verdict.stage or "").encode()),
        (_CONNECT_CLASS, _EXECUTING_CLASS),
        (_CONNECT_EXCEPTION_CLASS, (verdict.code or "").encode()),
        (_CONNECT_EXCEPTION_MESSAGE, message_text.encode()),
    ]


def error_detail(diagnostics: Diagnostics | None) -> bytes:
    """``tg-error-detail``: the diagnostics as ASCII JSON, exactly as
    ``json.dumps(to_builtins(diagnostics), ensure_ascii=True, separators=(",", ":"))``.

    msgspec writes the same bytes whenever it escapes nothing: printable ASCII strings
    without a quote or backslash are written as they are by both (json escapes DEL,
    msgspec does not, so a DEL byte also takes the json path).
    """
    if diagnostics is None:
        return b"{}"
    fast = _encode_json(diagnostics)
    if fast.isascii() and b"\\" not in fast and b"\x7f" not in fast:
        return fast
    text: str = _encode_detail(msgspec.to_builtins(diagnostics))
    return text.encode()


def quarantine_record(
    message: Message,
    verdict: Verdict,
    topic: str,
    decided_at: datetime,
    max_record_bytes: int,
    trace: TraceContext | None = None,
    replays: int | None = None,
    *,
    origin: str | None = None,
    rejected_at: bytes | None = None,
    contract_set: Sequence[tuple[str, bytes]] = (),
    sealer: Sealer | None = None,
) -> OutRecord:
    """The dead-letter record of a rejected message. When the caller has them already:
    ``replays``, :func:`replay_count` of the message; ``origin``, ``str(message.origin)``;
    ``rejected_at``, ``decided_at.isoformat()`` encoded. ``contract_set``: :func:`set_headers`
    of the deciding set (an original ``tg-contract-set``, of an earlier decision, is dropped)."""
    kept = _kept_original
    headers: list[tuple[str, bytes]] = []
    for pair in message.headers:
        name = pair[0]
        keep = kept.get(name)
        if keep is None:
            lower = name.lower()
            keep = lower not in _DROPPED_ORIGINALS and not lower.startswith(CONNECT_PREFIX)
            if len(kept) >= _KEPT_ORIGINAL_MAX:  # attacker-chosen names: stay bounded
                kept.clear()
            kept[name] = keep
        if keep:
            headers.append(pair)
    originals = sum([len(n) + len(v or b"") for n, v in headers])
    diagnostics = verdict.diagnostics
    exception_message = diagnostics.message if diagnostics is not None else ""
    sealed_text = ""  # the diagnostics' message, which a sealed record holds encrypted
    if sealer is not None:
        exception_message = ""
        if diagnostics is not None and diagnostics.message:
            sealed_text = diagnostics.message
            diagnostics = msgspec.structs.replace(diagnostics, message="")
    coordinates = message.origin
    if isinstance(coordinates, Origin):
        topic_name = coordinates.topic.encode()
        partition = str(coordinates.partition).encode()
        offset = str(coordinates.offset).encode()
    else:  # a label (an offline check): no coordinates, never a guess
        topic_name = partition = offset = b""
    origin_bytes = (str(coordinates) if origin is None else origin).encode()
    digest = verdict.raw_sha256.encode()
    stage = (verdict.stage or "").encode()
    code = (verdict.code or "").encode()
    # The same headers as connect_headers() gives, built in the one list.
    added: list[tuple[str, bytes]] = [
        ("tg-error-stage", stage),
        ("tg-error-code", code),
        ("tg-error-detail", error_detail(diagnostics)),
        ("tg-origin", origin_bytes),
        ("tg-raw-sha256", digest),
        ("tg-contract", (verdict.contract or "").encode()),
        _WORKER_VERSION_HEADER,
        ("tg-rejected-at", decided_at.isoformat().encode() if rejected_at is None else rejected_at),
        ("tg-replay-count", str(replay_count(message) if replays is None else replays).encode()),
        (_CONNECT_TOPIC, topic_name),
        (_CONNECT_PARTITION, partition),
        (_CONNECT_OFFSET, offset),
        (_CONNECT_STAGE, stage),
        _CONNECT_CLASS_HEADER,
        (_CONNECT_EXCEPTION_CLASS, code),
        (_CONNECT_EXCEPTION_MESSAGE, exception_message.encode()),
        *contract_set,
    ]
    if trace is not None:
        added += trace.headers()
    headers += added
    value = message.value
    budget = max_record_bytes - _QUARANTINE_HEADROOM - originals - sum([len(n) + len(v) for n, v in added])
    if value is not None and len(value) > budget:
        headers.append(("tg-truncated", str(len(value)).encode()))
        value = value[: max(budget, 0)]
    if sealer is not None:
        value, headers = sealer.seal(
            message.key, value, sealed_text, headers, origin=origin_bytes, digest=digest
        )
    return OutRecord(topic, message.key, value, headers)
