"""contracts/wire/*.schema.json describe what the worker actually decodes: each sample gets the same
verdict from the schema as from the worker (the msgspec request decoder, the gate's header checks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
import pytest
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message, decode_request

from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, review_request, review_value

WIRE = CONTRACTS / "wire"


def _validator(name: str) -> Any:
    schema = json.loads((WIRE / name).read_text(encoding="utf-8"))
    jsonschema_rs.meta.validate(schema)
    return jsonschema_rs.Draft202012Validator(schema, validate_formats=True, ignore_unknown_formats=False)


REQUEST = _validator("request.schema.json")
HEADERS = _validator("intake-headers.schema.json")
CROSS_FIELD = json.loads((WIRE / "request.schema.json").read_text())["x-toolgate-cross-field-rules"]

GOOD: dict[str, Any] = {
    "request_id": "req.1",
    "tool": "review_status",
    "issued_at": "2026-05-01T12:00:00Z",
    "expires_at": "2026-05-01T14:10:00+02:00",
}


def _with(**changes: Any) -> dict[str, Any]:
    record = {**GOOD, **changes}
    return {k: v for k, v in record.items() if v is not _DROP}


_DROP = object()

# (name, record): schema and decoder must agree on each.
REQUEST_SAMPLES: list[tuple[str, dict[str, Any]]] = [
    ("minimal", _with()),
    ("every field", _with(bind={"a": "x", "n": 3, "b": True, "l": ["x", "y"]}, attempt=2, max_attempts=3)),
    ("fraction of a second", _with(issued_at="2026-05-01T11:59:59.123456Z")),
    ("offset -05:00", _with(expires_at="2026-05-01T09:00:00-05:00")),
    ("lower-case t and z", _with(issued_at="2026-05-01t11:00:00z")),
    ("request_id 128", _with(request_id="r" * 128)),
    ("request_id 129", _with(request_id="r" * 129)),
    ("request_id empty", _with(request_id="")),
    ("unknown field", _with(priority="high")),
    ("no request_id", _with(request_id=_DROP)),
    ("no tool", _with(tool=_DROP)),
    ("no issued_at", _with(issued_at=_DROP)),
    ("no expires_at", _with(expires_at=_DROP)),
    ("naive issued_at", _with(issued_at="2026-05-01T11:00:00")),
    ("date only", _with(expires_at="2026-05-02")),
    ("not a date", _with(expires_at="tomorrow")),
    ("tool a number", _with(tool=7)),
    ("request_id null", _with(request_id=None)),
    ("attempt 0", _with(attempt=0)),
    ("attempt a string", _with(attempt="1")),
    ("attempt a boolean", _with(attempt=True)),
    ("attempt a fraction", _with(attempt=1.5)),
    ("max_attempts 0", _with(max_attempts=0)),
    ("bind a list", _with(bind=["a"])),
    ("bind value an object", _with(bind={"a": {"b": 1}})),
    ("bind value null", _with(bind={"a": None})),
    ("bind value a float", _with(bind={"a": 1.5})),
    ("bind list of numbers", _with(bind={"a": [1, 2]})),
    ("bind empty", _with(bind={})),
]
# (name, record, rule): the schema cannot compare two fields; the decoder rejects these.
CROSS_FIELD_SAMPLES = [
    ("attempt above max_attempts", _with(attempt=3, max_attempts=2), "attempt <= max_attempts"),
    ("expires before issued", _with(expires_at="2026-05-01T11:00:00Z"), "expires_at > issued_at"),
    ("expires when issued", _with(expires_at=GOOD["issued_at"]), "expires_at > issued_at"),
]
# (name, record): the decoder is stricter than JSON Schema's number model; listed in the schema.
STRICTER_SAMPLES = [("attempt 1.0", _with(attempt=1.0)), ("max_attempts 2.0", _with(max_attempts=2.0))]


def _decodes(record: dict[str, Any]) -> bool:
    try:
        decode_request(json.dumps(record).encode())
    except (msgspec.ValidationError, msgspec.DecodeError):
        return False
    return True


class TestRequestSchema:
    """request.schema.json agrees with the worker's request decoder."""

    @pytest.mark.parametrize(("name", "record"), REQUEST_SAMPLES, ids=[n for n, _ in REQUEST_SAMPLES])
    def test_same_verdict(self, name: str, record: dict[str, Any]) -> None:
        """The schema accepts exactly the records the decoder accepts."""
        assert REQUEST.is_valid(record) == _decodes(record), name

    def test_samples_hold_both_verdicts(self) -> None:
        """The samples are not all accepted or all rejected."""
        verdicts = {_decodes(record) for _, record in REQUEST_SAMPLES}
        assert verdicts == {True, False}

    @pytest.mark.parametrize(
        ("name", "record", "rule"), CROSS_FIELD_SAMPLES, ids=[n for n, _, _ in CROSS_FIELD_SAMPLES]
    )
    def test_cross_field_rules_are_listed(self, name: str, record: dict[str, Any], rule: str) -> None:
        """What the schema cannot say (comparing two fields) is listed, and the decoder enforces it."""
        assert rule in CROSS_FIELD
        assert REQUEST.is_valid(record)
        assert not _decodes(record), name

    @pytest.mark.parametrize(("name", "record"), STRICTER_SAMPLES, ids=[n for n, _ in STRICTER_SAMPLES])
    def test_where_the_decoder_is_stricter_is_listed(self, name: str, record: dict[str, Any]) -> None:
        """An integer written as 1.0: JSON Schema accepts it, the decoder refuses it, the schema says so."""
        stricter = json.loads((WIRE / "request.schema.json").read_text())["x-toolgate-decoder-stricter"]
        assert any("1.0" in rule for rule in stricter)
        assert REQUEST.is_valid(record)
        assert not _decodes(record), name

    def test_bundled_sample_records_are_valid(self) -> None:
        """The request records the sample traffic writes are valid under the schema."""
        from toolgate.gate._signing import Keyring
        from toolgate.operations._traffic import TrafficGenerator

        traffic = TrafficGenerator(Keyring.load(CONTRACTS / "fixtures-keyring.toml", environ={}), seed=3)
        records = [s.request for s in traffic.mix(60, NOW) if s.request is not None]
        assert records
        assert all(REQUEST.is_valid(r) for r in records)


