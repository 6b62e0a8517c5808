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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


class Branches:
    """Per-branch validators of a schema whose root is a ``oneOf`` / ``anyOf`` of objects."""

    __slots__ = ("_branches", "_keyword", "_outcomes")

    def __init__(self, keyword: str, branches: list[Any], outcomes: list[Any]) -> None:
        self._keyword = keyword
        self._branches = branches
        self._outcomes = outcomes

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
    return Branches(keyword, branches, outcomes)


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
