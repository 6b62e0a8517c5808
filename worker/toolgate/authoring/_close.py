"""Closing an MCP tool's ``outputSchema`` without rewriting it.

The written schema of a result is ``{"allOf": [upstream, closure]}``:

* ``upstream`` is the tool's ``outputSchema`` as it came, embedded as a resource of its
  own (``$id: urn:toolgate:upstream:<tool>``, so its ``#/...`` references still resolve
  inside it);
* ``closure`` (``$id: urn:toolgate:closure:<tool>``) is a *skeleton* derived from it: at
  every instance position the upstream reaches through applicators that admit values
  (``properties``, ``patternProperties``, ``items``, ``prefixItems``, ``contains``,
  ``unevaluatedItems``, ``allOf``/``anyOf``/``oneOf``, ``then``/``else``,
  ``dependentSchemas``, ``$ref``), it admits only the JSON types the schemas declaring
  that position admit, rejects member names no schema there declares (by name or
  pattern) and bounds string lengths and array lengths. So every value the closure
  accepts is closed and bounded on its own, whichever branch of the upstream applied
  (a member typed in one ``anyOf`` branch holds that type even when another branch
  leaves it free). ``not``, ``if`` and ``propertyNames`` only decide: they declare no
member (an ``if`` is a condition, often untyped: read as a declaration, it would refuse
tools whose conditions say ``{"minimum": 5}``).

Because the written schema is a conjunction with the upstream, it accepts a subset of
what the upstream accepts whatever the closure says (the closure can only remove
values). Because the closure's members at a position are the *union* over every
branch that can apply there, it never rejects a member some branch declares
(a closed base used through ``allOf`` + ``$ref`` beside other members still passes
them). Where a position cannot be closed that way, :func:`close` raises
:class:`Unclosable` and the tool is refused: an untyped value, a free-form map
(``additionalProperties``/``unevaluatedProperties`` given a schema), array items no
schema constrains, a reference it cannot follow (remote, an anchor, a nested ``$id``,
``$dynamicRef``), ``const``/``enum`` holding objects or arrays, a shape larger than
:data:`MAX_POSITIONS`, or one needing more than :data:`MAX_STEPS` steps of work.
"""

from __future__ import annotations

from typing import Any, Final

import jsonschema_rs

from toolgate.authoring._dialect import Unclosable as Untranslatable
from toolgate.authoring._dialect import to_draft_2020_12
from toolgate.gate._contracts import EVERY_ITEM
from toolgate.gate._gate import CLOSURE_BOUNDS_KEY

UPSTREAM_ID: Final = "urn:toolgate:upstream:"
CLOSURE_ID: Final = "urn:toolgate:closure:"
AT_KEY: Final = "at"  # under BOUNDS_KEY: positions with their own bound, by instance path
BOUNDS_KEY: Final = CLOSURE_BOUNDS_KEY  # the closure's bounds: lint re-derives it, the gate names them
MAX_POSITIONS: Final = 2000  # skeleton positions: a shape past this is refused, not analysed
MAX_NESTING: Final = 64  # instance positions and $ref chains deeper than this are refused
# (each level costs a few Python frames: well inside the interpreter's recursion limit)
MAX_STEPS: Final = 100_000  # subschemas visited, names matched against patterns, members
# gathered: the closing's whole work. A shape needing more is refused, not analysed (a
# schema within the size limits can otherwise ask for billions: names x patterns, or many
# positions that each reach one large anyOf).
_ALL_TYPES: Final = frozenset({"object", "array", "string", "number", "boolean", "null"})
_IN_PLACE_LISTS: Final = ("allOf", "anyOf", "oneOf")


class Unclosable(ValueError):
    """The schema has a position that cannot be closed soundly; ``pointer`` names it."""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer or '/'}: {reason}")
        self.pointer = pointer
        self.reason = reason


