"""What a schema implies (gate/_depth.py) and the gate's deferred checks after jiter.

Where every value a contract's schema accepts is within its depth limit and holds no
infinite number, the parse leaves those checks to the schema stage: the tests here hold
that to the same verdict (stage and code) as the checks at parse, over the hostile corpus
and deep and infinite variants of every bundled contract's fixtures, and the bound itself
to an upper bound of what the validator accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate._errors import RejectedInput
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.gate import _gate as gate_module
from toolgate.gate import _parse
from toolgate.gate._contracts import ContractSet, compile_schema
from toolgate.gate._depth import depth_bound, value_depth
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message, RequestRecord, Verdict

from tests.properties import DERANDOMIZED
from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, message, review_request
from tests.unit.gate.test_corpus import CASES, CORPUS, corpus_contracts, corpus_message, corpus_request
from tests.unit.gate.test_corpus import NOW as CORPUS_NOW

S = "https://json-schema.org/draft/2020-12/schema"
CLOSED_ITEM = {"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": False}


class TestDepthBound:
    @pytest.mark.parametrize(
        ("schema", "bound"),
        [
            ({"type": "string"}, 0),
            ({"type": "number"}, 0),  # jsonschema-rs gives an infinite float no JSON type
            ({"minimum": 0}, None),  # no type: an infinite number passes
            ({"const": float("inf")}, None),
            ({"enum": [1, float("-inf")]}, None),
            ({"properties": {"a": {"type": "string"}}, "additionalProperties": False}, None),
            ({"type": ["string", "null"]}, 0),
            (False, 0),
            (True, None),
            ({}, None),
            ({"type": "object"}, None),  # members unconstrained
            ({"type": "object", "additionalProperties": False}, 1),
            (CLOSED_ITEM, 1),
            ({"type": "object", "properties": {"a": CLOSED_ITEM}, "additionalProperties": False}, 2),
            ({"type": "object", "additionalProperties": CLOSED_ITEM}, 2),
            ({"type": "object", "patternProperties": {"^x": CLOSED_ITEM}, "additionalProperties": False}, 2),
            ({"type": "object", "properties": {"a": {}}, "additionalProperties": False}, None),
            ({"type": "array"}, None),
            ({"type": "array", "items": {"type": "integer"}}, 1),
            ({"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}, 2),
            ({"type": "array", "prefixItems": [CLOSED_ITEM], "items": False}, 2),
            ({"type": "array", "prefixItems": [{"type": "integer"}]}, None),  # items past it open
            ({"type": "array", "prefixItems": [CLOSED_ITEM], "maxItems": 1}, 2),
            ({"type": "array", "items": [{"type": "integer"}]}, None),  # not a 2020-12 items
            ({"type": ["object", "array"], "items": {"type": "integer"}}, None),  # objects open
            ({"type": ["object", "integer"], "additionalProperties": {"type": "integer"}}, 1),
            ({"const": {"a": [1]}}, 2),
            ({"enum": [1, [2], {"a": [[3]]}]}, 3),
            ({"const": 1, "type": "array"}, 0),  # nothing valid is deeper than the const
            ({"oneOf": [{"type": "string"}, CLOSED_ITEM]}, 1),
            ({"anyOf": [{"type": "string"}, {"type": "object"}]}, None),
            ({"allOf": [{"type": "object"}, CLOSED_ITEM]}, 1),  # each member narrows
            ({"type": "object", "additionalProperties": False, "not": {"const": 1}}, 1),
            ({"$defs": {"item": CLOSED_ITEM}, "$ref": "#/$defs/item"}, 1),
            ({"$defs": {"item": CLOSED_ITEM}, "type": "array", "items": {"$ref": "#/$defs/item"}}, 2),
            ({"$ref": "#/$defs/missing"}, None),
            ({"$ref": "https://example.invalid/other.json"}, None),
            # A recursive schema nests without end.
            (
                {
                    "$defs": {
                        "node": {
                            "type": "object",
                            "properties": {"child": {"$ref": "#/$defs/node"}},
                            "additionalProperties": False,
                        }
                    },
                    "$ref": "#/$defs/node",
                },
                None,
            ),
            # Under a nested $id, "#/..." names another resource: references are not followed.
            (
                {
                    "$defs": {"inner": {"$id": "https://example.invalid/inner", "$defs": {}}},
                    "type": "array",
                    "items": {"$ref": "#/$defs/item"},
                },
                None,
            ),
        ],
    )
    def test_bound(self, schema: Any, bound: int | None) -> None:
        """Each schema shape gets its bound, or None where it admits any depth."""
        assert depth_bound(schema) == bound

    def test_bundled_contracts_are_bounded_within_their_limits(self) -> None:
        """Every bundled JSON contract's schema bounds the depth within its own limit."""
        for contract in ContractSet.load(CONTRACTS):
            bound = depth_bound(contract.schema)
            assert bound is not None, contract.key
            assert bound <= contract.spec.limits.max_depth, contract.key

    def test_value_depth_counts_as_the_parse_does(self) -> None:
        """A scalar is 0, each object or array one more than its deepest member."""
        values: list[Any] = [1, "x", {}, [], {"a": [1]}, [[[]]], [1, [2, {"b": {}}]]]
        assert [value_depth(v) for v in values] == [0, 0, 1, 1, 2, 3, 4]


