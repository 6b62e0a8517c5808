"""The MCP proxy decides in process (``toolgate mcp-proxy``'s default, ``--decide proxy``).

The proxy holds everything a decision needs: the reviewed contract (the same
:class:`~toolgate.gate.ContractSet` the workers load), the request it issued, the result as
it came on the wire, and the pure :class:`~toolgate.gate.Gate`. So it decides the result
itself with :func:`~toolgate.gate.decide_batch` (a batch of one: the same stages, shadows,
codes, projection and envelope as a worker) and writes what a worker's transaction writes
for it: the agent envelope, the quarantine record of a rejection (the raw result and its
intake headers, which ``toolgate replay`` republishes to intake for the workers), the audit
event (a shadow version's disagreement too), with the request record itself (no one reads
it before the decision exists). Each record goes through the client's idempotent producer
with ``acks=all``, all at once, and the host is answered only once the broker acknowledged
every one: a call answered has its records.

Keyed as a worker keys them (the request id), they carry ``tg-origin`` /
the audit event's ``origin`` ``mcp-proxy:<server>`` where a worker's name an intake offset:
that marks a decision made in a proxy. Nothing goes to intake: a record there is a worker's
to decide, and a proxy-decided one would be decided twice.

What keeps one accepted answer per attempt beside the workers' ledger (docs/design.md,
"Exactly once on the proxy path"): one result per attempt by construction (the proxy calls
the upstream once per attempt), and an accepted attempt is written into the request record
itself (``answered``, acknowledged with the decision's records), which the workers read on
the requests topic as they read every request: a later result for that attempt, from anyone,
is ``DUPLICATE_RESULT`` and gets no agent envelope, as on the workers' own path. A rejected
answer leaves the request as issued until its expiry, so that its quarantined result can be
replayed through the workers and decided there.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toolgate._config import Topics
from toolgate.client import Answer, Request, Signer, answer_of, result_record
from toolgate.gate import ContractSet, Gate, Keyring, Message, RequestRecord, Verdict, decide_batch
from toolgate.gate._batch import AcceptedView, ShadowSampler
from toolgate.gate._outputs import OutRecord
from toolgate.gate._records import CONTRACT_GENERATION_HEADER

_log = logging.getLogger("toolgate.mcp_proxy")

# The origin a proxy's decision records name where a worker's name an intake offset.
ORIGIN_PREFIX = "mcp-proxy:"
# The largest record the decision writes (a quarantine record keeps the first bytes of a
# longer result, as a worker's does): the producer's default max.request.size.
MAX_RECORD_BYTES = 1024 * 1024


def generation_headers(contracts: ContractSet) -> list[tuple[str, bytes]]:
    """``tg-contract-generation``: the generation of the set the proxy decides with (none for
    an unordered set, generation 0: a folder that names none)."""
    if not contracts.generation:
        return []
    return [(CONTRACT_GENERATION_HEADER, str(contracts.generation).encode())]


def _nothing_accepted(_request_id: str, _attempt: int) -> bool:
    """A proxy's attempt has one result: nothing was accepted for it before."""
    return False


def retries(answer: Answer, request: Request) -> bool:
    """Whether ``answer`` sends the call to its next attempt: a retryable failure with
    attempts left (the proxy's two ways of deciding alike)."""
    return answer.outcome == "failure" and answer.retryable and request.attempt < request.max_attempts


def request_record(request: Request) -> RequestRecord:
    """The request record the workers would look up for ``request`` (as issued)."""
    return RequestRecord(
        request_id=request.request_id,
        tool=request.tool,
        issued_at=request.issued_at,
        expires_at=request.expires_at,
        bind=dict(request.bind),
        attempt=request.attempt,
        max_attempts=request.max_attempts,
        answered=request.answered,
    )


@dataclass(frozen=True, slots=True)
class Decided:
    """One result decided in process: the verdict, the host's answer, the records to write."""

    verdict: Verdict
    answer: Answer
    records: list[OutRecord]


