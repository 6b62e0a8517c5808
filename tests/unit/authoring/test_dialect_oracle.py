"""Every keyword means, after translation to Draft 2020-12, what its own draft says it means.

The oracle is independent of the gate: python-jsonschema's validator of each draft (Draft 6, 7,
2019-09, 2020-12) judges the schema as it came; the gate's compiler (jsonschema-rs, Draft
2020-12) judges the translation. ``format`` is left out: the gate asserts it on purpose.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import jsonschema_rs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from toolgate.authoring._close import close
from toolgate.authoring._dialect import Unclosable, to_draft_2020_12

DRAFTS: dict[str, Any] = {
    "http://json-schema.org/draft-06/schema#": jsonschema.Draft6Validator,
    "http://json-schema.org/draft-07/schema#": jsonschema.Draft7Validator,
    "https://json-schema.org/draft/2019-09/schema": jsonschema.Draft201909Validator,
    "https://json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
    "": jsonschema.Draft202012Validator,  # no $schema: 2020-12
}
NAMES = ("a", "b", "c")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, 2.0]),
    st.sampled_from(["", "x", "ab"]),
)
instances = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(NAMES), inner, max_size=3), st.lists(inner, max_size=3)
    ),
    max_leaves=8,
)
names = st.lists(st.sampled_from(NAMES), max_size=2, unique=True)


def _keywords(sub: st.SearchStrategy[Any], refs: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """One keyword of any draft (6 to 2020-12) with a value of its shape (with ``refs``, a
    ``$ref`` to the definition ``d`` in either place a draft keeps definitions)."""
    ref = st.sampled_from([{"$ref": "#/definitions/d"}, {"$ref": "#/$defs/d"}]) if refs else st.nothing()
    sub_map = st.dictionaries(st.sampled_from(NAMES), sub, max_size=2)
    return st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(["object", "array", "string", "integer", "null"])),
        st.builds(lambda m: {"properties": m}, sub_map),
        st.builds(lambda r: {"required": r}, names),
        st.builds(lambda s: {"additionalProperties": s}, sub),
        st.builds(lambda m: {"patternProperties": {"^[ab]$": m}}, sub),
        st.builds(lambda s: {"propertyNames": s}, sub),
        st.builds(lambda s: {"items": s}, sub),
        st.builds(lambda xs: {"items": xs}, st.lists(sub, min_size=1, max_size=2)),
        st.builds(lambda s: {"additionalItems": s}, sub),
        st.builds(lambda xs: {"prefixItems": xs}, st.lists(sub, min_size=1, max_size=2)),
        st.builds(lambda s: {"contains": s}, sub),
        st.builds(lambda n: {"minContains": n}, st.integers(0, 2)),
        st.builds(lambda n: {"maxContains": n}, st.integers(0, 2)),
        st.builds(lambda s: {"unevaluatedItems": s}, sub),
        st.builds(lambda s: {"unevaluatedProperties": s}, sub),
        st.builds(
            lambda d: {"dependencies": d},
            st.dictionaries(st.sampled_from(NAMES), st.one_of(names, sub), min_size=1, max_size=2),
        ),
        st.builds(
            lambda d: {"dependentRequired": d}, st.dictionaries(st.sampled_from(NAMES), names, max_size=2)
        ),
        st.builds(lambda d: {"dependentSchemas": d}, sub_map),
        st.builds(lambda s, t: {"if": s, "then": t}, sub, sub),
        st.builds(lambda s, e: {"if": s, "else": e}, sub, sub),
        st.builds(lambda s: {"not": s}, sub),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(sub, min_size=1, max_size=2)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(sub, min_size=1, max_size=2)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(sub, min_size=1, max_size=2)),
        st.builds(lambda v: {"const": v}, scalars),
        st.builds(lambda v: {"enum": v}, st.lists(scalars, min_size=1, max_size=3)),
        st.builds(lambda n: {"minimum": n}, st.integers(-1, 1)),
        st.builds(lambda n: {"exclusiveMaximum": n}, st.integers(-1, 1)),
        st.builds(lambda n: {"maxLength": n}, st.integers(0, 2)),
        st.builds(lambda n: {"minItems": n}, st.integers(0, 2)),
        st.builds(lambda n: {"maxProperties": n}, st.integers(0, 2)),
        st.just({"uniqueItems": True}),
        ref,
    )


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out


def _schemas(refs: bool) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(st.booleans(), st.just({})),
        lambda sub: st.builds(_merge, st.lists(_keywords(sub, refs), min_size=1, max_size=3)),
        max_leaves=6,
    )


schemas = _schemas(refs=True)
definitions = _schemas(refs=False)  # the definition refers to nothing: no cycle


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A root schema naming one of the drafts (or none), with a definition ``d`` in the
    place its draft keeps definitions."""
    dialect = draw(st.sampled_from(sorted(DRAFTS)))
    root = draw(st.builds(_merge, st.lists(_keywords(schemas), min_size=1, max_size=4)))
    # The keywords whose meaning moved between drafts, at the root more often than chance.
    moved = st.dictionaries(st.sampled_from(NAMES), st.one_of(names, schemas), min_size=1, max_size=2)
    root = {**root, **draw(st.one_of(st.just({}), st.builds(lambda d: {"dependencies": d}, moved)))}
    definition = draw(definitions)
    container = (
        "definitions"
        if dialect in ("http://json-schema.org/draft-06/schema#", "http://json-schema.org/draft-07/schema#")
        else "$defs"
    )
    root = {**root, container: {"d": definition}}
    if dialect:
        root = {"$schema": dialect, **root}
    return dialect, root


