"""``cel`` rules: reviewed boolean expressions in the Common Expression Language.

A contract's ``rules`` may hold ``kind: cel`` entries (checked in the ``semantic`` stage,
over ``data``, ``request``, ``adapter_version`` and ``now``) and its ``mcp`` section
``argument_rules`` (checked before an MCP proxy calls the upstream, over ``args`` and
``now``). The expressions run on Google's CEL runtime (``cel-expr-python``, C++; the
choice and its figures are in docs/benchmarks.md); this module only declares the
variables, walks the checked expression for what CEL's checker cannot know, and turns
outcomes into the gate's codes.

At load, each of these is one :class:`~toolgate._errors.ContractError` naming the file,
the rule and the position (line:column in the expression): a syntax error, an unknown
variable or function, a type error the checker finds, a result that is not ``bool``, a
field the schema does not declare (``data.x`` where the data object's schema lists its
properties and ``x`` is not one; ``request.x`` for a member a request record lacks), and
a static cost over :data:`MAX_COST` (expression size times the iterations its list
macros may take, an array the schema bounds by ``maxItems`` counting that many, one it
does not by what ``limits.max_bytes`` can hold).

At run time a false rule is ``RULE_FAILED``; an evaluation error (a missing key,
division by zero, overflow, a type mismatch, an RE2 pattern the runtime refuses) is
``RULE_FAILED`` too, with a detail naming the rule and the class of error only: a value
from the result never reaches a detail.

Most results pass every rule: a rule within a small subset (comparisons, logic, ``size``,
``timestamp``, ``has``, member reads, indexes, ``all``, ``exists``) is also compiled to Python
closures that vouch only for a certain ``true`` (the fast path, below); every other answer
is the runtime's.
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import re2
from cel_expr_python import cel

from toolgate._errors import ContractError, RejectedInput

RULE_KEYWORD: Final = "rule"  # Diagnostics.keyword of a RULE_FAILED; schema_path holds the name
MAX_EXPR_CHARS: Final = 4096
MAX_RULES: Final = 64  # cel rules per contract, and argument rules per MCP tool
MAX_COST: Final = 10_000_000  # static bound on the work of one rule (nodes x iterations)
OTHER_RANGE: Final = 1024  # iterations assumed for a list macro over a request or argument list
_NO_VALUE: Final = object()  # a constant the fast path does not read (null, uint, bytes)
RULE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

REQUEST_FIELDS: Final = frozenset({"bind", "issued_at", "expires_at", "attempt", "tool"})
_TIMES: Final = frozenset({"issued_at", "expires_at"})
_DYN_MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
RESULT_VARIABLES: Final[Mapping[str, Any]] = {
    "data": _DYN_MAP,
    "request": _DYN_MAP,
    "adapter_version": cel.Type.STRING,
    "now": cel.Type.TIMESTAMP,
}
ARGUMENT_VARIABLES: Final[Mapping[str, Any]] = {"args": _DYN_MAP, "now": cel.Type.TIMESTAMP}
_ENVS: dict[str, Any] = {}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # reported once, as a ContractError


def _env(kind: str) -> Any:
    env = _ENVS.get(kind)
    if env is None:
        variables = RESULT_VARIABLES if kind == "result" else ARGUMENT_VARIABLES
        env = _ENVS[kind] = cel.NewEnv(variables=dict(variables))
    return env


# ---------------------------------------------------------------- the checked expression
# Expression.serialize() is a google.protobuf.Any holding a cel.expr.CheckedExpr; the
# few messages read here are decoded from the wire format directly (no protobuf runtime).


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: int or bytes."""
    at = 0
    while at < len(buf):
        key, at = _varint(buf, at)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 1:
            value, at = buf[at : at + 8], at + 8
        elif wire == 2:
            size, at = _varint(buf, at)
            value, at = buf[at : at + size], at + size
        elif wire == 5:
            value, at = buf[at : at + 4], at + 4
        else:
            raise ValueError(f"unexpected wire type {wire}")
        yield number, wire, value


def _message(buf: bytes) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for number, _, value in _fields(buf):
        found.setdefault(number, []).append(value)
    return found


@dataclass
class Node:
    """One node of a checked CEL expression (cel.expr.Expr), as far as the walk needs it."""

    id: int
    kind: str  # ident, select, call, const, list, struct, comprehension
    name: str = ""  # ident name, selected field, called function, comprehension variable
    test_only: bool = False  # select: a has() test
    children: list[Node] = field(default_factory=list)  # select: [operand]; call: target+args
    string: str | None = None  # const: a string constant
    value: Any = None  # const: a bool, int, double or string constant (_NO_VALUE: another kind)
    accu: str = ""  # comprehension: the accumulator's name
    # comprehension: iter_range, accu_init, loop_condition, loop_step, result
    loop: list[Node] = field(default_factory=list)


