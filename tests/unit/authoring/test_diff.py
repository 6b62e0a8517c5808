"""Schema and contract diff: each change is named and classed breaking, widening, or both."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec
import pytest
from toolgate.authoring._contract_diff import diff_contracts
from toolgate.authoring._schema_diff import Change, diff_schemas
from toolgate.gate._contracts import (
    Contract,
    ContractSet,
    DisplayText,
    Freshness,
    Limits,
    Signature,
    load_contract,
)

from tests import ROOT

CONTRACTS = ROOT / "contracts"


def closed(required: list[str] | None = None, **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "required": required or [],
        "properties": properties,
        "additionalProperties": False,
    }


def envelope(data: dict[str, Any]) -> dict[str, Any]:
    """A result envelope: success and failure branches, titled."""
    return {
        "oneOf": [
            {
                "title": "Success result",
                **closed(["tool", "data"], tool={"const": "deploy_status"}, data=data),
            },
            {
                "title": "Failure result",
                **closed(
                    ["tool", "error"],
                    tool={"const": "deploy_status"},
                    error=closed(["code"], code={"enum": ["NOT_FOUND", "UPSTREAM_UNAVAILABLE"]}),
                ),
            },
        ]
    }


DEPLOY = closed(
    ["environment", "revision", "state"],
    environment={"enum": ["staging", "production"]},
    revision={"type": "string", "pattern": "^[0-9a-f]{7,40}$", "maxLength": 40},
    state={"type": "string", "maxLength": 32},
)


def summary(changes: list[Change]) -> list[tuple[str, str, bool, bool]]:
    return [(c.pointer, c.kind, c.breaking, c.widens) for c in changes]


def changed(old: dict[str, Any], edit: Any) -> list[tuple[str, str, bool, bool]]:
    """Diff ``old`` against a copy of it changed in place by ``edit``."""
    new = copy.deepcopy(old)
    edit(new)
    return summary(diff_schemas(old, new))


class TestDeployStatusChanges:
    def test_state_string_to_object_is_a_breaking_type_change(self) -> None:
        """deploy_status: state turned from a string into an object breaks."""
        old = envelope(DEPLOY)
        new = envelope(copy.deepcopy(DEPLOY))
        new["oneOf"][0]["properties"]["data"]["properties"]["state"] = closed(
            ["value"], value={"enum": ["healthy"]}, message={"type": "string", "maxLength": 200}
        )
        [change] = diff_schemas(old, new)
        assert (change.pointer, change.kind, change.breaking) == ("/data/state", "type-changed", True)
        assert "Success result" in change.message

    def test_new_optional_property_on_a_closed_object_is_reported(self) -> None:
        """deploy_status's maintenance flag: not breaking, but a widening contract change."""
        old = envelope(DEPLOY)

        def add(new: dict[str, Any]) -> None:
            new["oneOf"][0]["properties"]["data"]["properties"]["maintenance"] = {"type": "boolean"}

        assert changed(old, add) == [("/data/maintenance", "property-added", False, True)]
        new = copy.deepcopy(old)
        add(new)
        assert "contract change" in diff_schemas(old, new)[0].message

    def test_identical_schemas_have_no_change(self) -> None:
        """A schema compared with itself yields nothing."""
        assert diff_schemas(envelope(DEPLOY), envelope(copy.deepcopy(DEPLOY))) == []


class TestRequired:
    def test_new_required_field_is_breaking(self) -> None:
        """Results without a newly required field are rejected."""

        def edit(s: dict[str, Any]) -> None:
            s["required"].append("owner")
            s["properties"]["owner"] = {"type": "string", "maxLength": 64}

        assert changed(DEPLOY, edit) == [
            ("/owner", "required-added", True, False),
            ("/owner", "property-added", False, True),
        ]

    def test_dropped_requirement_widens(self) -> None:
        """A field no longer required may be missing from what the agent sees."""
        assert changed(DEPLOY, lambda s: s["required"].remove("state")) == [
            ("/state", "required-removed", False, True)
        ]


class TestEnums:
    def test_narrowed_enum_is_breaking(self) -> None:
        """A value removed from an enum rejects results that carried it."""

        def edit(s: dict[str, Any]) -> None:
            s["properties"]["environment"]["enum"] = ["production"]

        assert changed(DEPLOY, edit) == [("/environment", "enum-narrowed", True, False)]

    def test_widened_enum_is_not_breaking_but_widens(self) -> None:
        """A value added to an enum breaks no producer but widens the agent's input."""

        def edit(s: dict[str, Any]) -> None:
            s["properties"]["environment"]["enum"].append("dev")

        assert changed(DEPLOY, edit) == [("/environment", "enum-widened", False, True)]

    def test_changed_const_is_both(self) -> None:
        """A const swapped for another both rejects and admits."""
        old = closed(tool={"const": "a"})
        assert changed(old, lambda s: s["properties"]["tool"].update(const="b")) == [
            ("/tool", "const-changed", True, True)
        ]

    def test_enum_introduced_is_breaking(self) -> None:
        """Restricting a free string to listed values narrows it."""

        def edit(s: dict[str, Any]) -> None:
            s["properties"]["state"] = {"enum": ["healthy", "failed"]}

        assert changed(DEPLOY, edit) == [("/state", "enum-narrowed", True, False)]


