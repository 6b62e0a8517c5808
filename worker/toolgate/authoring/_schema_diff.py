"""Schema diff: name every change between two schema versions, breaking or not.

Breaking changes are managed explicitly (docs/design.md, Contracts): a new required field, a
narrowed enum or a changed type needs a new schema version and an adapter release plan,
and even a new optional field on a closed, agent-facing object is a contract change.
Each :class:`Change` therefore answers two questions:

``breaking``
    A result the OLD version accepted may be rejected by the NEW one, or something the
    agent was given (a field, a value, a text length) is no longer given. Adapters or
    agent prompts must move with it: new version, release plan.
``widens``
    The NEW version accepts results, values or members the OLD one rejected, or hands
    the agent more. Producers are unaffected, but the agent's input grew and a reviewer
    must decide it may: this is how a new optional property on a closed object is
    reported (``property-added``, ``breaking=False``, ``widens=True``).

A change can be both (a pattern or type swap) or neither (an informational change).

Classification::

    kind                         breaking  widens
    type-changed                 a type was dropped / a type was added ("integer" is in "number")
    enum-narrowed                yes       -     values removed, or enum/const introduced
    enum-widened                 -         yes   values added, or enum/const dropped
    const-changed                yes       yes
    required-added               yes       -
    required-removed             -         yes
    property-added (closed obj)  -         yes   contract change: omit, version, or keep to operators
    property-added (open obj)    yes       -     a member that was unconstrained is now constrained
    property-removed             yes       if the new object is open (the member is unconstrained)
    open-to-closed               yes       -
    closed-to-open               -         yes
    max-*-lowered / -added       yes       -     maxLength, maxItems, maxProperties, maximum, ...
    max-*-raised / -removed      -         yes
    min-*-raised / -added        yes       -     minLength, minItems, minProperties, minimum, ...
    min-*-lowered / -removed     -         yes
    pattern-added                yes       -
    pattern-removed              -         yes
    pattern-changed              yes       yes   regex containment is not decided
    format-added/-removed/-changed           as pattern-*
    items-added / prefix-items-added  yes  -     (and -removed: widens)
    branch-added                 -         yes   a new oneOf/anyOf branch
    branch-removed               yes       -
    <keyword>-added              yes       -     any other assertion (not, if, uniqueItems, ...)
    <keyword>-removed            -         yes
    <keyword>-changed            yes       yes

How the schemas are compared: local ``$ref``\\ s are resolved and ``allOf`` is flattened
(so moving a property between ``allOf`` branches is no change), then ``oneOf``/``anyOf``
branches are paired by title when every branch on both sides has a distinct one, by
index otherwise. Keywords of a kind are compared only where both versions allow that
kind (a string turned object is one ``type-changed``, not a list of new properties).
Annotations (title, description, examples, ...) are ignored.

``Change.pointer`` is the instance location a change applies to (``/data/state``), with
``*`` for every member of a map or every item of an array (``/data/tags/*``) and an index
for a tuple item; a change inside a ``oneOf``/``anyOf`` branch names the branch in its
message. :mod:`toolgate.authoring._contract_diff` adds the changes of ``contract.yaml``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from toolgate.authoring._lint import SchemaDocument

__all__ = ["Change", "diff_schemas"]


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One difference between two versions.

    Attributes:
        pointer: The instance location (``/data/state``), or a ``$.``-path into
            ``contract.yaml`` for contract settings (see the module docstring).
        kind: A short stable id, e.g. ``required-added`` (see the module docstring).
        breaking: A result the old version accepted may now be rejected, or the agent
            loses something it was given.
        widens: The new version accepts or hands the agent more: review it.
        message: What changed, for a reviewer.
    """

    pointer: str
    kind: str
    breaking: bool
    widens: bool = False
    message: str = ""