def _node(buf: bytes) -> Node:
    parts = _message(buf)
    node = Node(id=parts.get(2, [0])[0], kind="const")
    if 4 in parts:
        node.kind, node.name = "ident", _message(parts[4][0]).get(1, [b""])[0].decode()
    elif 5 in parts:
        select = _message(parts[5][0])
        node.kind = "select"
        node.name = select.get(2, [b""])[0].decode()
        node.test_only = bool(select.get(3, [0])[0])
        node.children = [_node(b) for b in select.get(1, [])]
    elif 6 in parts:
        call = _message(parts[6][0])
        node.kind, node.name = "call", call.get(2, [b""])[0].decode()
        node.children = [_node(b) for b in call.get(1, []) + call.get(3, [])]
    elif 7 in parts:
        node.kind, node.children = "list", [_node(b) for b in _message(parts[7][0]).get(1, [])]
    elif 8 in parts:
        node.kind = "struct"
        for entry in _message(parts[8][0]).get(2, []):
            item = _message(entry)
            node.children += [_node(b) for b in item.get(3, []) + item.get(4, [])]
    elif 9 in parts:
        loop = _message(parts[9][0])
        node.kind, node.name = "comprehension", loop.get(1, [b""])[0].decode()
        node.accu = loop.get(3, [b""])[0].decode() if 8 not in loop else ""  # two variables: no fast path
        node.loop = [_node(loop[n][0]) if n in loop else Node(0, "const") for n in (2, 4, 5, 6, 7)]
    elif 3 in parts:
        constant = _message(parts[3][0])
        node.value = _NO_VALUE
        if 6 in constant:
            node.string = node.value = constant[6][0].decode()
        elif 2 in constant:
            node.value = bool(constant[2][0])
        elif 3 in constant:
            number = constant[3][0]
            node.value = number - (1 << 64) if number >= 1 << 63 else number
        elif 5 in constant:
            node.value = struct.unpack("<d", constant[5][0])[0]
    return node


def _checked(expression: Any) -> tuple[Node, dict[int, int]]:
    """The root node of a compiled expression and its source positions (id -> offset)."""
    wrapped = _message(expression.serialize())
    checked = _message(wrapped[2][0])
    positions: dict[int, int] = {}
    for info in checked.get(5, []):
        for entry in _message(info).get(4, []):
            pair = _message(entry)
            positions[pair.get(1, [0])[0]] = pair.get(2, [0])[0]
    return _node(checked[4][0]), positions


# ---------------------------------------------------------------- compiled rules


@dataclass(frozen=True)
class SchemaView:
    """What the walk asks of a schema: the subschemas at a path (empty: not typable) and
    the iteration bound of an array there."""

    levels: Any  # Callable[[tuple[str, ...]], list[dict]]
    default_items: int  # iterations assumed for an array with no maxItems

    def fields_at(self, tokens: tuple[str, ...]) -> frozenset[str] | None:
        """The member names declared at ``tokens``, or None when any of them is allowed."""
        level = self.levels(tokens)
        if not level:
            return None
        names: set[str] = set()
        declared = False
        for node in level:
            if "patternProperties" in node or isinstance(node.get("additionalProperties"), dict):
                return None
            members = node.get("properties")
            if isinstance(members, dict):
                declared = True
                names.update(members)
        return frozenset(names) if declared else None

    def items_at(self, tokens: tuple[str, ...]) -> int:
        bounds = [n["maxItems"] for n in self.levels(tokens) if isinstance(n.get("maxItems"), int)]
        return min(bounds) if bounds else self.default_items


