"""What a schema implies about the values it accepts: their deepest nesting, and that
they hold no infinite number. Where both are implied within a contract's limits, the
parse's own checks after jiter need not run on a value the schema accepts.

After jiter, the parse stage checks two things jiter does not (gate/_parse.py): no
number overflowed a double to infinity (``NUMBER_OUT_OF_RANGE``) and the nesting is
within ``limits.max_depth`` (``NESTING_TOO_DEEP``). It translates the bytes to find
exponents and count brackets, and walks the parsed value where those say it must: on a
20 KB result about a third of what jiter itself costs. Most contract schemas are
closed (``type`` everywhere, ``additionalProperties``, ``items``): they already refuse
every value nested deeper than they describe, and every infinite number (jsonschema-rs
gives a non-finite float no JSON type: ``{"type": "number"}`` refuses it). Where
:func:`depth_bound` says so, the gate runs the parse's checks only once the schema has
refused a value (``Gate.schema``): the verdict is the same, stage and code included,
and an accepted value is neither scanned nor walked.

The bound is an upper bound, never a guess: every keyword that could admit a deeper
value, or a number of any size (a member without ``type``, ``const`` or ``enum``),
makes it None; keywords that only narrow what is valid (``allOf`` members, ``$ref``,
``not``, ``if``, formats, ...) may be left out, which can only make it None. Depth
counts as the parse counts it: a scalar is 0, an object or array one more than its
deepest member (``{"a": [1]}`` is 2).
"""

from __future__ import annotations

import math
from typing import Any

_CONTAINERS = frozenset({"object", "array"})
_SCALARS = frozenset({"null", "boolean", "integer", "number", "string"})
_ALL_TYPES = _CONTAINERS | _SCALARS


def depth_bound(schema: Any) -> int | None:
    """The deepest nesting of any value ``schema`` (Draft 2020-12) accepts, or None where
    that cannot be shown from the schema alone, or where an accepted value could hold an
    infinite number."""
    return _Bounds(schema).of(schema)


def value_depth(value: Any) -> int:
    """The nesting depth of a JSON value, as the parse counts it (a scalar is 0)."""
    depth = 0
    level = [value]
    while True:
        level = [node for node in level if isinstance(node, (dict, list))]
        if not level:
            return depth
        depth += 1
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)]


class _Bounds:
    """One walk over a schema; local ``$ref`` targets resolved once each."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.done: dict[str, int | None] = {}
        self.active: set[str] = set()
        # A nested $id starts a new base URI: "#/..." inside it names another resource.
        # Then no reference is followed (each one only narrows: leaving it out is safe).
        self.follow_refs = isinstance(root, dict) and not _nested_id(root, top=True)

    def of(self, schema: Any) -> int | None:
        if schema is True:
            return None
        if schema is False:
            return 0  # nothing is valid: no depth to bound
        if not isinstance(schema, dict):
            return None
        bounds: list[int] = []
        if "const" in schema and _finite(schema["const"]):
            bounds.append(value_depth(schema["const"]))
        enum = schema.get("enum")
        if isinstance(enum, list) and _finite(enum):
            bounds.append(max((value_depth(v) for v in enum), default=0))
        shape = self._shape(schema)
        if shape is not None:
            bounds.append(shape)
        for member in _list(schema.get("allOf")):
            bound = self.of(member)
            if bound is not None:
                bounds.append(bound)
        for keyword in ("anyOf", "oneOf"):
            members = schema.get(keyword)
            if isinstance(members, list) and members:
                branch = [self.of(member) for member in members]
                if None not in branch:
                    bounds.append(max(b for b in branch if b is not None))
        ref = schema.get("$ref")
        if isinstance(ref, str):
            bound = self._ref(ref)
            if bound is not None:
                bounds.append(bound)
        return min(bounds) if bounds else None

    def _shape(self, schema: dict[str, Any]) -> int | None:
        """The bound the type keywords give: 0 for scalars, one more than the members'
        deepest for objects and arrays (None where members are not all described)."""
        declared = schema.get("type")
        if declared is None:
            return None  # any number, infinite ones included (no type refuses them)
        if isinstance(declared, str):
            types = frozenset({declared})
        elif isinstance(declared, list) and all(isinstance(t, str) for t in declared):
            types = frozenset(declared)
        else:
            return None
        if not types <= _ALL_TYPES:
            return None
        deepest = 0
        if "object" in types:
            members = self._object(schema)
            if members is None:
                return None
            deepest = max(deepest, members + 1)
        if "array" in types:
            items = self._array(schema)
            if items is None:
                return None
            deepest = max(deepest, items + 1)
        return deepest

    def _object(self, schema: dict[str, Any]) -> int | None:
        if "additionalProperties" not in schema:
            return None  # members not named by properties are unconstrained
        children = [schema["additionalProperties"]]
        for keyword in ("properties", "patternProperties"):
            named = schema.get(keyword, {})
            if not isinstance(named, dict):
                return None
            children.extend(named.values())
        return self._deepest(children)

    def _array(self, schema: dict[str, Any]) -> int | None:
        prefix = schema.get("prefixItems", [])
        if not isinstance(prefix, list):
            return None
        if "items" in schema:
            return self._deepest([schema["items"], *prefix])
        most = schema.get("maxItems")
        if type(most) is int and most <= len(prefix):
            return self._deepest(prefix[:most])
        return None  # items past the prefix are unconstrained

    def _deepest(self, children: list[Any]) -> int | None:
        deepest = 0
        for child in children:
            bound = self.of(child)
            if bound is None:
                return None
            deepest = max(deepest, bound)
        return deepest

    def _ref(self, ref: str) -> int | None:
        """The bound of a local reference's target; None (leave it out) for any other
        reference, or one met again while its own bound is being computed."""
        if not self.follow_refs or not ref.startswith("#"):
            return None
        if ref in self.done:
            return self.done[ref]
        if ref in self.active:
            return None
        target = _pointer(self.root, ref[1:])
        if target is _MISSING:
            return None
        self.active.add(ref)
        try:
            bound = self.of(target)
        finally:
            self.active.discard(ref)
        self.done[ref] = bound
        return bound


_MISSING: Any = object()


def _pointer(root: Any, fragment: str) -> Any:
    """The subschema a ``#``-fragment JSON pointer names, or :data:`_MISSING`."""
    if fragment == "":
        return root
    if not fragment.startswith("/"):
        return _MISSING  # an anchor name
    node = root
    for raw in fragment[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if "%" in token:
            return _MISSING  # percent-encoded: not followed
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def _nested_id(node: Any, *, top: bool = False) -> bool:
    """Whether a subschema below the root declares ``$id`` (a new base URI)."""
    if isinstance(node, dict):
        if not top and "$id" in node:
            return True
        return any(_nested_id(child) for child in node.values())
    if isinstance(node, list):
        return any(_nested_id(child) for child in node)
    return False


def _finite(value: Any) -> bool:
    """No infinite or NaN float anywhere in a schema's literal (json.loads reads Infinity)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
