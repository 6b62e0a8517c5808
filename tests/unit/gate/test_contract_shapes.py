"""Every contract that lints clean decides every result without an INTERNAL_ERROR."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate.authoring._lint import lint_contracts
from toolgate.gate._contracts import ContractSet, load_contract
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message, RequestRecord

from tests.properties import DERANDOMIZED

REQUEST_ID = "req.1"
NOW = datetime.fromisoformat("2026-05-01T09:15:00+00:00")

_leaves = {
    "short": {"type": "string", "maxLength": 10, "pattern": "^[a-z]{0,10}$"},
    "long": {"type": "string", "maxLength": 5000, "pattern": "^x*$"},
    "free": {"type": "string", "maxLength": 20},
    "enum": {"enum": ["p", "q"]},
    "int": {"type": "integer"},
    "num": {"type": "number"},
    "bool": {"type": "boolean"},
    "list": {"type": "array", "maxItems": 3, "items": {"enum": ["p", "q"]}},
    "biglist": {"type": "array", "maxItems": 2000, "items": {"type": "integer"}},
    "objlist": {
        "type": "array",
        "maxItems": 3,
        "items": {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": False},
    },
    "obj": {"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": False},
    "nullable": {"type": ["integer", "null"]},
}

_request_ids = st.sampled_from(
    [
        {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$", "maxLength": 128},
        {"type": "string", "maxLength": 300, "pattern": "^.{0,300}$"},
        {"type": ["string", "integer"], "maxLength": 300, "pattern": "^.{0,300}$"},
    ]
)
_outcomes = st.sampled_from(
    [{"const": "success"}, {"enum": ["success", "failure"]}, {"enum": ["success", "done"]}]
)
_codes = st.sampled_from(
    [{"enum": ["UPSTREAM_DOWN"]}, {"enum": ["bad code", "UPSTREAM_DOWN"]}, {"type": "integer"}]
)


@st.composite
def _shapes(draw: st.DrawFn) -> dict[str, Any]:
    """A contract folder's content: contract.yaml as a dict and schema.json."""
    mcp = draw(st.booleans())
    tool = "srv.t" if mcp else "t"
    fields = draw(st.dictionaries(st.sampled_from(sorted(_leaves)), st.just(None), max_size=4))
    names = sorted(fields)
    data = {
        "type": "object",
        "properties": {name: _leaves[name] for name in names},
        "required": draw(st.lists(st.sampled_from(names), unique=True)) if names else [],
        "additionalProperties": False,
    }
    success = {
        "type": "object",
        "required": ["tool", "request_id", "outcome", *(["data"] if draw(st.booleans()) else [])],
        "properties": {
            "tool": {"const": tool},
            "request_id": draw(_request_ids),
            "outcome": draw(_outcomes),
            "data": data,
        },
        "additionalProperties": False,
    }
    error = {
        "type": "object",
        "required": draw(st.sampled_from([["code", "retryable"], ["code"], []])),
        "properties": {"code": draw(_codes), "retryable": {"type": "boolean"}},
        "additionalProperties": False,
    }
    failure = {
        "type": "object",
        "required": ["tool", "request_id", "outcome", *(["error"] if draw(st.booleans()) else [])],
        "properties": {
            "tool": {"const": tool},
            "request_id": draw(_request_ids),
            "outcome": {"const": "failure"},
            "error": error,
        },
        "additionalProperties": False,
    }
    pointers = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    projection = [f"/data/{n}" for n in pointers]
    if "obj" in names and draw(st.booleans()):  # a nested pointer instead of the object itself
        projection = [p for p in projection if p != "/data/obj"] + ["/data/obj/x"]
    if "objlist" in names and draw(st.booleans()):  # every item's member instead of the array
        projection = [p for p in projection if p != "/data/objlist"] + ["/data/objlist/*/x"]
    spec: dict[str, Any] = {
        "tool": tool,
        "version": 1,
        "status": "active",
        "schema": "schema.json",
        "limits": {"max_bytes": 65536, "max_depth": 16},
        "projection": projection,
        "free_text": [{"pointer": p, "reason": "a test field"} for p in projection if p in ("/data/free",)],
        "retry": {"retryable_codes": ["UPSTREAM_DOWN"]},
    }
    if mcp:
        spec["mcp"] = {
            "server": "srv",
            "tool": "t",
            "error_code": "UPSTREAM_DOWN",
            "text_max_length": draw(st.sampled_from([0, 5, 1000])),
        }
    return {
        "spec": spec,
        "schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", "oneOf": [success, failure]},
    }


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 2)
    | st.sampled_from(["p", "q", "x" * 4100, "UPSTREAM_DOWN", "req.1"]),
    lambda c: (
        st.lists(c, max_size=3)
        | st.dictionaries(st.sampled_from(["x", "p", "code", "retryable"]), c, max_size=3)
    ),
    max_leaves=6,
)


