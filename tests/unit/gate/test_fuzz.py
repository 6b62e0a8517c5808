"""Fuzzing the gate in CI: arbitrary bytes, arbitrary JSON, and schema-generated envelopes
mutated, against an independent oracle (python-jsonschema and the declared projection).

Bounded to a few hundred examples per property and derandomized, so a CI run is quick
and repeatable; ``ops/chaos/fuzz_long.py`` runs the same properties for hours with
fresh randomness (or atheris). The properties live in :mod:`tests.fuzzing`.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolgate.gate._contracts import compile_schema
from toolgate.gate._gate import Gate

from tests.fuzzing import (
    MUTATIONS,
    NOW,
    Oracle,
    arbitrary_message,
    check,
    envelopes,
    fuzz_gate,
    scenarios,
    targets,
)
from tests.properties import DERANDOMIZED, json_values

GATE = fuzz_gate()
TARGETS = targets(GATE)
ORACLES: dict[str, Oracle] = {}
JSON_TARGETS = [c for c in TARGETS if c.spec.content_type == "application/json"]
_ci = settings(
    DERANDOMIZED, max_examples=250, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)

contracts = st.sampled_from(TARGETS)


class TestArbitraryInput:
    @_ci
    @given(contract=contracts, raw=st.binary(max_size=400))
    def test_arbitrary_bytes_never_raise_or_pass(self, contract: Any, raw: bytes) -> None:
        """Arbitrary bytes to any contract give a verdict, never INTERNAL_ERROR, never an accept."""
        verdict = check(GATE, arbitrary_message(GATE, contract, raw), ORACLES)
        assert not verdict.accepted

    @_ci
    @given(contract=contracts, value=json_values)
    def test_arbitrary_json_never_raises(self, contract: Any, value: Any) -> None:
        """Arbitrary JSON to any contract gives a verdict that keeps every property."""
        check(GATE, arbitrary_message(GATE, contract, msgspec.json.encode(value)), ORACLES)


class TestSchemaGenerated:
    @_ci
    @given(data=st.data())
    def test_generated_envelopes_are_valid(self, data: st.DataObject) -> None:
        """Envelopes generated from a schema are valid for jsonschema-rs and python-jsonschema."""
        contract = data.draw(st.sampled_from(JSON_TARGETS))
        envelope = data.draw(envelopes(contract, data.draw(st.sampled_from(["success", "failure"]))))
        assert compile_schema(contract.schema).is_valid(envelope)
        checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
        assert jsonschema.Draft202012Validator(contract.schema, format_checker=checker).is_valid(envelope)

    @settings(_ci, max_examples=150)
    @given(data=st.data())
    def test_valid_envelopes_are_accepted(self, data: st.DataObject) -> None:
        """An unmutated generated envelope, fresh, bound and signed, is accepted as its projection
        (or refused by the contract's cel rule that is false for it, which check asserts)."""
        contract = data.draw(contracts)
        scenario = data.draw(scenarios(GATE, contract, mutations=("none",)))
        verdict = check(GATE, scenario, ORACLES)
        assert (
            verdict.accepted
            or scenario.expect == ("limits", "PAYLOAD_TOO_LARGE")
            or verdict.code == "RULE_FAILED"
        )

    @settings(_ci, max_examples=1500)
    @given(data=st.data())
    def test_mutated_envelopes_keep_every_property(self, data: st.DataObject) -> None:
        """Mutated envelopes never crash the gate, never pass what the schema rejects, never leak."""
        contract = data.draw(contracts)
        check(GATE, data.draw(scenarios(GATE, contract)), ORACLES)

    @pytest.mark.parametrize("mutation", [m for m in MUTATIONS if m != "none"])
    def test_each_mutation_is_rejected_when_it_must_be(self, mutation: str) -> None:
        """Each structural mutation, applied to a valid review_status envelope, gets its verdict."""
        contract = next(c for c in TARGETS if c.spec.tool == "review_status")

        @settings(_ci, max_examples=40)
        @given(data=st.data())
        def run(data: st.DataObject) -> None:
            scenario = data.draw(scenarios(GATE, contract, mutations=(mutation,)))
            verdict = check(GATE, scenario, ORACLES)
            if mutation in (
                "unknown_field",
                "duplicate_member",
                "duplicate_escaped_name",
                "truncate",
                "second_document",
                "non_finite",
                "deepen",
            ):
                assert not verdict.accepted

        run()


class TestOracle:
    def test_oracle_checks_date_time(self) -> None:
        """The independent oracle asserts format date-time (python-jsonschema needs rfc3339-validator)."""
        job = next(c for c in TARGETS if c.spec.tool == "job_status")
        oracle = Oracle(job)
        good: dict[str, Any] = {
            "tool": "job_status",
            "request_id": "req.J7q94MkP",
            "outcome": "success",
            "data": {
                "project_id": "bluebird",
                "run_id": "run_7Hk2mQ9xLp4sTb",
                "state": "failed",
                "observed_at": NOW.isoformat(),
            },
        }
        assert oracle.valid(good)
        good["data"]["observed_at"] = "yesterday"
        assert not oracle.valid(good)

    def test_gate_is_the_real_one(self) -> None:
        """The fuzzed gate holds the bundled contracts and the corpus-only ones."""
        assert isinstance(GATE, Gate)
        assert {"review_status", "job_status", "deploy_status", "service_state", "wide_report"} <= {
            c.spec.tool for c in TARGETS
        }
