"""A batch of intake messages to the records of its transaction, without a broker."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.builders import NOW, REQUEST_ID, message, review_request, review_value
from worker._batch import decide_batch
from worker._config import Topics
from worker._gate import Gate
from worker._records import Message, RequestRecord

TOPICS = Topics(agent="a", quarantine="q", audit="au")


def decide(gate: Gate, messages: list[Message], requests: dict[str, RequestRecord],
           accepted: set[tuple[str, int]] | None = None) -> Any:
    known = accepted or set()
    return decide_batch(gate, messages, requests.get, lambda r, a: (r, a) in known, NOW,
                        topics=TOPICS, max_record_bytes=1 << 20)


class TestDecideBatch:
    def test_records_per_decision(self, gate: Gate) -> None:
        """Accepted results write agent and audit; rejected ones agent, quarantine and audit."""
        batch = decide(gate, [message(), message(review_value(admin_override=True))],
                       {REQUEST_ID: review_request()})
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
            def evaluate(self, msg: Message, *args: Any, **kwargs: Any) -> Any:
                if msg.key == b"boom":
                    raise RuntimeError("boom")
                return super().evaluate(msg, *args, **kwargs)

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

    def test_missing_request_is_unknown(self, gate: Gate) -> None:
        """With no request record known, the result is UNKNOWN_REQUEST."""
        batch = decide(gate, [message()], {})
        assert batch.decisions[0].verdict.code == "UNKNOWN_REQUEST"
