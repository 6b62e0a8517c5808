"""A batch of intake messages to the records of its transaction, without a broker."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from toolgate._config import Topics
from toolgate.gate._batch import AcceptedView, ShadowSampler, decide_batch
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._outputs import outputs
from toolgate.gate._records import Message, RequestRecord

from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, message, review_request, review_value

TOPICS = Topics(agent="a", quarantine="q", audit="au")


def decide(
    gate: Gate,
    messages: list[Message],
    requests: dict[str, RequestRecord],
    accepted: set[tuple[str, int]] | None = None,
) -> Any:
    known = accepted or set()
    return decide_batch(
        gate,
        messages,
        requests.get,
        AcceptedView(lambda r, a: (r, a) in known),
        NOW,
        topics=TOPICS,
        max_record_bytes=1 << 20,
    )


class TestDecideBatch:
    def test_records_per_decision(self, gate: Gate) -> None:
        """Accepted results write agent and audit; rejected ones agent, quarantine and audit."""
        # the rejected one answers another request: an answered attempt gets no second envelope
        batch = decide(
            gate,
            [message(), message(review_value(admin_override=True), key=b"req.other")],
            {REQUEST_ID: review_request()},
        )
        assert [r.topic for r in batch.records] == ["a", "au", "a", "q", "au"]
        assert batch.accepted == {(REQUEST_ID, 1)}

    def test_second_result_in_same_batch_is_duplicate(self, gate: Gate) -> None:
        """Two results for one attempt in a batch: the first is accepted, the second is a duplicate."""
        batch = decide(gate, [message(), message()], {REQUEST_ID: review_request()})
        codes = [d.verdict.code for d in batch.decisions]
        assert codes == [None, "DUPLICATE_RESULT"]

    def test_ledger_from_earlier_batches(self, gate: Gate) -> None:
        """A result for an attempt accepted in an earlier transaction is a duplicate."""
        batch = decide(gate, [message()], {REQUEST_ID: review_request()}, {(REQUEST_ID, 1)})
        assert batch.decisions[0].verdict.code == "DUPLICATE_RESULT"
        assert batch.accepted == set()

    def test_raising_gate_quarantines_and_goes_on(self, gate: Gate) -> None:
        """A message whose evaluation raises is INTERNAL_ERROR, quarantined, and the batch goes on."""

        class Exploding(Gate):
            def evaluate(self, message: Message, *args: Any, **kwargs: Any) -> Any:
                if message.key == b"boom":
                    raise RuntimeError("boom")
                return super().evaluate(message, *args, **kwargs)

        exploding = Exploding(gate.contracts, gate.keyring)
        batch = decide(exploding, [message(key=b"boom"), message()], {REQUEST_ID: review_request()})
        first, second = batch.decisions
        assert (first.verdict.stage, first.verdict.code) == ("project", "INTERNAL_ERROR")
        assert second.verdict.accepted
        quarantined = [r for r in batch.records if r.topic == "q"]
        assert len(quarantined) == 1
        assert dict(quarantined[0].headers)["tg-error-code"] == b"INTERNAL_ERROR"
        agent = json.loads(batch.records[0].value or b"")
        assert agent["error"] == {"code": "INVALID_RESPONSE", "retryable": False}

    def test_records_that_cannot_be_built_are_an_internal_error(self, gate: Gate) -> None:
        """A verdict whose records cannot be encoded becomes INTERNAL_ERROR, with its records."""

        class Unencodable(Gate):
            def evaluate(self, message: Message, *args: Any, **kwargs: Any) -> Any:
                verdict = super().evaluate(message, *args, **kwargs)
                return msgspec.structs.replace(verdict, request_id="\ud800")  # no UTF-8 form

        unencodable = Unencodable(gate.contracts, gate.keyring)
        batch = decide(unencodable, [message()], {REQUEST_ID: review_request()})
        (decision,) = batch.decisions
        assert (decision.verdict.stage, decision.verdict.code) == ("project", "INTERNAL_ERROR")
        assert [r.topic for r in batch.records] == ["a", "q", "au"]
        audit = json.loads(batch.records[-1].value or b"")
        assert (audit["code"], audit["request_id"]) == ("INTERNAL_ERROR", None)
        assert batch.accepted == frozenset()

    def test_missing_request_is_unknown(self, gate: Gate) -> None:
        """With no request record known, the result is UNKNOWN_REQUEST."""
        batch = decide(gate, [message()], {})
        assert batch.decisions[0].verdict.code == "UNKNOWN_REQUEST"


def shadow_gate(tmp_path: Path, gate: Gate) -> Gate:
    """review_status v1 (active) and a v2 shadow that also allows a `comment` field."""
    source = CONTRACTS / "review_status" / "v1"
    for version, status in ((1, "active"), (2, "shadow")):
        folder = tmp_path / "review_status" / f"v{version}"
        shutil.copytree(source, folder)
        spec = (folder / "contract.yaml").read_text()
        spec = spec.replace("version: 1", f"version: {version}").replace(
            "status: active", f"status: {status}"
        )
        (folder / "contract.yaml").write_text(spec)
        if version == 2:
            schema = json.loads((folder / "schema.json").read_text())
            schema["$defs"]["reviewStatus"]["properties"]["comment"] = {"type": "string", "maxLength": 200}
            (folder / "schema.json").write_text(json.dumps(schema))
    return Gate(ContractSet.load(tmp_path), gate.keyring)


class TestRequestsBehind:
    """Which rejections a newer request record could change: those naming a later attempt."""

    @pytest.mark.parametrize(
        ("header", "held", "behind"),
        [
            (("tg-attempt", "2"), 1, True),  # attempt 2's result, attempt 1 held
            (("TG-Attempt", "3"), 1, True),  # header names are not case-sensitive
            (("tg-attempt", "1"), 2, False),  # an earlier attempt: stale, whatever is read
            (("tg-attempt", "2"), 2, False),  # accepted
            (("tg-attempt", "²"), 1, False),  # not an attempt number: HEADER_MISMATCH
            (("tg-attempt", "99999"), 1, False),  # longer than an attempt number
            (None, 1, False),  # no header: the held attempt
        ],
    )
    def test_a_later_attempt_than_the_held_request(
        self, gate: Gate, header: tuple[str, str] | None, held: int, behind: bool
    ) -> None:
        base = message()
        extra = [] if header is None else [(header[0], header[1].encode())]
        result = Message(key=base.key, value=base.value, headers=[*base.headers, *extra])
        batch = decide(gate, [result], {REQUEST_ID: review_request(attempt=held)})
        assert bool(batch.requests_behind) is behind

    def test_a_missing_request_is_not_behind_here(self, gate: Gate) -> None:
        """UNKNOWN_REQUEST: the worker's wait before deciding covers it, not this list."""
        batch = decide(gate, [message(tg_attempt="2")], {})
        assert [d.verdict.code for d in batch.decisions] == ["UNKNOWN_REQUEST"]
        assert batch.requests_behind == []