class TestTypes:
    def test_type_change_is_breaking(self) -> None:
        """A string turned integer rejects every old value."""
        assert changed(DEPLOY, lambda s: s["properties"].update(state={"type": "integer"})) == [
            ("/state", "type-changed", True, True)
        ]

    def test_integer_to_number_only_widens(self) -> None:
        """Every integer is a number: widening, not breaking."""
        old = closed(n={"type": "integer"})
        assert changed(old, lambda s: s["properties"]["n"].update(type="number")) == [
            ("/n", "type-changed", False, True)
        ]

    def test_dropping_null_is_breaking(self) -> None:
        """[string, null] to string rejects null."""
        old = closed(s={"type": ["string", "null"], "maxLength": 3})
        assert changed(old, lambda s: s["properties"]["s"].update(type="string")) == [
            ("/s", "type-changed", True, False)
        ]


class TestProperties:
    def test_removed_property_is_breaking(self) -> None:
        """A property removed from a closed object rejects results that carry it."""

        def edit(s: dict[str, Any]) -> None:
            del s["properties"]["revision"]
            s["required"].remove("revision")

        assert changed(DEPLOY, edit) == [
            ("/revision", "required-removed", False, True),
            ("/revision", "property-removed", True, False),
        ]

    def test_property_declared_on_an_open_object_is_breaking(self) -> None:
        """On an open object a new property constrains a member that was free."""
        old = {"type": "object", "properties": {"a": {"type": "boolean"}}}
        assert changed(old, lambda s: s["properties"].update(b={"type": "boolean"})) == [
            ("/b", "property-added", True, False)
        ]

    def test_closed_to_open_widens(self) -> None:
        """Opening an object lets undeclared members through."""
        assert changed(DEPLOY, lambda s: s.pop("additionalProperties")) == [
            ("", "closed-to-open", False, True)
        ]

    def test_open_to_closed_is_breaking(self) -> None:
        """Closing an object rejects results with undeclared members."""
        old = {"type": "object", "properties": {"a": {"type": "boolean"}}}
        assert changed(old, lambda s: s.update(additionalProperties=False)) == [
            ("", "open-to-closed", True, False)
        ]


class TestBounds:
    @pytest.mark.parametrize(
        ("old", "new", "kind", "breaking"),
        [
            ({"maxLength": 32}, {"maxLength": 16}, "max-length-lowered", True),
            ({"maxLength": 32}, {"maxLength": 64}, "max-length-raised", False),
            ({}, {"maxLength": 64}, "max-length-added", True),
            ({"minLength": 1}, {"minLength": 4}, "min-length-raised", True),
            ({"minLength": 4}, {"minLength": 1}, "min-length-lowered", False),
        ],
    )
    def test_length_bounds(self, old: dict[str, Any], new: dict[str, Any], kind: str, breaking: bool) -> None:
        """A tighter bound breaks; a looser one widens."""
        before = closed(s={"type": "string", **old})
        after = closed(s={"type": "string", **new})
        assert summary(diff_schemas(before, after)) == [("/s", kind, breaking, not breaking)]

    def test_max_items_lowered_is_breaking(self) -> None:
        """Fewer items allowed rejects longer arrays."""
        old = closed(tags={"type": "array", "maxItems": 8, "items": {"enum": ["a"]}})
        assert changed(old, lambda s: s["properties"]["tags"].update(maxItems=4)) == [
            ("/tags", "max-items-lowered", True, False)
        ]

    def test_changed_pattern_is_both(self) -> None:
        """A different pattern may reject old values and admit new ones."""

        def edit(s: dict[str, Any]) -> None:
            s["properties"]["revision"]["pattern"] = "^[0-9a-f]{40}$"

        assert changed(DEPLOY, edit) == [("/revision", "pattern-changed", True, True)]

    def test_items_are_compared_under_a_wildcard(self) -> None:
        """A change inside items is reported at <array>/*."""
        old = closed(tags={"type": "array", "maxItems": 8, "items": {"enum": ["a", "b"]}})
        assert changed(old, lambda s: s["properties"]["tags"]["items"].update(enum=["a"])) == [
            ("/tags/*", "enum-narrowed", True, False)
        ]


