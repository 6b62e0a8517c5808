"""One batch of intake messages to the records its transaction must write. Pure: no Kafka.

The Kafka loop (:mod:`toolgate.service._service`) reads a batch, calls :func:`decide_batch`,
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
from typing import Final

import msgspec

from toolgate._config import Topics
from toolgate._errors import RejectedInput
from toolgate.gate._cel import rejected_rule
from toolgate.gate._contracts import version_label
from toolgate.gate._gate import Gate, attempt_ahead, rejection
from toolgate.gate._outputs import OutRecord, outputs, replay_count, set_headers, shadow_record
from toolgate.gate._records import Message, RequestRecord, Verdict, request_key
from toolgate.gate._rules import Ledger
from toolgate.gate._sealing import sealer_for
from toolgate.gate._trace_context import TraceContext

Lookup = Callable[[str], RequestRecord | None]
# (message, verdict, start ns, end ns) -> the trace context of the decision's span
DecisionTracer = Callable[[Message, Verdict, int, int], TraceContext | None]


class Decision(msgspec.Struct, frozen=True, gc=False):
    """One message's verdict and what the metrics need about it.

    A msgspec struct, not a frozen dataclass: one is built per result, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``. It holds a
    verdict and numbers only (gc=False, as the verdict).
    """

    verdict: Verdict
    size: int
    seconds: float
    replays: int


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A shadow version that decided differently from the deciding version."""

    tool: str
    version: str  # major[.minor], as the metrics label it: "2", "2.1"
    sampled: bool  # an audit event was written for it
    rule: str | None = None  # the cel rule the shadow rejected with (RULE_FAILED), if any


class AcceptedView:
    """One batch's view of "already accepted": the attempts committed before the batch
    (``committed``, owned by the accepted ledger) plus those this batch accepts.

    The ledger hands one out per batch and, once the batch's transaction has committed,
    takes :attr:`pending` in; a batch that aborts is simply dropped with its view.
    """

    __slots__ = ("committed", "pending")

    def __init__(self, committed: Ledger) -> None:
        self.committed = committed
        self.pending: set[tuple[str, int]] = set()

    def __call__(self, request_id: str, attempt: int) -> bool:
        return (request_id, attempt) in self.pending or self.committed(request_id, attempt)

    def add(self, request_id: str, attempt: int) -> None:
        """This batch accepted a result for the attempt."""
        self.pending.add((request_id, attempt))


@dataclass(slots=True)
class Batch:
    """A decided batch: the records to send and the view of what it accepted."""

    view: AcceptedView
    decisions: list[Decision] = field(default_factory=list)
    records: list[OutRecord] = field(default_factory=list)
    disagreements: list[Disagreement] = field(default_factory=list)
    # Messages rejected as an unknown tool or version, or because the set is behind the
    # generation they name: the worker catches up on its contracts and decides again.
    behind: list[Message] = field(default_factory=list)
    # Messages rejected while they name a later attempt than the request record this worker
    # holds: the requests topic may hold the newer record; the worker reads on, decides again.
    requests_behind: list[Message] = field(default_factory=list)

    @property
    def accepted(self) -> frozenset[tuple[str, int]]:
        """The (request id, attempt) pairs this batch accepted."""
        return frozenset(self.view.pending)


class ShadowSampler:
    """Bounds the shadow audit events: at most ``per_minute`` per contract version.

    Every disagreement is counted in metrics; only a sample is written to the audit
    topic, so a shadow version that disagrees with everything cannot flood it.
    """

    __slots__ = ("_windows", "per_minute")

    def __init__(self, per_minute: int = 60) -> None:
        self.per_minute = per_minute
        self._windows: dict[str, tuple[datetime, int]] = {}

    def take(self, contract: str, now: datetime) -> bool:
        """True when one more audit event may be written for ``contract`` at ``now``."""
        start, count = self._windows.get(contract, (now, 0))
        if (now - start).total_seconds() >= 60:
            start, count = now, 0
        if count >= self.per_minute:
            self._windows[contract] = (start, count)
            return False
        self._windows[contract] = (start, count + 1)
        return True


def internal_error(message: Message, where: str) -> Verdict:
    """The verdict for a message whose evaluation raised outside the gate's own guard."""
    return rejection(
        RejectedInput("project", "INTERNAL_ERROR", f"evaluation raised in {where}"),
        digest=hashlib.sha256(message.value or b"").hexdigest(),
    )


CATCH_UP_CODES: Final = frozenset({"UNKNOWN_TOOL", "UNKNOWN_CONTRACT_VERSION", "CONTRACTS_BEHIND"})
"""Rejections that may be the worker's set being behind, not the result being wrong."""


