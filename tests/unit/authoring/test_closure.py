"""Closing an imported outputSchema: {"allOf": [upstream, closure]}, sound by construction."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate.authoring._close import Unclosable, closed, rederive, split

from tests.properties import DERANDOMIZED

MAX_STRING = 4
MAX_ITEMS = 3
UNKNOWN = "zz"  # a member name no generated schema declares and no generated pattern matches


def _validator(schema: Any) -> Any:
    return jsonschema_rs.Draft202012Validator(
        schema, validate_formats=True, pattern_options=jsonschema_rs.RegexOptions()
    )


def _close(upstream: dict[str, Any]) -> Any:
    return _validator(closed(upstream, "t", max_string=MAX_STRING, max_items=MAX_ITEMS))


STATE = {"state": {"type": "string"}}


class TestIssueExamples:
    """The shapes an outside review found wrong, each closed soundly now."""

    def test_a_not_cannot_be_turned_around(self) -> None:
        """A member forbidden under not stays forbidden (closing never rewrites under not)."""
        upstream = {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "not": {"properties": {"b": {"const": 1}}, "required": ["b"]},
        }
        check = _close(upstream)
        assert not check.is_valid({"a": "x", "b": 1})
        assert check.is_valid({"a": "x"})

    def test_if_then_bounds_still_hold(self) -> None:
        """if/then keeps its meaning: a long string stays rejected."""
        upstream = {
            "type": "object",
            "properties": {"s": {"type": "string", "if": {"type": "string"}, "then": {"maxLength": 3}}},
        }
        check = _close(upstream)
        assert not check.is_valid({"s": "x" * 2000})
        assert check.is_valid({"s": "abc"})

    def test_one_of_and_contains_keep_their_meaning(self) -> None:
        """Bounds beside oneOf or contains/maxContains never make another branch match."""
        one_of = {
            "type": "object",
            "properties": {"s": {"type": "string", "oneOf": [{"maxLength": 10}, {"minLength": 3}]}},
        }
        assert not _close(one_of).is_valid({"s": "abcd"})  # both branches: the upstream rejects it
        contains = {
            "type": "object",
            "properties": {
                "l": {
                    "type": "array",
                    "items": {"type": "string"},
                    "contains": {"const": "x"},
                    "maxContains": 1,
                }
            },
        }
        assert not _close(contains).is_valid({"l": ["x", "x"]})
        assert _close(contains).is_valid({"l": ["x", "y"]})

    @pytest.mark.parametrize(
        "upstream",
        [
            {"type": "object", "properties": STATE, "allOf": [{"properties": {"x": {"type": "string"}}}]},
            {"type": "object", "properties": STATE, "anyOf": [{"properties": {"x": {"type": "string"}}}]},
            {"type": "object", "properties": STATE, "oneOf": [{"properties": {"x": {"type": "string"}}}]},
            {
                "type": "object",
                "if": {"required": ["state"]},
                "then": {"properties": STATE},
                "else": {"properties": STATE},
            },
            {
                "type": "object",
                "properties": STATE,
                "dependentSchemas": {"state": {"properties": {"x": {"type": "string"}}}},
            },
            {"type": "object", "allOf": [{"$ref": "#/$defs/s"}], "$defs": {"s": {"properties": STATE}}},
            {"type": "object", "properties": STATE, "additionalProperties": True},
            {"type": "object", "properties": STATE, "patternProperties": {"^x_": {"type": "string"}}},
            {"type": "object", "properties": STATE, "unevaluatedProperties": True},
        ],
    )
    def test_open_objects_through_every_applicator_are_closed(self, upstream: dict[str, Any]) -> None:
        """{"state": "ok", "zz": ...} is rejected wherever the open object is reached from."""
        check = _close(upstream)
        assert _validator(upstream).is_valid({"state": "ok", UNKNOWN: "approve"})
        assert not check.is_valid({"state": "ok", UNKNOWN: "approve"})
        assert check.is_valid({"state": "ok"})

    def test_open_objects_inside_array_items_are_closed(self) -> None:
        """An object reached through items is closed too."""
        upstream = {
            "type": "object",
            "properties": {"runs": {"type": "array", "items": {"type": "object", "properties": STATE}}},
        }
        check = _close(upstream)
        assert not check.is_valid({"runs": [{"state": "ok", UNKNOWN: 1}]})
        assert check.is_valid({"runs": [{"state": "ok"}]})
        assert not check.is_valid({"runs": [{"state": "ok"}] * (MAX_ITEMS + 1)})

    def test_a_base_used_through_all_of_and_ref_is_not_over_closed(self) -> None:
        """Members declared beside an allOf -> $ref base pass: the closure is the union."""
        upstream = {
            "type": "object",
            "allOf": [{"$ref": "#/$defs/base"}],
            "properties": {"b": {"type": "string"}},
            "$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"}}}},
        }
        check = _close(upstream)
        assert check.is_valid({"a": "x", "b": "y"})
        assert not check.is_valid({"a": "x", "b": "y", UNKNOWN: "z"})

    def test_a_recursive_shape_is_closed_at_every_depth(self) -> None:
        """A $ref cycle through a member closes each level (the closure's own $defs cycle)."""
        upstream = {
            "type": "object",
            "$ref": "#/$defs/node",
            "$defs": {"node": {"type": "object", "properties": {**STATE, "child": {"$ref": "#/$defs/node"}}}},
        }
        check = _close(upstream)
        assert check.is_valid({"state": "a", "child": {"state": "b", "child": {"state": "c"}}})
        assert not check.is_valid({"state": "a", "child": {"state": "b", "child": {UNKNOWN: 1}}})

    @pytest.mark.parametrize(
        ("upstream", "reason"),
        [
            (
                {"type": "object", "$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
                "declares no member",
            ),
            ({"type": "object", "properties": {"a": {}}}, "declares no member"),
            ({"type": "object", "properties": {"a": True}}, "declares no member"),
            ({"type": "object", "additionalProperties": {"type": "string"}}, "free-form map"),
            ({"type": "object", "unevaluatedProperties": {"type": "string"}}, "free-form map"),
            ({"type": "object", "properties": {"l": {"type": "array"}}}, "items no schema constrains"),
            (
                {"type": "object", "properties": {"l": {"type": "array", "contains": {"type": "string"}}}},
                "items",
            ),
            (
                {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/s.json"}}},
                "not a local",
            ),
            ({"type": "object", "properties": {"a": {"$ref": "#anchor"}}}, "not a local"),
            ({"type": "object", "properties": {"a": {"$dynamicRef": "#meta"}}}, "$dynamicRef"),
            ({"type": "object", "properties": {"a": {"$id": "urn:x", "type": "string"}}}, "nested $id"),
            (
                {"type": "object", "$defs": {"x": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
                "nested",
            ),
            ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}, "not a draft"),
            ({"type": "object", "properties": {"a": {"const": {"k": 1}}}}, "object or array value"),
            ({"type": "object", "properties": {"a": {"type": "string", "minLength": 5}}}, "exceed the bound"),
            (
                {
                    "type": "object",
                    "properties": {"l": {"type": "array", "items": {"type": "integer"}, "minItems": 9}},
                },
                "exceed",
            ),
            (
                {"type": "object", "patternProperties": {"(?=a)": {"type": "string"}}, "properties": STATE},
                "compile",
            ),
        ],
    )
    def test_what_cannot_be_closed_is_refused_with_the_place(
        self, upstream: dict[str, Any], reason: str
    ) -> None:
        """Closing refuses a shape it cannot close soundly, naming where and why."""
        with pytest.raises(Unclosable, match=r"^/") as caught:
            closed(upstream, "t", max_string=MAX_STRING, max_items=MAX_ITEMS)
        assert reason in str(caught.value)

    def test_work_is_bounded_by_positions_and_nesting(self) -> None:
        """A long $ref chain or a shape of too many positions is refused, never a RecursionError."""
        chain: dict[str, Any] = {
            f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}}}
            for i in range(200)
        }
        chain["d200"] = {"type": "string"}
        with pytest.raises(Unclosable, match="nested deeper than 64"):
            closed({"type": "object", "$ref": "#/$defs/d0", "$defs": chain}, "t", max_string=4, max_items=3)
        many = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2100)}}
        with pytest.raises(Unclosable, match="more than 2000 positions"):
            closed(many, "t", max_string=4, max_items=3)

    def test_a_written_closure_is_recognised_and_re_derived(self) -> None:
        """split() finds the two parts and rederive() tells an edited closure apart."""
        written = closed({"type": "object", "properties": STATE}, "t", max_string=4, max_items=3)
        parts = split(written)
        assert parts is not None
        upstream, skeleton = parts
        assert rederive(upstream, skeleton)
        edited = {**skeleton, "$defs": {**skeleton["$defs"], "p0": {"additionalProperties": True}}}
        assert not rederive(upstream, edited)
        assert split({"allOf": [upstream]}) is None


