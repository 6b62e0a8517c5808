"""One pair of schemas (old, new) per change kind ``toolgate contracts diff`` names.

Each case is named by the kind its diff must report (``maximum-lowered``, ``not-added``, ...);
a kind that comes in two forms has a case per form (``property-added/open``). Every kind of
:mod:`toolgate.authoring._schema_diff` has a case: ``test_every_kind_has_a_case`` holds it.
"""

from __future__ import annotations

from typing import Any

from toolgate.authoring._schema_diff import _LOWER, _OPAQUE, _UPPER, _kebab

DIALECT = "https://json-schema.org/draft/2020-12/schema"
S: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}

Schema = dict[str, Any]


def obj(props: dict[str, Any], required: tuple[str, ...] = (), *, closed: bool = True, **kw: Any) -> Schema:
    """A root object schema with ``props``, closed unless ``closed=False``."""
    schema: Schema = {"$schema": DIALECT, "type": "object", "properties": props, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    schema.update(kw)
    return schema


def at(node: dict[str, Any]) -> Schema:
    """A closed object whose member ``a`` is ``node``."""
    return obj({"a": node}, ("a",))


_TYPE_OF = {"string": S, "array": {"type": "array"}, "object": {"type": "object"}, "number": INT}


def _bound_cases() -> dict[str, tuple[Schema, Schema]]:
    cases: dict[str, tuple[Schema, Schema]] = {}
    for keyword, kind in _UPPER.items():
        base, name = _TYPE_OF[kind], _kebab(keyword)
        cases[f"{name}-lowered"] = (at({**base, keyword: 10}), at({**base, keyword: 5}))
        cases[f"{name}-added"] = (at(base), at({**base, keyword: 5}))
        cases[f"{name}-raised"] = (at({**base, keyword: 5}), at({**base, keyword: 10}))
        cases[f"{name}-removed"] = (at({**base, keyword: 5}), at(base))
    for keyword, kind in _LOWER.items():
        base, name = _TYPE_OF[kind], _kebab(keyword)
        cases[f"{name}-raised"] = (at({**base, keyword: 1}), at({**base, keyword: 5}))
        cases[f"{name}-added"] = (at(base), at({**base, keyword: 1}))
        cases[f"{name}-lowered"] = (at({**base, keyword: 5}), at({**base, keyword: 1}))
        cases[f"{name}-removed"] = (at({**base, keyword: 5}), at(base))
    return cases


# keyword -> (the node without it, with it, with it changed)
_OPAQUE_NODES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    "not": (S, {**S, "not": {"const": "x"}}, {**S, "not": {"const": "y"}}),
    "contains": (
        {"type": "array"},
        {"type": "array", "contains": S},
        {"type": "array", "contains": INT},
    ),
    "minContains": (
        {"type": "array", "contains": S},
        {"type": "array", "contains": S, "minContains": 2},
        {"type": "array", "contains": S, "minContains": 3},
    ),
    "maxContains": (
        {"type": "array", "contains": S},
        {"type": "array", "contains": S, "maxContains": 3},
        {"type": "array", "contains": S, "maxContains": 2},
    ),
    "propertyNames": (
        {"type": "object"},
        {"type": "object", "propertyNames": {"maxLength": 5}},
        {"type": "object", "propertyNames": {"maxLength": 3}},
    ),
    "patternProperties": (
        {"type": "object"},
        {"type": "object", "patternProperties": {"^x": S}},
        {"type": "object", "patternProperties": {"^x": INT}},
    ),
    "dependentSchemas": (
        {"type": "object"},
        {"type": "object", "dependentSchemas": {"b": {"required": ["c"]}}},
        {"type": "object", "dependentSchemas": {"b": {"required": ["d"]}}},
    ),
    "dependentRequired": (
        {"type": "object"},
        {"type": "object", "dependentRequired": {"b": ["c"]}},
        {"type": "object", "dependentRequired": {"b": ["d"]}},
    ),
    "multipleOf": (INT, {**INT, "multipleOf": 2}, {**INT, "multipleOf": 3}),
    "uniqueItems": (
        {"type": "array"},
        {"type": "array", "uniqueItems": True},
        {"type": "array", "uniqueItems": True, "maxItems": 1},
    ),
    "additionalItems": (
        {"type": "array"},
        {"type": "array", "additionalItems": False},
        {"type": "array", "additionalItems": S},
    ),
    "unevaluatedItems": (
        {"type": "array"},
        {"type": "array", "unevaluatedItems": False},
        {"type": "array", "unevaluatedItems": S},
    ),
    "$dynamicRef": (
        {"type": "object"},
        {"type": "object", "$dynamicRef": "#a"},
        {"type": "object", "$dynamicRef": "#b"},
    ),
    "if": (
        {"type": "object"},
        {"type": "object", "if": {"required": ["b"]}, "then": {"required": ["c"]}},
        {"type": "object", "if": {"required": ["b"]}, "then": {"required": ["d"]}},
    ),
}


