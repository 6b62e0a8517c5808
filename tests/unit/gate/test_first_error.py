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
from toolgate._errors import RejectedInput
from toolgate.authoring._fixtures import fixtures_keyring, load_cases, run_case
from toolgate.gate._contracts import Contract, ContractSet, compile_schema
from toolgate.gate._first_error import Branches, Located, branches_for, reference_error
from toolgate.gate._gate import UNEXPECTED_MEMBER, Gate, _PreparedContract, _schema_rejection

from tests.fuzzing import CONTRACTS, fuzz_gate, scenarios, targets
from tests.properties import DERANDOMIZED
from tests.unit.gate.test_corpus import CASES, CORPUS, NOW, corpus_contracts, corpus_message, corpus_request

GATE = fuzz_gate()
JSON_TARGETS = [c for c in targets(GATE) if c.spec.content_type == "application/json"]
_ci = settings(
    DERANDOMIZED, max_examples=600, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


_MASKED = ("additionalProperties", "unevaluatedProperties", "propertyNames")


def described(found: tuple[Any, list[str | int]] | None) -> tuple[str, list[str | int], list[str | int]]:
    """The error as a rejection reports it: a masked keyword's message is never shown
    (and a :class:`Located` error has none)."""
    assert found is not None
    error, schema_path = found
    masked = bool(schema_path) and schema_path[-1] in _MASKED
    assert error.message is not None or masked
    return UNEXPECTED_MEMBER if masked else error.message, list(error.instance_path), schema_path


def without_search(found: Branches) -> Branches:
    """The same per-branch validators without the extra-member search: the meant branch's
    first error from jsonschema-rs, as before the search existed."""
    return Branches(found._keyword, found._branches, found._outcomes)


def legacy(prepared: _PreparedContract) -> _PreparedContract:
    """A copy of ``prepared`` whose rejections take the meant branch's first error from
    jsonschema-rs (no extra-member search)."""
    copy = _PreparedContract.__new__(_PreparedContract)
    for name in _PreparedContract.__slots__:
        setattr(copy, name, getattr(prepared, name))
    found = prepared.branches()
    copy._branches = None if found is None else without_search(found)
    return copy


def legacy_gate(gate: Gate) -> Gate:
    """``gate`` with every prepared version :func:`legacy` (in place; returns it)."""
    for contract, prepared in gate._prepared.items():
        gate._prepared[contract] = legacy(prepared)
    gate._selected.clear()
    return gate


def reported(rejected: RejectedInput) -> tuple[str, str, str, str, str, str]:
    return (
        rejected.stage,
        rejected.code,
        rejected.detail,
        rejected.instance_path,
        rejected.schema_path,
        rejected.keyword,
    )


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


class TestExtraMemberSearch:
    """A member too many in a closed object is found without jsonschema-rs building the
    error, and reported exactly as the meant branch's first error was."""

    @pytest.mark.parametrize(
        ("value", "instance_path", "schema_path"),
        [
            (
                envelope(data={"change_id": "CR-1", "decision": "approved", "reviewed_by": "ana", "x": 1}),
                ["data"],
                ["$defs", "reviewStatus", "additionalProperties"],
            ),
            (envelope(extra=True), [], ["oneOf", 0, "additionalProperties"]),
            (
                envelope(outcome="failure", error={"code": "NOT_FOUND", "retryable": True, "x": 1}, data=None)
                | {"data": None},
                None,
                None,
            ),
        ],
        ids=["in-data", "at-root", "failure-with-two-faults"],
    )
    def test_answers_only_a_lone_extra_member(
        self, value: dict[str, Any], instance_path: list[str] | None, schema_path: list[str | int] | None
    ) -> None:
        """An extra member that is the branch's only fault is located; with another fault beside
        it, jsonschema-rs's first error is asked for instead. Both report as before."""
        contract = review()
        found = branches(contract).first_error(value)
        assert found is not None
        error, path = found
        if instance_path is None:
            assert not isinstance(error, Located)
        else:
            assert isinstance(error, Located)
            assert (error.message, error.instance_path, path) == (None, instance_path, schema_path)
        old = without_search(branches(contract)).first_error(value)
        assert described(found) == described(old)

    @pytest.mark.parametrize(
        "value",
        [
            {"outcome": "a", "inner": {"deep": {"n": 1, "x": 2}}},
            {"outcome": "a", "inner": {"deep": {"n": 1}, "x": 2}},
            {"outcome": "a", "inner": {"deep": {"n": 1}}, "x": 2},
            {"outcome": "a", "inner": {"deep": {"n": "1", "x": 2}}},
            {"outcome": "a", "inner": {"deep": {"n": 1, "x": 2}, "x": 2}},
            {"outcome": "a", "inner": {"deep": {}}},
            {"outcome": "a", "inner": {"deep": {"n": 1}}, "ref": {"name": "a", "x": 1}},
            {
                "outcome": "a",
                "inner": {"deep": {"n": 1}},
                "ref": {"name": "a", "again": {"name": "b", "x": 1}},
            },
            {"outcome": "a", "inner": {"deep": {"n": 1}}, "ref": {"name": "a", "again": {"name": 1, "x": 1}}},
            {"outcome": "a", "inner": {"deep": {"n": 1}}, "ref": {"name": "a", "again": {"again": {"x": 1}}}},
            {"outcome": "a", "inner": {"deep": {"n": 1}}, "list": [{"x": 1}]},
            {"outcome": "a", "inner": []},
            {"outcome": "b", "x": 1},
        ],
    )
    def test_nested_and_referenced_objects(self, value: dict[str, Any]) -> None:
        """Closed objects nested, behind a $ref and behind a recursive $ref: the located error
        is the one jsonschema-rs reports first, paths included."""
        closed = {"type": "object", "additionalProperties": False}
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "oneOf": [
                closed
                | {
                    "required": ["outcome", "inner"],
                    "properties": {
                        "outcome": {"const": "a"},
                        "inner": closed
                        | {
                            "properties": {
                                "deep": closed | {"required": ["n"], "properties": {"n": {"type": "integer"}}}
                            }
                        },
                        "ref": {"$ref": "#/$defs/named"},
                        "list": {"type": "array", "items": closed},
                    },
                },
                closed | {"properties": {"outcome": {"const": "b"}}},
            ],
            "$defs": {
                "named": closed
                | {"properties": {"name": {"type": "string"}, "again": {"$ref": "#/$defs/named"}}}
            },
        }
        validator = compile_schema(schema)
        assert not validator.is_valid(value)
        found = branches_for(schema)
        assert found is not None
        fast = found.first_error(value)
        assert fast is not None
        assert described(fast) == described(without_search(found).first_error(value))

    def test_the_nested_schema_is_searched(self) -> None:
        """The schema of the test above gets its search at every level (the walk is not skipped)."""
        found = branches_for(
            {
                "oneOf": [
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "outcome": {"const": "a"},
                            "inner": {"type": "object", "additionalProperties": False},
                        },
                    }
                ]
            }
        )
        assert found is not None
        fast = found.first_error({"outcome": "a", "inner": {"x": 1}})
        assert fast is not None
        assert isinstance(fast[0], Located)
        assert (fast[0].instance_path, fast[1]) == (
            ["inner"],
            ["oneOf", 0, "properties", "inner", "additionalProperties"],
        )

    @_ci
    @given(data=st.data())
    def test_mutated_envelopes_report_as_before(self, data: st.DataObject) -> None:
        """Every generated, mutated envelope the schema rejects gets the rejection (detail,
        paths, keyword) it got from the meant branch's first error."""
        contract = data.draw(st.sampled_from(JSON_TARGETS))
        scenario = data.draw(
            scenarios(GATE, contract, mutations=("unknown_field", "replace_value", "change_type"))
        )
        try:
            value = jiter.from_json(scenario.raw)
        except ValueError:
            return
        prepared = GATE._prepared[contract]
        if prepared.validator.is_valid(value):
            return
        assert reported(_schema_rejection(prepared, value)) == reported(
            _schema_rejection(legacy(prepared), value)
        )