class TestComposition:
    def test_inlining_a_ref_is_no_change(self) -> None:
        """A $ref replaced by its target accepts the same results."""
        old = {**closed(a={"$ref": "#/$defs/a"}), "$defs": {"a": {"type": "string", "maxLength": 3}}}
        new = closed(a={"type": "string", "maxLength": 3})
        assert diff_schemas(old, new) == []

    def test_changes_behind_a_ref_are_found(self) -> None:
        """A definition changed behind a $ref is reported at the instance location."""
        old = {**closed(a={"$ref": "#/$defs/a"}), "$defs": {"a": {"enum": ["x", "y"]}}}
        assert changed(old, lambda s: s["$defs"]["a"].update(enum=["x"])) == [
            ("/a", "enum-narrowed", True, False)
        ]

    def test_moving_a_property_between_allof_branches_is_no_change(self) -> None:
        """allOf is flattened, so where a property is declared does not matter."""
        a, b = {"type": "boolean"}, {"enum": [1, 2]}
        old = {"allOf": [{"properties": {"a": a}}, {"properties": {"b": b}}], "unevaluatedProperties": False}
        new = {"allOf": [{"properties": {"a": a, "b": b}}, {}], "unevaluatedProperties": False}
        assert diff_schemas(old, new) == []

    def test_branches_pair_by_title(self) -> None:
        """Reordered oneOf branches are matched by title, not position."""
        old = envelope(DEPLOY)
        new = copy.deepcopy(old)
        new["oneOf"].reverse()
        assert diff_schemas(old, new) == []

    def test_branches_pair_by_index_without_titles(self) -> None:
        """Untitled branches are paired by position."""
        old = {"oneOf": [closed(a={"enum": [1]}), closed(b={"enum": [2]})]}
        assert changed(old, lambda s: s["oneOf"][1]["properties"]["b"].update(enum=[2, 3])) == [
            ("/b", "enum-widened", False, True)
        ]

    def test_removed_branch_is_breaking_and_added_branch_widens(self) -> None:
        """Dropping a branch rejects its shape; adding one admits a new shape."""
        old = envelope(DEPLOY)
        removed = copy.deepcopy(old)
        del removed["oneOf"][1]
        assert summary(diff_schemas(old, removed)) == [("", "branch-removed", True, False)]
        assert summary(diff_schemas(removed, old)) == [("", "branch-added", False, True)]

    def test_recursive_schema_terminates(self) -> None:
        """A self-referencing schema is compared one level into its recursion, then stops."""
        old = closed(name={"enum": ["a"]}, children={"type": "array", "maxItems": 4, "items": {"$ref": "#"}})
        assert changed(old, lambda s: s["properties"]["name"].update(enum=["a", "b"])) == [
            ("/name", "enum-widened", False, True),
            ("/children/*/name", "enum-widened", False, True),
        ]

    def test_other_assertions_are_compared_conservatively(self) -> None:
        """An added not, or a changed one, is reported by keyword."""
        old = closed(a={"type": "integer"})
        assert changed(old, lambda s: s["properties"]["a"].update({"not": {"const": 0}})) == [
            ("/a", "not-added", True, False)
        ]


def with_spec(contract: Contract, **changes: Any) -> Contract:
    return Contract(msgspec.structs.replace(contract.spec, **changes), contract.folder, contract.schema)