class CelRule:
    """One compiled rule: its name, source, program, and the parts of ``data`` (or ``args``)
    it reads (see :func:`read_tree`)."""

    __slots__ = ("description", "expr", "fast", "name", "names", "program", "reads")

    def __init__(
        self,
        name: str,
        expr: str,
        description: str,
        program: Any,
        reads: Sequence[Read] = (),
        names: frozenset[str] = frozenset(),
        fast: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.name = name
        self.expr = expr
        self.description = description
        self.program = program
        self.reads = tuple(reads)
        self.names = names  # the variables it reads (data, request, adapter_version, now, args)
        self.fast = fast  # the fast path's closures (:func:`fast_program`), None: not covered


Read = tuple[tuple[str, ...], bool]  # (path below data, True: read whole / False: only its size)
WHOLE: Final = "whole"  # a read tree's leaf: the value is read whole
SIZE_KEY: Final = "\x00size"  # a read tree's mark: the value's size (or keys) is read
Tree = dict[str, Any]


def read_tree(rules: Sequence[CelRule]) -> Tree | None:
    """What ``rules`` read of ``data``, as a tree of member names (``*``: every item); None
    when one reads it whole (nothing to leave out)."""
    tree: Tree = {}
    for rule in rules:
        for path, whole in rule.reads:
            if not path and whole:
                return None
            node = tree
            for token in path[:-1] if whole else path:
                child = node.get(token)
                if child == WHOLE:
                    break
                if child is None:
                    child = node[token] = {}
                node = child
            else:
                if whole:
                    node[path[-1]] = WHOLE
                else:
                    node[SIZE_KEY] = True
    return tree


def pruner(tree: Tree) -> Callable[[Any], Any]:
    """:func:`pruned` for one tree, as closures built once (the per-result work is then the
    members the rules read, no walk of the tree)."""
    if SIZE_KEY in tree:
        below = tree.get("*", {})
        item = None if below == WHOLE else pruner(below)

        def sized(value: Any) -> Any:
            if type(value) is list and item is not None:
                return [item(v) for v in value]
            return value

        return sized
    members = [
        (name, None if below == WHOLE else pruner(below)) for name, below in tree.items() if name != "*"
    ]
    every = tree.get("*")
    each = None if every is None or every == WHOLE else pruner(every)

    def prune(value: Any) -> Any:
        if type(value) is dict:
            out = {}
            for name, inner in members:
                if name in value:
                    out[name] = value[name] if inner is None else inner(value[name])
            return out
        if type(value) is list and every is not None:
            return value if each is None else [each(v) for v in value]
        return value

    return prune


def pruned(value: Any, tree: Tree) -> Any:
    """``value`` with only what ``tree`` reads: the rules see the same values and the same
    errors (a member they read that is missing is missing here too), and the runtime
    converts less. A map whose size or keys are read is kept whole; a list keeps every item."""
    if type(value) is dict:
        if SIZE_KEY in tree:
            return value
        out = {}
        for name, below in tree.items():
            if name in value:
                out[name] = value[name] if below == WHOLE else pruned(value[name], below)
        return out
    if type(value) is list:
        below = tree.get("*", {})
        if below == WHOLE:
            return value
        return [pruned(item, below) for item in value]
    return value


def _position(expr: str, offset: int) -> str:
    before = expr[:offset]
    line = before.count("\n") + 1
    return f"{line}:{offset - (before.rfind(chr(10)) + 1) + 1}"


def compile_rule(
    name: str,
    expr: str,
    description: str,
    *,
    kind: str,
    where: str,
    path: str,
    schema: SchemaView | None,
) -> CelRule:
    """Compile and check one rule (see the module docstring).

    Args:
        kind: ``result`` (data, request, adapter_version, now) or ``arguments`` (args, now).
        where: the contract file, for the error.
        path: the rule's path in it (``$.rules[2]``).
        schema: the data (or arguments) schema view, for field references and costs.

    Raises:
        ContractError: one line naming the file, the rule and the position.
    """
    at = f"{path} ({name})"
    if not RULE_NAME.fullmatch(name):
        raise ContractError(where, path, f"rule name {name!r} must match {RULE_NAME.pattern}")
    if not expr.strip() or len(expr) > MAX_EXPR_CHARS:
        raise ContractError(where, at, f"expr must be 1..{MAX_EXPR_CHARS} characters")
    try:
        program = _env(kind).compile(expr)
    except RuntimeError as exc:
        raise ContractError(where, at, _compile_error(str(exc))) from None
    result = program.return_type()
    if result != cel.Type.BOOL:
        raise ContractError(where, at, f"1:1: the expression is {result.name().lower()}, not bool")
    root, positions = _checked(program)
    problem = _walk(root, kind, schema, positions, expr)
    if problem:
        raise ContractError(where, at, problem)
    reads: list[Read] = []
    _reads(root, "data" if kind == "result" else "args", {}, reads)
    variables = RESULT_VARIABLES if kind == "result" else ARGUMENT_VARIABLES
    names = set(n for n in _idents(root) if n in variables)
    if kind == "result" and "request" in names:
        request_reads: list[Read] = []
        _reads(root, "request", {}, request_reads)
        if all(path for path, _ in request_reads):  # request.<field> only: name the fields
            names.discard("request")
            names.update(f"request.{path[0]}" for path, _ in request_reads)
    fast = fast_program(root) if kind == "result" else None
    return CelRule(name, expr, description, program, reads, frozenset(names), fast)


def _idents(node: Node) -> Iterator[str]:
    """Every identifier ``node`` names (a comprehension's own variables included)."""
    if node.kind == "ident":
        yield node.name
    for child in (*node.children, *node.loop):
        yield from _idents(child)


def _chain(node: Node, root_var: str, scope: Mapping[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The path below ``root_var`` a select chain names (comprehension variables stand for
    ``*``), or None when the node is not such a chain."""
    if node.kind == "ident":
        if node.name in scope:
            return scope[node.name]
        return () if node.name == root_var else None
    if node.kind == "select" and node.children:
        parent = _chain(node.children[0], root_var, scope)
        return None if parent is None else (*parent, node.name)
    return None


def _reads(node: Node, root_var: str, scope: Mapping[str, tuple[str, ...]], out: list[Read]) -> None:
    """Collect what ``node`` reads below ``root_var`` into ``out`` (see :func:`read_tree`)."""
    path = _chain(node, root_var, scope)
    if path is not None:
        out.append((path, True))
        return
    if node.kind == "call" and node.name == "size" and len(node.children) == 1:
        sized = _chain(node.children[0], root_var, scope)
        if sized is not None:
            out.append((sized, False))
            return
    if node.kind == "comprehension":
        iter_range, accu_init, condition, step, result = node.loop
        ranged = _chain(iter_range, root_var, scope)
        inner = dict(scope)
        inner.pop(node.name, None)
        if ranged is not None:
            out.append((ranged, False))
            inner[node.name] = (*ranged, "*")
        else:
            _reads(iter_range, root_var, scope, out)
        _reads(accu_init, root_var, scope, out)
        for part in (condition, step, result):
            _reads(part, root_var, inner, out)
        return
    for child in node.children:
        _reads(child, root_var, scope, out)


def _compile_error(text: str) -> str:
    """The first of the checker's errors as ``line:column: message``."""
    found = re.search(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)", text)
    if found is None:
        return text.splitlines()[0][:200] if text else "does not compile"
    return f"{found.group(1)}:{found.group(2)}: {found.group(3)[:200]}"


def _walk(root: Node, kind: str, schema: SchemaView | None, positions: Mapping[int, int], expr: str) -> str:
    """The first field or cost problem of a checked expression ('' when none)."""
    root_var = "data" if kind == "result" else "args"
    nodes = 0
    problems: list[str] = []

    def where(node: Node) -> str:
        return _position(expr, positions.get(node.id, 0))

    def path_of(node: Node, scope: Mapping[str, tuple[str, ...]]) -> tuple[str, ...] | None:
        """The schema path a select chain names: ('data', 'items', '*', 'id')."""
        if node.kind == "ident":
            if node.name in scope:
                return scope[node.name]
            return (node.name,) if node.name in (root_var, "request") else None
        if node.kind == "select" and node.children:
            parent = path_of(node.children[0], scope)
            return None if parent is None else (*parent, node.name)
        return None

    def check_pattern(node: Node) -> None:
        pattern = node.children[-1] if node.name == "matches" and node.children else None
        if pattern is not None and pattern.string is not None:
            try:
                re2.compile(pattern.string, _RE2_OPTIONS)
            except re2.error:
                problems.append(f"{where(pattern)}: RE2 refuses the pattern of matches()")

    def check_select(node: Node, scope: Mapping[str, tuple[str, ...]]) -> None:
        parent = path_of(node.children[0], scope) if node.children else None
        if parent is None:
            return
        if parent == ("request",):
            if node.name not in REQUEST_FIELDS:
                problems.append(
                    f"{where(node)}: a request has no {node.name!r} "
                    f"(it has {', '.join(sorted(REQUEST_FIELDS))})"
                )
            return
        if parent[0] != root_var or schema is None:
            return
        declared = schema.fields_at(parent[1:] if kind == "arguments" else parent)
        if declared is not None and node.name not in declared:
            shown = ".".join(p for p in parent)
            problems.append(f"{where(node)}: the schema declares no {node.name!r} in {shown}")

    def cost(node: Node, scope: Mapping[str, tuple[str, ...]]) -> int:
        nonlocal nodes
        nodes += 1
        if node.kind == "select":
            check_select(node, scope)
        elif node.kind == "call":
            check_pattern(node)
        if node.kind != "comprehension":
            return 1 + sum(cost(child, scope) for child in node.children)
        iter_range, accu_init, condition, step, result = node.loop
        ranged = path_of(iter_range, scope)
        if ranged is not None and ranged[0] == root_var and schema is not None:
            tokens = ranged[1:] if kind == "arguments" else ranged
            bound = schema.items_at(tokens)
            inner = {**scope, node.name: (*ranged, "*")}
        else:
            bound, inner = OTHER_RANGE, dict(scope)
        body = cost(condition, inner) + cost(step, inner)
        return cost(iter_range, scope) + cost(accu_init, scope) + bound * body + cost(result, scope)

    total = cost(root, {})
    if problems:
        return problems[0]
    if total > MAX_COST:
        return (
            f"1:1: the expression may cost {total:,} steps, over the bound of {MAX_COST:,}: "
            "bound the arrays it loops over with maxItems, or loop less deeply"
        )
    return ""


# ---------------------------------------------------------------- evaluation

_ERROR_CLASSES: Final = (
    ("iteration budget", "over the runtime's iteration budget (10,000 per evaluation)"),
    ("key not found", "a member it reads is missing"),
    ("no such key", "a member it reads is missing"),
    ("no such field", "a member it reads is missing"),
    ("divide by zero", "division by zero"),
    ("division by zero", "division by zero"),
    ("modulus by zero", "division by zero"),
    ("overflow", "overflow"),
    ("out of range", "a value out of range"),
    ("no matching overload", "no operation for these types"),
    ("regular expression", "a pattern the runtime refuses"),
    ("invalid", "an invalid value"),
)


def error_class(text: str) -> str:
    """A fixed description of a CEL evaluation error: its text may hold values."""
    lowered = text.lower()
    for needle, described in _ERROR_CLASSES:
        if needle in lowered:
            return described
    return "an evaluation error"


def _reject(rule: str, detail: str, code: Any = "RULE_FAILED") -> RejectedInput:
    return RejectedInput("semantic", code, detail, schema_path=rule, keyword=RULE_KEYWORD)


def evaluate(rules: Sequence[CelRule], variables: Mapping[str, Any], kind: str = "result") -> None:
    """Evaluate ``rules`` in order on one activation (the input converted once).

    Raises:
        RejectedInput: RULE_FAILED (stage semantic) for the first rule that is not true,
            the detail a fixed text naming the rule, ``schema_path`` the rule's name and
            ``keyword`` :data:`RULE_KEYWORD`.
    """
    try:
        activation = _env(kind).Activation(variables)
    except Exception:  # a value CEL cannot hold (an integer over 64 bits, ...)
        raise _reject(rules[0].name, f"rule {rules[0].name!r} could not read its input") from None
    for rule in rules:
        try:
            value = rule.program.eval(activation)
        except Exception as exc:  # the runtime raising is an error like any other
            detail = f"rule {rule.name!r} could not be evaluated: {error_class(str(exc))}"
            raise _reject(rule.name, detail) from None
        result = value.value()
        if result is True:
            continue
        if result is False and value.type() == cel.Type.BOOL:
            raise _reject(rule.name, f"rule {rule.name!r} is false")
        raise _reject(rule.name, f"rule {rule.name!r} could not be evaluated: {error_class(str(result))}")


class RuleSet:
    """A contract's result rules prepared for the gate: one combined program that says which
    rule is first false (``!(r0) ? 0 : !(r1) ? 1 : ... : -1``, one evaluation for all), the
    rules one by one only when it errs (to name the rule), ``data`` cut to what they read and
    only the variables they name converted."""

    __slots__ = ("combined", "fast", "holdable", "prune", "request_fields", "rules", "uses")

    def __init__(self, rules: Sequence[CelRule]) -> None:
        self.rules = tuple(rules)
        tree = read_tree(self.rules)
        self.prune = None if tree is None else pruner(tree)
        self.holdable = holdable_checker(tree)
        fast = tuple(r.fast for r in self.rules if r.fast is not None)
        self.fast = fast if len(fast) == len(self.rules) else None
        self.uses = frozenset().union(*(r.names for r in self.rules))
        # request.<field> read alone: only those fields are built (the times as text cost most)
        self.request_fields = (
            frozenset(n.removeprefix("request.") for n in self.uses if n.startswith("request."))
            & REQUEST_FIELDS
        )
        text = "".join(f"!({r.expr}) ? {i} : " for i, r in enumerate(self.rules)) + "-1"
        try:
            self.combined: Any = _env("result").compile(text) if self.rules else None
        except RuntimeError:  # each rule compiles alone; the combination only speeds them up
            self.combined = None

    def check(self, data: Any, request: Any, adapter_version: str | None, now: datetime) -> None:
        """Raise RULE_FAILED for the first rule not true of this result (see :func:`evaluate`)."""
        variables: dict[str, Any] = {"data": data if isinstance(data, dict) else {}}
        uses = self.uses
        if "request" in uses:
            variables["request"] = request_variable(request)
        elif self.request_fields:
            whole = request_variable(request) if self.request_fields & _TIMES else None
            variables["request"] = {
                field: (whole[field] if whole is not None else getattr(request, field))
                for field in self.request_fields
            }
        if "adapter_version" in uses:
            variables["adapter_version"] = adapter_version or ""
        if "now" in uses:
            variables["now"] = now
        if self.fast is not None and self._surely_true(variables, now):
            return
        if self.prune is not None:
            variables["data"] = self.prune(variables["data"])
        combined = self.combined
        if combined is not None:
            try:
                first = combined.eval(data=variables).value()
            except Exception:
                first = None
            if first == -1 and type(first) is int:
                return
            if type(first) is int and 0 <= first < len(self.rules):
                name = self.rules[first].name
                raise _reject(name, f"rule {name!r} is false")
        evaluate(self.rules, variables)

    def _surely_true(self, variables: dict[str, Any], now: datetime) -> bool:
        """Whether the fast path vouches that every rule is true (False: the runtime decides)."""
        if now.tzinfo is None or not self.holdable(variables["data"]):
            return False
        if "request" in variables and not _holdable(variables["request"]):
            return False
        scope = dict(variables)
        scope[_SPENT] = [0]
        try:
            for fast in self.fast or ():
                if fast(scope) is not True:
                    return False
        except _Unsure:
            return False
        return True


# ---------------------------------------------------------------- the fast path
# Most results pass every rule. A rule whose expression uses only the operations below is
# also compiled to Python closures that answer "true" only where CEL's answer is certainly
# true (same types on both sides, values CEL holds, no macro past a small iteration count),
# and raise _Unsure for anything else: the runtime then decides as before, so a verdict never
# depends on this path (tests/unit/gate/test_cel.py compares both over generated data).


class _Unsure(Exception):
    """The fast path cannot vouch for CEL's answer: the runtime decides."""


_UNSURE: Final = _Unsure()
_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_FAST_ITERATIONS: Final = 1000  # far below the runtime's 10,000 per evaluation
_SCALARS: Final = (str, int, float)
_EXACT: Final = 1 << 53  # integers a double holds exactly
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})", re.ASCII
)
Scope = dict[str, Any]
_SPENT: Final = "\x00spent"  # a scope's iteration count so far (a one-item list), no CEL name
Fast = Callable[[Scope], Any]