# --- the property: every applicator of Draft 2020-12, both directions ---------------------------

NAMES = ["a", "b", "c", "x_1", "y2"]
PATTERNS = ["^x_", "^y"]

_leaf = st.sampled_from(
    [
        {"type": "string"},
        {"type": "string", "maxLength": 2},
        {"type": "integer"},
        {"type": ["string", "null"]},
        {"enum": ["p", "q", 1]},
        {"const": "p"},
        {"type": "boolean"},
        {"$ref": "#/$defs/d"},
        {"$ref": "#"},
    ]
)


def _node(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    pairs = st.dictionaries(st.sampled_from(NAMES[:3]), children, max_size=3)
    obj = st.fixed_dictionaries(
        {"type": st.just("object"), "properties": pairs},
        optional={
            "required": st.lists(st.sampled_from(NAMES[:3]), max_size=2, unique=True),
            "additionalProperties": st.booleans(),
            "unevaluatedProperties": st.just(False),
            "patternProperties": st.dictionaries(st.sampled_from(PATTERNS), children, min_size=1, max_size=2),
            "not": children,
            "if": children,
            "then": children,
            "else": children,
            "dependentSchemas": st.dictionaries(st.sampled_from(NAMES[:3]), children, min_size=1, max_size=1),
            "allOf": st.lists(children, min_size=1, max_size=2),
            "anyOf": st.lists(children, min_size=1, max_size=2),
            "oneOf": st.lists(children, min_size=1, max_size=2),
            "propertyNames": st.just({"maxLength": 3}),
            "$ref": st.sampled_from(["#/$defs/d", "#"]),
        },
    )
    arr = st.fixed_dictionaries(
        {"type": st.just("array")},
        optional={
            "items": children,
            "prefixItems": st.lists(children, min_size=1, max_size=2),
            "contains": children,
            "maxContains": st.just(1),
            "unevaluatedItems": st.just(False) | children,
            "maxItems": st.just(2),
        },
    )
    return obj | arr | st.builds(lambda c: {"anyOf": c}, st.lists(children, min_size=1, max_size=2))


_schemas = st.recursive(_leaf, _node, max_leaves=8)
_upstreams = st.builds(
    lambda root, d: {**root, "type": "object", "$defs": {"d": d}},
    _node(_schemas),
    _schemas,
)
_instances = st.recursive(
    st.sampled_from([None, True, False, 0, 1, "p", "q", "", "xxxxx"]),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(NAMES), c, max_size=4),
    max_leaves=10,
)


