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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import msgspec

from toolgate._version import __version__
from toolgate.gate._records import Message, Verdict

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
    }
)
# Room left for headers and record overhead under the producer's max request size.
_QUARANTINE_HEADROOM = 64 * 1024


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


class AuditEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event per decision: what was decided about which bytes, never the bytes.

    ``kind`` is ``decision`` for the one event every intake message gets, and
    ``shadow`` for a sampled disagreement of a shadow contract version, which then
    carries the shadow verdict in ``shadow`` (readers counting decisions skip it).
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
    message: Message, decided: Verdict, shadow: Verdict, *, audit_topic: str, decided_at: datetime
) -> OutRecord:
    """An audit event showing a shadow version's verdict beside the deciding one."""
    event = msgspec.structs.replace(
        audit_event(decided, message.origin, decided_at),
        kind="shadow",
        shadow={
            "contract": shadow.contract,
            "outcome": shadow.result,
            "stage": shadow.stage,
            "code": shadow.code,
        },
    )
    return OutRecord(audit_topic, message.key, _encode_audit(event), [])


def replay_count(message: Message) -> int:
    """How many times this message has been replayed from the quarantine (0 if never)."""
    for name, value in message.headers:
        if name == "tg-replay-count":
            try:
                return max(0, int(value or b"0"))
            except ValueError:
                return 0
    return 0


def outputs(
    message: Message,
    verdict: Verdict,
    *,
    agent_topic: str,
    quarantine_topic: str,
    audit_topic: str,
    decided_at: datetime,
    max_record_bytes: int = 1024 * 1024,
) -> list[OutRecord]:
    """The records one decision produces: agent always, quarantine when rejected, audit always."""
    records = [OutRecord(agent_topic, message.key, verdict.agent, [])]
    if not verdict.accepted:
        records.append(quarantine_record(message, verdict, quarantine_topic, decided_at, max_record_bytes))
    event = audit_event(verdict, message.origin, decided_at)
    records.append(OutRecord(audit_topic, message.key, _encode_audit(event), []))
    return records


def quarantine_record(
    message: Message, verdict: Verdict, topic: str, decided_at: datetime, max_record_bytes: int
) -> OutRecord:
    """The dead-letter record of a rejected message."""
    diagnostics = verdict.diagnostics
    detail = json.dumps(
        msgspec.to_builtins(diagnostics) if diagnostics is not None else {},
        ensure_ascii=True,
        separators=(",", ":"),
    )
    headers = [(name, value) for name, value in message.headers if name not in DIAGNOSTIC_HEADERS]
    headers += [
        ("tg-error-stage", (verdict.stage or "").encode()),
        ("tg-error-code", (verdict.code or "").encode()),
        ("tg-error-detail", detail.encode()),
        ("tg-origin", message.origin.encode()),
        ("tg-raw-sha256", verdict.raw_sha256.encode()),
        ("tg-contract", (verdict.contract or "").encode()),
        ("tg-worker-version", __version__.encode()),
        ("tg-rejected-at", decided_at.isoformat().encode()),
        ("tg-replay-count", str(replay_count(message)).encode()),
    ]
    value = message.value
    budget = max_record_bytes - _QUARANTINE_HEADROOM - sum(len(n) + len(v or b"") for n, v in headers)
    if value is not None and len(value) > budget:
        headers.append(("tg-truncated", str(len(value)).encode()))
        value = value[: max(budget, 0)]
    return OutRecord(topic, message.key, value, headers)