class TestContracts:
    @pytest.fixture
    def job(self) -> Contract:
        return load_contract(CONTRACTS / "job_status" / "v1")

    def test_bundled_contracts_equal_themselves(self) -> None:
        """Every bundled contract diffed with itself has no change."""
        for contract in ContractSet.load(CONTRACTS):
            assert diff_contracts(contract, contract) == [], contract

    def test_projection_added_widens_and_removed_breaks(self, job: Contract) -> None:
        """A field added to the projection reaches the agent; one removed is lost to it."""
        fewer = with_spec(job, projection=job.spec.projection[:-1])
        assert [(c.kind, c.breaking, c.widens) for c in diff_contracts(job, fewer)] == [
            ("projection-removed", True, False)
        ]
        assert [(c.kind, c.breaking, c.widens) for c in diff_contracts(fewer, job)] == [
            ("projection-added", False, True)
        ]

    def test_lowered_limits_break(self, job: Contract) -> None:
        """A smaller byte limit rejects results that used to fit."""
        smaller = with_spec(
            job, limits=Limits(max_bytes=job.spec.limits.max_bytes // 2, max_depth=job.spec.limits.max_depth)
        )
        where = "$.limits.max_bytes"
        assert summary(diff_contracts(job, smaller)) == [(where, "max-bytes-lowered", True, False)]
        assert summary(diff_contracts(smaller, job)) == [(where, "max-bytes-raised", False, True)]

    def test_rules_added_break_and_removed_widen(self, job: Contract) -> None:
        """A new semantic rule rejects more; a dropped one lets more through."""
        fewer = with_spec(job, rules=job.spec.rules[:2] + job.spec.rules[3:])  # the owned_id rule dropped
        removed = diff_contracts(job, fewer)
        assert [(c.kind, c.breaking, c.widens) for c in removed] == [("rule-removed", False, True)]
        assert [(c.kind, c.breaking) for c in diff_contracts(fewer, job)] == [("rule-added", True)]

    def test_shorter_freshness_window_breaks(self, job: Contract) -> None:
        """A lowered max age rejects results that used to be fresh enough."""
        rules = tuple(
            msgspec.structs.replace(r, max_age_seconds=60) if isinstance(r, Freshness) else r
            for r in job.spec.rules
        )
        assert summary(diff_contracts(job, with_spec(job, rules=rules))) == [
            ("/data/observed_at", "rule-changed", True, False)
        ]

    def test_display_text_cut_shorter_breaks(self, job: Contract) -> None:
        """Agents given less display text than before is breaking."""
        shorter = with_spec(
            job,
            display_text=tuple(DisplayText(pointer=d.pointer, max_length=50) for d in job.spec.display_text),
        )
        assert [(c.kind, c.breaking) for c in diff_contracts(job, shorter)] == [
            ("display-text-max-length-lowered", True)
        ]

    def test_dropped_signature_widens(self, job: Contract) -> None:
        """Unsigned results reaching the agent is reported as widening."""
        signed = with_spec(job, signature=Signature(algorithm="hmac-sha256", key_id="k"))
        unsigned = with_spec(job, signature=None)
        assert [(c.kind, c.breaking, c.widens) for c in diff_contracts(signed, unsigned)] == [
            ("signature-removed", False, True)
        ]
        assert [(c.kind, c.breaking) for c in diff_contracts(unsigned, signed)] == [("signature-added", True)]

    def test_schema_changes_come_first(self, job: Contract) -> None:
        """diff_contracts reports the schema's changes, then the contract's."""
        schema = copy.deepcopy(job.schema)
        schema["$defs"]["jobStatus"]["properties"]["state"]["enum"].remove("cancelled")
        changed_job = Contract(
            msgspec.structs.replace(job.spec, projection=job.spec.projection[:-1]), job.folder, schema
        )
        assert [c.kind for c in diff_contracts(job, changed_job)] == ["enum-narrowed", "projection-removed"]


class TestCelRules:
    """An added or changed cel rule is breaking, a removed one widens; each shows its expression."""

    def _diff(self, tmp_path: Path, old: str, new: str) -> list[Change]:
        from tests import cel_kit

        cel_kit.write_contract(tmp_path / "a", old)
        cel_kit.write_contract(tmp_path / "b", new)
        (before,) = list(ContractSet.load(tmp_path / "a"))
        (after,) = list(ContractSet.load(tmp_path / "b"))
        return [c for c in diff_contracts(before, after) if c.kind.startswith("cel-")]

    def test_added_changed_and_removed(self, tmp_path: Path) -> None:
        """Adding a rule breaks, narrowing one breaks (shown before and after), removing one widens."""
        from tests import cel_kit

        rule = (
            "  - kind: cel\n    name: started_recently\n"
            "    expr: now - timestamp(data.started_at) <= duration('1h')\n"
        )
        without = cel_kit.CONTRACT.replace(rule, "")
        [added] = self._diff(tmp_path / "1", without, cel_kit.CONTRACT)
        assert (added.kind, added.breaking, added.widens) == ("cel-rule-added", True, False)
        assert "duration('1h')" in added.message
        [removed] = self._diff(tmp_path / "2", cel_kit.CONTRACT, without)
        assert (removed.kind, removed.breaking, removed.widens) == ("cel-rule-removed", False, True)
        narrowed = cel_kit.CONTRACT.replace("duration('1h')", "duration('30m')")
        [changed_rule] = self._diff(tmp_path / "3", cel_kit.CONTRACT, narrowed)
        assert (changed_rule.kind, changed_rule.breaking) == ("cel-rule-changed", True)
        assert "duration('1h')" in changed_rule.message
        assert "duration('30m')" in changed_rule.message
        described = cel_kit.CONTRACT.replace("the agent asked for\n", "the agent asked for, no more\n")
        assert self._diff(tmp_path / "4", cel_kit.CONTRACT, described) == []
