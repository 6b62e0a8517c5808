"""Schema lint: hold every contract schema to the schema rules before it ships.

A schema that validates is not yet a contract. An open object lets an upstream add a
field the agent then reads; an unbounded string can carry a page of instructions; a
free-form map carries anything. :func:`lint_schema` walks every subschema and names
each one that breaks a rule; :func:`lint_contracts` does it for a whole
:class:`~toolgate.gate._contracts.ContractSet` and also checks the contracts' own pointers.

Rules (``Finding.rule``)::

    open-object           an object with declared properties that is not closed: add
                          additionalProperties: false (unevaluatedProperties: false over allOf)
    free-form-map         additionalProperties/unevaluatedProperties set to a schema,
                          patternProperties, or an open object that declares no property
    additional-properties-with-allof
                          additionalProperties: false beside or inside allOf, while another
                          part of the composition declares properties it cannot see
    unbounded-string      a string with no maxLength, enum, const or anchored bounded pattern
    unanchored-pattern    a pattern that does not match the whole string (^...$)
    unbounded-array       an array with no maxItems (or const/enum), or with unconstrained items
    untyped-value         no type, const, enum or $ref: it accepts any JSON value
    format-not-asserted   format where the validator treats it as an annotation only
    remote-ref            a $ref or $dynamicRef that is not local (#...)
    unresolved-ref        a local $ref that points nowhere
    pointer-not-in-schema (contracts only) a projection, display_text or rule pointer that
                          the success branch of the schema does not declare
    free-text-in-data     (contracts only) a string projected into data with no pattern, enum,
                          const or format: free text belongs in display_text (untrusted_text),
                          unless the contract's free_text names the field with a reason
    sensitive-undecided   (contracts only) free text reaches the agent (free_text, display_text,
                          an MCP result's text, a free-text-in-data string) and the contract
                          has no sensitive section saying what a secret or personal data in
                          it becomes (gate/_sensitive.py)
    projection-exceeds-envelope
                          (contracts only) a projected field the schema lets be an object, or
                          where the schema sets no bound, a string longer than 4096 characters
                          or an array of more than 1000 items: the agent envelope (bounded by
                          the schema's own maxLength/maxItems there) cannot carry it
    draft-version         (contracts only) status: draft (import-mcp writes drafts): it never
                          decides until a person has reviewed it and set status: active
                          (status: disabled, reviewed and deliberately not served, is no finding)
    closure-mismatch      (contracts only) an imported schema whose closure is not the one
                          import-mcp derives from its upstream part (edited by hand)
    unreviewed-text       (MCP contracts, while draft) a text the host's model reads: the
                          pinned title, description, annotations title, and every string
                          of the input schema the proxy serves (authoring/_texts.py: names,
                          enum/const/pattern/format values, descriptions, ...); the enum/const
                          strings and pattern/format values of the advertised outputSchema
                          (pointer outputSchema/...); and how much
                          upstream text passes (mcp.text_max_length); setting status:
                          active marks them reviewed
    nothing-projected     (imported MCP contracts) the outputSchema declares members and none
                          can be projected (arrays of arrays): every success would be empty
    nothing-passes        (MCP contracts with a pinned definition) no projected data and
                          mcp.text_max_length 0: every call would answer NOTHING_PASSED
    input-*               (MCP contracts) the pinned input schema held to the rules above
                          (input-open-object, input-unbounded-string, ...): arguments are
                          closed and bounded like results

Imported MCP schemas (``data`` is ``{"allOf": [upstream, closure]}``, see
:mod:`toolgate.authoring._close`) are judged as what they are: the closure is derived
again from the upstream part and must be the same; the upstream part itself only
decides (a conjunction with the closure admits nothing the closure does not), so only
the ``$ref`` and ``format`` rules apply inside it; the pointer rules read the upstream
part, where the members are declared.

How subschemas are judged:

* An object, string or array schema is any subschema whose ``type`` allows one, or that
  has no ``type`` at all: without ``type`` a schema accepts every JSON value, which is
  reported once as ``untyped-value``. ``const`` and ``enum`` bound every kind.
* A subschema is bounded for a kind if it bounds itself, if any ``allOf`` branch does, if
  every ``oneOf``/``anyOf`` branch does, if ``then`` and ``else`` both do, or if its
  ``$ref`` target does. Subschemas applied to the same instance (``allOf``, ``anyOf``,
  ``oneOf``, ``then``, ``else``, ``dependentSchemas``) are covered by an ancestor that
  bounds or reports, so each problem is reported once, at its most specific place: a
  ``$ref`` at its target (which passes only if every use of it is covered), a
  ``oneOf``/``anyOf`` at the branches that fail, an ``allOf`` at the composition.
* ``if``, ``not``, ``contains`` and ``propertyNames`` only decide, they never admit a
  value, so only the ``$ref`` and ``format`` rules apply inside them.
* A member is judged at each schema that declares it: ``then: {properties: {a: ...}}``
  must bound ``a`` by itself even when the parent's ``properties`` already does.
* ``{"type": "object", "additionalProperties": false}`` without properties is the empty
  object: closed, not a map.
* Pattern heuristic (the text is read, not compiled): anchored means every top-level
  alternative starts with ``^`` (or ``\\A``) and ends with an unescaped ``$`` (or
  ``\\z``); bounded means no ``*``, ``+`` or ``{n,}`` outside a character class. It is
  deliberately conservative: a ``*`` inside a lookahead counts too (add ``maxLength``).

``Finding.pointer`` is the JSON Pointer of the offending subschema within the schema
(``/$defs/status/properties/state``); for ``pointer-not-in-schema`` it is the path of the
entry within ``contract.yaml`` (``$.projection[1]``), as
:class:`~toolgate._errors.ContractError` writes it.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from typing import Any, Final, Literal, NamedTuple
from urllib.parse import unquote

import msgspec

from toolgate.gate._contracts import (
    ENVELOPE_MAX_ITEMS,
    ENVELOPE_MAX_LENGTH,
    EVERY_ITEM,
    MISSING,
    Cel,
    Contract,
    ContractSet,
    bound_ceilings,
    parse_pointer,
    resolve,
    schema_bound,
)
from toolgate.gate._sensitive import MCP_TEXT_POINTER

__all__ = [
    "Finding",
    "SchemaDocument",
    "context_costs",
    "lint_contracts",
    "lint_schema",
    "scan_pattern",
    "unreviewed_texts",
]


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One rule broken at one place.

    Attributes:
        file: The schema file (or ``contract.yaml``) the finding is in.
        pointer: Where in ``file``: a JSON Pointer into the schema, or the ``$.``-path of a
            ``contract.yaml`` entry for ``pointer-not-in-schema``.
        rule: A short stable id, e.g. ``open-object`` (see the module docstring).
        message: What is wrong and how to fix it, for a reviewer.
    """

    file: str
    pointer: str
    rule: str
    message: str