# Schemas that accept many random values yet bound their depth: random values often pass
# them, so the property below is tested on values the validator accepts.
_SCALAR = {"type": ["null", "boolean", "integer", "number", "string"]}
_BOUNDED_SCHEMAS: list[dict[str, Any]] = [
    {"type": "array", "items": {"type": ["array", "integer", "string"], "items": _SCALAR}},
    {"type": ["object", "array", "boolean"], "additionalProperties": _SCALAR, "items": _SCALAR},
    {
        "$defs": {"leaf": _SCALAR, "pair": {"type": "array", "items": {"$ref": "#/$defs/leaf"}}},
        "anyOf": [{"$ref": "#/$defs/leaf"}, {"type": "array", "items": {"$ref": "#/$defs/pair"}}],
    },
    {
        "allOf": [
            {"maxItems": 3},
            {"type": "array", "items": {"anyOf": [_SCALAR, {"type": "array", "items": _SCALAR}]}},
        ]
    },
    {
        "type": "object",
        "patternProperties": {"^a": {"type": "array", "items": _SCALAR}},
        "additionalProperties": _SCALAR,
    },
    {"type": "array", "prefixItems": [{"type": "array", "items": _SCALAR}], "items": _SCALAR},
]
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.text("ab", max_size=2)
    | st.sampled_from([1.5, float("inf"), float("-inf")]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text("ab", max_size=2), children, max_size=3)
    ),
    max_leaves=12,
)


def _bounded_validators() -> list[tuple[Any, int]]:
    validators = []
    for schema in _BOUNDED_SCHEMAS:
        bound = depth_bound({"$schema": S, **schema})
        assert bound is not None, schema
        validators.append((compile_schema({"$schema": S, **schema}), bound))
    return validators


class TestBoundHolds:
    @pytest.mark.parametrize("kind", ["null", "boolean", "integer", "number", "string", "array", "object"])
    def test_no_type_admits_an_infinite_number(self, kind: str) -> None:
        """The bound relies on it: jsonschema-rs refuses an infinite float under every ``type``
        (if a release changed that, this fails before any verdict could)."""
        validator = compile_schema({"$schema": S, "type": kind})
        assert not validator.is_valid(float("inf"))
        assert not validator.is_valid(float("-inf"))
        assert compile_schema({"$schema": S, "minimum": 0}).is_valid(float("inf"))  # no type: passes

    def test_accepted_values_are_within_the_bound(self) -> None:
        """A value the validator accepts is never deeper than the schema's bound and holds no
        infinite number; each schema accepted some of the random values (else nothing was tested)."""
        validators = _bounded_validators()
        accepted = [0] * len(validators)

        # Derandomized: the counts below do not depend on a random draw.
        @settings(DERANDOMIZED, max_examples=400, suppress_health_check=[])
        @given(value=_json)
        def check(value: Any) -> None:
            for index, (validator, bound) in enumerate(validators):
                if validator.is_valid(value):
                    accepted[index] += 1
                    assert value_depth(value) <= bound, (index, value)
                    assert "inf" not in repr(value), (index, value)

        check()
        assert min(accepted) >= 5, accepted