class TestVerdictsAsBefore:
    """Whole verdicts (agent bytes, diagnostics, digests) with the search and without it."""

    def test_fixtures(self) -> None:
        """Every bundled fixture gets the same verdict, also decided a second time by the same
        gate (a located extra member's report then kept from the first)."""
        contracts = ContractSet.load(CONTRACTS)
        keyring = fixtures_keyring(CONTRACTS)
        new, old = Gate(contracts, keyring), legacy_gate(Gate(contracts, keyring))
        cases = [case for contract in contracts for case in load_cases(contract, keyring)]
        schema_rejections = 0
        for case in cases * 2:
            verdict = run_case(new, case).verdict
            assert verdict == run_case(old, case).verdict, case.path
            schema_rejections += verdict.stage == "schema"
        assert schema_rejections
        assert any(prepared.located for prepared in new._prepared.values())

    def test_corpus(self) -> None:
        """Every hostile corpus file gets the same verdict, also decided a second time by the same gate."""
        contracts = corpus_contracts()
        keyring = fixtures_keyring(CONTRACTS)
        new, old = Gate(contracts, keyring), legacy_gate(Gate(contracts, keyring))
        for case in CASES * 2:
            raw = (CORPUS / case["file"]).read_bytes()
            message = corpus_message(new, case, raw)
            request = corpus_request(case)
            verdict = new.evaluate(message, request, NOW, lambda rid, attempt: False)
            assert verdict == old.evaluate(message, request, NOW, lambda rid, attempt: False), case["file"]


class TestLocatedReportsKept:
    """A located extra member's report is made once per contract version and reused as it was."""

    def test_extra_members_at_other_paths_keep_their_own_reports(self) -> None:
        """An extra member at the root and one in data, alternately, each keep their own paths."""
        gate = Gate(ContractSet.load(CONTRACTS))
        prepared = next(p for c, p in gate._prepared.items() if c.key == "review_status@v1")
        data = {**envelope()["data"], "extra": 1}
        for _ in range(2):
            root = _schema_rejection(prepared, envelope(extra=True))
            inner = _schema_rejection(prepared, envelope(data=data))
            assert (root.instance_path, root.schema_path) == ("", "/oneOf/0/additionalProperties")
            assert (inner.instance_path, inner.schema_path) == (
                "/data",
                "/$defs/reviewStatus/additionalProperties",
            )
            assert root.detail == inner.detail == UNEXPECTED_MEMBER