def decide_batch(
    gate: Gate,
    messages: Sequence[Message],
    lookup: Lookup,
    accepted: AcceptedView,
    now: datetime,
    *,
    topics: Topics,
    max_record_bytes: int,
    sampler: ShadowSampler | None = None,
    tracer: DecisionTracer | None = None,
    keys: Sequence[str] | None = None,
) -> Batch:
    """Decide every message; a second result for an attempt in the same batch is a duplicate.

    ``tracer`` (tracing on: :mod:`toolgate.service._otel_spans`) makes each decision's span
    and returns the trace context the output records carry; None costs nothing.
    ``accepted`` is the batch's view of the accepted ledger: it answers "already
    accepted" for the gate and collects this batch's acceptances.
    ``keys``: :func:`~toolgate.gate._records.request_key` of each message, when the
    caller has read them already (the worker, to wait for their requests); else each
    is read here, once per message, and handed to the gate and the shadows.

    Shadow contract versions matching a message are evaluated beside the deciding one
    (same request, clock and ledger) and never decide; disagreements are reported in
    :attr:`Batch.disagreements` and sampled into the audit topic.
    """
    batch = Batch(accepted)
    sampler = sampler or ShadowSampler()
    # Only a tool with a shadow version needs the shadow check (ContractSet.shadows).
    shadowed = frozenset(c.spec.tool for c in gate.contracts if c.spec.status == "shadow")
    contract_set = set_headers(gate.contracts.label)
    # What every decision's records share, bound once per batch: as locals passed by name
    # (a functools.partial holding keywords merges them into a new dict on every call).
    agent_topic, quarantine_topic, audit_topic = topics.agent, topics.quarantine, topics.audit
    rejected_at = now.isoformat().encode()
    sealer = sealer_for(gate.keyring)  # the quarantine at rest (gate/_sealing.py)

    def write(
        message: Message,
        verdict: Verdict,
        *,
        trace: TraceContext | None,
        replays: int,
        attempt_has_answer: bool = False,
    ) -> list[OutRecord]:
        return outputs(
            message,
            verdict,
            agent_topic=agent_topic,
            quarantine_topic=quarantine_topic,
            audit_topic=audit_topic,
            decided_at=now,
            max_record_bytes=max_record_bytes,
            trace=trace,
            attempt_has_answer=attempt_has_answer,
            replays=replays,
            rejected_at=rejected_at,
            contract_set=contract_set,
            sealer=sealer,
        )

    for index, message in enumerate(messages):
        started = time.perf_counter()
        key = request_key(message.key) if keys is None else keys[index]
        request = lookup(key) if key else None
        try:
            verdict = gate.evaluate(message, request, now, accepted, key=key)
        except Exception:  # the gate guards its stages; this guards the guard
            verdict = internal_error(message, "the gate")
        seconds = time.perf_counter() - started
        trace = None
        if tracer is not None:
            trace = _span(tracer, message, verdict, seconds)
        if verdict.tool in shadowed:
            _shadow(gate, message, key, request, verdict, now, accepted, batch, sampler, topics, contract_set)
        replays = replay_count(message)
        try:
            has_answer = attempt_has_answer(verdict, key, request, accepted)
            records = write(message, verdict, trace=trace, attempt_has_answer=has_answer, replays=replays)
        except Exception:
            # The verdict's records cannot be built: the decision is an INTERNAL_ERROR
            # instead, whose records hold only constants and the message's own parts.
            verdict = internal_error(message, "building the output records")
            records = write(message, verdict, trace=trace, replays=replays)
        if verdict.accepted:
            if verdict.request_id and verdict.attempt is not None:
                accepted.add(verdict.request_id, verdict.attempt)
        elif verdict.code in CATCH_UP_CODES:
            batch.behind.append(message)
        elif attempt_ahead(message, request):
            batch.requests_behind.append(message)
        batch.records.extend(records)
        batch.decisions.append(Decision(verdict, len(message.value or b""), seconds, replays))
    return batch


def attempt_has_answer(verdict: Verdict, key: str, request: RequestRecord | None, seen: Ledger) -> bool:
    """Whether a rejected result is for an issued request whose attempt has its accepted answer.

    Such a result gets no agent envelope (docs/design.md, One answer per attempt): the agent
    already holds the answer to that attempt, and an ``INVALID_RESPONSE`` after it would
    contradict it. The attempt is the one the gate read (``tg-attempt``, else the request's
    current one); a result before the correlate stage is judged by the request's current
    attempt, the one the agent is waiting on.
    """
    if verdict.accepted or request is None or key != request.request_id:
        return False
    attempt = verdict.attempt if verdict.attempt is not None else request.attempt
    if request.answered and attempt == request.attempt:
        return True  # decided outside the workers (docs/design.md, Exactly once on the proxy path)
    return seen(request.request_id, attempt)


def _span(tracer: DecisionTracer, message: Message, verdict: Verdict, seconds: float) -> TraceContext | None:
    """The decision's span; a tracer that fails never changes a decision."""
    end = time.time_ns()
    try:
        return tracer(message, verdict, end - int(seconds * 1e9), end)
    except Exception:
        return None


def _shadow(
    gate: Gate,
    message: Message,
    key: str,
    request: RequestRecord | None,
    decided: Verdict,
    now: datetime,
    seen: Ledger,
    batch: Batch,
    sampler: ShadowSampler,
    topics: Topics,
    contract_set: Sequence[tuple[str, bytes]],
) -> None:
    assert decided.tool is not None
    for contract in gate.contracts.shadows(decided.tool, decided.adapter_version):
        try:
            shadow = gate.evaluate(message, request, now, seen, contract=contract, key=key)
        except Exception:
            shadow = internal_error(message, f"shadow {contract.key}")
        if (shadow.accepted, shadow.stage, shadow.code) == (decided.accepted, decided.stage, decided.code):
            continue
        sampled = sampler.take(contract.key, now)
        if sampled:
            batch.records.append(
                shadow_record(
                    message,
                    decided,
                    shadow,
                    audit_topic=topics.audit,
                    decided_at=now,
                    contract_set=contract_set,
                )
            )
        batch.disagreements.append(
            Disagreement(contract.spec.tool, version_label(contract.spec), sampled, rejected_rule(shadow))
        )