def _same_scalar(left: Any, right: Any) -> bool:
    kind = type(left)
    return kind is type(right) and kind in _SCALARS


def _numbers(left: Any, right: Any) -> bool:
    """An integer and a double the runtime compares as Python does: the integer within 2**53,
    where it converts to a double exactly."""
    if type(left) is int and type(right) is float:
        return -_EXACT <= left <= _EXACT
    if type(left) is float and type(right) is int:
        return -_EXACT <= right <= _EXACT
    return False


def _compare(op: Callable[[Any, Any], bool], ordered: bool) -> Callable[[Fast, Fast], Fast]:
    def build(a: Fast, b: Fast) -> Fast:
        constant = getattr(b, "constant", _NO_VALUE)
        if type(constant) in _SCALARS:  # against a constant: its type known here
            kind = type(constant)

            def against(scope: Scope) -> Any:
                left = a(scope)
                if type(left) is kind or _numbers(left, constant):
                    return op(left, constant)
                raise _UNSURE

            return against

        def run(scope: Scope) -> Any:
            left, right = a(scope), b(scope)
            kind = type(left)
            if kind is type(right) and (kind in _SCALARS or (kind is bool and not ordered)):
                return op(left, right)
            if ordered and kind is datetime and type(right) is datetime:
                return op(left, right)
            if _numbers(left, right):
                return op(left, right)
            raise _UNSURE

        return run

    return build


