"""Properties of the gate over arbitrary input: it never crashes and never leaks."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolgate.gate._gate import STAGES, Gate

from tests.properties import json_values
from tests.unit.builders import NOW, REQUEST_ID, message, review_request, review_value

CANARY = "CANARY-7f3a"
_settings = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def assert_well_formed(verdict: Any) -> None:
    agent = json.loads(verdict.agent)
    assert agent["outcome"] in ("success", "failure")
    if not verdict.accepted:
        assert verdict.stage in STAGES
        assert agent["error"] == {"code": "INVALID_RESPONSE", "retryable": False}


class TestNeverCrashes:
    @_settings
    @given(raw=st.binary(max_size=300))
    def test_arbitrary_bytes(self, gate: Gate, raw: bytes) -> None:
        """Any bytes at all give a verdict, and a non-JSON one is rejected."""
        for tool in gate.contracts.tools:
            verdict = gate.evaluate(message(raw=raw, tool=tool), review_request(tool=tool), NOW)
            assert_well_formed(verdict)
            assert not verdict.accepted

    @_settings
    @given(value=json_values)
    def test_arbitrary_json(self, gate: Gate, value: Any) -> None:
        """Arbitrary JSON values give a well-formed verdict for every contract."""
        raw = msgspec.json.encode(value)
        for tool in gate.contracts.tools:
            assert_well_formed(gate.evaluate(message(raw=raw, tool=tool), review_request(tool=tool), NOW))

    @_settings
    @given(
        key=st.binary(max_size=40),
        headers=st.lists(
            st.tuples(
                st.sampled_from(
                    [
                        "tg-tool",
                        "tg-request-id",
                        "tg-attempt",
                        "tg-adapter-version",
                        "tg-content-type",
                        "tg-signature",
                        "x-other",
                    ]
                ),
                st.binary(max_size=40),
            ),
            max_size=8,
        ),
    )
    def test_arbitrary_headers(self, gate: Gate, key: bytes, headers: list[tuple[str, bytes]]) -> None:
        """Arbitrary keys and headers give a well-formed verdict."""
        msg = msgspec.structs.replace(message(), key=key, headers=headers)
        assert_well_formed(gate.evaluate(msg, review_request(), NOW))


class TestCanary:
    @_settings
    @given(
        place=st.sampled_from(
            ["unknown_field", "long_text", "nested_unknown", "error_extra", "header", "key", "top_level"]
        )
    )
    def test_canary_never_reaches_agent(self, gate: Gate, place: str) -> None:
        """A canary placed anywhere an attacker can reach never appears in an agent envelope."""
        value: dict[str, Any] = review_value()
        headers: dict[str, str] = {}
        key = REQUEST_ID.encode()
        if place == "unknown_field":
            value["data"]["note"] = CANARY
        elif place == "long_text":
            value["data"]["reviewed_by"] = CANARY * 20
        elif place == "nested_unknown":
            value["data"]["change_id"] = {"value": "CR-1042", "message": CANARY}
        elif place == "error_extra":
            value["error"] = {"code": "NOT_FOUND", "retryable": False, "detail": CANARY}
        elif place == "header":
            headers = {"tg_tool": CANARY}
        elif place == "key":
            key = CANARY.encode()
        else:
            value[CANARY] = True
        verdict = gate.evaluate(message(value, key=key, **headers), review_request(), NOW)  # type: ignore[arg-type]
        assert CANARY.encode() not in verdict.agent
        assert not verdict.accepted
