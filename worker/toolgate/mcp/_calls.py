"""What ``toolgate mcp-proxy`` checks of a host's ``tools/call`` before the upstream is called.

Every check that can refuse a call runs here, before anything is written or called, and
says why in lines written from the schema and the proxy's own bounds, never a value:

* :func:`argument_size_lines`: the arguments within :data:`MAX_ARGUMENT_VALUES` values,
  :data:`MAX_ARGUMENT_CHARS` characters of text and :data:`MAX_ARGUMENT_DEPTH` levels,
  counted before any validator runs, so one call's arguments cannot hold the others up;
* :func:`argument_errors_bounded`: the reviewed input schema, its work bounded: every
  error named for small arguments, the first one only for larger ones;
* :func:`call_arguments_bind`: the arguments a request record binds (its scalars and lists
  of strings), so a contract's ``bind`` rule compares the result with what was asked;
* :func:`bind_errors` and :func:`record_lines`: what the request record refuses (an
  integer outside 64 bits, a record over its size bound, anything else building it raises);
* :func:`trace_context`: the host's ``traceparent`` and ``tracestate`` as the proxy forwards
  and publishes them (a ``tracestate`` the gate's header bound refuses is dropped, as W3C
  Trace Context lets a participant do; an invalid ``traceparent`` drops both).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.gate._contracts import Contract, declared_names
from toolgate.gate._trace_context import from_headers
from toolgate.mcp._advertise import argument_errors

MAX_ARGUMENT_VALUES = 10_000  # every value: objects, arrays, their members and items
MAX_ARGUMENT_CHARS = 1_000_000  # strings and member names together
MAX_ARGUMENT_DEPTH = 64
# Up to this many values every failing argument is named; beyond it the first one (the
# validator's work for all of them grows with the instance, one call's with the first).
MAX_ITERATED_VALUES = 1_000
MAX_HEADER_BYTES = 1024  # the gate's bound on one header value (client.publish_result)
_INT64 = (-(2**63), 2**63 - 1)


def _measure(arguments: Any) -> tuple[int, int, int]:
    """(values, characters, depth) of ``arguments``, counting stopped past any bound."""
    values = chars = deepest = 0
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    while stack:
        node, depth = stack.pop()
        values += 1
        deepest = max(deepest, depth)
        if values > MAX_ARGUMENT_VALUES or chars > MAX_ARGUMENT_CHARS or deepest > MAX_ARGUMENT_DEPTH:
            break
        if isinstance(node, str):
            chars += len(node)
        elif isinstance(node, Mapping):
            for name, value in node.items():
                chars += len(name) if isinstance(name, str) else 0
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)
    return values, chars, deepest


def argument_size_lines(arguments: Any) -> list[str]:
    """Why ``arguments`` are over the proxy's bounds (empty: within them)."""
    values, chars, depth = _measure(arguments)
    if values > MAX_ARGUMENT_VALUES:
        return [f"arguments: more than {MAX_ARGUMENT_VALUES} values (the proxy's bound)"]
    if chars > MAX_ARGUMENT_CHARS:
        return [f"arguments: more than {MAX_ARGUMENT_CHARS} characters of text (the proxy's bound)"]
    if depth > MAX_ARGUMENT_DEPTH:
        return [f"arguments: nested more than {MAX_ARGUMENT_DEPTH} levels deep (the proxy's bound)"]
    return []


def argument_errors_bounded(contract: Contract, arguments: dict[str, Any]) -> list[str]:
    """:func:`argument_size_lines`, then the reviewed input schema's lines
    (:func:`toolgate.mcp._advertise.argument_errors`) with the validator's work bounded."""
    lines = argument_size_lines(arguments)
    if lines:
        return lines
    validator = contract.input_validator
    if validator is None or validator.is_valid(arguments):
        return []
    if _measure(arguments)[0] <= MAX_ITERATED_VALUES:
        return argument_errors(contract, arguments)
    try:
        validator.validate(arguments)
    except Exception as error:  # the validator's ValidationError: its first error
        return argument_errors(contract, arguments, errors=[error])
    return []


def bind_errors(bind: Mapping[str, Any], schema: Any) -> list[str]:
    """The bound arguments a request record cannot carry: integers outside 64 bits (the
    argument named when the schema declares it)."""
    names: frozenset[str] | None = None  # walked only for a line to write
    lines = []
    for name, value in bind.items():
        if isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
            names = declared_names(schema) if names is None else names
            pointer = "/" + (name.replace("~", "~0").replace("/", "~1") if name in names else "*")
            lines.append(f"argument {pointer}: an integer outside the signed 64-bit range")
    return lines


def call_arguments_bind(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The call's arguments a request record can bind: strings, integers, booleans, lists of strings."""
    bind: dict[str, Any] = {}
    for name, value in (arguments or {}).items():
        if isinstance(value, str | int | bool) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            bind[name] = value
    return bind


def record_lines(exc: Exception) -> list[str]:
    """The fixed line for what building the request record refused (never its text)."""
    if str(exc).startswith("bind: the request record would be"):
        return ["arguments: the request record would be over its size bound (1 MiB)"]
    return ["arguments: they cannot be carried in the request record"]


def _header_value(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        encoded = value.encode()
    except UnicodeEncodeError:
        return False
    return len(encoded) <= MAX_HEADER_BYTES and not any(b < 0x20 or b == 0x7F for b in encoded)


def trace_context(meta: Mapping[str, Any] | None) -> dict[str, str]:
    """The host's trace context the proxy forwards upstream and publishes: a valid
    ``traceparent`` and, when the gate's header bound takes it, its ``tracestate``."""
    meta = meta or {}
    traceparent = meta.get("traceparent")
    if not _header_value(traceparent) or from_headers([("traceparent", str(traceparent).encode())]) is None:
        return {}
    trace = {"traceparent": str(traceparent)}
    tracestate = meta.get("tracestate")
    if tracestate and _header_value(tracestate):
        trace["tracestate"] = str(tracestate)
    return trace


__all__ = [
    "MAX_ARGUMENT_CHARS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_VALUES",
    "argument_errors_bounded",
    "argument_size_lines",
    "bind_errors",
    "call_arguments_bind",
    "record_lines",
    "trace_context",
]