def _opaque_cases() -> dict[str, tuple[Schema, Schema]]:
    cases: dict[str, tuple[Schema, Schema]] = {}
    for keyword, (without, with_it, changed) in _OPAQUE_NODES.items():
        name = _kebab(keyword)
        cases[f"{name}-added"] = (at(without), at(with_it))
        cases[f"{name}-removed"] = (at(with_it), at(without))
        if keyword != "uniqueItems":  # true is its only asserting value
            cases[f"{name}-changed"] = (at(with_it), at(changed))
    return cases


CASES: dict[str, tuple[Schema, Schema]] = {
    "type-changed/narrowed": (at(S), at(INT)),
    "type-changed/widened": (at(INT), at({"type": ["integer", "string"]})),
    "enum-narrowed": (at({"enum": ["x", "y"]}), at({"enum": ["x"]})),
    "enum-widened": (at({"enum": ["x"]}), at({"enum": ["x", "y"]})),
    "const-changed": (at({"const": "x"}), at({"const": "y"})),
    "required-added": (obj({"a": S, "b": S}, ("a",)), obj({"a": S, "b": S}, ("a", "b"))),
    "required-removed": (obj({"a": S, "b": S}, ("a", "b")), obj({"a": S, "b": S}, ("a",))),
    "property-added/closed": (obj({"a": S}), obj({"a": S, "b": S})),
    "property-added/open": (obj({"a": S}, closed=False), obj({"a": S, "b": S}, closed=False)),
    "property-removed/closed": (obj({"a": S, "b": S}), obj({"a": S})),
    "property-removed/open": (obj({"a": S, "b": S}, closed=False), obj({"a": S}, closed=False)),
    "open-to-closed": (obj({"a": S}, closed=False), obj({"a": S})),
    "closed-to-open": (obj({"a": S}), obj({"a": S}, closed=False)),
    "additional-properties-added": (
        obj({"a": S}, closed=False),
        obj({"a": S}, closed=False, additionalProperties=S),
    ),
    "additional-properties-removed": (
        obj({"a": S}, closed=False, additionalProperties=S),
        obj({"a": S}, closed=False),
    ),
    "pattern-added": (at(S), at({**S, "pattern": "^x"})),
    "pattern-removed": (at({**S, "pattern": "^x"}), at(S)),
    "pattern-changed": (at({**S, "pattern": "^x"}), at({**S, "pattern": "^y"})),
    "format-added": (at(S), at({**S, "format": "date-time"})),
    "format-removed": (at({**S, "format": "date-time"}), at(S)),
    "format-changed": (at({**S, "format": "date-time"}), at({**S, "format": "email"})),
    "items-added": (at({"type": "array"}), at({"type": "array", "items": S})),
    "items-removed": (at({"type": "array", "items": S}), at({"type": "array"})),
    "prefix-items-added": (at({"type": "array"}), at({"type": "array", "prefixItems": [S]})),
    "prefix-items-removed": (at({"type": "array", "prefixItems": [S]}), at({"type": "array"})),
    "branch-added": (at({"oneOf": [S, INT]}), at({"oneOf": [S, INT, {"type": "boolean"}]})),
    "branch-removed": (at({"oneOf": [S, INT]}), at({"oneOf": [S]})),
    "branches-changed": (at({"oneOf": [S, INT]}), at({"anyOf": [S, {"type": "boolean"}]})),
    **_bound_cases(),
    **_opaque_cases(),
}


def expected_kinds() -> set[str]:
    """Every kind the schema diff can name, from its own keyword tables."""
    kinds = {
        "type-changed",
        "enum-narrowed",
        "enum-widened",
        "const-changed",
        "required-added",
        "required-removed",
        "property-added",
        "property-removed",
        "open-to-closed",
        "closed-to-open",
        "additional-properties-added",
        "additional-properties-removed",
        "items-added",
        "items-removed",
        "prefix-items-added",
        "prefix-items-removed",
        "branch-added",
        "branch-removed",
        "branches-changed",
    }
    kinds |= {f"{k}-{v}" for k in ("pattern", "format") for v in ("added", "removed", "changed")}
    for keyword in (*_UPPER, *_LOWER):
        kinds |= {f"{_kebab(keyword)}-{v}" for v in ("added", "removed", "raised", "lowered")}
    for keyword in (*_OPAQUE, "if"):
        kinds |= {f"{_kebab(keyword)}-{v}" for v in ("added", "removed")}
        if keyword != "uniqueItems":
            kinds.add(f"{_kebab(keyword)}-changed")
    return kinds