_SCALARS = st.sampled_from([None, True, False, 0, 1, "p", "q", "", "xxxxx"])


def _shaped(node: Any, root: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped by the schema's own members and items (so that many are accepted)."""
    if depth > 5 or not isinstance(node, dict):
        return _SCALARS
    options: list[st.SearchStrategy[Any]] = []
    ref = node.get("$ref")
    if ref == "#":
        options.append(st.deferred(lambda: _shaped(root, root, depth + 1)))
    elif ref == "#/$defs/d":
        options.append(st.deferred(lambda: _shaped(root["$defs"]["d"], root, depth + 1)))
    for keyword in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(keyword, []):
            options.append(_shaped(branch, root, depth + 1))
    members = {name: _shaped(sub, root, depth + 1) for name, sub in node.get("properties", {}).items()}
    for pattern, sub in node.get("patternProperties", {}).items():
        members[{"^x_": "x_1", "^y": "y2"}[pattern]] = _shaped(sub, root, depth + 1)
    if node.get("type") == "object" or members:
        options.append(st.fixed_dictionaries({}, optional=members))
    if node.get("type") == "array":
        items = [_shaped(node[k], root, depth + 1) for k in ("items", "contains") if k in node]
        items += [_shaped(sub, root, depth + 1) for sub in node.get("prefixItems", [])]
        options.append(st.lists(st.one_of(*items) if items else _SCALARS, max_size=3))
    return st.one_of(*options, _SCALARS) if options else _SCALARS


def _objects(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every object in ``value``."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for name, member in value.items():
            found.extend(_objects(member, (*path, name)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.extend(_objects(item, (*path, i)))
    return found


def _inject(value: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return {**value, UNKNOWN: "approve production"}
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _inject(value[head], rest)}
    return [_inject(v, rest) if i == head else v for i, v in enumerate(value)]


def _bounded(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_STRING
    if isinstance(value, list):
        return len(value) <= MAX_ITEMS and all(map(_bounded, value))
    if isinstance(value, dict):
        return all(map(_bounded, value.values()))
    return True


class TestClosingProperty:
    """Over schemas using every applicator: closed accepts a subset and rejects every unknown member."""

    def test_closed_is_a_subset_that_rejects_unknown_members_everywhere(self) -> None:
        """For each schema closing accepts: every value closed accepts, the upstream accepts,
        is bounded, and turns rejected when an unknown member is added to any of its objects."""
        tally = {"closed": 0, "refused": 0, "accepted": 0, "injected": 0}

        @settings(DERANDOMIZED, max_examples=300)
        @given(upstream=_upstreams, data=st.data())
        def check(upstream: dict[str, Any], data: st.DataObject) -> None:
            try:
                original = _validator(upstream)
            except ValueError:
                return  # not a schema jsonschema-rs compiles: import refuses it before closing
            try:
                check = _close(upstream)
            except Unclosable:
                tally["refused"] += 1
                return
            tally["closed"] += 1
            values = st.one_of(_shaped(upstream, upstream), _shaped(upstream, upstream), _instances)
            for value in data.draw(st.lists(values, min_size=20, max_size=20)):
                if not check.is_valid(value):
                    continue
                tally["accepted"] += 1
                assert original.is_valid(value), (upstream, value)
                assert _bounded(value), (upstream, value)
                for path in _objects(value):
                    tally["injected"] += 1
                    assert not check.is_valid(_inject(value, path)), (upstream, value, path)

        check()
        # The property was exercised on closed schemas and accepted values, not only on refusals.
        assert tally["closed"] >= 50, tally
        assert tally["accepted"] >= 100, tally
        assert tally["injected"] >= 100, tally