Kind = Literal["object", "string", "array", "items"]
_KINDS: Final[tuple[Kind, ...]] = ("object", "string", "array", "items")
_JSON_TYPE: Final[dict[Kind, str]] = {
    "object": "object",
    "string": "string",
    "array": "array",
    "items": "array",
}
_ALL_KINDS: Final = frozenset(_KINDS)
_UNTYPED_SHAPES: Final[dict[Kind, str]] = {
    "object": "any object",
    "string": "a string of any length",
    "array": "an array of any length",
    "items": "array items of any kind",
}
# Keywords that, when present, make a subschema more than "any value with annotations".
_TYPING_KEYWORDS: Final = ("type", "const", "enum", "$ref", "allOf", "anyOf", "oneOf")
_BRANCH_LISTS: Final = ("allOf", "anyOf", "oneOf")
_CONDITIONS: Final = ("if", "not", "contains", "propertyNames")
_DEFINITIONS: Final = ("$defs", "definitions")


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _join(pointer: str, *tokens: str | int) -> str:
    return pointer + "".join(f"/{_escape(str(t))}" for t in tokens)


def _types(node: dict[str, Any]) -> set[str] | None:
    """The JSON types ``node`` allows by its ``type`` keyword, or None when it has none."""
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return None


def _is_count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_QUANTIFIER = re.compile(r"\{(\d*)(,(\d*))?\}")
_BRACED_ESCAPES = frozenset("pPuxk")
_INLINE_FLAGS = re.compile(r"^\(\?[a-zA-Z]+\)")


def scan_pattern(pattern: str) -> tuple[bool, bool]:
    """Read a regex's text: is it anchored at both ends, and is its match length bounded?

    The heuristic is documented in the module docstring; it never compiles the pattern.
    """
    text = _INLINE_FLAGS.sub("", pattern)
    alternatives: list[str] = []
    start, depth, in_class, bounded = 0, 0, False, True
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            if i + 2 < len(text) and text[i + 1] in _BRACED_ESCAPES and text[i + 2] == "{":
                close = text.find("}", i + 2)
                i = close + 1 if close > 0 else len(text)
            else:
                i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            # A ']' right after '[' or '[^' is a literal in the Rust and Python flavours.
            if text[i + 1 : i + 2] == "^":
                i += 1
            if text[i + 1 : i + 2] == "]":
                i += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char in "*+":
            bounded = False
        elif char == "{":
            match = _QUANTIFIER.match(text, i)
            if match and match.group(2) and not match.group(3) and match.group(1):
                bounded = False
        elif char == "|" and depth == 0:
            alternatives.append(text[start:i])
            start = i + 1
        i += 1
    alternatives.append(text[start:])
    anchored = all(_anchored(alt) for alt in alternatives)
    return anchored, bounded


def _anchored(alternative: str) -> bool:
    if not alternative.startswith(("^", "\\A")):
        return False
    if alternative.endswith("\\z"):
        body = alternative[:-2]
    elif alternative.endswith("$"):
        body = alternative[:-1]
    else:
        return False
    backslashes = len(body) - len(body.rstrip("\\"))
    return backslashes % 2 == 0


class SchemaDocument:
    """One schema document: resolves its local ``$ref``\\ s to (pointer, subschema).

    A ``$ref`` is local when it is a fragment (``#/$defs/x``, ``#anchor``) or names the
    document's own ``$id``; everything else is remote, which toolgate refuses.
    """

    __slots__ = ("anchors", "base", "root")

    def __init__(self, root: Any) -> None:
        self.root = root
        base = root.get("$id") if isinstance(root, dict) else None
        self.base = base.partition("#")[0] if isinstance(base, str) else None
        self.anchors: dict[str, str] = {}
        for pointer, node in _all_subschemas("", root):
            anchor = node.get("$anchor")
            if isinstance(anchor, str):
                self.anchors.setdefault(anchor, pointer)

    def is_local(self, ref: str) -> bool:
        """True when ``ref`` stays inside this document."""
        uri = ref.partition("#")[0]
        return uri == "" or uri == self.base

    def target(self, ref: str) -> tuple[str, Any] | None:
        """The (pointer, subschema) a local ``ref`` names, or None when it names nothing."""
        if not self.is_local(ref):
            return None
        fragment = unquote(ref.partition("#")[2])
        if fragment and not fragment.startswith("/"):
            pointer = self.anchors.get(fragment)
            return None if pointer is None else (pointer, self.get(pointer))
        try:
            node = resolve(self.root, parse_pointer(fragment))
        except ValueError:
            return None
        return None if node is MISSING else (fragment, node)

    def get(self, pointer: str) -> Any:
        """The subschema at ``pointer`` (which must exist)."""
        return resolve(self.root, parse_pointer(pointer))

    def deref(self, pointer: str, node: Any) -> tuple[str, Any]:
        """Follow a chain of ``$ref``\\ s from ``node`` to the first subschema without one."""
        seen = {pointer}
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            found = self.target(node["$ref"])
            if found is None or found[0] in seen:
                break
            pointer, node = found
            seen.add(pointer)
        return pointer, node

    def in_place(self, pointer: str, node: Any) -> Iterator[tuple[str, Any]]:
        """``node`` and every subschema applied to the same instance (through allOf, anyOf,
        oneOf, then, else, dependentSchemas and ``$ref``), each once."""
        seen: set[str] = set()
        stack = [(pointer, node)]
        while stack:
            pointer, node = stack.pop()
            if pointer in seen or not isinstance(node, dict):
                continue
            seen.add(pointer)
            yield pointer, node
            children = list(_in_place_children(pointer, node))
            if isinstance(node.get("$ref"), str):
                found = self.target(node["$ref"])
                if found is not None:
                    children.append(found)
            stack.extend(reversed(children))


def _in_place_children(pointer: str, node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for keyword in _BRANCH_LISTS:
        branches = node.get(keyword)
        if isinstance(branches, list):
            for i, branch in enumerate(branches):
                yield _join(pointer, keyword, i), branch
    if "if" in node:
        for keyword in ("then", "else"):
            if keyword in node:
                yield _join(pointer, keyword), node[keyword]
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, dict):
        for name, sub in dependent.items():
            yield _join(pointer, "dependentSchemas", name), sub


def _branch_prefixes(pointer: str) -> tuple[str, ...]:
    return tuple(_join(pointer, keyword) + "/" for keyword in _BRANCH_LISTS)