_GATE = Gate(ContractSet.load(CONTRACTS))
BASE_HEADERS = {
    "tg-tool": "review_status",
    "tg-request-id": REQUEST_ID,
    "tg-adapter": "review-adapter",
    "tg-adapter-version": "1.0.0",
}
# Codes the gate gives for a header problem (every other code is about the value or request).
HEADER_CODES = {"PAYLOAD_TOO_LARGE", "HEADER_MISMATCH", "UNKNOWN_TOOL", "UNSUPPORTED_CONTENT_TYPE"}


def _headers(**changes: str | None) -> list[tuple[str, bytes]]:
    merged = {**BASE_HEADERS, **{k.replace("_", "-"): v for k, v in changes.items()}}
    return [(k, v.encode()) for k, v in merged.items() if v is not None]


HEADER_SAMPLES: list[tuple[str, list[tuple[str, bytes]]]] = [
    ("the usual four", _headers()),
    ("with attempt 1", _headers(tg_attempt="1")),
    ("with content type json", _headers(tg_content_type="application/json")),
    ("with source and trace", _headers(tg_source="https://ci.example/api", traceparent="garbage")),
    ("replay headers", _headers(tg_replay_count="1", tg_replay_origin="toolgate.quarantine/0/7")),
    ("an unknown tg- header", _headers(tg_color="blue")),
    ("no tg-adapter-version", _headers(tg_adapter_version=None)),
    ("no tg-tool", _headers(tg_tool=None)),
    ("no tg-request-id", _headers(tg_request_id=None)),
    ("attempt not a number", _headers(tg_attempt="one")),
    ("attempt five digits", _headers(tg_attempt="00001")),
    ("content type html", _headers(tg_content_type="text/html")),
    ("control character", _headers(tg_source="a\x1b[2Jb")),
    ("line break", _headers(tg_adapter="a\nb")),
    ("value of 1024 bytes", _headers(tg_source="s" * 1024)),
    ("value of 1025 bytes", _headers(tg_source="s" * 1025)),
    ("64 headers", _headers(**{f"x_{i}": "v" for i in range(60)})),
    ("65 headers", _headers(**{f"x_{i}": "v" for i in range(61)})),
]


def _gate_accepts_headers(headers: list[tuple[str, bytes]]) -> bool:
    message = Message(key=REQUEST_ID.encode(), value=msgspec.json.encode(review_value()), headers=headers)
    verdict = _GATE.evaluate(message, review_request(), NOW)
    return verdict.accepted or verdict.code not in HEADER_CODES


class TestIntakeHeadersSchema:
    """intake-headers.schema.json agrees with the gate's header checks."""

    @pytest.mark.parametrize(("name", "headers"), HEADER_SAMPLES, ids=[n for n, _ in HEADER_SAMPLES])
    def test_same_verdict(self, name: str, headers: list[tuple[str, bytes]]) -> None:
        """Headers the schema accepts pass the gate's header checks, and only those."""
        as_object = {k: v.decode() for k, v in headers}
        assert HEADERS.is_valid(as_object) == _gate_accepts_headers(headers), name

    @pytest.mark.parametrize(
        ("header", "code"),
        [
            ("tg-tool", "UNKNOWN_TOOL"),
            ("tg-request-id", "HEADER_MISMATCH"),
            ("tg-adapter-version", "UNKNOWN_CONTRACT_VERSION"),
        ],
    )
    def test_required_headers_say_what_missing_means(self, header: str, code: str) -> None:
        """Each required header's x-toolgate-when-missing names the code the gate gives without it."""
        schema = json.loads((WIRE / "intake-headers.schema.json").read_text())
        assert header in schema["required"] or header == "tg-adapter-version"  # see unversioned_adapters
        assert code in schema["properties"][header]["x-toolgate-when-missing"]
        headers = [(k, v) for k, v in _headers() if k != header]
        message = Message(key=REQUEST_ID.encode(), value=msgspec.json.encode(review_value()), headers=headers)
        assert _GATE.evaluate(message, review_request(), NOW).code == code

    def test_every_header_the_gate_reads_is_described(self) -> None:
        """Every tg-* header name in the gate's source is a property of the schema (or a diagnostics one)."""
        import re

        from toolgate.gate._outputs import DIAGNOSTIC_HEADERS

        schema = json.loads((WIRE / "intake-headers.schema.json").read_text())
        import toolgate.gate

        gate_dir = Path(toolgate.gate.__file__).parent
        source = "\n".join(p.read_text() for p in gate_dir.glob("*.py"))
        read = set(re.findall(r'"(tg-[a-z-]+)"', source)) - DIAGNOSTIC_HEADERS
        assert read - set(schema["properties"]) == set()
        for name, spec in schema["properties"].items():
            assert spec.get("description"), name
            assert spec.get("x-toolgate-when-missing"), name