class Decider:
    """Decides results in process with the workers' gate over the proxy's contract set."""

    def __init__(
        self,
        server: str,
        contracts: ContractSet,
        keyring: Keyring | None,
        topics: Topics,
        *,
        clock: Callable[[], datetime] | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        self.gate = Gate(contracts, keyring)
        self.topics = topics
        self.origin = f"{ORIGIN_PREFIX}{server}"
        self.clock = clock or (lambda: datetime.now(UTC))
        self.max_record_bytes = max_record_bytes
        self.sampler = ShadowSampler()
        # The generation this proxy decides with, on the records it writes as an issuer (the
        # request record; the intake headers a quarantined result replays with), so a worker
        # whose set is behind catches up first (DESIGN: tg-contract-generation).
        self.generation = generation_headers(contracts)

    def using(self, contracts: ContractSet) -> Decider:
        """This decider over another contract set (the one the proxy's source moved to): the
        same origin, topics, clock and shadow sampler; a call in flight keeps the one it began with."""
        other = copy.copy(self)
        other.gate = Gate(contracts, self.gate.keyring)
        other.generation = generation_headers(contracts)
        return other

    def decide(
        self,
        request: Request,
        raw: bytes | Mapping[str, Any],
        *,
        adapter_version: str,
        adapter: str | None,
        signer: Signer | None,
        source: str,
        traceparent: str | None,
        tracestate: str | None,
    ) -> Decided:
        """Decide one result for ``request``'s current attempt, as a worker would decide the
        intake record :meth:`toolgate.client.Client.publish_result` would have written."""
        value, headers = result_record(
            request.request_id,
            request.attempt,
            raw,
            tool=request.tool,
            adapter_version=adapter_version,
            adapter=adapter,
            signer=signer,
            source=source,
            traceparent=traceparent,
            tracestate=tracestate,
        )
        return self.decide_message(
            Message(
                key=request.request_id.encode(),
                value=value,
                headers=[*headers, *self.generation],
                origin=self.origin,
            ),
            request_record(request),
        )

    def decide_message(self, message: Message, request: RequestRecord) -> Decided:
        """Decide ``message`` against ``request`` (pure: the clock is the only input besides)."""
        rid = request.request_id

        def lookup(key: str) -> RequestRecord | None:
            return request if key == rid else None

        batch = decide_batch(
            self.gate,
            [message],
            lookup,
            AcceptedView(_nothing_accepted),
            self.clock(),
            topics=self.topics,
            max_record_bytes=self.max_record_bytes,
            sampler=self.sampler,
            keys=[rid],
        )
        verdict = batch.decisions[0].verdict
        records = batch.records  # each stamped tg-contract-set by decide_batch
        answer = answer_of(rid, verdict.agent, _agent_headers(records, self.topics.agent))
        if answer is None:  # the gate's envelope always decodes; an answer must not be guessed
            raise AssertionError(f"the gate's envelope for {rid} is not an agent envelope")
        return Decided(verdict, answer, records)


def _agent_headers(records: Sequence[OutRecord], agent_topic: str) -> Sequence[tuple[str, bytes]]:
    for record in records:
        if record.topic == agent_topic:
            return record.headers
    return ()


Write = tuple[str, bytes | None, bytes | None, Sequence[tuple[str, bytes]]]


def decision_writes(
    requests_topic: str, request: Request, decided: Decided, generation: Sequence[tuple[str, bytes]]
) -> list[Write]:
    """What one decision writes, in one round of sends: the request record (``request`` as the
    decision left it: marked ``answered`` when accepted; with the ``generation`` headers of the
    set that decided it) on ``requests_topic``, then the decision's records (envelope,
    quarantine, audit). No one reads the request record before the decision exists (the proxy
    decides), so it goes with it: one acknowledged round trip per call instead of two."""
    return [
        (requests_topic, request.request_id.encode(), request.record(), generation),
        *((r.topic, r.key, r.value, r.headers) for r in decided.records),
    ]