def _value_children(pointer: str, node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Subschemas that judge a member or an item of the instance (a new instance)."""
    for keyword in ("properties", "patternProperties"):
        members = node.get(keyword)
        if isinstance(members, dict):
            for name, sub in members.items():
                yield _join(pointer, keyword, name), sub
    for keyword in ("prefixItems", "items"):
        entries = node.get(keyword)
        if isinstance(entries, list):
            for i, sub in enumerate(entries):
                yield _join(pointer, keyword, i), sub
    for keyword in (
        "items",
        "additionalItems",
        "unevaluatedItems",
        "additionalProperties",
        "unevaluatedProperties",
    ):
        if isinstance(node.get(keyword), dict):
            yield _join(pointer, keyword), node[keyword]


def _all_subschemas(pointer: str, node: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    stack = [(pointer, node)]
    while stack:
        pointer, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield pointer, node
        children = [*_in_place_children(pointer, node), *_value_children(pointer, node)]
        for keyword in _CONDITIONS:
            if keyword in node:
                children.append((_join(pointer, keyword), node[keyword]))
        for keyword in _DEFINITIONS:
            defs = node.get(keyword)
            if isinstance(defs, dict):
                children.extend((_join(pointer, keyword, name), sub) for name, sub in defs.items())
        stack.extend(reversed(children))


class _Context(NamedTuple):
    covered: frozenset[Kind]
    """Kinds an ancestor on the same instance already bounds or reports."""
    condition: bool
    """Inside if/not/contains/propertyNames: the subschema only decides."""


_FRESH: Final = _Context(frozenset(), False)


class _Linter:
    """One pass over one schema document."""

    def __init__(self, root: dict[str, Any], file: str, formats_asserted: bool) -> None:
        self.doc = SchemaDocument(root)
        self.file = file
        self.formats_asserted = formats_asserted
        self.nodes: dict[str, Any] = {}
        self.contexts: dict[str, list[_Context]] = {}
        self.seen: set[tuple[str, _Context]] = set()
        self.definitions: list[tuple[str, Any]] = []
        self.bounds_memo: dict[tuple[str, Kind], bool] = {}
        self.names_memo: dict[str, frozenset[str]] = {}
        self.findings: list[Finding] = []

    def run(self) -> list[Finding]:
        self.walk("", self.doc.root, _FRESH)
        # Definitions are judged where they are used; one never used is judged on its own.
        while self.definitions:
            pending, self.definitions = self.definitions, []
            for pointer, node in pending:
                if pointer not in self.contexts:
                    self.walk(pointer, node, _FRESH)
        for pointer, contexts in self.contexts.items():
            merged = _Context(
                frozenset.intersection(*(c.covered for c in contexts)), all(c.condition for c in contexts)
            )
            self.judge(pointer, self.nodes[pointer], merged)
        return self.findings

    # ------------------------------------------------------------------ traversal

    def walk(self, pointer: str, node: Any, context: _Context) -> None:
        stack = [(pointer, node, context)]
        while stack:
            pointer, node, context = stack.pop()
            if (pointer, context) in self.seen:
                continue
            self.seen.add((pointer, context))
            self.nodes[pointer] = node
            self.contexts.setdefault(pointer, []).append(context)
            if isinstance(node, dict):
                stack.extend(reversed(list(self.children(pointer, node, context))))

    def children(
        self, pointer: str, node: dict[str, Any], context: _Context
    ) -> Iterator[tuple[str, Any, _Context]]:
        for keyword in _DEFINITIONS:
            defs = node.get(keyword)
            if isinstance(defs, dict):
                self.definitions.extend((_join(pointer, keyword, name), sub) for name, sub in defs.items())
        covered = context.covered | {k for k in _KINDS if self.bounds(pointer, node, k)}
        # Every kind is now bounded, reported at this node, or delegated to the oneOf/anyOf
        # branches or the $ref target, which alone see the delegated kinds as uncovered.
        delegated = {k for k in _KINDS if k not in covered and self.delegates(node, k)}
        to_delegates = _Context(_ALL_KINDS - delegated, context.condition)
        same_instance = _Context(_ALL_KINDS, context.condition)
        fresh = _Context(frozenset(), context.condition)
        for keyword in _BRANCH_LISTS:
            branches = node.get(keyword)
            if isinstance(branches, list):
                inner = same_instance if keyword == "allOf" else to_delegates
                for i, branch in enumerate(branches):
                    yield _join(pointer, keyword, i), branch, inner
        for keyword, sub in _in_place_children(pointer, node):
            if not keyword.startswith(_branch_prefixes(pointer)):
                yield keyword, sub, same_instance
        ref = node.get("$ref")
        found = self.doc.target(ref) if isinstance(ref, str) else None
        if found is not None:
            yield found[0], found[1], to_delegates
        for child_pointer, child in _value_children(pointer, node):
            yield child_pointer, child, fresh
        # `true` as a member or tuple item accepts anything; elsewhere its parent reports it.
        for keyword in ("properties", "prefixItems"):
            entries = node.get(keyword)
            pairs = (
                entries.items()
                if isinstance(entries, dict)
                else (enumerate(entries) if isinstance(entries, list) else ())
            )
            for token, sub in pairs:
                if sub is True:
                    yield _join(pointer, keyword, token), sub, fresh
        for keyword in _CONDITIONS:
            if keyword in node:
                yield _join(pointer, keyword), node[keyword], _Context(_ALL_KINDS, True)

    def delegates(self, node: dict[str, Any], kind: Kind) -> bool:
        """Whether an unbounded ``kind`` is reported below ``node`` rather than at it."""
        if isinstance(node.get("$ref"), str):
            return True
        if kind == "object" and "properties" in node:
            return False  # the object that declares the properties is the one to close
        return any(isinstance(node.get(k), list) and node[k] for k in ("oneOf", "anyOf"))

    # ------------------------------------------------------------------ bounds

    def bounds(self, pointer: str, node: Any, kind: Kind) -> bool:
        """Whether every instance ``node`` accepts is bounded for ``kind`` (see module docs)."""
        if not isinstance(node, dict):
            return node is not True
        key = (pointer, kind)
        if key in self.bounds_memo:
            return self.bounds_memo[key]
        self.bounds_memo[key] = False  # a cycle through $ref bounds nothing
        result = _bounds_itself(node, kind) or self._bounds_through(pointer, node, kind)
        self.bounds_memo[key] = result
        return result

    def _bounds_through(self, pointer: str, node: dict[str, Any], kind: Kind) -> bool:
        all_of = node.get("allOf")
        if isinstance(all_of, list) and any(
            self.bounds(_join(pointer, "allOf", i), b, kind) for i, b in enumerate(all_of)
        ):
            return True
        for keyword in ("oneOf", "anyOf"):
            branches = node.get(keyword)
            if (
                isinstance(branches, list)
                and branches
                and all(self.bounds(_join(pointer, keyword, i), b, kind) for i, b in enumerate(branches))
            ):
                return True
        if (
            "if" in node
            and "then" in node
            and "else" in node
            and all(self.bounds(_join(pointer, k), node[k], kind) for k in ("then", "else"))
        ):
            return True
        ref = node.get("$ref")
        if isinstance(ref, str):
            found = self.doc.target(ref)
            if found is not None and self.bounds(found[0], found[1], kind):
                return True
        return False

    def declared_names(self, pointer: str, node: Any) -> frozenset[str]:
        """Property names ``node`` declares for its instance, through in-place subschemas."""
        if pointer in self.names_memo:
            return self.names_memo[pointer]
        names: set[str] = set()
        for _, sub in self.doc.in_place(pointer, node):
            properties = sub.get("properties")
            if isinstance(properties, dict):
                names.update(properties)
        self.names_memo[pointer] = frozenset(names)
        return self.names_memo[pointer]

    # ------------------------------------------------------------------ rules

    def report(self, pointer: str, rule: str, message: str) -> None:
        self.findings.append(Finding(file=self.file, pointer=pointer, rule=rule, message=message))

    def judge(self, pointer: str, node: Any, context: _Context) -> None:
        if node is True and not context.condition and context.covered != _ALL_KINDS:
            self.report(pointer, "untyped-value", "`true` accepts any JSON value: give it a type and bounds")
        if not isinstance(node, dict):
            return
        self.judge_refs(pointer, node)
        if "format" in node and not self.formats_asserted:
            self.report(
                pointer,
                "format-not-asserted",
                f"format {node['format']!r} is only an annotation where assertion is off: "
                "turn assertion on or check the value with a pattern and maxLength",
            )
        if context.condition:
            return
        self.judge_maps(pointer, node)
        self.judge_all_of(pointer, node)
        types = _types(node)
        pattern = node.get("pattern")
        anchored = scan_pattern(pattern)[0] if isinstance(pattern, str) else True
        if not anchored and (types is None or "string" in types):
            self.report(
                pointer,
                "unanchored-pattern",
                f"pattern {pattern!r} matches anywhere in the string: anchor it as ^...$",
            )
        failing = [
            k
            for k in _KINDS
            if k not in context.covered and not self.bounds(pointer, node, k) and not self.delegates(node, k)
        ]
        if not failing:
            return
        if not any(k in node for k in _TYPING_KEYWORDS):
            shown = [k for k in failing if not (k == "items" and "array" in failing)]
            shapes = ", ".join(_UNTYPED_SHAPES[k] for k in shown)
            self.report(
                pointer,
                "untyped-value",
                f"no type: this accepts any JSON value, including {shapes}; declare its type",
            )
            return
        if "object" in failing and not self.has_map_keyword(node):
            if self.declared_names(pointer, node):
                hint = (
                    "unevaluatedProperties: false beside allOf"
                    if "allOf" in node
                    else "additionalProperties: false"
                )
                self.report(
                    pointer, "open-object", f"object accepts properties it does not declare: add {hint}"
                )
            else:
                self.report(
                    pointer,
                    "free-form-map",
                    "object declares no properties and is not closed: a free-form map; "
                    "name each member and add additionalProperties: false",
                )
        if "string" in failing:
            why = (
                f"its pattern {pattern!r} is not bounded (no *, + or {{n,}})"
                if isinstance(pattern, str) and anchored
                else "it has no maxLength, enum, const or anchored bounded pattern"
            )
            self.report(pointer, "unbounded-string", f"string length is not bounded: {why}")
        if "array" in failing:
            self.report(pointer, "unbounded-array", "array length is not bounded: add maxItems")
        if "items" in failing:
            self.report(
                pointer,
                "unbounded-array",
                "array items are unconstrained: give items a schema (or prefixItems with items: false)",
            )

    def judge_refs(self, pointer: str, node: dict[str, Any]) -> None:
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            if not self.doc.is_local(ref):
                self.report(
                    pointer,
                    "remote-ref",
                    f"{keyword} {ref!r} is not local: remote and file references are refused; "
                    "copy the definition into $defs",
                )
            elif keyword == "$ref" and self.doc.target(ref) is None:
                self.report(pointer, "unresolved-ref", f"$ref {ref!r} points at nothing in this schema")

    @staticmethod
    def has_map_keyword(node: dict[str, Any]) -> bool:
        return (
            isinstance(node.get("additionalProperties"), dict)
            or isinstance(node.get("unevaluatedProperties"), dict)
            or "patternProperties" in node
        )

    def judge_maps(self, pointer: str, node: dict[str, Any]) -> None:
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            if isinstance(node.get(keyword), dict):
                self.report(
                    pointer,
                    "free-form-map",
                    f"{keyword} is a schema: any member name is accepted; name each member "
                    f"and set {keyword}: false",
                )
        if "patternProperties" in node:
            self.report(
                pointer,
                "free-form-map",
                "patternProperties accepts members by name pattern: name each member instead",
            )

    def judge_all_of(self, pointer: str, node: dict[str, Any]) -> None:
        branches = node.get("allOf")
        if not isinstance(branches, list):
            return
        own = node.get("properties")
        own_names = set(own) if isinstance(own, dict) else set()
        names = [self.declared_names(_join(pointer, "allOf", i), b) for i, b in enumerate(branches)]
        for i, branch in enumerate(branches):
            _, target = self.doc.deref(_join(pointer, "allOf", i), branch)
            if not (isinstance(target, dict) and target.get("additionalProperties") is False):
                continue
            others = own_names.union(*(n for j, n in enumerate(names) if j != i))
            unseen = sorted(others - names[i])
            if unseen:
                self.report(
                    _join(pointer, "allOf", i),
                    "additional-properties-with-allof",
                    f"additionalProperties: false in an allOf branch rejects {unseen}, which "
                    "other parts of the composition declare; remove it and put "
                    "unevaluatedProperties: false beside allOf",
                )
        if node.get("additionalProperties") is False:
            unseen = sorted(frozenset().union(*names) - own_names)
            if unseen:
                self.report(
                    pointer,
                    "additional-properties-with-allof",
                    f"additionalProperties: false beside allOf rejects {unseen}, which the "
                    "allOf branches declare; use unevaluatedProperties: false instead",
                )


def _bounds_itself(node: dict[str, Any], kind: Kind) -> bool:
    if "const" in node or "enum" in node:
        return True
    types = _types(node)
    if types is not None and _JSON_TYPE[kind] not in types:
        return True
    if kind == "object":
        return node.get("additionalProperties") is False or node.get("unevaluatedProperties") is False
    if kind == "string":
        pattern = node.get("pattern")
        return _is_count(node.get("maxLength")) or (
            isinstance(pattern, str) and scan_pattern(pattern) == (True, True)
        )
    items = node.get("items")
    if kind == "array":
        return (
            _is_count(node.get("maxItems"))
            or items is False
            or (isinstance(items, list) and node.get("additionalItems") is False)
        )
    # kind == "items": each item is judged by its own subschema when there is one.
    if node.get("maxItems") == 0 or items is False:
        return True
    if isinstance(items, list):
        return "additionalItems" in node and node["additionalItems"] is not True
    return ("items" in node and items is not True) or (
        "unevaluatedItems" in node and node["unevaluatedItems"] is not True
    )


def lint_schema(schema: dict[str, Any], *, formats_asserted: bool = True, file: str = "") -> list[Finding]:
    """Hold one schema to the schema rules (docs/design.md, Contracts).

    Args:
        schema: The schema document (Draft 2020-12; ``definitions`` and array ``items``
            of older drafts are walked too).
        formats_asserted: Whether the validator asserts ``format`` (toolgate's does);
            when False every ``format`` is a ``format-not-asserted`` finding.
        file: Name put in each finding's ``file``.

    Returns:
        Findings in document order (a subschema's findings before its children's); empty
        when the schema is clean.
    """
    return _Linter(schema, file, formats_asserted).run()


def lint_contracts(contracts: ContractSet) -> list[Finding]:
    """Lint every contract version: its schema, and its pointers against the schema.

    Schemas are linted with ``format`` asserted, as :func:`~toolgate.gate._contracts.compile_schema`
    compiles them. Each ``projection``, ``display_text`` and rule pointer must name a
    property the schema's success branch declares under ``/data`` (rule
    ``pointer-not-in-schema``, reported against ``contract.yaml``).

    Returns:
        Findings, contract by contract in the set's order; empty when all are clean.
    """
    findings: list[Finding] = []
    for contract in contracts:
        file = str(contract.schema_path)
        imported = _imported_parts(contract.schema)
        if imported is None:
            findings.extend(lint_schema(contract.schema, file=file))
            doc = SchemaDocument(contract.schema)
            strip = 0
            sized = False
        else:
            upstream, skeleton = imported
            findings.extend(_lint_imported(contract.schema, upstream, skeleton, file))
            doc, strip = SchemaDocument(upstream), 1
            sized = _closure_fits(skeleton, contract.spec.limits.max_bytes)
        findings.extend(_check_pointers(contract, doc, strip))
        free = list(_check_free_text(contract, doc, strip, imported=imported is not None))
        findings.extend(free)
        findings.extend(_check_sensitive(contract, free))
        findings.extend(
            _check_envelope_fit(
                contract, doc, strip, sized=sized, skeleton=None if imported is None else imported[1]
            )
        )
        findings.extend(_lint_input_schema(contract))
        findings.extend(_check_nothing_projected(contract, None if imported is None else imported[1]))
        findings.extend(_check_rules_exercised(contract))
        findings.extend(_check_nothing_passes(contract))
        if contract.spec.status == "draft":
            findings.extend(unreviewed_texts(contract))
        if contract.spec.status == "draft":
            findings.append(
                Finding(
                    file=str(contract.path),
                    pointer="$.status",
                    rule="draft-version",
                    message="status: draft never decides: review the schema, projection, limits and "
                    "rules, settle the other findings, then set status: active (or shadow; or disabled: "
                    "reviewed, deliberately not served)",
                )
            )
    return findings


_IMPORTED_AT = ("$defs", "structuredContent")


def _check_rules_exercised(contract: Contract) -> Iterator[Finding]:
    """Each ``cel`` rule is named by a reject fixture (``expect.rule``): a rule no fixture
    makes false is a rule nobody has seen reject (rule ``cel-rule-untested``)."""
    named: set[str] = set()
    for path in sorted((contract.folder / "fixtures" / "reject").glob("*.json")):
        try:
            expect = json.loads(path.read_bytes()).get("expect", {})
        except (OSError, ValueError, AttributeError):
            continue  # contracts test reports an unreadable fixture
        if isinstance(expect, dict) and isinstance(expect.get("rule"), str):
            named.add(expect["rule"])
    for i, rule in enumerate(contract.spec.rules):
        if isinstance(rule, Cel) and rule.name not in named:
            yield Finding(
                file=str(contract.path),
                pointer=f"$.rules[{i}]",
                rule="cel-rule-untested",
                message=f"no reject fixture names rule {rule.name!r}: add one under fixtures/reject "
                f'with "expect": {{"stage": "semantic", "code": "RULE_FAILED", "rule": "{rule.name}"}}',
            )


def _check_nothing_passes(contract: Contract) -> Iterator[Finding]:
    """A served MCP contract that projects no ``data`` (a text-only tool: no outputSchema)
    and passes no text (``mcp.text_max_length: 0``, as import writes it): mcp-proxy would
    answer every call ``NOTHING_PASSED``."""
    mcp = contract.spec.mcp
    if mcp is None or mcp.definition is None or contract.spec.status == "disabled":
        return
    if contract.data_projection or mcp.text_max_length > 0:
        return
    yield Finding(
        file=str(contract.path),
        pointer="$.mcp.text_max_length",
        rule="nothing-passes",
        message="0, and the tool has no projected data (no outputSchema): mcp-proxy would answer every call "
        "NOTHING_PASSED; set mcp.text_max_length to the characters of the upstream's text a person needs "
        '(it reaches the host for the user, annotations.audience ["user"]), or status: disabled',
    )


def _check_nothing_projected(contract: Contract, skeleton: dict[str, Any] | None) -> Iterator[Finding]:
    """An imported MCP contract whose outputSchema declares members of which none can be
    projected (arrays of arrays, items that differ by position, objects nested past 4
    levels): each success would reach
    the agent empty, so the proxy answers it ``NOTHING_PASSED`` rather than an empty success."""
    if skeleton is None or contract.data_projection or contract.spec.status == "disabled":
        return
    from toolgate.authoring._close import at_path

    top = at_path(skeleton, ())
    if not (isinstance(top, dict) and top.get("properties")):
        return
    yield Finding(
        file=str(contract.path),
        pointer="$.projection",
        rule="nothing-projected",
        message="no member of the outputSchema can be projected (arrays of arrays, items that differ by "
        "position, objects deeper than 4 levels): every success would reach the agent empty, so "
        "mcp-proxy answers NOTHING_PASSED; "
        "set status: disabled, or serve the tool from an outputSchema with scalar fields",
    )


def _imported_parts(schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    from toolgate.authoring._close import split

    defs = schema.get(_IMPORTED_AT[0])
    return split(defs.get(_IMPORTED_AT[1])) if isinstance(defs, dict) else None


def _lint_imported(
    schema: dict[str, Any], upstream: dict[str, Any], skeleton: dict[str, Any], file: str
) -> Iterator[Finding]:
    from toolgate.authoring._close import rederive

    at = "/" + "/".join(_IMPORTED_AT)
    # The envelope around data, with data standing in as the closed object it is.
    envelope = {**schema, "$defs": {**schema["$defs"], _IMPORTED_AT[1]: _CLOSED_STAND_IN}}
    yield from lint_schema(envelope, file=file)
    if not rederive(upstream, skeleton):
        yield Finding(
            file=file,
            pointer=at + "/allOf/1",
            rule="closure-mismatch",
            message="this closure is not the one import-mcp derives from the upstream schema beside it: "
            "import the tool again rather than editing either part",
        )
    decide_only = ("remote-ref", "unresolved-ref", "format-not-asserted")
    for finding in lint_schema(upstream, file=file):
        if finding.rule in decide_only:
            yield msgspec.structs.replace(finding, pointer=f"{at}/allOf/0{finding.pointer}")


_CLOSED_STAND_IN: Final = {"type": "object", "additionalProperties": False}
_ENVELOPE_STRING: Final = ENVELOPE_MAX_LENGTH  # a projected leaf's bounds where the schema sets none
_ENVELOPE_ITEMS: Final = ENVELOPE_MAX_ITEMS


_CONSTRAINING = ("pattern", "enum", "const", "format")


def _free_text_remedy(contract: Contract, *, imported: bool) -> str:
    """What the reviewer can do, in the terms lint accepts for this kind of contract."""
    if contract.spec.mcp is not None:
        # An MCP result's display text is its text blocks, and an imported schema.json is
        # never edited (closure-mismatch): what is left is the projection and free_text.
        return (
            "cut it from the projection in contract.yaml if the agent does not need it, or name it "
            "under free_text with a reason (the agent reads it as data)"
        )
    if imported:
        return "cut it from the projection, or list it under free_text with a reason"
    return "bound it, move it to display_text, or list it under free_text with a reason"


def _check_free_text(
    contract: Contract, doc: SchemaDocument, strip: int, *, imported: bool = False
) -> Iterator[Finding]:
    """Projected strings (and string items) must be constrained, or excepted with a reason."""
    remedy = _free_text_remedy(contract, imported=imported)
    excepted = {free.pointer for free in contract.spec.free_text}
    for i, pointer in enumerate(contract.spec.projection):
        if pointer in excepted:
            continue
        level = _nodes_at(doc, parse_pointer(pointer)[strip:])
        if not level:
            continue  # pointer-not-in-schema says so
        items = [
            pair
            for _, node in level
            if isinstance(node.get("items"), dict)
            for pair in doc.in_place(_join("", "items"), node["items"])
        ]
        if _free_text(level) or (items and "array" in _kinds(level) and _free_text(items)):
            yield Finding(
                file=str(contract.path),
                pointer=f"$.projection[{i}]",
                rule="free-text-in-data",
                message=f"{pointer} projects a string with no pattern, enum, const or format into data: "
                + remedy,
            )


def _check_sensitive(contract: Contract, free: list[Finding]) -> Iterator[Finding]:
    """A contract that passes free text to the agent says what a secret or personal data in it
    becomes (``sensitive``, gate/_sensitive.py)."""
    spec = contract.spec
    if spec.sensitive is not None:
        return
    texts = [entry.pointer for entry in spec.free_text] + [entry.pointer for entry in spec.display_text]
    if spec.mcp is not None and spec.mcp.text_max_length > 0:
        texts.append(MCP_TEXT_POINTER)
    texts += [spec.projection[int(f.pointer[len("$.projection[") : -1])] for f in free]
    if not texts:
        return
    more = f" (and {len(texts) - 1} more)" if len(texts) > 1 else ""
    yield Finding(
        file=str(contract.path),
        pointer="$.sensitive",
        rule="sensitive-undecided",
        message=f"{texts[0]}{more} reaches the agent as free text and the contract has no sensitive "
        "section: say what a secret (reject | redact; reject when unsaid) and personal data "
        "(reject | redact | allow; allow when unsaid) in it become",
    )


def _kinds(level: list[tuple[str, Any]]) -> set[str]:
    kinds: set[str] = set()
    for _, node in level:
        kind = node.get("type")
        if isinstance(kind, str):
            kinds.add(kind)
        elif isinstance(kind, list):
            kinds.update(k for k in kind if isinstance(k, str))
        elif not any(k in node for k in ("const", "enum", "$ref", "allOf", "anyOf", "oneOf")):
            kinds.add("string")  # untyped: admits strings
    return kinds


def _free_text(level: list[tuple[str, Any]]) -> bool:
    """The subschemas at one place admit strings and none of them constrains their text."""
    if "string" not in _kinds(level):
        return False
    return not any(keyword in node for _, node in level for keyword in _CONSTRAINING)


def _nodes_at(doc: SchemaDocument, tokens: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Every subschema (outside failure branches) applied to the value at ``tokens``."""
    level = _success_level(doc)
    for token in tokens:
        level = [pair for p, n in _declared(level, token) for pair in doc.in_place(p, n)]
    return level


def _contract_pointers(contract: Contract) -> Iterator[tuple[str, str]]:
    spec = contract.spec
    for i, pointer in enumerate(spec.projection):
        yield f"$.projection[{i}]", pointer
    for i, display in enumerate(spec.display_text):
        yield f"$.display_text[{i}].pointer", display.pointer
    for i, rule in enumerate(spec.rules):
        if not isinstance(rule, Cel):
            yield f"$.rules[{i}].pointer", rule.pointer


def _closure_fits(skeleton: dict[str, Any], max_bytes: int) -> bool:
    """Whether an imported closure bounds every string and array within what a result of
    ``max_bytes`` can hold (the envelope's leaf follows the closure's bounds; only a closure
    lint re-derived counts: :func:`_lint_imported` reports any other)."""
    from toolgate.authoring._close import BOUNDS_KEY, own_bounds

    bounds = skeleton.get(BOUNDS_KEY)
    strings, items = bound_ceilings(max_bytes)
    ceilings = {"maxLength": strings, "maxItems": items}
    at = own_bounds(bounds) if isinstance(bounds, dict) else None
    return (
        isinstance(bounds, dict)
        and _is_count(bounds.get("max_string"))
        and _is_count(bounds.get("max_items"))
        and bounds["max_string"] <= strings
        and bounds["max_items"] <= items
        and at is not None
        and all(v <= ceilings[k] for own in at.values() for k, v in own.items())
    )


def _check_envelope_fit(
    contract: Contract,
    doc: SchemaDocument,
    strip: int,
    *,
    sized: bool,
    skeleton: dict[str, Any] | None = None,
) -> Iterator[Finding]:
    """Projected fields must fit the agent envelope's leaf: a scalar or an array of scalars,
    within the maxLength/maxItems the schema guarantees at the field, or where it guarantees
    none a string of at most 4096 characters and an array of at most 1000 items
    (:attr:`~toolgate.gate._contracts.Contract.leaf_bounds`); otherwise the projection
    refuses a result the schema accepted (an INTERNAL_ERROR). Judged conservatively: a
    field is flagged when any subschema declaring it admits the shape, and for an imported
    schema when its closure admits anything else there (the closure sees every branch:
    prefixItems, anyOf, then, ...)."""
    from toolgate.authoring._close import at_path, holds_leaves

    for i, pointer in enumerate(contract.spec.projection):
        full = parse_pointer(pointer)
        tokens = full[strip:]
        entries = _entries_at(doc, tokens)
        # A bound the schema guarantees is the envelope's own there: nothing longer arrives.
        own_length, own_items, _ = contract.leaf_bounds[full].from_schema
        sized_here = {"string": own_length is not None, "array": own_items is not None}
        problems = [
            shown
            for kind, shown in (
                ("object", "an object"),
                ("string", f"a string longer than {_ENVELOPE_STRING} characters"),
                ("array", f"an array of more than {_ENVELOPE_ITEMS} items"),
                ("items", "an array holding objects or arrays"),
            )
            if not (sized and kind in ("string", "array"))
            and not sized_here.get(kind, False)
            and skeleton is None
            and any(_admits(doc, p, n, kind, frozenset()) for p, n in entries)
        ]
        for at, token in enumerate(tokens):  # each array projected item by item
            if token == EVERY_ITEM and not sized and skeleton is None:
                arrays = _entries_at(doc, tokens[:at])
                bounded = schema_bound(contract.schema, full[: at + strip], "maxItems") is not None
                if not bounded and any(_admits(doc, p, n, "array", frozenset()) for p, n in arrays):
                    array = _join("", *full[: at + strip])
                    problems.append(f"in an array ({array}) of more than {_ENVELOPE_ITEMS} items")
        if skeleton is not None:  # what data may hold there is exactly what the closure admits
            position = at_path(skeleton, tuple(tokens))
            if position is not None and not holds_leaves(skeleton, position):
                problems.append("an object or an array holding objects or arrays (on some branch)")
            elif not sized:
                problems.append("a string or array longer than limits.max_bytes lets arrive")
        if problems:
            yield Finding(
                file=str(contract.path),
                pointer=f"$.projection[{i}]",
                rule="projection-exceeds-envelope",
                message=f"{pointer} may be {' or '.join(problems)}, which the agent envelope cannot "
                "carry: bound it in the schema or project its fields one by one",
            )


def _entries_at(doc: SchemaDocument, tokens: tuple[str, ...]) -> list[tuple[str, Any]]:
    """The subschemas that declare the member at ``tokens`` (outside failure branches)."""
    level = _success_level(doc)
    found: list[tuple[str, Any]] = []
    for depth, token in enumerate(tokens):
        found = _declared(level, token)
        if depth < len(tokens) - 1:
            level = [pair for p, n in found for pair in doc.in_place(p, n)]
    return found


def _too_big(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "string":
        return isinstance(value, str) and len(value) > _ENVELOPE_STRING
    if kind == "array":
        return isinstance(value, list) and len(value) > _ENVELOPE_ITEMS
    if kind == "any-array":
        return isinstance(value, list)
    return isinstance(value, list) and any(isinstance(v, dict | list) for v in value)  # items


_KIND_TYPE: Final = {
    "object": "object",
    "string": "string",
    "array": "array",
    "any-array": "array",
    "items": "array",
}


def _admits(doc: SchemaDocument, pointer: str, node: Any, kind: str, seen: frozenset[str]) -> bool:
    """Whether ``node`` may accept a value of the too-big ``kind`` (see :func:`_too_big`)."""
    if not isinstance(node, dict):
        return node is not False
    if pointer in seen:
        return False  # a cycle adds nothing the first visit did not
    seen = seen | {pointer}
    if "const" in node:
        return _too_big(node["const"], kind)
    if isinstance(node.get("enum"), list):
        return any(_too_big(v, kind) for v in node["enum"])
    types = _types(node)
    if types is not None and _KIND_TYPE[kind] not in types:
        return False
    if kind == "string" and (
        _at_most(node, "maxLength", _ENVELOPE_STRING)
        or _pattern_at_most(node.get("pattern"), _ENVELOPE_STRING)
    ):
        return False
    if kind == "array" and _at_most(node, "maxItems", _ENVELOPE_ITEMS):
        return False
    if kind == "items":
        items = node.get("items")
        if node.get("maxItems") == 0 or items is False:
            return False
        where = _join(pointer, "items")
        if isinstance(items, dict) and not any(
            _admits(doc, where, items, inner, seen) for inner in ("object", "any-array")
        ):
            return False
    branches = node.get("allOf")
    if isinstance(branches, list) and any(
        not _admits(doc, _join(pointer, "allOf", i), b, kind, seen) for i, b in enumerate(branches)
    ):
        return False
    for keyword in ("anyOf", "oneOf"):
        branches = node.get(keyword)
        if isinstance(branches, list) and all(
            not _admits(doc, _join(pointer, keyword, i), b, kind, seen) for i, b in enumerate(branches)
        ):
            return False
    ref = node.get("$ref")
    if isinstance(ref, str):
        found = doc.target(ref)
        if found is not None and not _admits(doc, found[0], found[1], kind, seen):
            return False
    return True


def _pattern_at_most(pattern: Any, limit: int) -> bool:
    """Whether an anchored ``pattern`` matches no string longer than ``limit``."""
    if not isinstance(pattern, str) or scan_pattern(pattern) != (True, True):
        return False
    try:
        parser = importlib.import_module("re._parser")  # the widths of the pattern's pieces
        longest = parser.parse(pattern).getwidth()[1]
    except (re.error, ValueError, TypeError, OverflowError, RecursionError):
        return False
    return bool(longest <= limit)


def _at_most(node: dict[str, Any], keyword: str, limit: int) -> bool:
    value = node.get(keyword)
    return isinstance(value, int) and _is_count(value) and value <= limit


def _check_pointers(contract: Contract, doc: SchemaDocument, strip: int) -> Iterator[Finding]:
    for path, pointer in _contract_pointers(contract):
        if not _declares(doc, parse_pointer(pointer)[strip:]):
            yield Finding(
                file=str(contract.path),
                pointer=path,
                rule="pointer-not-in-schema",
                message=f"{pointer} is not a property the schema's success branch declares",
            )


def _is_failure_branch(node: dict[str, Any]) -> bool:
    properties = node.get("properties")
    outcome = properties.get("outcome") if isinstance(properties, dict) else None
    if not isinstance(outcome, dict):
        return False
    if "const" in outcome:
        return bool(outcome["const"] != "success")
    enum = outcome.get("enum")
    return isinstance(enum, list) and "success" not in enum


def _declares(doc: SchemaDocument, tokens: tuple[str, ...]) -> bool:
    """Whether some path of subschemas, outside failure branches, declares ``tokens``."""
    level = _success_level(doc)
    for token in tokens:
        found = _declared(level, token, indexes=True)
        if not found:
            return False
        level = [pair for p, n in found for pair in doc.in_place(p, n)]
    return True


def _success_level(doc: SchemaDocument) -> list[tuple[str, Any]]:
    """The subschemas applied to the whole result, outside failure branches."""
    return [(p, n) for p, n in doc.in_place("", doc.root) if not _is_failure_branch(n)]


def _declared(level: list[tuple[str, Any]], token: str, *, indexes: bool = False) -> list[tuple[str, Any]]:
    """The subschemas ``level`` declares for the member ``token``: a property, every item of
    an array for ``*`` (``items`` and each ``prefixItems``), and with ``indexes`` the item a
    digit token names."""
    found: list[tuple[str, Any]] = []
    for pointer, node in level:
        properties = node.get("properties")
        prefix = node.get("prefixItems")
        if token == EVERY_ITEM:
            if isinstance(node.get("items"), dict):
                found.append((_join(pointer, "items"), node["items"]))
            if isinstance(prefix, list):
                found.extend((_join(pointer, "prefixItems", i), item) for i, item in enumerate(prefix))
        elif isinstance(properties, dict) and token in properties:
            found.append((_join(pointer, "properties", token), properties[token]))
        elif indexes and token.isdigit():
            if isinstance(prefix, list) and int(token) < len(prefix):
                found.append((_join(pointer, "prefixItems", token), prefix[int(token)]))
            elif isinstance(node.get("items"), dict):
                found.append((_join(pointer, "items"), node["items"]))
    return found


# --- MCP: the pinned tool definition ----------------------------------------------------

_SHOWN_TEXT: Final = 160  # characters of an unreviewed text quoted in its finding


def _quote(value: Any) -> str:
    """A text as one bounded line: control characters, quotes and non-ASCII escaped."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    shown = ascii(text[:_SHOWN_TEXT])
    return shown + (f" ... ({len(text)} characters)" if len(text) > _SHOWN_TEXT else "")


def unreviewed_texts(contract: Contract) -> Iterator[Finding]:
    """Every text of an MCP contract's pinned definition that the host's model reads: the
    title, description and annotations title in ``contract.yaml``, and every ``title``,
    ``description``, ``default``, ``$comment`` and ``examples`` of the input schema (at
    schema positions, not member names). Reported while the version is a draft: setting
    ``status: active`` is the review of them all."""
    mcp = contract.spec.mcp
    definition = mcp.definition if mcp is not None else None
    if definition is None:
        return
    why = "the host's model reads it: read it, rewrite or cut it, then status: active marks it reviewed"
    for at, text in (
        ("$.mcp.definition.title", definition.title),
        ("$.mcp.definition.description", definition.description),
        (
            "$.mcp.definition.annotations.title",
            definition.annotations.title if definition.annotations else None,
        ),
    ):
        if text:
            yield Finding(
                file=str(contract.path), pointer=at, rule="unreviewed-text", message=f"{_quote(text)}: {why}"
            )
    yield from _text_passed(contract)
    yield from _advertised_output_texts(contract, why)
    if contract.input_schema is None or contract.input_schema_path is None:
        return
    from toolgate.authoring._texts import input_texts

    for pointer, text in input_texts(contract.input_schema):
        yield Finding(
            file=str(contract.input_schema_path),
            pointer=pointer,
            rule="unreviewed-text",
            message=f"{_quote(text)}: {why}",
        )


def _advertised_output_texts(contract: Contract, why: str) -> Iterator[Finding]:
    """The upstream's strings mcp-proxy serves in the tool's advertised ``outputSchema`` (the
    projected data's schema: ``enum``/``const`` strings, ``pattern`` and ``format`` values),
    with their pointer in that schema, reported against ``schema.json`` where they come from."""
    from toolgate.authoring._advertised import advertised_output_schema, advertised_texts

    try:
        advertised = advertised_output_schema(contract)
    except (ValueError, TypeError, KeyError):
        return
    for pointer, text in advertised_texts(advertised):
        yield Finding(
            file=str(contract.schema_path),
            pointer=f"outputSchema{pointer}",
            rule="unreviewed-text",
            message=f"{_quote(text)}: served in the advertised outputSchema (the projected data's schema, "
            f"at {pointer}): {why}; to serve it no more, drop its field from the projection",
        )


def _text_passed(contract: Contract) -> Iterator[Finding]:
    """The reviewer's choice on the upstream's text blocks: passed to the user or not."""
    mcp = contract.spec.mcp
    if mcp is None or mcp.definition is None:
        return
    if mcp.text_max_length > 0:
        message = (
            f"{mcp.text_max_length}: up to {mcp.text_max_length} characters of the upstream's own text "
            'reach the host per call (for the user, annotations.audience ["user"]): keep it only if a '
            "person needs that text, else set 0; status: active marks it reviewed"
        )
    else:
        message = (
            "0: the upstream's text blocks reach no one (a tool without an outputSchema then answers "
            "nothing); to pass them to the user, set the characters a person needs; status: active "
            "marks it reviewed"
        )
    yield Finding(
        file=str(contract.path), pointer="$.mcp.text_max_length", rule="unreviewed-text", message=message
    )


def _lint_input_schema(contract: Contract) -> Iterator[Finding]:
    """The pinned input schema, closed and bounded like a result: an imported one (its
    closure beside the upstream part) must carry the closure import derives; a written
    one is linted as a schema. Each rule is reported as ``input-<rule>``."""
    from toolgate.authoring._close import rederive, split

    schema = contract.input_schema
    if schema is None or contract.input_schema_path is None:
        return
    file = str(contract.input_schema_path)
    parts = split({k: v for k, v in schema.items() if k not in ("$schema", "type")})
    if parts is None or schema.get("type") != "object":
        for finding in lint_schema(schema, file=file):
            yield msgspec.structs.replace(finding, rule=f"input-{finding.rule}")
        return
    upstream, skeleton = parts
    if not rederive(upstream, skeleton):
        yield Finding(
            file=file,
            pointer="/allOf/1",
            rule="input-closure-mismatch",
            message="this closure is not the one import-mcp derives from the input schema beside it "
            "(/allOf/0): its texts may be rewritten, its shape not; import the tool again instead",
        )
    for finding in lint_schema(upstream, file=file):
        if finding.rule in ("remote-ref", "unresolved-ref", "format-not-asserted"):
            yield msgspec.structs.replace(
                finding, pointer=f"/allOf/0{finding.pointer}", rule=f"input-{finding.rule}"
            )


CONTEXT_NOTE_AT: Final = 4096  # text_max_length past this gets a note of what it costs


def context_costs(contracts: ContractSet) -> list[str]:
    """One line per MCP contract whose text bound is large: what it may cost the agent's
    context per call (about four characters a token). Notes, not findings: the bound is
    the reviewer's choice."""
    notes = []
    for contract in contracts:
        mcp = contract.spec.mcp
        if mcp is None or mcp.text_max_length <= CONTEXT_NOTE_AT:
            continue
        notes.append(
            f"{contract.path}: $.mcp.text_max_length: {mcp.text_max_length} characters of untrusted text "
            f"may reach the agent per call, about {-(-mcp.text_max_length // 4)} tokens of its context "
            f"({mcp.text_max_length // CONTEXT_NOTE_AT}x the {CONTEXT_NOTE_AT} of a projected string)"
        )
    return notes
