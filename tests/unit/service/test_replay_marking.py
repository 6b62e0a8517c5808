"""Replayed decisions are marked: in the audit event, and counted apart from live traffic."""

from __future__ import annotations

import json

from prometheus_client import generate_latest
from toolgate.gate._batch import Decision
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._outputs import outputs
from toolgate.gate._records import Message
from toolgate.operations._replay import Quarantined, ReplayedAccepted
from toolgate.service._metrics import Metrics

from tests.unit.builders import CONTRACTS, NOW, message, review_request

_GATE = Gate(ContractSet.load(CONTRACTS))


def _replayed(msg: Message, count: int = 1) -> Message:
    headers = [*msg.headers, ("tg-replay-count", str(count).encode())]
    headers.append(("tg-replay-origin", b"toolgate.quarantine/0/41"))
    return Message(key=msg.key, value=msg.value, headers=headers, origin="toolgate.intake/1/9")


def _audit(msg: Message) -> dict[str, object]:
    verdict = _GATE.evaluate(msg, review_request(), NOW)
    records = outputs(msg, verdict, agent_topic="a", quarantine_topic="q", audit_topic="au", decided_at=NOW)
    (audit,) = [r for r in records if r.topic == "au"]
    return json.loads(audit.value or b"")  # type: ignore[no-any-return]


class TestAudit:
    def test_replayed_decision_names_its_replay(self) -> None:
        """A replayed result's audit event carries its replay count and the quarantine record."""
        event = _audit(_replayed(message(), 2))
        assert (event["replay"], event["replay_of"]) == (2, "toolgate.quarantine/0/41")

    def test_live_decision_is_not_a_replay(self) -> None:
        """Live traffic: replay 0, replay_of null."""
        event = _audit(message())
        assert (event["replay"], event["replay_of"]) == (0, None)


def _decision(msg: Message, replays: int) -> Decision:
    verdict = _GATE.evaluate(msg, review_request(), NOW, lambda _r, _a: True)  # already answered
    return Decision(verdict, len(msg.value or b""), 1e-5, replays)


class TestMetrics:
    def test_replays_count_apart_from_live_traffic(self) -> None:
        """A replayed DUPLICATE_RESULT counts in the replay series only; a live one in the live ones."""
        metrics = Metrics()
        metrics.decided_batch([_decision(_replayed(message()), 1), _decision(_replayed(message()), 1)])
        text = generate_latest(metrics.registry).decode()
        assert (
            "toolgate_replayed_rejections_total"
            '{code="DUPLICATE_RESULT",stage="semantic",tool="review_status"} 2.0' in text
        )
        assert 'toolgate_replayed_results_total{outcome="rejected",tool="review_status"} 2.0' in text
        assert "toolgate_rejections_total{" not in text
        assert "toolgate_results_total{" not in text
        metrics.decided_batch([_decision(message(), 0)])
        text = generate_latest(metrics.registry).decode()
        assert (
            'toolgate_rejections_total{code="DUPLICATE_RESULT",stage="semantic",tool="review_status"} 1.0'
            in text
        )
        assert 'toolgate_results_total{outcome="rejected",tool="review_status"} 1.0' in text


def _quarantined(key: bytes, sha: str) -> Quarantined:
    return Quarantined(0, 5, key, b"{}", [], {"tg-raw-sha256": sha})


class TestSkipAccepted:
    def test_accepted_replays_are_recognised(self) -> None:
        """Only an accepted replay decision of the same request and bytes marks a record as done."""
        done = ReplayedAccepted()
        base = {"request_id": "req.1", "raw_sha256": "aa", "kind": "decision"}
        done.apply(b"req.1", json.dumps({**base, "outcome": "success", "replay": 1}).encode())
        done.apply(
            b"req.2", json.dumps({**base, "request_id": "req.2", "outcome": "rejected", "replay": 1}).encode()
        )
        done.apply(
            b"req.3", json.dumps({**base, "request_id": "req.3", "outcome": "success", "replay": 0}).encode()
        )
        done.apply(b"req.4", b"not json")
        assert _quarantined(b"req.1", "aa") in done
        assert _quarantined(b"req.1", "bb") not in done  # other bytes
        assert _quarantined(b"req.2", "aa") not in done  # its replay was rejected
        assert _quarantined(b"req.3", "aa") not in done  # accepted live, not by a replay


class TestContractDifferences:
    def test_each_kind_of_difference_is_one_line(self) -> None:
        """Other digest, other status, only local, only on the worker: one line each; equal: none."""
        from toolgate.operations._replay import contract_differences

        local = {("a", "1", "active", "d1"), ("a", "1.1", "shadow", "d2"), ("b", "1", "active", "d3")}
        remote = {("a", "1", "active", "XX"), ("a", "1.1", "active", "d2"), ("c", "2", "active", "d4")}
        assert contract_differences(local, remote) == [
            "a v1: local active, digest d1; worker active, digest XX",
            "a v1.1: local shadow, digest d2; worker active, digest d2",
            "b v1: only in the local contracts (active, digest d3)",
            "c v2: only on the worker (active, digest d4)",
        ]
        assert contract_differences(local, set(local)) == []


class TestProgress:
    """replay's progress line counts records, whatever the offsets between them hold."""

    def test_reading_counts_records_not_offsets(self) -> None:
        """20 records spread over 23 offsets (3 transaction markers) end as "20 records", never "/23"."""
        import io

        from toolgate.operations._replay import Progress

        out = io.StringIO()
        progress = Progress("reading quarantine", None, out, span=23)
        for done in range(1, 21):
            progress.advance(1, position=done + done // 7)  # a marker after every 7th record
        progress.advance(0, position=23)
        progress.close()
        lines = out.getvalue().splitlines()
        assert "/23" not in out.getvalue()
        assert lines[-2].startswith("reading quarantine: 20 records, 100%")
        assert lines[-1].startswith("reading quarantine: 20 records in ")

    def test_sending_shows_records_of_the_total(self) -> None:
        """With a known number of records, the line shows done of total records."""
        import io

        from toolgate.operations._replay import Progress

        out = io.StringIO()
        progress = Progress("replaying", 4, out)
        for _ in range(4):
            progress.advance()
        progress.close()
        assert "replaying: 4/4 records, 100%" in out.getvalue()
        assert out.getvalue().splitlines()[-1].startswith("replaying: 4 records in ")
