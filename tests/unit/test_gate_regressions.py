"""Regressions: gate defects the hostile-input corpus and the fuzzers found, now fixed.

Each test states the behaviour the documented policy asks for and guards its fix.
"""

from __future__ import annotations

import json

import msgspec
import pytest
from toolgate.gate._gate import Gate

from tests.fuzzing import NOW, fuzz_gate, make_message, make_request
from tests.unit.builders import REQUEST_ID, message, review_request


@pytest.fixture(scope="module")
def gate() -> Gate:
    return fuzz_gate()


class TestAttemptHeader:
    def test_superscript_digit_is_header_mismatch(self, gate: Gate) -> None:
        """tg-attempt '²' is not a small integer: correlate/HEADER_MISMATCH, not INTERNAL_ERROR."""
        verdict = gate.evaluate(message(tg_attempt="²"), review_request(), NOW)
        assert (verdict.stage, verdict.code) == ("correlate", "HEADER_MISMATCH")

    def test_fullwidth_digit_is_header_mismatch(self, gate: Gate) -> None:
        """tg-attempt '１' (FULLWIDTH DIGIT ONE) is not the ASCII integer 1: it is refused."""
        verdict = gate.evaluate(message(tg_attempt="１"), review_request(), NOW)
        assert (verdict.stage, verdict.code) == ("correlate", "HEADER_MISMATCH")

    def test_ascii_attempt_is_accepted(self, gate: Gate) -> None:
        """tg-attempt '1' names the request's current attempt: accepted."""
        assert gate.evaluate(message(tg_attempt="1"), review_request(), NOW).accepted


class TestFreshnessTimestamps:
    def test_ten_fraction_digits_are_fresh(self, gate: Gate) -> None:
        """A fresh RFC 3339 timestamp with 10 fraction digits is accepted, not STALE_RESULT."""
        job = next(c for c in gate.contracts if c.spec.tool == "job_status")
        envelope = {
            "tool": "job_status",
            "request_id": REQUEST_ID,
            "outcome": "success",
            "data": {
                "project_id": "bluebird",
                "run_id": "run_7Hk2mQ9xLp4sTb",
                "state": "failed",
                "observed_at": "2026-05-01T11:59:30.1234567891Z",
            },
        }
        raw = json.dumps(envelope).encode()
        verdict = gate.evaluate(
            make_message(gate, job, raw, REQUEST_ID), make_request(job, REQUEST_ID, envelope, 1), NOW
        )
        assert verdict.accepted, verdict.diagnostics

    def test_nine_fraction_digits_are_fresh(self, gate: Gate) -> None:
        """A fresh RFC 3339 timestamp with 9 fraction digits is accepted."""
        job = next(c for c in gate.contracts if c.spec.tool == "job_status")
        envelope = {
            "tool": "job_status",
            "request_id": REQUEST_ID,
            "outcome": "success",
            "data": {
                "project_id": "bluebird",
                "run_id": "run_7Hk2mQ9xLp4sTb",
                "state": "failed",
                "observed_at": "2026-05-01T11:59:30.123456789Z",
            },
        }
        raw = json.dumps(envelope).encode()
        verdict = gate.evaluate(
            make_message(gate, job, raw, REQUEST_ID), make_request(job, REQUEST_ID, envelope, 1), NOW
        )
        assert verdict.accepted, verdict.diagnostics


class TestPlainIdentifier:
    def test_key_with_trailing_newline_is_not_a_plain_identifier(self, gate: Gate) -> None:
        """A Kafka key 'req.J7q94MkP\\n' is not a plain identifier: the verdict records none."""
        msg = msgspec.structs.replace(message(), key=REQUEST_ID.encode() + b"\n")
        verdict = gate.evaluate(msg, None, NOW)
        assert verdict.request_id is None
