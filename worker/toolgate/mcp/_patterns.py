"""A short string a ``pattern`` matches, for the example fixtures import writes.

The pattern's syntax tree comes from Python's own regex parser (``re._parser``: the
syntax RE2 and Python share: literals, classes, ``\\d``/``\\w``/``\\s``, groups,
alternatives, counted repeats, anchors); the string is built from it, shortest first,
then lengthened repeat by repeat until it fits ``minLength``/``maxLength``. Every
candidate is checked with RE2 (the engine the gate's patterns run on), so a string is
returned only when the gate would match it. Look-arounds and back-references (which
RE2 refuses) and anything the parser does not read (``\\p{L}``) give no string.
Bounded: at most :data:`MAX_STEPS` tree nodes visited over all attempts.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Final

MAX_STEPS: Final = 20_000
# Characters tried, in order, for a class or a negated literal: readable ones first.
_PREFERRED: Final = "a0A_-.zZ9 "


class _GiveUp(Exception):
    """No string from this tree within the bounds."""


class _Builder:
    def __init__(self, constants: Any, extra: int) -> None:
        self.c = constants
        self.extra = extra  # items each repeat adds beyond its minimum (up to its maximum)
        self.steps = 0

    def build(self, tree: Any) -> str:
        return "".join(self.node(op, arg) for op, arg in tree)

    def node(self, op: Any, arg: Any) -> str:
        c = self.c
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _GiveUp
        if op is c.LITERAL:
            return chr(arg)
        if op is c.NOT_LITERAL:
            return next(ch for ch in _PREFERRED + "b" if ord(ch) != arg)
        if op is c.ANY:
            return "a"
        if op is c.AT:
            return ""
        if op is c.IN:
            return self.in_class(arg)
        if op is c.BRANCH:
            for alternative in arg[1]:
                try:
                    return self.build(alternative)
                except _GiveUp:
                    continue
            raise _GiveUp
        if op is c.SUBPATTERN:
            return self.build(arg[-1])
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)):
            low, high, tree = arg
            count = min(high, low + self.extra)
            if count > 4096:
                raise _GiveUp
            return "".join(self.build(tree) for _ in range(count))
        raise _GiveUp  # look-arounds, back-references, conditionals: not RE2

    def in_class(self, items: list[tuple[Any, Any]]) -> str:
        c = self.c
        negate = bool(items) and items[0][0] is c.NEGATE
        members = items[1:] if negate else items
        tried = list(_PREFERRED)
        for op, arg in members:
            if op is c.LITERAL:
                tried.append(chr(arg))
            elif op is c.RANGE:
                tried.extend((chr(arg[0]), chr(arg[1])))
        for ch in tried:
            if self.matches(members, ch) != negate:
                return ch
        raise _GiveUp

    def matches(self, members: list[tuple[Any, Any]], ch: str) -> bool:
        c = self.c
        code = ord(ch)
        for op, arg in members:
            if op is c.LITERAL and arg == code:
                return True
            if op is c.RANGE and arg[0] <= code <= arg[1]:
                return True
            if op is c.CATEGORY and _category(c, arg, ch):
                return True
        return False


def _category(c: Any, category: Any, ch: str) -> bool:
    word = ch.isalnum() or ch == "_"
    table = {
        c.CATEGORY_DIGIT: ch.isdigit(),
        c.CATEGORY_NOT_DIGIT: not ch.isdigit(),
        c.CATEGORY_WORD: word,
        c.CATEGORY_NOT_WORD: not word,
        c.CATEGORY_SPACE: ch.isspace(),
        c.CATEGORY_NOT_SPACE: not ch.isspace(),
    }
    return bool(table.get(category, False))


def _extras() -> Iterator[int]:
    yield from (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 4096)


def pattern_example(pattern: str, *, min_length: int = 0, max_length: int | None = None) -> str | None:
    """A string RE2 finds ``pattern`` in, of ``min_length``..``max_length`` characters, or None."""
    import re2

    try:
        parser = importlib.import_module("re._parser")
        constants = importlib.import_module("re._constants")
        tree = parser.parse(pattern)
        options = re2.Options()
        options.log_errors = False  # a pattern RE2 refuses gives no example, quietly
        regex = re2.compile(pattern, options)
    except Exception:  # the parser's or RE2's refusal, whatever its type: no example
        return None
    steps = 0
    for extra in _extras():
        builder = _Builder(constants, extra)
        try:
            text = builder.build(tree)
        except (_GiveUp, ValueError, OverflowError):
            return None
        finally:
            steps += builder.steps
        if len(text) >= min_length and (max_length is None or len(text) <= max_length):
            if regex.search(text):
                return text
            return None  # the shortest fitting string does not match: the tree was misread
        if (max_length is not None and len(text) > max_length) or steps > MAX_STEPS:
            return None
    return None
