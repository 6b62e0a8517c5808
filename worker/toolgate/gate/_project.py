"""Projection: a new closed object holding only what the contract declares for the agent.

The agent never sees the validated object itself. Each projection pointer
``/data/a/b`` copies one value to ``data.a.b`` of a fresh object; display text
goes to ``untrusted_text.<last token>``, apart from ``data``, cut to its
declared length. Every envelope is then checked against a closed output
schema generated from the contract before it may leave.

Projected leaves must be scalars or arrays of scalars: a contract that points at
an object has to name that object's fields one by one, so a new upstream field
can never ride along. An array of objects is projected the same way, through
the ``*`` token: ``/data/entities/*/name`` and ``/data/entities/*/type`` give
``data.entities``, an array of fresh objects, one per item in the same order,
each holding only that item's ``name`` and ``type``.

Each leaf is bounded by what the contract's schema guarantees at its pointer
(:attr:`~toolgate.gate._contracts.Contract.leaf_bounds`: a file tool whose schema
says ``maxLength: 8000`` passes 5,000 characters), 4,096 characters and 1,000
items where it guarantees none; a value past those is refused naming the pointer
and the bound. The record as a whole stays within ``limits.max_bytes``.
"""

from __future__ import annotations

from typing import Any

from toolgate._errors import RejectedInput
from toolgate.gate._contracts import EVERY_ITEM, Contract, LeafBounds, Pointer, compile_schema, resolve

SAFE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
_SCALAR_TYPES = ["string", "number", "boolean", "null"]


def _leaf(bounds: LeafBounds) -> dict[str, Any]:
    """The closed leaf of one projected pointer: a scalar or an array of scalars, within the
    bounds the contract's schema guarantees there (:attr:`Contract.leaf_bounds`)."""
    return {
        "type": [*_SCALAR_TYPES, "array"],
        "maxLength": bounds.max_length,
        "maxItems": bounds.max_items,
        "items": {"type": _SCALAR_TYPES, "maxLength": bounds.items_max_length},
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


def _closed_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}, "additionalProperties": False}


def output_schema(contract: Contract) -> dict[str, Any]:
    """The closed schema every agent envelope for ``contract`` must satisfy."""
    data = _closed_object()
    for _, tokens in contract.data_projection:
        node = data
        for at in range(1, len(tokens) - 1):
            if tokens[at] == EVERY_ITEM:
                continue  # its array was made by the token before it
            if tokens[at + 1] == EVERY_ITEM:
                array = node["properties"].setdefault(
                    tokens[at],
                    {
                        "type": ["array", "null"],
                        "maxItems": contract.array_bounds[tokens[: at + 1]],
                        "items": _closed_object(),
                    },
                )
                node = array["items"]
            else:
                node = node["properties"].setdefault(tokens[at], _closed_object())
        node["properties"][tokens[-1]] = _leaf(contract.leaf_bounds[tokens])
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
        self.fields = _plan(contract)
        # The common case, every pointer one level under /data: copy by name.
        pointers = [tokens for _, tokens in contract.data_projection]
        self.flat = tuple(t[1] for t in pointers) if all(len(t) == 2 for t in pointers) else None
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
        if flat is not None:
            if isinstance(source, dict):
                for name in flat:
                    if name in source:
                        value = source[name]
                        data[name] = list(value) if isinstance(value, list) else value
            if self.integers:
                self._integers(data)
        elif isinstance(source, dict):
            data = _copy(source, self.fields)
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
            raise _unsafe(self.contract, data)
        return out

    def _integers(self, data: dict[str, Any]) -> None:
        """Integer-typed fields hold ints: 1.0, 1e0 and -0.0 become 1, 1 and 0 (flat fields;
        nested ones are converted as :func:`_copy` copies them)."""
        for tokens, items in self.integers:
            name = tokens[-1]
            if name not in data:
                continue
            value = data[name]
            if items and isinstance(value, list):
                data[name] = [_integer(v) for v in value]
            elif not items:
                data[name] = _integer(value)

    def check(self, out: dict[str, Any]) -> None:
        """Refuse to emit anything the closed output schema does not allow."""
        if not self.is_valid(out):
            raise _unsafe(self.contract, out.get("data"))


# What to copy of one object: member name -> a leaf (0: as it is, 1: an integer, 2: an
# array of integers), the plan of a nested object (a dict), or the plan of each item of an
# array of objects (a one-item list holding that plan).
Plan = dict[str, Any]
_AS_IS, _INTEGER, _INTEGER_ITEMS = 0, 1, 2


