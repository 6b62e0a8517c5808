"""Projection: a new closed object holding only what the contract declares for the agent.

The agent never sees the validated object itself. Each projection pointer
``/data/a/b`` copies one value to ``data.a.b`` of a fresh object; display text
goes to ``untrusted_text.<last token>``, apart from ``data``, cut to its
declared length. Every envelope is then checked against a closed output
schema generated from the contract before it may leave.

Projected leaves must be scalars or arrays of scalars: a contract that points at
an object has to name that object's fields one by one, so a new upstream field
can never ride along.
"""

from __future__ import annotations

from typing import Any

from toolgate._errors import RejectedInput
from toolgate.gate._contracts import MISSING, Contract, compile_schema, resolve

SAFE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
_SCALAR_TYPES = ["string", "number", "boolean", "null"]
_LEAF = {
    "type": [*_SCALAR_TYPES, "array"],
    "maxLength": 4096,
    "maxItems": 1000,
    "items": {"type": _SCALAR_TYPES, "maxLength": 4096},
}
_FAILURE = {
    "type": "object",
    "required": ["tool", "request_id", "outcome", "error"],
    "properties": {
        "tool": {"type": ["string", "null"], "maxLength": 128},  # MCP names: <server>.<tool>
        "request_id": {"type": ["string", "null"], "pattern": SAFE_ID_PATTERN},
        "outcome": {"const": "failure"},
        "error": {
            "type": "object",
            "required": ["code", "retryable"],
            "properties": {
                "code": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]{0,63}$"},
                "retryable": {"type": "boolean"},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


def output_schema(contract: Contract) -> dict[str, Any]:
    """The closed schema every agent envelope for ``contract`` must satisfy."""
    data: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    for _, tokens in contract.data_projection:
        node = data
        for token in tokens[1:-1]:
            node = node["properties"].setdefault(
                token, {"type": "object", "properties": {}, "additionalProperties": False}
            )
        node["properties"][tokens[-1]] = _LEAF
    success: dict[str, Any] = {
        "type": "object",
        "required": ["tool", "request_id", "outcome", "data"],
        "properties": {
            "tool": {"const": contract.spec.tool},
            "request_id": {"type": "string", "pattern": SAFE_ID_PATTERN},
            "outcome": {"const": "success"},
            "data": data,
        },
        "additionalProperties": False,
    }
    mcp = contract.spec.mcp
    if mcp is not None and mcp.text_max_length > 0:
        # An MCP result's text blocks, joined and cut (toolgate.gate._mcp).
        success["properties"]["untrusted_text"] = {
            "type": "object",
            "properties": {"content": {"type": "string", "maxLength": mcp.text_max_length}},
            "additionalProperties": False,
        }
    elif contract.display:
        success["properties"]["untrusted_text"] = {
            "type": "object",
            "properties": {
                tokens[-1]: {"type": "string", "maxLength": limit} for limit, tokens in contract.display
            },
            "additionalProperties": False,
        }
    return {"oneOf": [success, _FAILURE]}


class Projector:
    """Builds and checks the agent envelope of one contract."""

    __slots__ = (
        "contract",
        "display",
        "fields",
        "flat",
        "integer_fields",
        "integer_items",
        "integers",
        "is_valid",
        "tool",
        "validator",
    )

    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.tool = contract.spec.tool
        self.fields = tuple(tokens for _, tokens in contract.data_projection)
        # The common case, every pointer one level under /data: copy by name.
        self.flat = tuple(t[1] for t in self.fields) if all(len(t) == 2 for t in self.fields) else None
        self.display = contract.display
        self.integer_fields = contract.integer_fields
        self.integer_items = contract.integer_items
        # (pointer tokens, holds an array of integers), gathered once for _integers.
        self.integers = tuple((t, False) for t in self.integer_fields) + tuple(
            (t, True) for t in self.integer_items
        )
        self.validator = compile_schema(output_schema(contract))
        self.is_valid = self.validator.is_valid

    def success(self, envelope: Any, request_id: str, text: str | None = None) -> dict[str, Any]:
        """A fresh success envelope with the declared fields only.

        Raises:
            RejectedInput: stage ``project`` when the result cannot be projected safely.
        """
        data: dict[str, Any] = {}
        source = envelope.get("data")  # absent: a text-only result, whose data is empty
        flat = self.flat
        if flat is not None and isinstance(source, dict):
            for name in flat:
                if name in source:
                    value = source[name]
                    data[name] = list(value) if isinstance(value, list) else value
        else:
            self._copy_nested(envelope, data)
        if self.integers:
            self._integers(data)
        out: dict[str, Any] = {
            "tool": self.tool,
            "request_id": request_id,
            "outcome": "success",
            "data": data,
        }
        if text is not None:  # an MCP result's text blocks, already bounded
            out["untrusted_text"] = {"content": text}
        if self.display:
            shown = {}
            for limit, tokens in self.display:
                value = resolve(envelope, tokens)
                if isinstance(value, str):
                    shown[tokens[-1]] = value[:limit]
            if shown:
                out["untrusted_text"] = shown
        if not self.is_valid(out):  # check(), inlined
            raise _unsafe()
        return out

    def _copy_nested(self, envelope: Any, data: dict[str, Any]) -> None:
        for tokens in self.fields:
            value = resolve(envelope, tokens)
            if value is MISSING:
                continue  # an optional field the result left out
            node = data
            for token in tokens[1:-1]:
                node = node.setdefault(token, {})
            node[tokens[-1]] = list(value) if isinstance(value, list) else value

    def _integers(self, data: dict[str, Any]) -> None:
        """Integer-typed fields hold ints: 1.0, 1e0 and -0.0 become 1, 1 and 0."""
        for tokens, items in self.integers:
            node: Any = data
            for token in tokens[1:-1]:
                node = node.get(token) if isinstance(node, dict) else None
            if not isinstance(node, dict) or tokens[-1] not in node:
                continue
            value = node[tokens[-1]]
            if items and isinstance(value, list):
                node[tokens[-1]] = [_integer(v) for v in value]
            elif not items:
                node[tokens[-1]] = _integer(value)

    def check(self, out: dict[str, Any]) -> None:
        """Refuse to emit anything the closed output schema does not allow."""
        if not self.is_valid(out):
            raise _unsafe()


def _integer(value: Any) -> Any:
    # The schema said integer, so a float here has no fraction: int() is exact.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _unsafe() -> RejectedInput:
    return RejectedInput("project", "INTERNAL_ERROR", "the projected envelope fails the closed output schema")


def failure(tool: str | None, request_id: str | None, code: str, retryable: bool) -> dict[str, Any]:
    """A failure envelope: the upstream's validated code, or ``INVALID_RESPONSE``."""
    return {
        "tool": tool,
        "request_id": request_id,
        "outcome": "failure",
        "error": {"code": code, "retryable": retryable},
    }
