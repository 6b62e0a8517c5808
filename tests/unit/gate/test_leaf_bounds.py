"""The agent envelope's leaf bounds follow the contract: each projected string and array is
bounded by what the contract's schema guarantees at its pointer (4,096 characters and 1,000
items where it says nothing), and a bound past limits.max_bytes is refused at load."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from toolgate._errors import ContractError
from toolgate.authoring._lint import lint_contracts
from toolgate.gate._contracts import ContractSet, schema_bound
from toolgate.gate._gate import Gate

from tests.unit.builders import NOW, REQUEST_ID, message, review_request

TOOL = "reader"


def _schema(note: dict[str, Any], items: dict[str, Any] | None = None) -> dict[str, Any]:
    entries = items or {"type": "array", "maxItems": 10, "items": {"type": "object"}}
    entries.setdefault("items", {"type": "object"})
    entries["items"] = {
        **entries["items"],
        "additionalProperties": False,
        "properties": {"name": {"type": "string", "maxLength": 32}},
    }
    return {
        "type": "object",
        "required": ["tool", "request_id", "outcome", "data"],
        "properties": {
            "tool": {"const": TOOL},
            "request_id": {"type": "string", "maxLength": 64},
            "outcome": {"const": "success"},
            "data": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"content": note, "entries": entries},
            },
        },
        "additionalProperties": False,
    }


def _write(root: Path, schema: dict[str, Any], max_bytes: int = 65536) -> Path:
    folder = root / TOOL / "v1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "contract.yaml").write_text(
        textwrap.dedent(
            f"""\
            tool: {TOOL}
            version: 1
            status: active
            schema: schema.json
            limits: {{max_bytes: {max_bytes}, max_depth: 6}}
            projection: [/data/content, /data/entries/*/name]
            free_text:
            - {{pointer: /data/content, reason: a file's text}}
            """
        )
    )
    (folder / "schema.json").write_text(json.dumps(schema))
    return folder


def _evaluate(root: Path, data: dict[str, Any]) -> Any:
    value = {"tool": TOOL, "request_id": REQUEST_ID, "outcome": "success", "data": data}
    gate = Gate(ContractSet.load(root))
    return gate.evaluate(message(value, tool=TOOL), review_request(tool=TOOL, bind={}), NOW)


class TestTheLeafFollowsTheSchema:
    """A bound the schema sets at a projected pointer is the envelope's bound there."""

    def test_a_file_of_5000_characters_passes(self, tmp_path: Path) -> None:
        """maxLength 6000 in the schema: 5,000 characters reach the agent whole."""
        _write(tmp_path, _schema({"type": "string", "maxLength": 6000}))
        verdict = _evaluate(tmp_path, {"content": "x" * 5000})
        assert verdict.accepted, verdict.diagnostics
        assert json.loads(verdict.agent)["data"] == {"content": "x" * 5000}

    def test_an_array_of_objects_of_1500_items_passes(self, tmp_path: Path) -> None:
        """maxItems 2000 on an array projected item by item: 1,500 items reach the agent."""
        entries = {"type": "array", "maxItems": 2000}
        _write(tmp_path, _schema({"type": "string", "maxLength": 10}, entries))
        names = [{"name": f"n{i}"} for i in range(1500)]
        verdict = _evaluate(tmp_path, {"entries": names})
        assert verdict.accepted, verdict.diagnostics
        assert json.loads(verdict.agent)["data"] == {"entries": names}

    def test_one_over_the_schemas_bound_names_it(self, tmp_path: Path) -> None:
        """6,001 characters against maxLength 6000: a schema violation naming the bound and the place."""
        _write(tmp_path, _schema({"type": "string", "maxLength": 6000}))
        verdict = _evaluate(tmp_path, {"content": "x" * 6001})
        assert (verdict.stage, verdict.code) == ("schema", "SCHEMA_VIOLATION")
        assert verdict.diagnostics is not None
        assert "longer than 6000 characters" in verdict.diagnostics.message
        assert verdict.diagnostics.instance_path == "/data/content"
        assert verdict.diagnostics.schema_path == "/properties/data/properties/content/maxLength"

    def test_lint_finds_no_misfit_past_4096(self, tmp_path: Path) -> None:
        """A projected string bounded at 6000 by the schema is no projection-exceeds-envelope finding."""
        _write(tmp_path, _schema({"type": "string", "maxLength": 6000}))
        rules = [f.rule for f in lint_contracts(ContractSet.load(tmp_path))]
        assert "projection-exceeds-envelope" not in rules


class TestWhereTheSchemaSaysNothing:
    """Without a bound in the schema the envelope keeps 4,096 characters, and says so."""

    def test_the_default_names_the_pointer_and_the_file(self, tmp_path: Path) -> None:
        """5,000 characters where the schema sets no maxLength: refused naming the pointer, bound and file."""
        _write(tmp_path, _schema({"type": "string"}))
        verdict = _evaluate(tmp_path, {"content": "x" * 5000})
        assert (verdict.stage, verdict.code) == ("project", "INTERNAL_ERROR")
        assert verdict.diagnostics is not None
        said = verdict.diagnostics.message
        assert "/data/content is longer than 4096 characters" in said
        assert "schema.json sets no maxLength" in said
        assert "x" * 10 not in said

    def test_lint_says_so(self, tmp_path: Path) -> None:
        """The unbounded projected string is a projection-exceeds-envelope finding."""
        _write(tmp_path, _schema({"type": "string"}))
        findings = [
            f for f in lint_contracts(ContractSet.load(tmp_path)) if f.rule == "projection-exceeds-envelope"
        ]
        assert [f.pointer for f in findings] == ["$.projection[0]"]


class TestABoundPastMaxBytes:
    """A schema bound at a projected pointer larger than limits.max_bytes lets arrive is refused at load."""

    def test_max_length(self, tmp_path: Path) -> None:
        """maxLength 10000, max_bytes 4096: one line naming contract.yaml, the projection entry, the bound."""
        _write(tmp_path, _schema({"type": "string", "maxLength": 10000}), max_bytes=4096)
        with pytest.raises(ContractError) as refused:
            ContractSet.load(tmp_path)
        said = str(refused.value)
        assert "\n" not in said
        assert said.startswith(str(tmp_path / TOOL / "v1" / "contract.yaml"))
        assert "`$.projection[0]`" in said
        assert "maxLength 10000" in said
        assert "limits.max_bytes 4096" in said

    def test_max_items(self, tmp_path: Path) -> None:
        """maxItems 3000 on an array of max_bytes 4096 (at most 2048 items fit): refused, naming maxItems."""
        entries = {"type": "array", "maxItems": 3000}
        _write(tmp_path, _schema({"type": "string", "maxLength": 10}, entries), max_bytes=4096)
        with pytest.raises(ContractError, match=r"maxItems 3000.*limits\.max_bytes 4096") as refused:
            ContractSet.load(tmp_path)
        assert "`$.projection[1]`" in str(refused.value)

    def test_at_max_bytes_loads(self, tmp_path: Path) -> None:
        """maxLength equal to max_bytes loads, and is the envelope's bound."""
        _write(tmp_path, _schema({"type": "string", "maxLength": 4096}), max_bytes=4096)
        (contract,) = list(ContractSet.load(tmp_path))
        assert contract.leaf_bounds["data", "content"].max_length == 4096


class TestSchemaBound:
    """The bound every accepted value satisfies: the tightest of what always applies, the
    loosest of branches that may."""

    def test_all_of_and_ref(self) -> None:
        """allOf members and $ref targets all apply: the smallest maxLength holds."""
        schema = {
            "$defs": {"short": {"maxLength": 50}},
            "properties": {"a": {"allOf": [{"maxLength": 80}, {"$ref": "#/$defs/short"}]}},
        }
        assert schema_bound(schema, ("a",), "maxLength") == 50

    def test_any_of(self) -> None:
        """anyOf branches: the largest holds; one branch without a bound leaves none."""
        bounded = {"properties": {"a": {"anyOf": [{"maxLength": 5}, {"maxLength": 9}]}}}
        assert schema_bound(bounded, ("a",), "maxLength") == 9
        loose = {"properties": {"a": {"anyOf": [{"maxLength": 5}, {"type": "string"}]}}}
        assert schema_bound(loose, ("a",), "maxLength") is None

    def test_branches_that_admit_nothing_there(self) -> None:
        """A branch of another type, or a closed object without the member, does not loosen the bound."""
        schema = {
            "oneOf": [
                {"properties": {"a": {"anyOf": [{"maxLength": 5}, {"type": "integer"}]}}},
                {"properties": {"b": {}}, "additionalProperties": False},
            ]
        }
        assert schema_bound(schema, ("a",), "maxLength") == 5

    def test_an_open_branch_leaves_none(self) -> None:
        """A branch that lets the member through unconstrained leaves no bound."""
        schema = {"anyOf": [{"properties": {"a": {"maxLength": 5}}}, {"properties": {"b": {}}}]}
        assert schema_bound(schema, ("a",), "maxLength") is None

    def test_refs_resolve_in_their_resource(self) -> None:
        """A ``#/$defs`` reference under a subschema with its own $id resolves there (an imported closure)."""
        schema = {
            "$defs": {"p0": {"maxLength": 1}},
            "properties": {
                "a": {"$id": "urn:example:inner", "$ref": "#/$defs/p0", "$defs": {"p0": {"maxLength": 700}}}
            },
        }
        assert schema_bound(schema, ("a",), "maxLength") == 700

    def test_items_and_const(self) -> None:
        """Every item's bound through items and prefixItems; enum and const give their longest value."""
        schema = {
            "properties": {
                "a": {"prefixItems": [{"maxLength": 3}], "items": {"maxLength": 7}},
                "b": {"enum": ["one", "three"]},
            }
        }
        assert schema_bound(schema, ("a", "*"), "maxLength") == 7
        assert schema_bound(schema, ("b",), "maxLength") == 5

    def test_a_cycle_claims_nothing(self) -> None:
        """A $ref cycle is followed a bounded number of times, then no bound is claimed."""
        schema = {"$defs": {"loop": {"$ref": "#/$defs/loop"}}, "properties": {"a": {"$ref": "#/$defs/loop"}}}
        assert schema_bound(schema, ("a",), "maxLength") is None


class TestTheDefaultBoundsCrossed:
    """Each default bound a projection crosses is named: a leaf array, its items, an array of objects."""

    def _refused(self, tmp_path: Path, data: dict[str, Any], schema: dict[str, Any]) -> str:
        _write(tmp_path, schema)
        folder = tmp_path / TOOL / "v1"
        text = (
            (folder / "contract.yaml").read_text().replace("[/data/content,", "[/data/content, /data/tags,")
        )
        (folder / "contract.yaml").write_text(text)
        verdict = _evaluate(tmp_path, data)
        assert (verdict.stage, verdict.code) == ("project", "INTERNAL_ERROR")
        assert verdict.diagnostics is not None
        return str(verdict.diagnostics.message)

    def _schema(self, tags: dict[str, Any], entries: dict[str, Any] | None = None) -> dict[str, Any]:
        schema = _schema({"type": "string", "maxLength": 10}, entries)
        schema["properties"]["data"]["properties"]["tags"] = tags
        return schema

    def test_a_leaf_array(self, tmp_path: Path) -> None:
        """1,001 tags where the schema sets no maxItems: named as more than 1000 items."""
        schema = self._schema({"type": "array", "items": {"type": "integer"}})
        said = self._refused(tmp_path, {"tags": list(range(1001))}, schema)
        assert "/data/tags is more than 1000 items" in said
        assert "sets no maxItems" in said

    def test_its_string_items(self, tmp_path: Path) -> None:
        """A tag of 5,000 characters where the items set no maxLength: named as such."""
        schema = self._schema({"type": "array", "maxItems": 5, "items": {"type": "string"}})
        said = self._refused(tmp_path, {"tags": ["t" * 5000]}, schema)
        assert "/data/tags is holding a string longer than 4096 characters" in said
        assert "maxLength on its items" in said

    def test_an_array_of_objects(self, tmp_path: Path) -> None:
        """1,001 entries projected item by item where the schema sets no maxItems: named with the pointer."""
        schema = self._schema({"type": "integer"}, {"type": "array"})
        said = self._refused(tmp_path, {"entries": [{"name": "n"}] * 1001}, schema)
        assert "/data/entries/*/name is in an array of more than 1000 items" in said


class TestSchemaBoundShapes:
    """The places a bound can come from, and the ones that leave none."""

    def test_members_through_additional_properties(self) -> None:
        """A member no ``properties`` names: additionalProperties' schema applies, false admits none."""
        open_ = {"additionalProperties": {"maxLength": 12}}
        assert schema_bound(open_, ("any",), "maxLength") == 12
        closed = {"anyOf": [{"maxLength": 3}, {"additionalProperties": False, "properties": {}}]}
        assert schema_bound({"properties": {"a": {"maxLength": 3}}, **closed}, ("a",), "maxLength") == 3
        assert schema_bound({"patternProperties": {"^a": {"maxLength": 1}}}, ("a",), "maxLength") is None

    def test_arrays(self) -> None:
        """No items (or prefixItems alone) leave every item free; a false schema admits nothing."""
        assert schema_bound({"type": "array"}, ("*",), "maxLength") is None
        assert schema_bound({"prefixItems": [{"maxLength": 2}]}, ("*",), "maxLength") is None
        assert schema_bound({"prefixItems": [{"maxLength": 2}], "items": False}, ("*",), "maxLength") == 2
        assert schema_bound({"type": "string"}, ("*",), "maxLength") is None
        assert schema_bound({"type": "array", "enum": [[1, 2], [3]]}, (), "maxItems") == 2

    def test_a_member_of_a_value_that_is_no_object(self) -> None:
        """A branch where the parent is a string holds no member: the other branch's bound stands."""
        inner = {"properties": {"b": {"maxLength": 3}}}
        schema = {"anyOf": [{"properties": {"a": inner}}, {"properties": {"a": {"type": "string"}}}]}
        assert schema_bound(schema, ("a", "b"), "maxLength") == 3

    def test_references_it_cannot_follow(self) -> None:
        """A reference outside the document or to no place claims no bound from it."""
        assert schema_bound({"$ref": "https://example.com/s.json"}, (), "maxLength") is None
        assert schema_bound({"$ref": "#/$defs/none"}, (), "maxLength") is None
        assert schema_bound({"$ref": "#/bad~escape"}, (), "maxLength") is None
        assert schema_bound({"properties": {"a": True}}, ("a",), "maxLength") is None