class TestShadow:
    def test_disagreement_counted_and_sampled(self, tmp_path: Path, gate: Gate) -> None:
        """A shadow verdict that differs is reported and audited; the active version still decides."""
        shadowed = shadow_gate(tmp_path, gate)
        batch = decide(
            shadowed, [message(review_value(comment="looks good"))], {REQUEST_ID: review_request()}
        )
        decision = batch.decisions[0].verdict
        assert (decision.contract, decision.code) == ("review_status@v1", "SCHEMA_VIOLATION")
        assert [(d.tool, d.version, d.sampled) for d in batch.disagreements] == [("review_status", "2", True)]
        events = [json.loads(r.value or b"") for r in batch.records if r.topic == "au"]
        shadow = [e for e in events if e["kind"] == "shadow"]
        assert len(shadow) == 1
        assert shadow[0]["shadow"]["contract"] == "review_status@v2"
        assert shadow[0]["shadow"]["outcome"] == "success"
        assert shadow[0]["code"] == "SCHEMA_VIOLATION"
        assert [r.topic for r in batch.records].count("a") == 1  # the shadow never writes to agents

    def test_agreement_is_silent(self, tmp_path: Path, gate: Gate) -> None:
        """When both versions agree nothing extra is written."""
        batch = decide(shadow_gate(tmp_path, gate), [message()], {REQUEST_ID: review_request()})
        assert batch.disagreements == []
        assert batch.decisions[0].verdict.accepted

    def test_sampling_bounds_audit_events(self) -> None:
        """The sampler lets per_minute events through per contract per minute."""
        sampler = ShadowSampler(per_minute=2)
        taken = [sampler.take("t@v2", NOW) for _ in range(4)]
        assert taken == [True, True, False, False]
        assert sampler.take("t@v2", NOW + timedelta(seconds=61))
        assert sampler.take("other@v2", NOW)


class TestOneAnswerPerAttempt:
    """A rejected result for an attempt that already has its answer writes no agent envelope."""

    def test_duplicate_in_batch_gets_no_envelope(self, gate: Gate) -> None:
        """Success then the same success: agent once; the duplicate to quarantine and audit only."""
        batch = decide(gate, [message(), message()], {REQUEST_ID: review_request()})
        assert [r.topic for r in batch.records] == ["a", "au", "q", "au"]
        second = json.loads(batch.records[-1].value or b"")
        assert (second["code"], second["envelope"]) == ("DUPLICATE_RESULT", False)

    def test_answered_in_an_earlier_transaction(self, gate: Gate) -> None:
        """The ledger says answered: a malformed resend is quarantined without an envelope."""
        batch = decide(gate, [message(raw=b"{oops")], {REQUEST_ID: review_request()}, {(REQUEST_ID, 1)})
        assert [r.topic for r in batch.records] == ["q", "au"]

    def test_rejection_before_the_answer_keeps_its_envelope(self, gate: Gate) -> None:
        """Rejected first, then accepted: both envelopes, in that order."""
        batch = decide(
            gate, [message(review_value(admin_override=True)), message()], {REQUEST_ID: review_request()}
        )
        assert [r.topic for r in batch.records] == ["a", "q", "au", "a", "au"]

    def test_another_attempt_is_not_answered(self, gate: Gate) -> None:
        """Attempt 1 answered, the request now at attempt 2: a rejection for it reaches the agent."""
        batch = decide(
            gate,
            [message(raw=b"{oops")],
            {REQUEST_ID: review_request(attempt=2)},
            {(REQUEST_ID, 1)},
        )
        assert [r.topic for r in batch.records] == ["a", "q", "au"]

    def test_an_accepted_verdict_always_has_its_envelope(self, gate: Gate) -> None:
        """outputs() refuses to drop the envelope of an accepted result."""
        verdict = gate.evaluate(message(), review_request(), NOW)
        with pytest.raises(ValueError, match="always has its agent envelope"):
            outputs(message(), verdict, agent_topic="a", quarantine_topic="q", audit_topic="au",
                    decided_at=NOW, attempt_has_answer=True)  # fmt: skip