def _oracle(dialect: str, schema: dict[str, Any]) -> Any:
    validator = DRAFTS[dialect]
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return validator(schema)


class TestEachDraftsMeaning:
    """A translated schema gives every instance the verdict an independent validator of the
    schema's own draft gives the schema as it came, keyword by keyword."""

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(documents(), st.lists(instances, min_size=1, max_size=6))
    def test_gate_and_oracle_agree(self, document: tuple[str, dict[str, Any]], values: list[Any]) -> None:
        """python-jsonschema of the schema's draft and the gate's compiler of its translation agree."""
        dialect, schema = document
        oracle = _oracle(dialect, schema)
        assume(oracle is not None)  # not a schema of its own draft: the gate's compiler refuses it too
        try:
            translated = to_draft_2020_12(schema)
        except Unclosable:
            return  # refused on one line, never translated into another meaning
        try:
            gate = jsonschema_rs.Draft202012Validator(translated)
        except jsonschema_rs.ValidationError:
            return
        for value in values:
            assert gate.is_valid(value) == oracle.is_valid(value), (schema, translated, value)


class TestNoDependenciesWhereTheDraftHasNone:
    """``dependencies`` applies only in Draft 7 and 6: in 2019-09 and 2020-12 (no ``$schema``)
    it is no keyword, and ``{"a": 1}`` against ``dependencies: {"a": ["b"]}`` is valid."""

    @pytest.mark.parametrize(
        "dialect",
        ["", "https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema"],
        ids=["none", "2020-12", "2019-09"],
    )
    def test_dependencies_is_inert(self, dialect: str) -> None:
        """The translation drops it, and the closed contract accepts what the draft accepts."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependencies": {"a": ["b"], "b": {"required": ["c"]}},
        }
        if dialect:
            schema["$schema"] = dialect
        assert "dependencies" not in to_draft_2020_12(schema)
        closed = jsonschema_rs.Draft202012Validator(close(schema, max_string=64, max_items=8))
        assert closed.is_valid({"a": 1})
        assert closed.is_valid({"b": 1})

    def test_draft_7_still_applies_it(self) -> None:
        """In Draft 7 the same keyword holds: ``{"a": 1}`` is refused."""
        schema = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "dependencies": {"a": ["b"]},
        }
        closed = jsonschema_rs.Draft202012Validator(close(schema, max_string=64, max_items=8))
        assert not closed.is_valid({"a": 1})
        assert closed.is_valid({"a": 1, "b": 2})

    def test_a_member_named_dependencies_stays(self) -> None:
        """A property called ``dependencies`` is a name, not the keyword: it is kept."""
        schema = {"type": "object", "properties": {"dependencies": {"type": "string"}}, "dependencies": {}}
        assert to_draft_2020_12(schema) == {
            "type": "object",
            "properties": {"dependencies": {"type": "string"}},
        }
