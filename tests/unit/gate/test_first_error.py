"""The rejection's schema error through per-branch validators equals the reference search.

:class:`~toolgate.gate._first_error.Branches` answers a rejection's first error from
the branch the envelope's ``outcome`` selects; :func:`reference_error` gets it from the
root validator's full ``oneOf`` evaluation. Wherever the shortcut answers, the error it
reports (message, instance path, schema path) must be the reference's.
"""

from __future__ import annotations

from typing import Any

import jiter
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolgate.gate._contracts import Contract, compile_schema
from toolgate.gate._first_error import Branches, branches_for, reference_error

from tests.fuzzing import CONTRACTS, fuzz_gate, scenarios, targets
from tests.properties import DERANDOMIZED

GATE = fuzz_gate()
JSON_TARGETS = [c for c in targets(GATE) if c.spec.content_type == "application/json"]
_ci = settings(
    DERANDOMIZED, max_examples=600, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


def described(found: tuple[Any, list[str | int]] | None) -> tuple[str, list[str | int], list[str | int]]:
    assert found is not None
    error, schema_path = found
    return error.message, list(error.instance_path), schema_path


def branches(contract: Contract) -> Branches:
    found = branches_for(contract.schema)
    assert found is not None, f"{contract.key}: no per-branch validators"
    return found


def review() -> Contract:
    return next(c for c in JSON_TARGETS if c.key == "review_status@v1")


def envelope(**changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "tool": "review_status",
        "request_id": "req.00000001",
        "outcome": "success",
        "data": {"change_id": "CR-1", "decision": "approved", "reviewed_by": "ana"},
    }
    return value | changes


class TestShortcutAnswers:
    def test_every_bundled_contract_has_branches(self) -> None:
        """The shipped contracts are all of the shape the shortcut serves."""
        bundled = [c for c in JSON_TARGETS if c.folder.is_relative_to(CONTRACTS)]
        assert bundled
        for contract in bundled:
            branches(contract)

    @pytest.mark.parametrize(
        "value",
        [
            envelope(data={"change_id": "CR-1", "decision": "approved", "reviewed_by": "ana", "x": 1}),
            envelope(data={"change_id": "CR-1", "decision": "maybe", "reviewed_by": "ana"}),
            envelope(data={"change_id": "CR-1", "decision": "approved"}),
            envelope(data=[]),
            envelope(request_id="no"),
            envelope(extra=True),
            envelope(outcome="failure"),
            envelope(outcome="failure", error={"code": "NOT_FOUND", "retryable": "yes"}, data=None),
        ],
        ids=[
            "extra-in-data",
            "bad-enum",
            "missing-member",
            "wrong-type",
            "bad-pattern",
            "extra-at-root",
            "failure-without-error",
            "failure-bad-field",
        ],
    )
    def test_answers_as_the_reference(self, value: dict[str, Any]) -> None:
        """The usual rejections get the shortcut's answer, equal to the reference's."""
        contract = review()
        assert not contract.validator.is_valid(value)
        fast = branches(contract).first_error(value)
        assert fast is not None
        assert described(fast) == described(reference_error(contract.validator, value))

    def test_reference_path_goes_through_the_ref(self) -> None:
        """A violation inside a $ref'd definition keeps the definition's path, as the reference."""
        value = envelope(data={"change_id": "CR-1", "decision": "approved", "reviewed_by": "ana", "x": 1})
        _, _, path = described(branches(review()).first_error(value))
        assert path == ["$defs", "reviewStatus", "additionalProperties"]

    def test_branch_path_is_prefixed(self) -> None:
        """A violation in the branch itself is reported from the root (oneOf/<branch>/...)."""
        _, _, path = described(branches(review()).first_error(envelope(extra=True)))
        assert path == ["oneOf", 0, "additionalProperties"]


class TestShortcutDeclines:
    @pytest.mark.parametrize(
        "value",
        [
            [],
            "text",
            {"tool": "review_status", "request_id": "req.00000001"},  # no outcome
            envelope(outcome="maybe"),  # no branch accepts it
            envelope(outcome=7),
        ],
        ids=["array", "string", "no-outcome", "unknown-outcome", "number-outcome"],
    )
    def test_leaves_it_to_the_reference(self, value: Any) -> None:
        """Where the branch cannot be told from outcome alone, the reference search decides."""
        assert branches(review()).first_error(value) is None
        assert reference_error(review().validator, value) is not None

    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object"},
            {"oneOf": [{"type": "object", "properties": {"outcome": {"const": "a"}}}], "type": "object"},
            {"oneOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"type": "object"}}},
            {"oneOf": [{"type": "object", "properties": {"x": {}}}]},
            {
                "oneOf": [
                    {
                        "properties": {"outcome": {"const": "a"}},
                        "patternProperties": {"^o": {"type": "integer"}},
                    }
                ]
            },
            {"oneOf": [{"properties": {"outcome": {}}}], "anyOf": [{}]},
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "oneOf": [{"properties": {"outcome": {}}}],
            },
        ],
        ids=["no-oneOf", "root-keyword", "ref-branch", "no-outcome", "pattern-props", "both", "draft-07"],
    )
    def test_shapes_it_does_not_serve(self, schema: dict[str, Any]) -> None:
        """Schemas where another keyword could decide or report at /outcome get no shortcut."""
        assert branches_for(schema) is None


class TestAgainstTheReference:
    @_ci
    @given(data=st.data())
    def test_mutated_envelopes(self, data: st.DataObject) -> None:
        """Every generated, mutated envelope the schema rejects: the shortcut, where it
        answers, reports the reference's error."""
        contract = data.draw(st.sampled_from(JSON_TARGETS))
        scenario = data.draw(
            scenarios(GATE, contract, mutations=("unknown_field", "replace_value", "change_type"))
        )
        try:
            value = jiter.from_json(scenario.raw)
        except ValueError:
            return
        validator = compile_schema(contract.schema)
        if validator.is_valid(value):
            return
        shortcut = branches_for(contract.schema)
        fast = None if shortcut is None else shortcut.first_error(value)
        if fast is not None:
            assert described(fast) == described(reference_error(validator, value))
