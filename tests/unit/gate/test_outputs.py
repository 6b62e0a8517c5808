"""What one decision writes, without a broker: agent, quarantine and audit records."""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from typing import TypedDict

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from toolgate.gate._gate import Gate
from toolgate.gate._outputs import DIAGNOSTIC_HEADERS, error_detail, outputs, quarantine_record, replay_count
from toolgate.gate._records import Diagnostics, Origin

from tests.properties import DERANDOMIZED
from tests.unit.builders import NOW, message, review_request, review_value


class _Topics(TypedDict):
    agent_topic: str
    quarantine_topic: str
    audit_topic: str


TOPICS: _Topics = {"agent_topic": "a", "quarantine_topic": "q", "audit_topic": "au"}


class TestOutputs:
    def test_accepted_writes_agent_and_audit(self, gate: Gate) -> None:
        """An accepted result writes the agent envelope and one audit event, no quarantine."""
        msg = message()
        verdict = gate.evaluate(msg, review_request(), NOW)
        records = outputs(msg, verdict, decided_at=NOW, **TOPICS)
        assert [r.topic for r in records] == ["a", "au"]
        assert records[0].value == verdict.agent
        assert records[0].key == msg.key
        audit = json.loads(records[1].value or b"")
        assert audit["outcome"] == "success"
        assert audit["raw_sha256"] == verdict.raw_sha256
        assert audit["projected_sha256"] == verdict.projected_sha256

    def test_rejected_writes_quarantine_with_original(self, gate: Gate) -> None:
        """A rejection keeps the original key, bytes and headers and adds the diagnosis."""
        msg = message(review_value(admin_override=True))
        verdict = gate.evaluate(msg, review_request(), NOW)
        _agent, quarantine, audit = outputs(msg, verdict, decided_at=NOW, **TOPICS)
        assert quarantine.topic == "q"
        assert quarantine.value == msg.value
        assert quarantine.key == msg.key
        headers = dict(quarantine.headers)
        for name, value in msg.headers:
            assert headers[name] == value
        assert headers["tg-error-stage"] == b"schema"
        assert headers["tg-error-code"] == b"SCHEMA_VIOLATION"
        assert json.loads(headers["tg-error-detail"])["keyword"] == "additionalProperties"
        assert headers["tg-contract"] == b"review_status@v1"
        assert json.loads(audit.value or b"")["code"] == "SCHEMA_VIOLATION"
        assert b"admin_override" not in (audit.value or b"")

    def test_forged_diagnostics_are_dropped(self, gate: Gate) -> None:
        """An adapter cannot forge the diagnosis operators read."""
        msg = message(review_value(admin_override=True), tg_error_code="OK")
        verdict = gate.evaluate(msg, review_request(), NOW)
        quarantine = outputs(msg, verdict, decided_at=NOW, **TOPICS)[1]
        codes = [v for n, v in quarantine.headers if n == "tg-error-code"]
        assert codes == [b"SCHEMA_VIOLATION"]
        assert "tg-error-code" in DIAGNOSTIC_HEADERS

    def test_oversize_quarantine_is_truncated_with_digest(self, gate: Gate) -> None:
        """A record too large for the broker keeps its first bytes, its length and its digest."""
        msg = message(raw=b"x" * 300_000, tool="nope")
        verdict = gate.evaluate(msg, review_request(), NOW)
        quarantine = outputs(msg, verdict, decided_at=NOW, max_record_bytes=200_000, **TOPICS)[1]
        headers = dict(quarantine.headers)
        assert headers["tg-truncated"] == b"300000"
        assert len(quarantine.value or b"") < 200_000
        assert headers["tg-raw-sha256"].decode() == verdict.raw_sha256

    def test_replay_count(self) -> None:
        """The replay count comes from tg-replay-count, 0 when absent or garbled."""
        assert replay_count(message()) == 0
        assert replay_count(message(tg_replay_count="2")) == 2
        assert replay_count(message(tg_replay_count="x")) == 0

    def test_replay_count_name_in_any_case(self) -> None:
        """tg-replay-count is found in any case spelling, and a longer or other name is not it."""
        base = message()
        for name, expected in [("TG-Replay-Count", 3), ("tg-replay-count-x", 0), ("x-replay-count", 0)]:
            found = replay_count(msgspec.structs.replace(base, headers=[*base.headers, (name, b"3")]))
            assert found == expected, name

    def test_audit_is_json_with_fixed_fields(self, gate: Gate) -> None:
        """The audit event decodes as JSON with the fields of docs/design.md (Messages)."""
        msg = message()
        audit = outputs(msg, gate.evaluate(msg, review_request(), NOW), decided_at=NOW, **TOPICS)[-1]
        event = msgspec.json.decode(audit.value or b"")
        assert set(event) >= {
            "request_id",
            "tool",
            "adapter",
            "adapter_version",
            "source",
            "contract",
            "outcome",
            "stage",
            "code",
            "raw_sha256",
            "projected_sha256",
            "origin",
            "decided_at",
            "worker_version",
        }


