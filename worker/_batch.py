"""One batch of intake messages to the records its transaction must write. Pure: no Kafka.

The Kafka loop (:mod:`worker._service`) reads a batch, calls :func:`decide_batch`,
and sends what it returns plus the offset in one transaction. Deciding before the
transaction opens keeps transactions short, and keeps this logic testable with
plain lists.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from worker._config import Topics
from worker._gate import Gate
from worker._outputs import OutRecord, outputs, replay_count
from worker._project import failure
from worker._records import Diagnostics, Message, RequestRecord, Verdict
from worker._rules import Ledger

Lookup = Callable[[str], RequestRecord | None]


@dataclass(frozen=True, slots=True)
class Decision:
    """One message's verdict and what the metrics need about it."""

    verdict: Verdict
    size: int
    seconds: float
    replays: int


@dataclass(slots=True)
class Batch:
    """A decided batch: the records to send and the acceptances to remember after commit."""

    decisions: list[Decision] = field(default_factory=list)
    records: list[OutRecord] = field(default_factory=list)
    accepted: set[tuple[str, int]] = field(default_factory=set)


def request_key(key: bytes | None) -> str:
    """The request id a Kafka key names ('' when it is not text)."""
    if key is None:
        return ""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def internal_error(message: Message, where: str) -> Verdict:
    """The verdict for a message whose evaluation raised outside the gate's own guard."""
    agent = msgspec.json.encode(failure(None, None, "INVALID_RESPONSE", False))
    return Verdict(
        accepted=False, outcome="failure", tool=None, request_id=None, contract=None,
        stage="project", code="INTERNAL_ERROR", attempt=None, agent=agent,
        raw_sha256=hashlib.sha256(message.value or b"").hexdigest(),
        diagnostics=Diagnostics(stage="project", code="INTERNAL_ERROR",
                                message=f"evaluation raised in {where}"))


def decide_batch(gate: Gate, messages: Sequence[Message], lookup: Lookup, ledger: Ledger,
                 now: datetime, *, topics: Topics, max_record_bytes: int) -> Batch:
    """Decide every message; a second result for an attempt in the same batch is a duplicate."""
    batch = Batch()
    accepted = batch.accepted

    def seen(request_id: str, attempt: int) -> bool:
        return (request_id, attempt) in accepted or ledger(request_id, attempt)

    for message in messages:
        started = time.perf_counter()
        try:
            verdict = gate.evaluate(message, lookup(request_key(message.key)), now, seen)
        except Exception:  # the gate guards its stages; this guards the guard
            verdict = internal_error(message, "the gate")
        seconds = time.perf_counter() - started
        try:
            records = outputs(message, verdict, agent_topic=topics.agent,
                              quarantine_topic=topics.quarantine, audit_topic=topics.audit,
                              decided_at=now, max_record_bytes=max_record_bytes)
        except Exception:
            verdict = internal_error(message, "building the output records")
            records = outputs(message, verdict, agent_topic=topics.agent,
                              quarantine_topic=topics.quarantine, audit_topic=topics.audit,
                              decided_at=now, max_record_bytes=max_record_bytes)
        if verdict.accepted and verdict.request_id and verdict.attempt is not None:
            accepted.add((verdict.request_id, verdict.attempt))
        batch.records.extend(records)
        batch.decisions.append(Decision(verdict, len(message.value or b""), seconds,
                                        replay_count(message)))
    return batch