def _plan(contract: Contract) -> Plan:
    """The projection of ``contract`` as one tree, built once per contract."""
    plan: Plan = {}
    for _, tokens in contract.data_projection:
        node = plan
        at = 1
        while at < len(tokens) - 1:
            name = tokens[at]
            if tokens[at + 1] == EVERY_ITEM:
                node = node.setdefault(name, [{}])[0]
                at += 2
            else:
                node = node.setdefault(name, {})
                at += 1
        node[tokens[-1]] = _leaf_kind(contract, tokens)
    return plan


def _leaf_kind(contract: Contract, tokens: Pointer) -> int:
    if tokens in contract.integer_fields:
        return _INTEGER
    return _INTEGER_ITEMS if tokens in contract.integer_items else _AS_IS


def _copy(source: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """A fresh object holding what ``plan`` names of ``source``: an optional member the
    result left out (or an object that holds none of the planned members) is left out,
    an array of objects keeps every item, in order, each copied by the items' plan."""
    out: dict[str, Any] = {}
    for name, step in plan.items():
        if name not in source:
            continue
        value = source[name]
        if type(step) is int:
            if step == _INTEGER:
                out[name] = _integer(value)
            elif isinstance(value, list):
                out[name] = [_integer(v) for v in value] if step == _INTEGER_ITEMS else list(value)
            else:
                out[name] = value
        elif type(step) is list:
            if isinstance(value, list):
                out[name] = [_copy(item, step[0]) if isinstance(item, dict) else item for item in value]
            elif value is None:
                out[name] = None
        else:
            if isinstance(value, list):  # an index token (/data/list/0/name) names one item
                value = {k: value[int(k)] for k in step if k.isdigit() and int(k) < len(value)}
            if isinstance(value, dict):
                inner = _copy(value, step)
                if inner:
                    out[name] = inner
    return out


def _integer(value: Any) -> Any:
    # The schema said integer, so a float here has no fraction: int() is exact.
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _unsafe(contract: Contract, data: Any) -> RejectedInput:
    crossed = _crossed(contract, data)
    detail = "the projected envelope fails the closed output schema"
    if crossed:
        detail += f": {crossed}"
    return RejectedInput("project", "INTERNAL_ERROR", detail)


def _crossed(contract: Contract, data: Any) -> str:
    """Which bound of the agent envelope a projected ``data`` crossed, and the file that sets
    it (else ``""``): the operator reading the quarantine sees what to change. (A bound the
    schema sets is checked before: only the envelope's defaults are crossed here.)"""
    for pointer, tokens in contract.data_projection:
        bounds = contract.leaf_bounds[tokens]
        for array, value in _values(data, tokens, 1, contract.array_bounds):
            if array is not None:
                said, keyword = f"in an array of more than {array} items", "maxItems"
            elif isinstance(value, str) and len(value) > bounds.max_length:
                said, keyword = f"longer than {bounds.max_length} characters", "maxLength"
            elif isinstance(value, list) and len(value) > bounds.max_items:
                said, keyword = f"more than {bounds.max_items} items", "maxItems"
            elif isinstance(value, list) and any(
                isinstance(v, str) and len(v) > bounds.items_max_length for v in value
            ):
                said = f"holding a string longer than {bounds.items_max_length} characters"
                keyword = "maxLength on its items"
            else:
                continue
            return (
                f"{pointer} is {said}, the agent envelope's bound where {contract.spec.schema} sets no "
                f"{keyword}: set one there as the tool needs (up to limits.max_bytes)"
            )
    return ""


def _values(node: Any, tokens: Pointer, at: int, arrays: dict[Pointer, int]) -> list[tuple[int | None, Any]]:
    """The values at ``tokens[at:]`` under ``node`` (the projected data), each with None; an
    array of objects on the way longer than its bound instead gives (its bound, the array)."""
    if at == len(tokens):
        return [(None, node)]
    if not isinstance(node, dict) or tokens[at] not in node:
        return []
    value = node[tokens[at]]
    if at + 1 < len(tokens) and tokens[at + 1] == EVERY_ITEM:
        if not isinstance(value, list):
            return []
        limit = arrays[tokens[: at + 1]]
        if len(value) > limit:
            return [(limit, value)]
        return [found for item in value for found in _values(item, tokens, at + 2, arrays)]
    return _values(value, tokens, at + 1, arrays)


def failure(tool: str | None, request_id: str | None, code: str, retryable: bool) -> dict[str, Any]:
    """A failure envelope: the upstream's validated code, or ``INVALID_RESPONSE``."""
    return {
        "tool": tool,
        "request_id": request_id,
        "outcome": "failure",
        "error": {"code": code, "retryable": retryable},
    }