def _join(pointer: str, *tokens: str | int) -> str:
    for t in tokens:
        pointer += f"/{t}" if isinstance(t, int) else "/" + t.replace("~", "~0").replace("/", "~1")
    return pointer


def _value_types(value: Any) -> set[str]:
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int | float):
        return {"number"}
    if isinstance(value, str):
        return {"string"}
    if value is None:
        return {"null"}
    return {"object" if isinstance(value, dict) else "array"}


class _Closer:
    """One derivation of a closure from one upstream schema."""

    def __init__(
        self, upstream: Any, max_string: int, max_items: int, at: dict[str, dict[str, int]] | None = None
    ) -> None:
        self.root = upstream
        self.max_string = max_string
        self.max_items = max_items
        self.at_bounds = at or {}  # instance path -> its own maxLength/maxItems (a reviewer's bound)
        self.defs: dict[str, Any] = {}
        self.names: dict[Any, str] = {}
        self.types_memo: dict[str, frozenset[str]] = {}
        self.pattern_memo: dict[str, Any] = {}  # pattern -> its compiled check
        self.reach_memo: dict[str, tuple[str, ...]] = {}
        self.node_memo: dict[str, Any] = {"": upstream}
        self.steps = 0

    def step(self, where: str, count: int = 1) -> None:
        """Count ``count`` units of work; past :data:`MAX_STEPS` the schema is refused."""
        self.steps += count
        if self.steps > MAX_STEPS:
            raise Unclosable(
                where,
                f"closing needs more than {MAX_STEPS} steps (the work limit: subschemas visited "
                "per position, names matched against patterns): not analysed",
            )

    # ------------------------------------------------------------ the upstream document

    def at(self, pointer: str) -> Any:
        if pointer in self.node_memo:
            return self.node_memo[pointer]
        node = self.root
        for token in pointer.split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise Unclosable(pointer, "a reference that points at nothing")
        self.node_memo[pointer] = node
        return node

    def ref_target(self, pointer: str, node: dict[str, Any]) -> str | None:
        if "$dynamicRef" in node or "$recursiveRef" in node:
            raise Unclosable(pointer, "$dynamicRef cannot be analysed")
        ref = node.get("$ref")
        if ref is None:
            return None
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise Unclosable(pointer, f"$ref {str(ref)[:80]!r} is not a local JSON pointer")
        from urllib.parse import unquote

        target = unquote(ref[1:])
        self.at(target)
        return target

    def check_node(self, pointer: str, node: dict[str, Any]) -> None:
        for keyword in ("const", "enum"):
            if keyword not in node:
                continue
            values = [node[keyword]] if keyword == "const" else node[keyword]
            if isinstance(values, list) and any(isinstance(v, dict | list) for v in values):
                raise Unclosable(pointer, f"{keyword} with an object or array value is not supported")
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            sub = node.get(keyword)
            if isinstance(sub, dict):
                raise Unclosable(pointer, f"{keyword} is a schema: a free-form map cannot be closed")

    # ------------------------------------------------------------ types a schema admits

    def types(self, pointer: str, depth: int = 0) -> frozenset[str]:
        """Every JSON type ``pointer``'s schema may accept (an over-approximation)."""
        if pointer in self.types_memo:
            return self.types_memo[pointer]
        self.step(pointer)
        if depth > MAX_NESTING:
            raise Unclosable(pointer, f"subschemas nested deeper than {MAX_NESTING}: not analysed")
        self.types_memo[pointer] = _ALL_TYPES  # a cycle: assume anything
        node = self.at(pointer)
        result: set[str]
        if node is True:
            result = set(_ALL_TYPES)
        elif not isinstance(node, dict):
            result = set()
        else:
            result = set(_ALL_TYPES)
            kind = node.get("type")
            if isinstance(kind, str | list):
                named = {kind} if isinstance(kind, str) else {k for k in kind if isinstance(k, str)}
                named = {"number" if k == "integer" else k for k in named}
                result &= named
            if "const" in node:
                result &= _value_types(node["const"])
            if isinstance(node.get("enum"), list):
                result &= {t for v in node["enum"] for t in _value_types(v)}
            branches = node.get("allOf")
            if isinstance(branches, list):
                for i in range(len(branches)):
                    result &= self.types(_join(pointer, "allOf", i), depth + 1)
            for keyword in ("anyOf", "oneOf"):
                branches = node.get(keyword)
                if isinstance(branches, list):
                    result &= {
                        t
                        for i in range(len(branches))
                        for t in self.types(_join(pointer, keyword, i), depth + 1)
                    }
            target = self.ref_target(pointer, node)
            if target is not None:
                result &= self.types(target, depth + 1)
        self.types_memo[pointer] = frozenset(result)
        return self.types_memo[pointer]

    # ------------------------------------------------------------ positions

    def reach(self, pointer: str) -> tuple[str, ...]:
        """``pointer`` and every schema it applies in place (memoized: positions that reach
        one shared subschema walk it once)."""
        known = self.reach_memo.get(pointer)
        if known is not None:
            return known
        seen: set[str] = set()
        out: list[str] = []
        stack: list[tuple[str, Any]] = [(pointer, self.at(pointer))]
        memo = self.node_memo
        while stack:
            current, node = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            self.step(current)
            out.append(current)
            memo[current] = node
            if not isinstance(node, dict):
                continue
            self.check_node(current, node)
            children: list[tuple[str, Any]] = []
            for keyword in _IN_PLACE_LISTS:
                branches = node.get(keyword)
                if isinstance(branches, list):
                    at = f"{current}/{keyword}/"
                    children.extend((f"{at}{i}", branch) for i, branch in enumerate(branches))
            for keyword in ("then", "else"):  # not if: a condition, often untyped, declares nothing
                if keyword in node:
                    children.append((f"{current}/{keyword}", node[keyword]))
            dependent = node.get("dependentSchemas")
            if isinstance(dependent, dict):
                children.extend((_join(current, "dependentSchemas", k), v) for k, v in dependent.items())
            target = self.ref_target(current, node)
            if target is not None:
                children.append((target, self.at(target)))
            stack.extend(reversed(children))  # visited in document order
        self.reach_memo[pointer] = found = tuple(out)
        return found

    def gather(self, entries: frozenset[str], where: str) -> list[tuple[str, Any]]:
        """Every schema applied to the instance at a position whose own schemas are ``entries``."""
        seen: set[str] = set()
        out: list[tuple[str, Any]] = []
        for entry in sorted(entries):
            for pointer in self.reach(entry):
                if pointer not in seen:
                    seen.add(pointer)
                    out.append((pointer, self.at(pointer)))
        self.step(where, len(out))  # each is read again below, once per position
        return out

    def matches(self, pattern: str, name: str) -> bool:
        """Whether ``patternProperties``' ``pattern`` applies to ``name``, as the gate decides it."""
        self.step("")
        check = self.pattern_memo.get(pattern)
        if check is None:
            try:
                check = jsonschema_rs.Draft202012Validator(
                    {"pattern": pattern}, pattern_options=jsonschema_rs.RegexOptions()
                ).is_valid
            except ValueError as exc:
                raise Unclosable("", f"pattern {pattern[:80]!r} does not compile") from exc
            self.pattern_memo[pattern] = check
        return bool(check(name))

    def skeleton(self, entries: frozenset[str], where: str, depth: int) -> dict[str, Any]:
        """A reference to the closure of the position whose schemas are ``entries`` (a
        position with its own bound is never shared)."""
        key: Any = (entries, where) if where in self.at_bounds else entries
        if key in self.names:
            return {"$ref": f"#/$defs/{self.names[key]}"}
        if depth > MAX_NESTING:
            raise Unclosable(where, f"instance positions nested deeper than {MAX_NESTING}: not analysed")
        if len(self.names) >= MAX_POSITIONS:
            raise Unclosable(where, f"more than {MAX_POSITIONS} positions to close: not analysed")
        self.step(where, len(entries))
        name = f"p{len(self.names)}"
        self.names[key] = name
        self.defs[name] = self.position(entries, where, depth)
        return {"$ref": f"#/$defs/{name}"}

    def position(self, entries: frozenset[str], where: str, depth: int) -> dict[str, Any] | bool:
        """The closure of one position: the JSON types its declarations admit (a value of
        any other type fits no declaration there, whichever branch applies), objects
        closed to the declared members, strings and arrays bounded."""
        nodes = self.gather(entries, where)
        kinds = frozenset().union(*(self.types(p) for p in entries))
        if not kinds:
            return False  # no declaration here admits any value
        dicts = [(p, n) for p, n in nodes if isinstance(n, dict)]
        out: dict[str, Any] = {"type": sorted(kinds)}
        if "object" in kinds:
            out.update(self.object_position(dicts, where, depth))
        if "array" in kinds:
            out.update(self.array_position(dicts, where, depth))
        if "string" in kinds:
            shortest = max((n.get("minLength", 0) for _, n in dicts if _count(n.get("minLength"))), default=0)
            bound = self.at_bounds.get(where, {}).get("maxLength", self.max_string)
            if shortest > bound:
                raise Unclosable(where, f"strings of at least {shortest} characters exceed the bound")
            out["maxLength"] = bound
        return out

    def object_position(
        self, dicts: list[tuple[str, dict[str, Any]]], where: str, depth: int
    ) -> dict[str, Any]:
        names: dict[str, set[str]] = {}
        patterns: dict[str, set[str]] = {}
        closed_empty = False
        for pointer, node in dicts:
            properties = node.get("properties")
            if properties == {}:
                closed_empty = True  # "properties": {} declares that there are none
            if isinstance(properties, dict):
                for name in properties:
                    names.setdefault(name, set()).add(_join(pointer, "properties", name))
            pattern_properties = node.get("patternProperties")
            if isinstance(pattern_properties, dict):
                for pattern in pattern_properties:
                    patterns.setdefault(pattern, set()).add(_join(pointer, "patternProperties", pattern))
            if (
                node.get("additionalProperties") is False
                or node.get("unevaluatedProperties") is False
                or node.get("maxProperties") == 0
            ):
                closed_empty = True
        if not names and not patterns and not closed_empty:
            raise Unclosable(
                where, "may be an object that declares no member: a free-form map or an untyped value"
            )
        out: dict[str, Any] = {}
        if names:
            members = {}
            for name in names:  # the order they are declared in (the projection keeps it)
                entries = set(names[name])
                for pattern, pointers in patterns.items():
                    if self.matches(pattern, name):
                        entries |= pointers
                members[name] = self.skeleton(frozenset(entries), _join(where, name), depth + 1)
            out["properties"] = members
        if patterns:
            every = frozenset(p for pointers in patterns.values() for p in pointers)
            out["additionalProperties"] = self.skeleton(every, _join(where, "*"), depth + 1)
            allowed: list[Any] = [{"pattern": p} for p in sorted(patterns)]
            if names:
                allowed.insert(0, {"enum": sorted(names)})
            out["propertyNames"] = {"anyOf": allowed}
        else:
            out["additionalProperties"] = False
        return out

    def array_position(
        self, dicts: list[tuple[str, dict[str, Any]]], where: str, depth: int
    ) -> dict[str, Any]:
        """Arrays bounded, each position closed with its own declarations: index ``i`` is
        declared by the ``prefixItems[i]`` of the schemas whose prefix reaches it, and by the
        ``items`` (or ``unevaluatedItems``) of the others; a member declared at one index is
        never admitted at another (items swapped or moved)."""
        tails: set[str] = set()  # declarations of items past every prefix
        prefixes: list[tuple[list[Any], str, set[str]]] = []  # (prefix, pointer, its node's tail)
        anywhere: set[str] = set()  # contains: may be any item
        constrained = False
        longest = 0
        for pointer, node in dicts:
            if _count(node.get("minItems")):
                longest = max(longest, node["minItems"])
            own: set[str] = set()
            items = node.get("items")
            if items is False or node.get("maxItems") == 0:
                constrained = True
            if isinstance(items, dict | bool) and items is not False:
                own.add(_join(pointer, "items"))
                constrained = True
            unevaluated = node.get("unevaluatedItems")
            if unevaluated is False:
                constrained = True
            elif isinstance(unevaluated, dict | bool):
                own.add(_join(pointer, "unevaluatedItems"))
                constrained = True
            if isinstance(node.get("contains"), dict | bool):
                anywhere.add(_join(pointer, "contains"))
            prefix = node.get("prefixItems")
            if isinstance(prefix, list) and prefix:
                prefixes.append((prefix, pointer, own))
            tails |= own
        if not constrained:
            raise Unclosable(
                where, "may be an array whose items no schema constrains (declare type and items)"
            )
        bound = self.at_bounds.get(where, {}).get("maxItems", self.max_items)
        if longest > bound:
            raise Unclosable(where, f"arrays of at least {longest} items exceed the bound")
        out: dict[str, Any] = {"maxItems": bound}
        reach = min(max((len(p) for p, _, _ in prefixes), default=0), bound)
        if reach:
            positions = []
            for i in range(reach):
                # Past a schema's own prefix its items apply; a schema without a prefix
                # applies its items at every index.
                entries = set(anywhere)
                entries |= {t for t in tails if not any(t in own for _, _, own in prefixes)}
                for prefix, pointer, own in prefixes:
                    entries |= {_join(pointer, "prefixItems", i)} if i < len(prefix) else own
                positions.append(self.skeleton(frozenset(entries), _join(where, i), depth + 1))
            out["prefixItems"] = positions
        entries = tails | anywhere
        # No item declared anywhere (items false, maxItems 0): only the empty array fits.
        out["items"] = self.skeleton(frozenset(entries), _join(where, reach), depth + 1) if entries else False
        return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _no_nested_resources(upstream: dict[str, Any]) -> None:
    """Refuse a ``$id`` or ``$schema`` below the root anywhere in the document: references
    inside such a resource resolve against another base, or in another dialect, than the
    one this analysis reads them in. (A member *named* ``$id`` is refused too: rare, and
    telling it apart would need the analysis this refuses to guess at.)"""
    stack: list[tuple[str, Any]] = [("", upstream)]
    while stack:
        pointer, node = stack.pop()
        if isinstance(node, dict):
            if pointer and ("$id" in node or "$schema" in node):
                raise Unclosable(
                    pointer, "a nested $id or $schema changes how references resolve: not analysed"
                )
            stack.extend((_join(pointer, k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((_join(pointer, i), v) for i, v in enumerate(node))


def closure(
    upstream: Any, tool: str, *, max_string: int, max_items: int, at: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    """The closure of ``upstream`` (see the module docstring). ``at`` gives positions their
    own bounds, by instance path (``{"/content": {"maxLength": 6000}}``; an array's every item
    is its index ``0``): written under the bounds' ``at``, so that lint derives the same.

    Raises:
        Unclosable: a position that cannot be closed soundly, named by its instance path.
    """
    if not isinstance(upstream, dict):
        raise Unclosable("", "an outputSchema is a JSON object")
    _no_nested_resources(upstream)
    closer = _Closer(upstream, max_string, max_items, at)
    start = closer.skeleton(frozenset({""}), "", 0)
    bounds: dict[str, Any] = {"max_string": max_string, "max_items": max_items}
    if at:
        bounds[AT_KEY] = {where: dict(sorted(own.items())) for where, own in sorted(at.items())}
    return {
        "$id": CLOSURE_ID + tool,
        BOUNDS_KEY: bounds,
        **start,
        "$defs": closer.defs,
    }


def closed(upstream: dict[str, Any], tool: str, *, max_string: int, max_items: int) -> dict[str, Any]:
    """``{"allOf": [upstream, closure]}``: what the written contract validates ``data`` with.

    Raises:
        Unclosable: see :func:`closure`; also a ``$schema`` other than Draft 2020-12 that
            cannot be translated to it (:mod:`toolgate.authoring._dialect`).
    """
    try:
        upstream = to_draft_2020_12(upstream)  # Draft 7/6/2019-09 said in 2020-12, or refused
    except Untranslatable as exc:
        raise Unclosable(exc.pointer, exc.reason) from None
    embedded = {k: v for k, v in upstream.items() if k not in ("$schema", "$id")}
    return {
        "allOf": [
            {"$id": UPSTREAM_ID + tool, **embedded},
            closure(embedded, tool, max_string=max_string, max_items=max_items),
        ]
    }


def close(schema: Any, *, max_string: int, max_items: int, name: str = "schema") -> dict[str, Any]:
    """``schema`` closed and bounded: ``{"allOf": [schema, closure]}`` (see :func:`closed`).

    For any object schema: an MCP tool's ``outputSchema``, or its ``inputSchema``. Every
    value the result accepts, ``schema`` accepts too; at every position, whichever branch
    applies, it holds only the JSON types and members some schema there declares, strings
    of at most ``max_string`` characters and arrays of at most ``max_items`` items.

    Raises:
        ValueError: ``max_string`` or ``max_items`` is not a positive integer (naming it).
        Unclosable: ``schema`` cannot be closed soundly; ``pointer`` and ``reason`` say
            where (an instance path) and why.
    """
    for setting, value in (("max_string", max_string), ("max_items", max_items)):
        if not (_count(value) and value > 0):
            raise ValueError(f"{setting} must be a positive integer, not {value!r}")
    if not isinstance(schema, dict):
        raise Unclosable("", "a schema to close is a JSON object")
    return closed(schema, name, max_string=max_string, max_items=max_items)


_SCALARS: Final = frozenset({"string", "number", "boolean", "null"})


def _position(skeleton: dict[str, Any], node: Any) -> Any:
    """The closure position ``node`` names (its ``$ref`` into the closure's ``$defs``)."""
    ref = node.get("$ref") if isinstance(node, dict) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return skeleton.get("$defs", {}).get(ref[len("#/$defs/") :], False)
    return node


def _uniform_items(skeleton: dict[str, Any], position: Any) -> Any:
    """The closure position of every item of the arrays admitted at ``position``, or None
    where items differ by index (``prefixItems``) or no array is admitted."""
    if not isinstance(position, dict) or "array" not in position.get("type", ()):
        return None
    if "prefixItems" in position or not isinstance(position.get("items"), dict):
        return None
    return _position(skeleton, position["items"])


def at_path(skeleton: dict[str, Any], tokens: tuple[str, ...]) -> Any:
    """The closure position of the member at instance path ``tokens`` (member names, and
    ``*`` for every item of an array), or None when the closure declares no such member."""
    node = _position(skeleton, skeleton)
    for token in tokens:
        if token == EVERY_ITEM:
            node = _uniform_items(skeleton, node)
            if node is None:
                return None
            continue
        properties = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(properties, dict) or token not in properties:
            return None
        node = _position(skeleton, properties[token])
    return node


def holds_leaves(skeleton: dict[str, Any], position: Any) -> bool:
    """Whether every value the closure admits at ``position`` is a scalar or an array of
    scalars (what a projected field may be; the closure bounds their lengths)."""
    if position is False:
        return True
    if not isinstance(position, dict):
        return False
    kinds = set(position.get("type", ()))
    if not kinds <= _SCALARS | {"array"}:
        return False
    if "array" in kinds:
        every = [position.get("items", True), *position.get("prefixItems", [])]
        for item in every:
            items = _position(skeleton, item)
            scalar_items = isinstance(items, dict) and set(items.get("type", ("?",))) <= _SCALARS
            if items is not False and not scalar_items:
                return False
    return True


def leaves(skeleton: dict[str, Any], max_depth: int = 4) -> list[tuple[str, ...]]:
    """Instance paths of every member, reached through objects at most ``max_depth`` member
    names deep, whose every admitted value :func:`holds_leaves`: what an imported contract
    projects. An array (or null) whose every item is an object is walked into through
    ``*`` (every item): its items' members are projected one by one. Judged on the closure,
    so that what it admits at a projected field (every branch, ``prefixItems`` included)
    always fits the agent envelope. A member named ``*`` is never projected: its pointer
    would read as every item."""
    out: list[tuple[str, ...]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        if path and holds_leaves(skeleton, node):
            out.append(path)
            return
        depth = sum(token != EVERY_ITEM for token in path)
        kinds = set(node.get("type", ()))
        if path and kinds and kinds <= {"array", "null"} and depth < max_depth:
            items = _uniform_items(skeleton, node)
            if isinstance(items, dict) and set(items.get("type", ())) == {"object"}:
                walk(items, (*path, EVERY_ITEM))
            return
        properties = node.get("properties")
        if "object" in kinds and isinstance(properties, dict) and depth < max_depth:
            for name, member in properties.items():
                if name != EVERY_ITEM:
                    walk(_position(skeleton, member), (*path, name))

    walk(_position(skeleton, skeleton), ())
    return out


def split(node: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The (upstream, closure) of a schema :func:`closed` wrote, or None for any other."""
    if not isinstance(node, dict) or set(node) != {"allOf"}:
        return None
    parts = node["allOf"]
    if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, dict) for p in parts)):
        return None
    upstream, skeleton = parts
    up_id, cl_id = upstream.get("$id"), skeleton.get("$id")
    if not (isinstance(up_id, str) and up_id.startswith(UPSTREAM_ID)):
        return None
    if not (isinstance(cl_id, str) and cl_id.startswith(CLOSURE_ID)):
        return None
    return upstream, skeleton


def own_bounds(bounds: dict[str, Any]) -> dict[str, dict[str, int]] | None:
    """The positions' own bounds a closure's bounds name (``at``), or None when not in the
    shape :func:`closure` writes."""
    at = bounds.get(AT_KEY, {})
    if not isinstance(at, dict):
        return None
    for where, own in at.items():
        if not (
            isinstance(where, str)
            and isinstance(own, dict)
            and own
            and set(own) <= {"maxLength", "maxItems"}
            and all(_count(v) and v > 0 for v in own.values())
        ):
            return None
    return at


def rederive(upstream: dict[str, Any], skeleton: dict[str, Any]) -> bool:
    """Whether ``skeleton`` is exactly the closure :func:`closure` derives from ``upstream``."""
    bounds = skeleton.get(BOUNDS_KEY)
    if not (
        isinstance(bounds, dict)
        and {"max_string", "max_items"} <= set(bounds) <= {"max_string", "max_items", AT_KEY}
    ):
        return False
    if not all(_count(bounds[k]) and bounds[k] > 0 for k in ("max_string", "max_items")):
        return False
    at = own_bounds(bounds)
    if at is None:
        return False
    tool = str(skeleton["$id"])[len(CLOSURE_ID) :]
    embedded = {k: v for k, v in upstream.items() if k != "$id"}
    try:
        expected = closure(
            embedded, tool, max_string=bounds["max_string"], max_items=bounds["max_items"], at=at
        )
    except Unclosable:
        return False
    return bool(expected == skeleton)


__all__ = [
    "AT_KEY",
    "BOUNDS_KEY",
    "CLOSURE_ID",
    "MAX_NESTING",
    "MAX_POSITIONS",
    "MAX_STEPS",
    "UPSTREAM_ID",
    "Unclosable",
    "at_path",
    "close",
    "closed",
    "closure",
    "holds_leaves",
    "leaves",
    "own_bounds",
    "rederive",
    "split",
]