_COMPARISONS: Final = {
    "_==_": _compare(operator.eq, False),
    "_!=_": _compare(operator.ne, False),
    "_<_": _compare(operator.lt, True),
    "_<=_": _compare(operator.le, True),
    "_>_": _compare(operator.gt, True),
    "_>=_": _compare(operator.ge, True),
}


def _and(a: Fast, b: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        left = a(scope)
        if left is False:
            return False
        right = b(scope)
        if right is False:
            return False
        if left is True and right is True:
            return True
        raise _UNSURE

    return run


def _or(a: Fast, b: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        try:
            if a(scope) is True:
                return True
            first_false = True
        except _Unsure:
            first_false = False
        right = b(scope)
        if right is True or (right is False and first_false):
            return right
        raise _UNSURE

    return run


def _not(a: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        value = a(scope)
        if type(value) is bool:
            return not value
        raise _UNSURE

    return run


def _size(a: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        value = a(scope)
        if type(value) in (str, list, dict):
            return len(value)
        raise _UNSURE

    return run


def _timestamp(a: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        value = a(scope)
        if type(value) is str and _RFC3339.fullmatch(value):
            try:  # in UTC: a moment outside years 1-9999 there is out of CEL's range too
                return datetime.fromisoformat(value).astimezone(UTC)
            except (ValueError, OverflowError):
                pass
        raise _UNSURE

    return run


def _index(a: Fast, b: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        container, key = a(scope), b(scope)
        if type(container) is dict and type(key) is str and key in container:
            return container[key]
        if type(container) is list and type(key) is int and 0 <= key < len(container):
            return container[key]
        raise _UNSURE

    return run


def _conditional(a: Fast, b: Fast, c: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        test = a(scope)
        if test is True:
            return b(scope)
        if test is False:
            return c(scope)
        raise _UNSURE

    return run


def _not_strictly_false(a: Fast) -> Fast:
    def run(scope: Scope) -> Any:
        try:
            return a(scope) is not False
        except _Unsure:
            return True

    return run


_CALLS: Final[Mapping[tuple[str, int], Callable[..., Fast]]] = {
    **{(name, 2): build for name, build in _COMPARISONS.items()},
    ("_&&_", 2): _and,
    ("_||_", 2): _or,
    ("!_", 1): _not,
    ("size", 1): _size,
    ("timestamp", 1): _timestamp,
    ("_[_]", 2): _index,
    ("_?_:_", 3): _conditional,
    ("@not_strictly_false", 1): _not_strictly_false,
}


def _select(a: Fast, name: str, test_only: bool) -> Fast:
    def run(scope: Scope) -> Any:
        value = a(scope)
        if type(value) is dict:
            if test_only:
                return name in value
            if name in value:
                return value[name]
        raise _UNSURE

    return run


def _member(variable: str, name: str) -> Fast:
    """``variable.name`` (:func:`_select` over :func:`_ident`, in one step)."""

    def run(scope: Scope) -> Any:
        value = scope.get(variable)
        if type(value) is dict and name in value:
            return value[name]
        raise _UNSURE

    return run


def _ident(name: str) -> Fast:
    def run(scope: Scope) -> Any:
        if name in scope:
            return scope[name]
        raise _UNSURE

    return run


def _constant(value: Any) -> Fast:
    def run(_scope: Scope) -> Any:
        return value

    run.constant = value  # type: ignore[attr-defined]  # read by _compare
    return run


def _ranged(iter_range: Fast, scope: Scope) -> list[Any]:
    """The list a macro ranges over, its items counted against :data:`_FAST_ITERATIONS`."""
    items = iter_range(scope)
    if type(items) is not list:
        raise _UNSURE
    spent = scope[_SPENT]
    spent[0] += len(items)
    if spent[0] > _FAST_ITERATIONS:
        raise _UNSURE
    return items


def _all(node: Node) -> Fast | None:
    """``range.all(var, predicate)`` as one loop (None: ``node`` is another comprehension)."""
    _, init, condition, step, result = node.loop
    accu = node.accu
    if not (
        init.value is True
        and condition.kind == "call"
        and condition.name == "@not_strictly_false"
        and [c.kind + c.name for c in condition.children] == ["ident" + accu]
        and step.kind == "call"
        and step.name == "_&&_"
        and len(step.children) == 2
        and step.children[0].kind + step.children[0].name == "ident" + accu
        and result.kind + result.name == "ident" + accu
    ):
        return None
    iter_range, predicate = fast_program(node.loop[0]), fast_program(step.children[1])
    if iter_range is None or predicate is None:
        return None
    var = node.name

    def run(scope: Scope) -> Any:
        items = _ranged(iter_range, scope)
        inner = dict(scope)
        for item in items:
            inner[var] = item
            value = predicate(inner)
            if value is not True:
                if value is False:
                    return False
                raise _UNSURE
        return True

    return run


def _comprehension(node: Node, parts: list[Fast]) -> Fast:
    iter_range, accu_init, condition, step, result = parts
    var, accu = node.name, node.accu

    def run(scope: Scope) -> Any:
        items = _ranged(iter_range, scope)
        inner = dict(scope)
        inner[accu] = accu_init(scope)
        for item in items:
            going = condition(inner)
            if going is False:
                break
            if going is not True:
                raise _UNSURE
            inner[var] = item
            inner[accu] = step(inner)
        return result(inner)

    return run


def fast_program(node: Node) -> Fast | None:
    """``node`` as closures over a scope of Python values (see above), or None when it uses
    an operation the fast path does not cover."""
    if node.kind == "const":
        return None if node.value is _NO_VALUE or node.value is None else _constant(node.value)
    if node.kind == "ident":
        return _ident(node.name)
    if node.kind == "select" and not node.test_only and node.children[0].kind == "ident":
        return _member(node.children[0].name, node.name)
    if node.kind == "select":
        operand = fast_program(node.children[0]) if len(node.children) == 1 else None
        return None if operand is None else _select(operand, node.name, node.test_only)
    if node.kind == "call":
        build = _CALLS.get((node.name, len(node.children)))
        args = [fast_program(child) for child in node.children]
        if build is None or any(a is None for a in args):
            return None
        return build(*args)
    if node.kind == "comprehension" and node.accu:
        every = _all(node)
        if every is not None:
            return every
        parts = [fast_program(part) for part in node.loop]
        if any(p is None for p in parts):
            return None
        return _comprehension(node, parts)  # type: ignore[arg-type]
    return None


def _holdable(value: Any) -> bool:
    """Whether CEL holds ``value`` as the fast path reads it (an integer within int64)."""
    kind = type(value)
    if kind is int:
        return bool(_INT64[0] <= value <= _INT64[1])
    if kind is dict:
        return all(type(k) is str and _holdable(v) for k, v in value.items())
    if kind is list:
        return all(_holdable(v) for v in value)
    return kind in (str, float, bool) or value is None


def holdable_checker(tree: Tree | None) -> Callable[[Any], bool]:
    """:func:`_holdable` of what ``tree`` reads (None: all of it), as closures built once:
    the runtime converts every member it is given, read or not, and refuses an integer
    past 64 bits anywhere in them."""
    if tree is None:
        return _holdable
    if SIZE_KEY in tree:  # as pruner(): a map kept whole, a list's items cut by "*"
        below = tree.get("*", {})
        item = _holdable if below == WHOLE else holdable_checker(below)

        def sized(value: Any) -> bool:
            if type(value) is not list:
                return _holdable(value)
            return all(item(one) for one in value)

        return sized
    members = [
        (name, _holdable if below == WHOLE else holdable_checker(below))
        for name, below in tree.items()
        if name != "*"
    ]
    every = tree.get("*")
    each = None if every is None else (_holdable if every == WHOLE else holdable_checker(every))

    def check(value: Any) -> bool:
        kind = type(value)
        if kind is dict:
            low, high = _INT64
            for name, inner in members:
                if name in value:
                    member = value[name]
                    kind = type(member)
                    if kind is int:
                        if not low <= member <= high:
                            return False
                    elif kind is not str and kind is not float and not inner(member):
                        return False
            return True
        if kind is list:
            return _holdable(value) if each is None else all(each(v) for v in value)
        return _holdable(value)

    return check


def rejected_rule(verdict: Any) -> str | None:
    """The rule a rejected verdict's diagnostics name (None: not a rule's rejection)."""
    diagnostics = verdict.diagnostics
    if diagnostics is None or diagnostics.keyword != RULE_KEYWORD or not diagnostics.schema_path:
        return None
    return str(diagnostics.schema_path)


def request_variable(request: Any) -> dict[str, Any]:
    """``request`` as the rules read it."""
    return {
        "bind": request.bind,
        # RFC 3339 text: the runtime takes a timestamp as a variable, not inside a map
        # (rules read timestamp(request.issued_at)).
        "issued_at": _rfc3339(request.issued_at),
        "expires_at": _rfc3339(request.expires_at),
        "attempt": request.attempt,
        "tool": request.tool,
    }


def result_variables(data: Any, request: Any, adapter_version: str | None, now: datetime) -> dict[str, Any]:
    """Every variable of a result's rules (the reference path; the gate uses :class:`RuleSet`)."""
    return {
        "data": data if isinstance(data, dict) else {},
        "request": request_variable(request),
        "adapter_version": adapter_version or "",
        "now": now,
    }


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