class TestConnectHeaders:
    def test_quarantine_carries_connect_dead_letter_headers(self, gate: Gate) -> None:
        """Kafka Connect's __connect.errors.* headers mirror the tg-* diagnosis."""
        msg = msgspec.structs.replace(
            message(review_value(admin_override=True)), origin=Origin("toolgate.intake", 2, 4711)
        )
        verdict = gate.evaluate(msg, review_request(), NOW)
        quarantine = outputs(msg, verdict, decided_at=NOW, **TOPICS)[1]
        headers = dict(quarantine.headers)
        assert headers["__connect.errors.topic"] == b"toolgate.intake"
        assert headers["__connect.errors.partition"] == b"2"
        assert headers["__connect.errors.offset"] == b"4711"
        assert headers["__connect.errors.stage"] == headers["tg-error-stage"] == b"schema"
        assert headers["__connect.errors.exception.class.name"] == headers["tg-error-code"]
        detail = json.loads(headers["tg-error-detail"])
        assert headers["__connect.errors.exception.message"] == detail["message"].encode()
        assert headers["__connect.errors.class.name"] == b"toolgate.gate.Gate"

    def test_forged_connect_headers_are_dropped(self, gate: Gate) -> None:
        """An adapter's own __connect.errors.* headers never reach the quarantine record."""
        base = message(review_value(admin_override=True))
        msg = msgspec.structs.replace(
            base, headers=[*base.headers, ("__connect.errors.stage", b"none")], origin="toolgate.intake/0/1"
        )
        verdict = gate.evaluate(msg, review_request(), NOW)
        quarantine = outputs(msg, verdict, decided_at=NOW, **TOPICS)[1]
        stages = [v for n, v in quarantine.headers if n == "__connect.errors.stage"]
        assert stages == [b"schema"]

    def test_names_remembered_keep_and_drop_as_the_first_time(self, gate: Gate) -> None:
        """A header name seen before is kept or dropped as when first seen, in any case spelling."""
        base = message(review_value(admin_override=True))
        forged = [("TG-Error-Code", b"NONE"), ("__Connect.Errors.Stage", b"none"), ("x-kept", b"1")]
        msg = msgspec.structs.replace(base, headers=[*base.headers, *forged], origin="toolgate.intake/0/1")
        verdict = gate.evaluate(msg, review_request(), NOW)
        first, second = (outputs(msg, verdict, decided_at=NOW, **TOPICS)[1] for _ in range(2))
        assert first == second
        names = [n for n, _ in second.headers]
        assert "x-kept" in names
        assert "TG-Error-Code" not in names
        assert "__Connect.Errors.Stage" not in names
        assert dict(second.headers)["tg-error-code"] == b"SCHEMA_VIOLATION"

    def test_origin_that_is_not_topic_partition_offset(self, gate: Gate) -> None:
        """An origin of another shape (offline check) gives empty coordinates, never a guess."""
        msg = msgspec.structs.replace(message(review_value(admin_override=True)), origin="file.json")
        verdict = gate.evaluate(msg, review_request(), NOW)
        headers = dict(outputs(msg, verdict, decided_at=NOW, **TOPICS)[1].headers)
        assert headers["__connect.errors.topic"] == b""
        assert headers["__connect.errors.offset"] == b""


def dumped(diagnostics: Diagnostics | None) -> bytes:
    """tg-error-detail as the standard library writes it: the definition error_detail keeps."""
    builtins = msgspec.to_builtins(diagnostics) if diagnostics is not None else {}
    return json.dumps(builtins, ensure_ascii=True, separators=(",", ":")).encode()


class TestErrorDetail:
    """tg-error-detail is byte for byte the standard library's ensure_ascii JSON."""

    @pytest.mark.parametrize(
        "text",
        [
            "plain text",
            'a "quote"',
            "back\\slash",
            "line\nbreak",
            "tab\t",
            "nul\x00",
            "del\x7f",
            "é",
            "…",
            "😀",
            "",
        ],
    )
    def test_awkward_messages(self, text: str) -> None:
        """Quotes, backslashes, control characters, DEL and non-ASCII text (escaped) and plain
        text (written as is) come out as json.dumps writes them."""
        diagnostics = Diagnostics(stage="schema", code="SCHEMA_VIOLATION", message=text, keyword=text)
        assert error_detail(diagnostics) == dumped(diagnostics)

    def test_no_diagnostics(self) -> None:
        """A verdict without diagnostics has an empty object."""
        assert error_detail(None) == dumped(None) == b"{}"

    @DERANDOMIZED
    @given(message=st.text(), path=st.text(max_size=20))
    def test_any_text(self, message: str, path: str) -> None:
        """Any message and path text."""
        diagnostics = Diagnostics(stage="parse", code="MALFORMED_JSON", message=message, instance_path=path)
        assert error_detail(diagnostics) == dumped(diagnostics)


class TestQuarantineShortcuts:
    """What a batch hands quarantine_record (origin text, rejected_at) changes no byte."""

    def test_same_record(self, gate: Gate) -> None:
        """Given origin and rejected_at, the record equals the one computed from the message."""
        msg = msgspec.structs.replace(message(raw=b"{"), origin=Origin("intake", 2, 9))
        verdict = gate.evaluate(msg, review_request(), NOW)
        offset = NOW.astimezone(timezone(timedelta(hours=2)))  # equal instant, other text
        for decided_at in (NOW, offset):
            plain = quarantine_record(msg, verdict, "q", decided_at, 1 << 20)
            given_ = quarantine_record(
                msg,
                verdict,
                "q",
                decided_at,
                1 << 20,
                origin=str(msg.origin),
                rejected_at=decided_at.isoformat().encode(),
            )
            assert given_ == plain
            assert (b"tg-rejected-at", decided_at.isoformat().encode()) in [
                (n.encode(), v) for n, v in plain.headers
            ]