# ------------------------------------------------------------------ the gate's deferral


def _undeferred(gate: Gate) -> Gate:
    """The same gate with the deferral off: the parse walks every value it may."""
    other = Gate(gate.contracts, gate.keyring)
    for plan in other._prepared.values():
        plan.checks_implied = False
    return other


def _same(a: Verdict, b: Verdict) -> bool:
    return msgspec.json.encode(a) == msgspec.json.encode(b)


def test_corpus_verdicts_do_not_depend_on_the_deferral() -> None:
    """Every hostile-corpus case gets the very same verdict with the depth left to the schema."""
    gate = Gate(corpus_contracts(), fixtures_keyring(CONTRACTS))
    walked = _undeferred(gate)
    for case in CASES:
        raw = (CORPUS / case["file"]).read_bytes()
        msg = corpus_message(gate, case, raw)
        request = corpus_request(case)
        got = gate.evaluate(msg, request, CORPUS_NOW, lambda rid, attempt: False)
        want = walked.evaluate(msg, request, CORPUS_NOW, lambda rid, attempt: False)
        assert _same(got, want), case["file"]
    assert any(plan.checks_implied for plan in gate._prepared.values())


def _nest(value: Any, levels: int, kind: str) -> Any:
    for _ in range(levels):
        value = [value] if kind == "array" else {"a": value}
    return value


INFINITE = "<a number that overflows>"


def _deep_variants(value: Any) -> Iterator[Any]:
    """``value`` with each member, in turn, nested 1 to 6 levels deeper (arrays, objects),
    or replaced by a number that overflows to infinity (alone, or nested)."""
    if not isinstance(value, dict):
        return
    for name, member in value.items():
        for levels in range(1, 7):
            for kind in ("array", "object"):
                yield {**value, name: _nest(member, levels, kind)}
                yield {**value, name: _nest(INFINITE, levels - 1, kind)}
        for deeper in _deep_variants(member):
            yield {**value, name: deeper}


def _fixture_messages() -> Iterator[tuple[str, Message, RequestRecord]]:
    """Deep variants of every bundled contract's accept fixtures, with sound headers and
    with a repeated tg-tool header (the contract stage's HEADER_MISMATCH)."""
    for contract in ContractSet.load(CONTRACTS):
        folder = contract.folder / "fixtures"
        defaults = json.loads((folder / "defaults.json").read_bytes())
        if contract.spec.content_type != "application/json":
            continue
        request = msgspec.convert(defaults["request"], RequestRecord, strict=False)
        for path in sorted((folder / "accept").glob("*.json")):
            fixture = json.loads(path.read_bytes())
            headers = {**defaults["headers"], **fixture.get("headers", {})}
            for variant in _deep_variants(fixture["value"]):
                raw = json.dumps(variant).encode().replace(json.dumps(INFINITE).encode(), b"-1.5e999")
                pairs = [(k, v.encode()) for k, v in headers.items() if v is not None]
                key = request.request_id.encode()
                yield path.name, Message(key=key, value=raw, headers=pairs), request
                doubled = [*pairs, ("TG-Tool", contract.spec.tool.encode())]
                yield path.name, Message(key=key, value=raw, headers=doubled), request


def test_deep_fixture_variants_get_the_walked_verdict() -> None:
    """Deep and infinite variants of every bundled fixture: the same verdict with the checks
    deferred as without, so the deferral is exercised (too deep, an infinite number, within
    the limits, header problems) and changes nothing."""
    gate = Gate(ContractSet.load(CONTRACTS), fixtures_keyring(CONTRACTS))
    walked = _undeferred(gate)
    codes: dict[str | None, int] = {}
    for name, msg, request in _fixture_messages():
        got = gate.evaluate(msg, request, NOW, lambda rid, attempt: False)
        want = walked.evaluate(msg, request, NOW, lambda rid, attempt: False)
        assert _same(got, want), (name, msg.value)
        codes[got.code] = codes.get(got.code, 0) + 1
    # Every outcome of the deferred checks happened: too deep, infinite, refused by the schema alone.
    assert codes.get("NESTING_TOO_DEEP", 0) > 50, codes
    assert codes.get("NUMBER_OUT_OF_RANGE", 0) > 50, codes
    assert codes.get("SCHEMA_VIOLATION", 0) > 50, codes
    assert codes.get("HEADER_MISMATCH", 0) > 50, codes


