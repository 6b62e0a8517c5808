"""The schema error a rejection reports, found without building every error.

A contract schema is a ``oneOf`` (or ``anyOf``) of envelope branches told apart
by ``outcome``. When the envelope fails, the rejection reports the first error of
the branch the envelope meant: among the branches, the one without an error at
``/outcome``, then the one with the fewest errors (:func:`reference_error`).
Asking jsonschema-rs for that through the root validator evaluates every branch
in full and converts each branch's errors, with the instances they name, into
Python objects: for a 20 KB result that is most of the cost of a rejection.

:class:`Branches` gets the same error more cheaply, from validators compiled for
each branch and for each branch's ``outcome`` member (the compiled validator map
of the same schema, with the same options): the ``outcome`` validators say which
branch the envelope meant, and that branch alone is asked for its errors.
It answers only where that is provably the branch :func:`reference_error` picks:
exactly one branch accepts the envelope's ``outcome``, and no keyword of a branch
other than ``properties/outcome`` can put an error at ``/outcome``. Otherwise it
answers None and the reference search runs.

Asking the meant branch for its errors still costs a conversion of the envelope and
of the failing value into Python objects, which grows with the result. The most
common rejection, one member too many in a closed object (an injected field), is
found without it where the branch's errors can only be that one: the branch and
the object schemas below it are plain closed objects (:class:`_Node`), every other
keyword on the way accepts (``type``, ``required``, each member's compiled
validator), and exactly one member fails at each level down to the object whose
``additionalProperties: false`` refuses a name. That object's one keyword is then
the only source of errors, so its error is the first one; its message is never
reported (the name is the sender's, the rejection masks it), so it is not built.
Anything else (two failures, a non-object, a member schema of another shape) falls
back to the branch's own first error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jsonschema_rs

from toolgate.gate._contracts import compile_subschemas

# Root keywords that validate nothing themselves: a failing root is its oneOf / anyOf.
_ROOT_KEYS = frozenset({"$schema", "$id", "$defs", "definitions", "$comment", "title", "description"})
# Branch keywords none of which can report an error at /outcome except properties/outcome:
# additionalProperties covers members not in properties, and outcome is one of them.
_BRANCH_KEYS = frozenset(
    {"$comment", "title", "description", "type", "required", "properties", "additionalProperties"}
)
_DRAFT_2020_12 = (
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
)
_REFERENCES = frozenset({"$ref", "$dynamicRef"})
# Keywords of a plain closed object (_Node): what it checks is type, required, the
# members' schemas and additionalProperties: false, and nothing else.
_NODE_KEYS = frozenset(
    {"$comment", "title", "description", "type", "required", "properties", "additionalProperties"}
)
_DEFS_REF = "#/$defs/"
_PLAIN_TOKEN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class Located(NamedTuple):
    """A schema error found without asking jsonschema-rs to build it: a closed object's
    ``additionalProperties: false``, whose message (naming the sender's member) no
    rejection reports, so none is made (None)."""

    message: str | None
    instance_path: list[str | int]


class _Node:
    """A plain closed object schema: ``type: object``, ``required``, ``properties`` and
    ``additionalProperties: false``; ``schema_path`` as jsonschema-rs reports an error
    of its keywords (from the resource's root once reached through a ``$ref``)."""

    __slots__ = ("members", "names", "required", "schema_path")

    def __init__(
        self,
        schema_path: tuple[str | int, ...],
        required: tuple[str, ...],
        names: frozenset[str],
        members: tuple[tuple[str, Any, _Node | None], ...],
    ) -> None:
        self.schema_path = schema_path
        self.required = required
        self.names = names
        self.members = members  # (name, compiled validator of its schema, its node if plain)


class Branches:
    """Per-branch validators of a schema whose root is a ``oneOf`` / ``anyOf`` of objects."""

    __slots__ = ("_branches", "_keyword", "_nodes", "_outcomes")

    def __init__(
        self,
        keyword: str,
        branches: list[Any],
        outcomes: list[Any],
        nodes: Sequence[_Node | None] | None = None,
    ) -> None:
        self._keyword = keyword
        self._branches = branches
        self._outcomes = outcomes
        self._nodes = list(nodes) if nodes is not None else [None] * len(branches)

    def first_error(self, envelope: Any) -> tuple[Any, list[str | int]] | None:
        """The error :func:`reference_error` would report and its schema path (from the
        root), or None where this shortcut cannot tell."""
        if type(envelope) is not dict or "outcome" not in envelope:
            return None
        outcome = envelope["outcome"]
        meant = -1
        for index, accepts in enumerate(self._outcomes):
            if accepts.is_valid(outcome):
                if meant >= 0:
                    return None  # two branches accept it: the reference counts errors
                meant = index
        if meant < 0:
            return None  # every branch misses it: the reference counts errors
        node = self._nodes[meant]
        if node is not None:
            located = _only_extra_member(node, envelope)
            if located is not None:
                return located
        # The reference's branch errors are in iter_errors() order (validate() may meet
        # another error first): the first of them, not validate()'s.
        first = next(iter(self._branches[meant].iter_errors(envelope)), None)
        if first is None:
            return None  # the branch is valid (oneOf: valid under two): the reference decides
        error = _descend(first)
        if not _REFERENCES.isdisjoint(error.evaluation_path):
            return error, list(error.schema_path)  # through a reference: from the schema resource's root
        return error, [self._keyword, meant, *error.schema_path]  # from the branch: from the root


def branches_for(schema: Any) -> Branches | None:
    """:class:`Branches` for ``schema``, or None when its shape does not allow the shortcut."""
    if not isinstance(schema, dict) or schema.get("$schema", _DRAFT_2020_12[0]) not in _DRAFT_2020_12:
        return None
    keywords = [k for k in ("oneOf", "anyOf") if k in schema]
    if len(keywords) != 1 or not set(schema) - {keywords[0]} <= _ROOT_KEYS:
        return None
    keyword = keywords[0]
    listed = schema[keyword]
    if not isinstance(listed, list) or not listed:
        return None
    for branch in listed:
        if not isinstance(branch, dict) or not set(branch) <= _BRANCH_KEYS:
            return None
        properties = branch.get("properties")
        if not isinstance(properties, dict) or "outcome" not in properties:
            return None
    compiled = compile_subschemas(schema)
    branches = [compiled.get(f"#/{keyword}/{i}") for i in range(len(listed))]
    outcomes = [compiled.get(f"#/{keyword}/{i}/properties/outcome") for i in range(len(listed))]
    if any(v is None for v in branches) or any(v is None for v in outcomes):
        return None
    nodes = [_node(schema, compiled, branch, (keyword, i), ()) for i, branch in enumerate(listed)]
    return Branches(keyword, branches, outcomes, nodes)


def _node(
    root: dict[str, Any], compiled: Any, schema: Any, at: tuple[str | int, ...], refs: tuple[str, ...]
) -> _Node | None:
    """The :class:`_Node` of ``schema``, found at ``at`` in ``root``, or None when it is not
    a plain closed object.

    ``at`` is also the schema path jsonschema-rs reports for its keywords: from the root
    for a branch and what lies under it, from the definition once reached through a
    ``$ref`` (which is where the definition is in the root). ``refs``: the definitions
    entered on the way, so that a recursive one ends the walk (a leaf, checked by its
    validator only).
    """
    if (
        not isinstance(schema, dict)
        or not set(schema) <= _NODE_KEYS
        or schema.get("type") != "object"
        or schema.get("additionalProperties", True) is not False
    ):
        return None
    required = schema.get("required", [])
    properties = schema.get("properties", {})
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    if not isinstance(properties, dict):
        return None
    definitions = root.get("$defs")
    members: list[tuple[str, Any, _Node | None]] = []
    for name, sub in properties.items():
        if not _plain(name):
            return None  # a name a pointer would escape: not worth the care
        validator = compiled.get(_fragment((*at, "properties", name)))
        if validator is None:
            return None
        child = None
        if isinstance(sub, dict) and set(sub) == {"$ref"}:
            ref = sub["$ref"]
            defined = ref[len(_DEFS_REF) :] if isinstance(ref, str) and ref.startswith(_DEFS_REF) else ""
            if (
                _plain(defined)
                and defined not in refs
                and isinstance(definitions, dict)
                and defined in definitions
            ):
                child = _node(root, compiled, definitions[defined], ("$defs", defined), (*refs, defined))
        else:
            child = _node(root, compiled, sub, (*at, "properties", name), refs)
        members.append((name, validator, child))
    return _Node(at, tuple(required), frozenset(properties), tuple(members))


def _plain(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and set(name) <= _PLAIN_TOKEN


def _fragment(tokens: tuple[str | int, ...]) -> str:
    return "#/" + "/".join(str(t) for t in tokens)


def _only_extra_member(node: _Node, value: Any) -> tuple[Located, list[str | int]] | None:
    """The error of a value whose only fault under ``node`` is a member name a closed
    object does not declare (see the module docstring); None for any other fault."""
    instance_path: list[str | int] = []
    while True:
        if type(value) is not dict:
            return None
        for name in node.required:
            if name not in value:
                return None
        extra = not node.names.issuperset(value)
        failing: tuple[str, _Node | None] | None = None
        for name, validator, child in node.members:
            if name in value and not validator.is_valid(value[name]):
                if failing is not None or extra:
                    return None  # two faults: which comes first is the validator's order
                failing = (name, child)
        if extra:
            return Located(None, instance_path), [*node.schema_path, "additionalProperties"]
        if failing is None:
            return None  # nothing fails here: not the shape this answers for
        name, child = failing
        if child is None:
            return None  # the fault is in a schema of another shape
        instance_path.append(name)
        node, value = child, value[name]


def reference_error(validator: Any, envelope: Any) -> tuple[Any, list[str | int]] | None:
    """The reported error by the root validator: its first error, then, while that error
    is a ``oneOf`` / ``anyOf`` one, the first error of the branch without an error at
    ``/outcome`` and with the fewest errors. None: the validator found no error."""
    # validate() stops at the first error; iter_errors() would build every error first,
    # which for a large invalid array costs time per element, not per message.
    try:
        validator.validate(envelope)
    except ValueError as first:
        error = _descend(first)
        return error, list(error.schema_path)
    return None


def _descend(error: Any) -> Any:
    while True:
        branches = getattr(error.kind, "context", None)
        if not branches:
            return error
        best = min(branches, key=lambda errs: (_misses_outcome(errs), len(errs)))
        if not best:
            return error
        error = best[0]


def _misses_outcome(errors: Sequence[jsonschema_rs.ValidationError]) -> bool:
    return any(list(e.instance_path) == ["outcome"] for e in errors)