_ANNOTATIONS: Final = frozenset(
    {
        "title",
        "description",
        "$comment",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$defs",
        "definitions",
        "$vocabulary",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)
# Assertions compared only as a whole: any difference is reported conservatively.
_OPAQUE: Final = (
    "not",
    "contains",
    "minContains",
    "maxContains",
    "propertyNames",
    "patternProperties",
    "dependentSchemas",
    "dependentRequired",
    "multipleOf",
    "uniqueItems",
    "additionalItems",
    "unevaluatedItems",
    "$dynamicRef",
)
# An upper bound lowered, or a lower bound raised, rejects what used to pass.
_UPPER: Final = {
    "maxLength": "string",
    "maxItems": "array",
    "maxProperties": "object",
    "maximum": "number",
    "exclusiveMaximum": "number",
}
_LOWER: Final = {
    "minLength": "string",
    "minItems": "array",
    "minProperties": "object",
    "minimum": "number",
    "exclusiveMinimum": "number",
}
_ALL_TYPES: Final = frozenset({"null", "boolean", "object", "array", "number", "string"})
_MAX_DEPTH: Final = 64  # deeper than any contract; a guard for pathological schemas


def _kebab(keyword: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", keyword.lstrip("$")).lower()


def _normal(value: Any) -> Any:
    """A JSON value with integral floats as ints: JSON Schema holds 1 and 1.0 equal."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def _canon(value: Any) -> str:
    return json.dumps(_normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _covers(types: frozenset[str] | None, json_type: str) -> bool:
    return types is None or json_type in types or (json_type == "integer" and "number" in types)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class _View:
    """Everything a list of subschemas (a conjunction) says about one instance."""

    __slots__ = (
        "closed",
        "const",
        "formats",
        "groups",
        "items",
        "lowers",
        "maps",
        "opaque",
        "patterns",
        "prefix",
        "properties",
        "required",
        "types",
        "uppers",
        "values",
    )

    def __init__(self) -> None:
        self.types: frozenset[str] | None = None
        self.values: dict[str, Any] | None = None  # canonical JSON -> value
        self.const = False
        self.properties: dict[str, list[Any]] = {}
        self.required: set[str] = set()
        self.closed = False
        self.maps: list[Any] = []
        self.items: list[Any] = []
        self.prefix: list[list[Any]] = []
        self.uppers: dict[str, float] = {}
        self.lowers: dict[str, float] = {}
        self.patterns: set[str] = set()
        self.formats: set[str] = set()
        self.groups: list[tuple[str, list[Any]]] = []
        self.opaque: dict[str, set[str]] = {}

    def effective_types(self) -> frozenset[str] | None:
        """Declared types, narrowed to the types of the enumerated values if any."""
        if self.values is None:
            return self.types
        value_types = frozenset(_json_type(v) for v in self.values.values())
        if self.types is None:
            return value_types
        return frozenset(t for t in value_types if _covers(self.types, t))

    def allows(self, json_type: str) -> bool:
        types = self.effective_types()
        if json_type == "number":
            return types is None or bool({"number", "integer"} & types)
        return _covers(types, json_type)

    def merge(self, other: _View) -> _View:
        """The conjunction of two views (``allOf`` semantics)."""
        out = _View()
        out.types = _intersect(self.types, other.types)
        if self.values is None or other.values is None:
            out.values = self.values if other.values is None else other.values
        else:
            out.values = {k: v for k, v in self.values.items() if k in other.values}
        out.const = (self.const or other.const) and out.values is not None and len(out.values) == 1
        for view in (self, other):
            for name, nodes in view.properties.items():
                out.properties.setdefault(name, []).extend(nodes)
            for i, nodes in enumerate(view.prefix):
                while len(out.prefix) <= i:
                    out.prefix.append([])
                out.prefix[i].extend(nodes)
            for keyword, canon in view.opaque.items():
                out.opaque.setdefault(keyword, set()).update(canon)
        out.required = self.required | other.required
        out.closed = self.closed or other.closed
        out.maps = self.maps + other.maps
        out.items = self.items + other.items
        out.uppers = {**self.uppers, **{k: min(v, self.uppers.get(k, v)) for k, v in other.uppers.items()}}
        out.lowers = {**self.lowers, **{k: max(v, self.lowers.get(k, v)) for k, v in other.lowers.items()}}
        out.patterns = self.patterns | other.patterns
        out.formats = self.formats | other.formats
        out.groups = self.groups + other.groups
        return out

    def without_groups(self) -> _View:
        out = self.merge(_View())
        out.groups = []
        return out


def _intersect(a: frozenset[str] | None, b: frozenset[str] | None) -> frozenset[str] | None:
    if a is None or b is None:
        return a if b is None else b
    both = {t for t in a if _covers(b, t)} | {t for t in b if _covers(a, t)}
    return frozenset(both)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _single(node: dict[str, Any]) -> _View:
    """What one subschema says by itself (``allOf`` and ``$ref`` are expanded by the caller)."""
    view = _View()
    declared = node.get("type")
    if isinstance(declared, str):
        view.types = frozenset({declared})
    elif isinstance(declared, list):
        view.types = frozenset(t for t in declared if isinstance(t, str))
    if "const" in node:
        view.values = {_canon(node["const"]): node["const"]}
        view.const = True
    if isinstance(node.get("enum"), list):
        values = {_canon(v): v for v in node["enum"]}
        view.values = values if view.values is None else {k: v for k, v in view.values.items() if k in values}
    if isinstance(node.get("properties"), dict):
        view.properties = {name: [sub] for name, sub in node["properties"].items()}
    if isinstance(node.get("required"), list):
        view.required = {r for r in node["required"] if isinstance(r, str)}
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if node.get(keyword) is False:
            view.closed = True
        elif isinstance(node.get(keyword), dict):
            view.maps.append(node[keyword])
    items = node.get("items")
    if isinstance(items, list):  # draft 7 tuples
        view.prefix = [[sub] for sub in items]
    elif items is False or isinstance(items, dict):
        view.items.append(items)
    if isinstance(node.get("prefixItems"), list):
        view.prefix = [[sub] for sub in node["prefixItems"]]
    view.uppers = {k: node[k] for k in _UPPER if _number(node.get(k))}
    view.lowers = {k: node[k] for k in _LOWER if _number(node.get(k))}
    if isinstance(node.get("pattern"), str):
        view.patterns = {node["pattern"]}
    if isinstance(node.get("format"), str):
        view.formats = {node["format"]}
    for keyword in ("oneOf", "anyOf"):
        if isinstance(node.get(keyword), list):
            view.groups.append((keyword, node[keyword]))
    for keyword in _OPAQUE:
        if keyword in node and not (keyword == "uniqueItems" and node[keyword] is False):
            view.opaque[keyword] = {_canon(node[keyword])}
    if "if" in node:
        view.opaque["if"] = {_canon({k: node.get(k) for k in ("if", "then", "else")})}
    return view


class _Differ:
    """One comparison of two schema documents."""

    def __init__(self, old: Any, new: Any) -> None:
        self.old = SchemaDocument(old)
        self.new = SchemaDocument(new)
        self.changes: list[Change] = []
        self.active: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()

    def view(self, doc: SchemaDocument, nodes: Iterable[Any]) -> _View:
        """Flatten ``nodes`` through ``allOf`` and local ``$ref`` into one view."""
        view = _View()
        stack = list(nodes)
        seen: set[int] = set()
        while stack:
            node = stack.pop()
            if node is False:
                view = view.merge(_never())
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            view = view.merge(_single(node))
            if isinstance(node.get("allOf"), list):
                stack.extend(node["allOf"])
            ref = node.get("$ref")
            if isinstance(ref, str):
                found = doc.target(ref)
                if found is None:
                    view.opaque.setdefault("$ref", set()).add(ref)
                else:
                    stack.append(found[1])
        return view

    def emit(self, pointer: str, label: str, kind: str, breaking: bool, widens: bool, message: str) -> None:
        where = f"in {label}: " if label else ""
        self.changes.append(
            Change(pointer=pointer, kind=kind, breaking=breaking, widens=widens, message=where + message)
        )

    def compare(self, old: list[Any], new: list[Any], pointer: str, label: str, depth: int) -> None:
        key = (tuple(map(id, old)), tuple(map(id, new)))
        if depth > _MAX_DEPTH or key in self.active:
            return  # a recursive schema: this pair is being compared further up
        self.active.add(key)
        try:
            self.compare_views(self.view(self.old, old), self.view(self.new, new), pointer, label, depth)
        finally:
            self.active.discard(key)

    def compare_views(self, old: _View, new: _View, pointer: str, label: str, depth: int) -> None:
        if old.groups or new.groups:
            if len(old.groups) == len(new.groups) == 1 and old.groups[0][0] == new.groups[0][0]:
                self.compare_branches(old, new, pointer, label, depth)
                return
            before = sorted(_canon(g) for g in old.groups)
            after = sorted(_canon(g) for g in new.groups)
            if before != after:
                self.emit(
                    pointer,
                    label,
                    "branches-changed",
                    True,
                    True,
                    "oneOf/anyOf composition changed shape; compared conservatively",
                )
            old, new = old.without_groups(), new.without_groups()
        self.compare_types(old, new, pointer, label)
        if self.compare_values(old, new, pointer, label):
            return  # the new version lists every value it accepts: nothing else can widen it
        if old.allows("string") and new.allows("string"):
            self.compare_set(pointer, label, "pattern", old.patterns, new.patterns)
            self.compare_set(pointer, label, "format", old.formats, new.formats)
        for keyword, kind in _UPPER.items():
            if old.allows(kind) and new.allows(kind):
                self.compare_bound(
                    pointer, label, keyword, old.uppers.get(keyword), new.uppers.get(keyword), upper=True
                )
        for keyword, kind in _LOWER.items():
            if old.allows(kind) and new.allows(kind):
                self.compare_bound(
                    pointer, label, keyword, old.lowers.get(keyword), new.lowers.get(keyword), upper=False
                )
        if old.allows("array") and new.allows("array"):
            self.compare_arrays(old, new, pointer, label, depth)
        if old.allows("object") and new.allows("object"):
            self.compare_objects(old, new, pointer, label, depth)
        for keyword in sorted(set(old.opaque) | set(new.opaque)):
            before_set, after_set = old.opaque.get(keyword), new.opaque.get(keyword)
            name = _kebab(keyword)
            if before_set is None:
                self.emit(pointer, label, f"{name}-added", True, False, f"{keyword} added")
            elif after_set is None:
                self.emit(pointer, label, f"{name}-removed", False, True, f"{keyword} removed")
            elif before_set != after_set:
                self.emit(
                    pointer,
                    label,
                    f"{name}-changed",
                    True,
                    True,
                    f"{keyword} changed; compared conservatively",
                )

    def compare_branches(self, old: _View, new: _View, pointer: str, label: str, depth: int) -> None:
        keyword, old_branches = old.groups[0]
        _, new_branches = new.groups[0]
        old_titles = [self.title(self.old, b) for b in old_branches]
        new_titles = [self.title(self.new, b) for b in new_branches]
        old_keys = [f"{keyword}[{i}]" for i in range(len(old_branches))]
        new_keys = [f"{keyword}[{i}]" for i in range(len(new_branches))]
        if _distinct_titles(old_titles) and _distinct_titles(new_titles):
            old_keys, new_keys = [t or "" for t in old_titles], [t or "" for t in new_titles]
        old_base, new_base = old.without_groups(), new.without_groups()
        new_by_key = dict(zip(new_keys, new_branches, strict=True))
        for key_, branch in zip(old_keys, old_branches, strict=True):
            inner = f"{label} > {key_}" if label else key_
            if key_ not in new_by_key:
                self.emit(
                    pointer,
                    label,
                    "branch-removed",
                    True,
                    False,
                    f"{keyword} branch {key_!r} removed: results of that shape are now rejected",
                )
                continue
            pair = (branch, new_by_key[key_])
            guard = ((id(pair[0]),), (id(pair[1]),))
            if guard in self.active or depth > _MAX_DEPTH:
                continue
            self.active.add(guard)
            try:
                self.compare_views(
                    old_base.merge(self.view(self.old, [pair[0]])),
                    new_base.merge(self.view(self.new, [pair[1]])),
                    pointer,
                    inner,
                    depth + 1,
                )
            finally:
                self.active.discard(guard)
        for key_ in new_keys:
            if key_ not in old_keys:
                self.emit(
                    pointer,
                    label,
                    "branch-added",
                    False,
                    True,
                    f"{keyword} branch {key_!r} added: results of a new shape are accepted",
                )

    @staticmethod
    def title(doc: SchemaDocument, branch: Any) -> str | None:
        _, target = doc.deref("", branch)
        title = target.get("title") if isinstance(target, dict) else None
        return title if isinstance(title, str) else None

    def compare_types(self, old: _View, new: _View, pointer: str, label: str) -> None:
        before, after = old.effective_types(), new.effective_types()
        if before is None and after is None:
            return
        dropped = sorted(t for t in (before if before is not None else _ALL_TYPES) if not _covers(after, t))
        added = sorted(t for t in (after if after is not None else _ALL_TYPES) if not _covers(before, t))
        if dropped or added:
            self.emit(
                pointer,
                label,
                "type-changed",
                bool(dropped),
                bool(added),
                f"type {_types_text(before)} -> {_types_text(after)}"
                + (f"; {dropped} no longer accepted" if dropped else "")
                + (f"; {added} now accepted" if added else ""),
            )

    def compare_values(self, old: _View, new: _View, pointer: str, label: str) -> bool:
        """Compare const/enum; True when the new side enumerates its values (nothing else to compare)."""
        before, after = old.values, new.values
        if before is None:
            if after is None:
                return False
            self.emit(
                pointer,
                label,
                "enum-narrowed",
                True,
                False,
                f"values now restricted to {_values_text(after)}",
            )
            return True  # every value now accepted is listed: other keywords cannot widen it
        if after is None:
            self.emit(
                pointer,
                label,
                "enum-widened",
                False,
                True,
                f"values no longer restricted to {_values_text(before)}",
            )
            return False
        removed = {k: v for k, v in before.items() if k not in after}
        added = {k: v for k, v in after.items() if k not in before}
        if old.const and new.const and removed and added:
            self.emit(
                pointer,
                label,
                "const-changed",
                True,
                True,
                f"const {_values_text(before)} -> {_values_text(after)}",
            )
            return True
        if removed:
            self.emit(
                pointer,
                label,
                "enum-narrowed",
                True,
                False,
                f"values {_values_text(removed)} no longer accepted",
            )
        if added:
            self.emit(
                pointer,
                label,
                "enum-widened",
                False,
                True,
                f"values {_values_text(added)} now accepted and may reach the agent",
            )
        return True

    def compare_set(self, pointer: str, label: str, keyword: str, before: set[str], after: set[str]) -> None:
        removed, added = sorted(before - after), sorted(after - before)
        if removed and added:
            self.emit(
                pointer,
                label,
                f"{keyword}-changed",
                True,
                True,
                f"{keyword} {removed} -> {added}; compared conservatively",
            )
        elif added:
            self.emit(pointer, label, f"{keyword}-added", True, False, f"{keyword} {added} added")
        elif removed:
            self.emit(pointer, label, f"{keyword}-removed", False, True, f"{keyword} {removed} removed")

    def compare_bound(
        self,
        pointer: str,
        label: str,
        keyword: str,
        before: float | None,
        after: float | None,
        *,
        upper: bool,
    ) -> None:
        name = _kebab(keyword)
        if before == after:
            return
        if before is None:
            self.emit(pointer, label, f"{name}-added", True, False, f"{keyword} {after} added")
        elif after is None:
            self.emit(pointer, label, f"{name}-removed", False, True, f"{keyword} {before} removed")
        elif (after < before) == upper:
            verb = "lowered" if upper else "raised"
            self.emit(pointer, label, f"{name}-{verb}", True, False, f"{keyword} {verb} {before} -> {after}")
        else:
            verb = "raised" if upper else "lowered"
            self.emit(pointer, label, f"{name}-{verb}", False, True, f"{keyword} {verb} {before} -> {after}")

    def compare_arrays(self, old: _View, new: _View, pointer: str, label: str, depth: int) -> None:
        for i in range(max(len(old.prefix), len(new.prefix))):
            if i >= len(old.prefix):
                self.emit(
                    f"{pointer}/{i}",
                    label,
                    "prefix-items-added",
                    True,
                    False,
                    f"tuple item {i} is now constrained",
                )
            elif i >= len(new.prefix):
                self.emit(
                    f"{pointer}/{i}",
                    label,
                    "prefix-items-removed",
                    False,
                    True,
                    f"tuple item {i} is no longer constrained",
                )
            else:
                self.compare(old.prefix[i], new.prefix[i], f"{pointer}/{i}", label, depth + 1)
        if old.items and new.items:
            self.compare(old.items, new.items, f"{pointer}/*", label, depth + 1)
        elif new.items:
            self.emit(f"{pointer}/*", label, "items-added", True, False, "array items are now constrained")
        elif old.items:
            self.emit(
                f"{pointer}/*", label, "items-removed", False, True, "array items are no longer constrained"
            )

    def compare_objects(self, old: _View, new: _View, pointer: str, label: str, depth: int) -> None:
        if old.closed and not new.closed:
            self.emit(
                pointer,
                label,
                "closed-to-open",
                False,
                True,
                "object is no longer closed: undeclared members are accepted",
            )
        elif new.closed and not old.closed:
            self.emit(
                pointer,
                label,
                "open-to-closed",
                True,
                False,
                "object is now closed: results with undeclared members are rejected",
            )
        for name in sorted(new.required - old.required):
            self.emit(
                f"{pointer}/{_escape(name)}",
                label,
                "required-added",
                True,
                False,
                f"{name!r} is now required: results without it are rejected",
            )
        for name in sorted(old.required - new.required):
            self.emit(
                f"{pointer}/{_escape(name)}",
                label,
                "required-removed",
                False,
                True,
                f"{name!r} is no longer required: the agent may see results without it",
            )
        for name in new.properties:
            if name in old.properties:
                continue
            where = f"{pointer}/{_escape(name)}"
            if old.closed:
                self.emit(
                    where,
                    label,
                    "property-added",
                    False,
                    True,
                    f"property {name!r} added to a closed object: a contract change; decide "
                    "whether to omit it, expose it in a new version, or keep it to operators",
                )
            else:
                self.emit(
                    where,
                    label,
                    "property-added",
                    True,
                    False,
                    f"property {name!r} now declared on an open object: values that do not "
                    "match its schema are now rejected",
                )
        for name in old.properties:
            if name not in new.properties:
                open_now = "; the object is open, so it is now unconstrained" if not new.closed else ""
                self.emit(
                    f"{pointer}/{_escape(name)}",
                    label,
                    "property-removed",
                    True,
                    not new.closed,
                    f"property {name!r} removed: results carrying it are rejected or no longer "
                    f"checked, and agents lose it{open_now}",
                )
        for name, nodes in old.properties.items():
            if name in new.properties:
                self.compare(nodes, new.properties[name], f"{pointer}/{_escape(name)}", label, depth + 1)
        if old.maps and new.maps:
            self.compare(old.maps, new.maps, f"{pointer}/*", label, depth + 1)
        elif new.maps and not old.closed:
            self.emit(
                f"{pointer}/*",
                label,
                "additional-properties-added",
                True,
                False,
                "undeclared members are now constrained by a schema",
            )
        elif old.maps and not new.closed:
            self.emit(
                f"{pointer}/*",
                label,
                "additional-properties-removed",
                False,
                True,
                "undeclared members are no longer constrained",
            )


def _distinct_titles(titles: list[str | None]) -> bool:
    return all(t is not None for t in titles) and len(set(titles)) == len(titles)


def _never() -> _View:
    view = _View()
    view.types = frozenset()
    return view


def _types_text(types: frozenset[str] | None) -> str:
    return "any" if types is None else "|".join(sorted(types)) or "none"


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(sorted(values))


def _dedupe(changes: Iterable[Change]) -> list[Change]:
    return list(dict.fromkeys(changes))


def diff_schemas(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """Compare two schema documents and classify every difference.

    Args:
        old: The schema of the version in service.
        new: The schema proposed to replace it.

    Returns:
        Changes in the order they were found (outer before inner); empty when the two
        accept the same results. See the module docstring for kinds and pointers.
    """
    differ = _Differ(old, new)
    differ.compare([old], [new], "", "", 0)
    return _dedupe(differ.changes)
