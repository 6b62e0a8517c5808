"""The output schema ``toolgate mcp-proxy`` advertises for a tool, from the reviewed contract alone.

:func:`advertised_output_schema` is the schema of the projected ``data`` the host receives as
``structuredContent``, with the types, ``required`` members and bounds the gate guarantees:
each projected leaf carries the structural keywords of the subschemas the contract's schema
applies at that place in every case (the node, its local ``$ref`` and ``allOf``),
intersected with the projection's own closed leaf (scalars or arrays of scalars, within the
``maxLength``/``maxItems`` the schema guarantees at the leaf, or where it guarantees none
strings of at most 4,096 characters and at most 1,000 items: ``Contract.leaf_bounds``).
No ``description``, ``title`` or other prose of the schema is carried over: only keywords
a validator reads, of which the upstream's own strings (``enum``/``const`` strings, ``pattern``
and ``format`` values) are listed for review by :func:`advertised_texts` (lint's
``unreviewed-text`` while the version is a draft).
"""

from __future__ import annotations

import math
from typing import Any

from toolgate.gate._contracts import (
    ENVELOPE_MAX_ITEMS,
    ENVELOPE_MAX_LENGTH,
    EVERY_ITEM,
    Contract,
    LeafBounds,
    in_place,
    item_schemas,
)

LEAF_MAX_LENGTH = ENVELOPE_MAX_LENGTH  # a projected leaf's bounds where the schema sets none
LEAF_MAX_ITEMS = ENVELOPE_MAX_ITEMS
_DEFAULT_BOUNDS = LeafBounds(LEAF_MAX_LENGTH, LEAF_MAX_ITEMS, LEAF_MAX_LENGTH)  # a pointer loaded with none
_SCALARS = ("string", "number", "integer", "boolean", "null")
_LEAF_TYPES = frozenset({*_SCALARS, "array"})
_NUMERIC_BOUNDS_MAX = ("maximum", "exclusiveMaximum")
_NUMERIC_BOUNDS_MIN = ("minimum", "exclusiveMinimum")


def _applied(root: dict[str, Any], node: Any) -> list[dict[str, Any]]:
    """``node`` and the subschemas that always apply to the same instance: local ``$ref``
    targets and ``allOf`` members (not ``anyOf``/``oneOf``/``if`` branches, which may not)."""
    return in_place(root, node, ("allOf",), most=256)


def _types(nodes: list[dict[str, Any]]) -> set[str]:
    allowed = set(_LEAF_TYPES)
    for node in nodes:
        kind = node.get("type")
        named = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else None
        if named is None:
            continue
        if "number" in named:
            named.add("integer")
        allowed &= named
    if "number" in allowed:
        allowed.discard("integer")  # number already holds the integers
    return allowed


def _bounded(
    nodes: list[dict[str, Any]],
    types: set[str],
    *,
    items: bool,
    max_length: int = LEAF_MAX_LENGTH,
    max_items: int = LEAF_MAX_ITEMS,
) -> dict[str, Any]:
    """The merged keywords of ``nodes`` for the given types: the tightest bound of each,
    strings and arrays at most the envelope's ``max_length`` and ``max_items`` there."""
    out: dict[str, Any] = {}
    ordered = [t for t in (*_SCALARS, "array") if t in types]
    if ordered:
        out["type"] = ordered[0] if len(ordered) == 1 else ordered
    else:
        out["not"] = {}  # no value can be projected here
    for node in nodes:
        for keyword in ("maxLength", "maxItems", *_NUMERIC_BOUNDS_MAX):
            value = node.get(keyword)
            if finite_number(value) and (keyword not in out or value < out[keyword]):
                out[keyword] = value
        for keyword in ("minLength", "minItems", *_NUMERIC_BOUNDS_MIN):
            value = node.get(keyword)
            if finite_number(value) and (keyword not in out or value > out[keyword]):
                out[keyword] = value
        if "const" in node and "const" not in out:
            out["const"] = node["const"]
        enum = node.get("enum")
        if isinstance(enum, list):
            out["enum"] = enum if "enum" not in out else [v for v in out["enum"] if v in enum]
        if isinstance(node.get("pattern"), str):
            out.setdefault("allOf", []).append({"pattern": node["pattern"]})
        if isinstance(node.get("format"), str):
            out.setdefault("format", node["format"])
        if finite_number(node.get("multipleOf")):
            out.setdefault("multipleOf", node["multipleOf"])
        if node.get("uniqueItems") is True:
            out["uniqueItems"] = True
    patterns = out.pop("allOf", [])
    if len(patterns) == 1:
        out["pattern"] = patterns[0]["pattern"]
    elif patterns:
        out["allOf"] = patterns
    if "string" in types:
        out["maxLength"] = min(out.get("maxLength", max_length), max_length)
    if "array" in types and not items:
        out["maxItems"] = min(out.get("maxItems", max_items), max_items)
    return out


def finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _leaf(root: dict[str, Any], nodes: list[dict[str, Any]], bounds: LeafBounds) -> dict[str, Any]:
    types = _types(nodes)
    leaf = _bounded(nodes, types, items=False, max_length=bounds.max_length, max_items=bounds.max_items)
    if "array" in types:
        item_nodes = [
            n for node in nodes if isinstance(node.get("items"), dict) for n in _applied(root, node["items"])
        ]
        item_types = _types(item_nodes) - {"array"}
        items = _bounded(item_nodes, item_types, items=True, max_length=bounds.items_max_length)
        leaf["items"] = items
    return leaf


def _success_data(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The subschemas applied to ``data`` in the success branch(es) of an envelope schema."""
    found: list[dict[str, Any]] = []
    for node in _every_branch(schema):
        members = node.get("properties")
        if not isinstance(members, dict) or "data" not in members or "outcome" not in members:
            continue
        outcome = members["outcome"]
        if isinstance(outcome, dict) and outcome.get("const") == "failure":
            continue
        found += _applied(schema, members["data"])
    return found


def _every_branch(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The root and its oneOf/anyOf branches (an envelope's success and failure)."""
    out: list[dict[str, Any]] = []
    for node in _applied(schema, schema):
        out.append(node)
        for keyword in ("oneOf", "anyOf"):
            branches = node.get(keyword)
            if isinstance(branches, list):
                for branch in branches:
                    out += _applied(schema, branch)
    return out


def advertised_output_schema(contract: Contract) -> dict[str, Any] | None:
    """The schema of the projected ``data`` (None: a text-only contract, no data)."""
    if not contract.data_projection:
        return None
    root = contract.schema
    top: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    data_nodes = _success_data(root)
    for _, tokens in contract.data_projection:
        node, nodes = top, data_nodes
        at = 1
        while at < len(tokens):
            token = tokens[at]
            below = [
                n
                for parent in nodes
                if isinstance(parent.get("properties"), dict) and token in parent["properties"]
                for n in _applied(root, parent["properties"][token])
            ]
            required = any(isinstance(p.get("required"), list) and token in p["required"] for p in nodes)
            if required:
                node.setdefault("required", [])
                if token not in node["required"]:
                    node["required"].append(token)
            if at == len(tokens) - 1:
                node["properties"][token] = _leaf(
                    root, below, contract.leaf_bounds.get(tokens, _DEFAULT_BOUNDS)
                )
            elif tokens[at + 1] == EVERY_ITEM:  # an array of objects, projected item by item
                array = _array_of_objects(below, contract.array_bounds.get(tokens[: at + 1], LEAF_MAX_ITEMS))
                node = node["properties"].setdefault(token, array)["items"]
                nodes = [n for parent in below for item in item_schemas(parent) for n in _applied(root, item)]
                at += 2
                continue
            else:
                node = node["properties"].setdefault(token, _closed_object())
            nodes = below
            at += 1
    _prune_required(top)
    defs = root.get("$defs")
    bounds = closure_bounds(defs.get("structuredContent")) if isinstance(defs, dict) else None
    if bounds is not None:  # the closure's bounds hold everywhere: never advertise looser ones
        clamp(top, *bounds)
    return top


ADVERTISED_TEXT_KEYWORDS = ("enum", "const", "pattern", "format")


def advertised_texts(schema: Any, pointer: str = "") -> list[tuple[str, str]]:
    """Every string of an advertised output schema a host's model may read that is not a
    JSON Schema word of its own: the ``enum`` and ``const`` strings, ``pattern`` and
    ``format`` values, each with its JSON pointer in the advertised schema. (Member names
    are the projection's, which the review reads.)"""
    found: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [(pointer, schema)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{at}/{i}", item) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            where = f"{at}/{key.replace('~', '~0').replace('/', '~1')}"
            if key in ("pattern", "format", "const") and isinstance(value, str):
                found.append((where, value))
            elif key == "enum" and isinstance(value, list):
                found.extend((f"{where}/{i}", v) for i, v in enumerate(value) if isinstance(v, str))
            elif key == "properties" and isinstance(value, dict):
                stack.extend(
                    (f"{where}/{n.replace('~', '~0').replace('/', '~1')}", v) for n, v in value.items()
                )
            elif key in ("items", "allOf", "not"):
                stack.append((where, value))
    return sorted(found)


def _closed_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "additionalProperties": False}


def _array_of_objects(nodes: list[dict[str, Any]], max_items: int) -> dict[str, Any]:
    """The advertised array whose items the projection copies member by member: its bounds
    on the count, never ``uniqueItems``, ``const`` or ``enum`` (items that differed only in a
    member left out are equal once projected)."""
    out = _bounded(nodes, _types(nodes) & {"array", "null"}, items=False, max_items=max_items)
    for keyword in ("uniqueItems", "const", "enum"):
        out.pop(keyword, None)
    out["items"] = _closed_object()
    return out


def closure_bounds(schema: Any) -> tuple[int, int] | None:
    """The (max_string, max_items) the closure of an imported schema enforces everywhere: its
    bounds, or a field's own where looser (``contracts review --bound``)."""
    from toolgate.authoring._close import BOUNDS_KEY, own_bounds, split

    parts = split(schema)
    bounds = parts[1].get(BOUNDS_KEY) if parts is not None else None
    if not isinstance(bounds, dict):
        return None
    strings, items = bounds.get("max_string"), bounds.get("max_items")
    at = own_bounds(bounds)
    if isinstance(strings, int) and isinstance(items, int) and at is not None:
        own = list(at.values())
        strings = max([strings, *(b["maxLength"] for b in own if "maxLength" in b)])
        items = max([items, *(b["maxItems"] for b in own if "maxItems" in b)])
        return strings, items
    return None


def clamp(node: Any, max_string: int, max_items: int) -> None:
    """Every ``maxLength``/``maxItems`` of an advertised schema at most what the closure enforces."""
    if isinstance(node, dict):
        if "maxLength" in node:
            node["maxLength"] = min(node["maxLength"], max_string)
        if "maxItems" in node:
            node["maxItems"] = min(node["maxItems"], max_items)
        for value in node.values():
            clamp(value, max_string, max_items)
    elif isinstance(node, list):
        for value in node:
            clamp(value, max_string, max_items)


def _prune_required(node: dict[str, Any]) -> bool:
    """Keep in ``required`` only the members always present in the projected data: a leaf
    the schema requires, or an object the schema requires holding such a member (projection
    creates an object only around a leaf it copies). Returns whether ``node`` is such an
    object."""
    members: dict[str, Any] = node.get("properties", {})
    kept = []
    for name in node.get("required", []):
        child = members.get(name, {})
        if child.get("type") != "object" or _prune_required(child):
            kept.append(name)
    for name, child in members.items():
        if name not in kept and child.get("type") == "object":
            _prune_required(child)
        elif isinstance(child.get("items"), dict) and child["items"].get("type") == "object":
            _prune_required(child["items"])  # each item of an array of objects, on its own
    if kept:
        node["required"] = kept
    else:
        node.pop("required", None)
    return bool(kept)


__all__ = [
    "ADVERTISED_TEXT_KEYWORDS",
    "LEAF_MAX_ITEMS",
    "LEAF_MAX_LENGTH",
    "advertised_output_schema",
    "advertised_texts",
    "clamp",
    "closure_bounds",
    "finite_number",
]