LISTING_CONTRACT = """\
tool: listing
version: 1
status: active
description: A closed listing of items, for the deferral test.
adapter_versions: ["1.*"]
schema: schema.json
limits:
  max_bytes: 65536
  max_depth: 4
projection:
  - /data/count
"""
LISTING_SCHEMA = {
    "$schema": S,
    "type": "object",
    "required": ["tool", "request_id", "outcome", "data"],
    "properties": {
        "tool": {"const": "listing"},
        "request_id": {"type": "string"},
        "outcome": {"const": "success"},
        "data": {
            "type": "object",
            "required": ["count", "items"],
            "properties": {"count": {"type": "integer"}, "items": {"type": "array", "items": CLOSED_ITEM}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


def test_an_accepted_value_is_not_walked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A listing with more brackets than the limit: accepted without the checks after jiter
    (no byte scan, no walk); a refused one is scanned and walked once before its schema
    error is reported; without the deferral both are."""
    folder = tmp_path / "listing" / "v1"
    folder.mkdir(parents=True)
    (folder / "contract.yaml").write_text(LISTING_CONTRACT)
    (folder / "schema.json").write_text(json.dumps(LISTING_SCHEMA))
    calls: list[int] = []
    real = _parse._check_depth

    def counting(root: Any, max_depth: int, brackets: int) -> None:
        calls.append(max_depth)
        real(root, max_depth, brackets)

    scans: list[int] = []
    real_checks = _parse.check_parsed

    def scanning(raw: bytes, value: Any, max_depth: int) -> None:
        scans.append(len(raw))
        real_checks(raw, value, max_depth)

    monkeypatch.setattr(_parse, "_check_depth", counting)
    monkeypatch.setattr(_parse, "check_parsed", scanning)
    monkeypatch.setattr(gate_module, "check_parsed", scanning)
    gate = Gate(ContractSet.load(tmp_path))
    request = review_request(tool="listing", bind={})
    items = [{"id": f"IT-{i}"} for i in range(10)]
    listing = {
        "tool": "listing",
        "request_id": REQUEST_ID,
        "outcome": "success",
        "data": {"count": 10, "items": items},
    }
    accepted = gate.evaluate(message(listing, tool="listing"), request, NOW)
    assert accepted.accepted, accepted.diagnostics
    assert (scans, calls) == ([], [])
    deep = {**listing, "data": {"count": 11, "items": [*items, {"id": [[["x"]]]}]}}
    refused = gate.evaluate(message(deep, tool="listing"), request, NOW)
    assert (refused.stage, refused.code) == ("parse", "NESTING_TOO_DEEP")
    assert (len(scans), calls) == (1, [4])
    walked = _undeferred(gate)
    assert walked.evaluate(message(listing, tool="listing"), request, NOW).accepted
    assert (len(scans), calls) == (2, [4, 4])


class TestCheckDepth:
    """The parse's depth check refuses exactly the values nested deeper than the limit."""

    @settings(DERANDOMIZED, max_examples=300)
    @given(value=_json, max_depth=st.integers(0, 5))
    def test_refuses_exactly_the_values_deeper_than_the_limit(self, value: Any, max_depth: int) -> None:
        """_check_depth rejects as NESTING_TOO_DEEP iff value_depth exceeds the limit."""
        raw = json.dumps(value, allow_nan=True).encode()
        brackets = raw.count(b"[") + raw.count(b"{")
        if value_depth(value) > max_depth:
            with pytest.raises(RejectedInput) as refused:
                _parse._check_depth(value, max_depth, brackets)
            assert refused.value.code == "NESTING_TOO_DEEP"
        else:
            _parse._check_depth(value, max_depth, brackets)