def _data(draw: st.DrawFn) -> dict[str, Any]:
    fields = {
        "short": st.sampled_from(["abc", ""]),
        "long": st.sampled_from(["x" * 4097, "xx"]),
        "free": st.sampled_from(["hello", ""]),
        "enum": st.sampled_from(["p", "q"]),
        "int": st.integers(-3, 3) | st.just(1.0),
        "num": st.floats(allow_nan=False, allow_infinity=False),
        "bool": st.booleans(),
        "list": st.lists(st.sampled_from(["p", "q"]), max_size=3),
        "biglist": st.sampled_from([[1] * 1001, [1, 2]]),
        "objlist": st.lists(st.fixed_dictionaries({"x": st.integers(0, 2)}), max_size=2),
        "obj": st.fixed_dictionaries({}, optional={"x": st.integers(0, 2)}),
        "nullable": st.none() | st.integers(0, 2),
    }
    return draw(st.fixed_dictionaries({}, optional={**fields, "x": _values}))


@st.composite
def _results(draw: st.DrawFn, mcp: bool, tool: str) -> Any:
    if mcp:
        value: dict[str, Any] = {
            "content": draw(
                st.lists(
                    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)}), max_size=2
                )
            )
        }
        if draw(st.booleans()):
            value["structuredContent"] = _data(draw) if draw(st.integers(0, 4)) else draw(_values)
        if draw(st.booleans()):
            value["isError"] = draw(st.booleans())
        return value
    envelope: dict[str, Any] = {
        "tool": tool,
        "request_id": draw(st.sampled_from([REQUEST_ID, REQUEST_ID, 7])),
        "outcome": draw(st.sampled_from(["success", "failure", "done"])),
    }
    if draw(st.booleans()):
        envelope["data"] = _data(draw)
    if draw(st.booleans()):
        envelope["error"] = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "code": st.sampled_from(["UPSTREAM_DOWN", "bad code", 3]),
                    "retryable": st.booleans(),
                },
            )
        )
    return draw(st.sampled_from([envelope, envelope, envelope, draw(_values)]))


class TestLintCleanContractsDecide:
    """Over generated contract shapes: a contract that lints clean never answers INTERNAL_ERROR."""

    def test_the_text_only_shape_of_the_report(self, tmp_path: Path) -> None:
        """An mcp: contract with no data and projection: [] accepts a text result (once a KeyError)."""
        shape = {
            "spec": {
                "tool": "srv.t",
                "version": 1,
                "status": "active",
                "schema": "schema.json",
                "limits": {"max_bytes": 4096, "max_depth": 8},
                "projection": [],
                "mcp": {"server": "srv", "tool": "t"},
            },
            "schema": {
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["tool", "request_id", "outcome"],
                        "properties": {
                            "tool": {"const": "srv.t"},
                            "request_id": {
                                "type": "string",
                                "maxLength": 128,
                                "pattern": "^[a-z0-9.]{1,128}$",
                            },
                            "outcome": {"const": "success"},
                        },
                        "additionalProperties": False,
                    }
                ]
            },
        }
        gate = _gate(tmp_path, shape)
        verdict = gate.evaluate(
            _message("srv.t", {"content": [{"type": "text", "text": "done"}]}), _request("srv.t"), NOW
        )
        assert verdict.accepted, verdict
        assert json.loads(verdict.agent)["data"] == {}

    def test_generated_shapes(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        """Lint-clean contracts decide every generated result as accepted or a named rejection."""
        tally = {"clean": 0, "accepted": 0, "rejected": 0}

        @settings(DERANDOMIZED, max_examples=200)
        @given(shape=_shapes(), data=st.data())
        def check(shape: dict[str, Any], data: st.DataObject) -> None:
            folder = tmp_path_factory.mktemp("shape")
            gate = _gate(folder, shape)
            if lint_contracts(gate.contracts):
                return
            tally["clean"] += 1
            tool = shape["spec"]["tool"]
            for value in data.draw(
                st.lists(_results("mcp" in shape["spec"], tool), min_size=10, max_size=10)
            ):
                verdict = gate.evaluate(_message(tool, value), _request(tool), NOW)
                assert verdict.code != "INTERNAL_ERROR", (shape, value, verdict)
                tally["accepted" if verdict.accepted else "rejected"] += 1

        check()
        assert tally["clean"] >= 20, tally
        assert tally["accepted"] >= 50, tally
        assert tally["rejected"] >= 50, tally


def _gate(root: Path, shape: dict[str, Any]) -> Gate:
    folder = root / shape["spec"]["tool"] / "v1"
    folder.mkdir(parents=True)
    (folder / "contract.yaml").write_text(yaml.safe_dump(shape["spec"]))
    (folder / "schema.json").write_text(json.dumps(shape["schema"]))
    return Gate(ContractSet([load_contract(folder)]))


def _request(tool: str) -> RequestRecord:
    return RequestRecord(
        request_id=REQUEST_ID,
        tool=tool,
        issued_at=datetime.fromisoformat("2026-05-01T09:14:00+00:00"),
        expires_at=datetime.fromisoformat("2026-05-01T09:20:00+00:00"),
        max_attempts=2,
    )


def _message(tool: str, value: Any) -> Message:
    return Message(
        key=REQUEST_ID.encode(),
        value=msgspec.json.encode(value),
        headers=[
            ("tg-tool", tool.encode()),
            ("tg-request-id", REQUEST_ID.encode()),
            ("tg-adapter-version", b"1"),
        ],
    )
