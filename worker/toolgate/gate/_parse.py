"""The strict parse: untrusted bytes to a Python value, or a ``parse``-stage rejection.

Policy (RFC 8259 plus what parsers disagree on):

* UTF-8 only; invalid or overlong sequences, lone surrogates (raw or escaped) and a
  byte-order mark are ``MALFORMED_JSON``;
* duplicate member names, also when spelled with escapes, are ``DUPLICATE_KEY``;
* ``NaN``/``Infinity`` are ``MALFORMED_JSON``; a number that overflows a double to
  infinity, or an integer past jiter's digit limit (4300), is ``NUMBER_OUT_OF_RANGE``;
* nesting deeper than the contract's limit is ``NESTING_TOO_DEEP`` (jiter's own
  recursion limit, 200, stops 100,000 open brackets before the stack does);
* anything but whitespace after the value (a second document, garbage) and empty
  input are ``MALFORMED_JSON``.

jiter does the parse (Rust, with duplicate detection). The depth and infinity checks
walk the parsed value only when a cheap byte scan says they could fail: most results
have fewer brackets than the depth limit and no exponent. When no number can
overflow, the depth alone is checked, a level at a time, ending once every bracket is seen.
The gate defers both checks (:func:`check_parsed`) past the schema stage where the
contract's schema already refuses whatever they would (gate/_depth.py).
"""

from __future__ import annotations

import math
import re
from typing import Any

import jiter

from toolgate._errors import RejectedInput
from toolgate.gate._contracts import TextPattern

# One translation gives the shape every cheap check reads: "[" for an opening
# bracket or brace, "0" for a digit, "e" for an exponent marker, " " for the rest;
# signs are deleted (_SIGNS). Then a count and a few substring searches (C speed) tell
# whether the nesting could exceed the limit and whether any number could overflow a
# double.
_SHAPE = bytes(
    ord("[") if chr(b) in "[{" else ord("0") if chr(b).isdigit() else ord("e") if chr(b) in "eE" else ord(" ")
    for b in range(256)
)
_SIGNS = b"+-"
# A number is below 10**(digits + exponent): it can only overflow (> 1.8e308) with
# an exponent of three digits or more, or with a run of 200 digits or more (200
# digits and a two-digit exponent stay below 10**299). Hex ids and hashes ("3e8f")
# match neither, so they do not force the walk.
_LONG = 200
_LONG_DIGITS = b"0" * _LONG
_DUPLICATE = re.compile(r'^Detected duplicate key ".*" at (line \d+ column \d+)$', re.S)
_from_json = jiter.from_json


def parse_json(raw: bytes, max_depth: int, *, checked: bool = True) -> Any:
    """Parse ``raw`` strictly (see the module docstring).

    Args:
        raw: the value's bytes.
        max_depth: the deepest nesting allowed.
        checked: False leaves :func:`check_parsed` (infinite numbers, depth) to the
            caller: for one whose schema refuses every value those checks would, and
            that runs them once the schema has refused a value (gate/_depth.py).

    Raises:
        RejectedInput: stage ``parse`` with the code for what was wrong.
    """
    try:
        value = _from_json(raw, allow_inf_nan=False, catch_duplicate_keys=True, cache_mode="keys")
    except ValueError as exc:
        raise _parse_error(str(exc)) from None
    if checked:
        check_parsed(raw, value, max_depth)
    return value


def check_parsed(raw: bytes, value: Any, max_depth: int) -> None:
    """The checks after jiter: no number overflowed to infinity, nesting within the limit.

    Raises:
        RejectedInput: stage ``parse``, ``NUMBER_OUT_OF_RANGE`` or ``NESTING_TOO_DEEP``.
    """
    # Signs deleted: "0e+000" reads as "0e000", one search for both exponent shapes
    # (deleting can only join runs, so it finds every overflow the two searches did).
    shape = raw.translate(_SHAPE, _SIGNS)
    if b"0e000" in shape or (len(shape) >= _LONG and _LONG_DIGITS in shape):
        _walk(value, max_depth)
    elif (brackets := shape.count(b"[")) > max_depth:
        _check_depth(value, max_depth, brackets)


def _parse_error(message: str) -> RejectedInput:
    duplicate = _DUPLICATE.match(message)
    if duplicate:
        # The member name is attacker-chosen: keep only where it was.
        return RejectedInput("parse", "DUPLICATE_KEY", f"duplicate member name at {duplicate[1]}")
    if message.startswith("number out of range"):
        return RejectedInput("parse", "NUMBER_OUT_OF_RANGE", message[:120])
    if message.startswith("recursion limit exceeded"):
        return RejectedInput("parse", "NESTING_TOO_DEEP", message[:120])
    return RejectedInput("parse", "MALFORMED_JSON", message[:160])


def _walk(root: Any, max_depth: int) -> None:
    """Check depth and non-finite floats iteratively (no recursion on attacker data)."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > max_depth:
                raise RejectedInput(
                    "parse", "NESTING_TOO_DEEP", f"nesting depth exceeds the limit of {max_depth}"
                )
            stack.extend((child, depth + 1) for child in value.values())
        elif isinstance(value, list):
            if depth > max_depth:
                raise RejectedInput(
                    "parse", "NESTING_TOO_DEEP", f"nesting depth exceeds the limit of {max_depth}"
                )
            stack.extend((child, depth + 1) for child in value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise RejectedInput("parse", "NUMBER_OUT_OF_RANGE", "a number overflows to infinity")


def _check_depth(root: Any, max_depth: int, brackets: int) -> None:
    """Depth only, a level of objects and arrays at a time; used when no number can
    be infinite, so the depth is the only possible error.

    ``brackets`` (the count of ``[`` and ``{`` bytes, strings included) bounds the
    number of objects and arrays: once that many were seen, no level is deeper, and
    the leaves of the last level need not be visited at all. The value is jiter's, so
    its objects and arrays are exactly ``dict`` and ``list`` (a type test, not isinstance:
    a third of the walk's cost).
    """
    level = [root] if type(root) in _CONTAINERS else []
    seen = len(level)
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise RejectedInput(
                "parse", "NESTING_TOO_DEEP", f"nesting depth exceeds the limit of {max_depth}"
            )
        if seen >= brackets:
            return
        below: list[Any] = []
        add = below.append
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) in _CONTAINERS:
                    add(child)
        level = below
        seen += len(below)


_CONTAINERS = frozenset({dict, list})


def extract_text(raw: bytes, pattern: TextPattern) -> dict[str, str]:
    """Full-match ``raw`` (UTF-8 text) against a text contract's one pattern.

    The whole output must match: a banner, a warning or a second line is a
    rejection, never something to skip. Named groups become the object that is
    validated; groups that did not take part are left out.

    Raises:
        RejectedInput: stage ``parse``, ``TEXT_EXTRACTION_FAILED``.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RejectedInput("parse", "TEXT_EXTRACTION_FAILED", "output is not UTF-8") from None
    match = pattern.fullmatch(text)
    if match is None:
        raise RejectedInput(
            "parse", "TEXT_EXTRACTION_FAILED", "output does not fully match the contract's pattern"
        )
    return {name: value for name, value in match.groupdict().items() if value is not None}
