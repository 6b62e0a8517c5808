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
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
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
RULE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")

REQUEST_FIELDS: Final = frozenset({"bind", "issued_at", "expires_at", "attempt", "tool"})
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
        node.loop = [_node(loop[n][0]) if n in loop else Node(0, "const") for n in (2, 4, 5, 6, 7)]
    elif 3 in parts:
        constant = _message(parts[3][0])
        if 6 in constant:
            node.string = constant[6][0].decode()
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
    """One compiled rule: its name, source and program."""

    __slots__ = ("description", "expr", "name", "program")

    def __init__(self, name: str, expr: str, description: str, program: Any) -> None:
        self.name = name
        self.expr = expr
        self.description = description
        self.program = program


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
    return CelRule(name, expr, description, program)


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
        activation = _env(kind).Activation(dict(variables))
    except Exception:  # a value CEL cannot hold (an integer over 64 bits, ...)
        raise _reject(rules[0].name, f"rule {rules[0].name!r} could not read its input") from None
    for rule in rules:
        try:
            value = rule.program.eval(activation)
        except Exception as exc:  # the runtime raising is an error like any other
            detail = f"rule {rule.name!r} could not be evaluated: {error_class(str(exc))}"
            raise _reject(rule.name, detail) from None
        if value.type() == cel.Type.BOOL:
            if value.value() is True:
                continue
            raise _reject(rule.name, f"rule {rule.name!r} is false")
        raise _reject(
            rule.name, f"rule {rule.name!r} could not be evaluated: {error_class(str(value.value()))}"
        )


def rejected_rule(verdict: Any) -> str | None:
    """The rule a rejected verdict's diagnostics name (None: not a rule's rejection)."""
    diagnostics = verdict.diagnostics
    if diagnostics is None or diagnostics.keyword != RULE_KEYWORD or not diagnostics.schema_path:
        return None
    return str(diagnostics.schema_path)


def result_variables(data: Any, request: Any, adapter_version: str | None, now: datetime) -> dict[str, Any]:
    """The activation of a result's rules: converted once per decision."""
    return {
        "data": data if isinstance(data, dict) else {},
        "request": {
            "bind": request.bind,
            # RFC 3339 text: the runtime takes a timestamp as a variable, not inside a map
            # (rules read timestamp(request.issued_at)).
            "issued_at": _rfc3339(request.issued_at),
            "expires_at": _rfc3339(request.expires_at),
            "attempt": request.attempt,
            "tool": request.tool,
        },
        "adapter_version": adapter_version or "",
        "now": now,
    }


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
