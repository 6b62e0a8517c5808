"""``toolgate contracts review``: each draft's review on one screen, decided item by item.

A version imported from an MCP server is a draft until a person has read what the host's model
will read and settled what the agent will get. :func:`screen` lists, for one version, every item
of that review with the decision it asks for:

* ``text``: each text the host's model reads (the pinned title, description and annotations
  title in ``contract.yaml``; every string of the input schema the proxy serves,
  :func:`~toolgate.authoring._texts.input_texts`): accept, rewrite or cut (names and values that
  are the schema's shape can only be accepted);
* ``data``: each projected pointer whose string is left free (lint's ``free-text-in-data``),
  with its bound and sample values: accept with a reason (written under ``free_text``) or cut
  (taken out of the projection); and, beside that, each projected string or array of an
  imported closure takes its own bound (written in ``schema.json``: the closure derived again
  with the bound under ``x-toolgate-bounds``' ``at``, as ``contracts rebound`` writes it; at
  most what ``limits.max_bytes`` holds);
* ``bound``: how much of the upstream's own text passes (``$.mcp.text_max_length``): accept
  or set a bound;
* ``finding``: any other lint finding, which the review cannot settle: it holds activation.

Texts the proxy does not serve (``x-`` keywords) are shown too, with nothing to decide. A
screen is shown whole or not at all: past :data:`MAX_ITEMS` items or :data:`MAX_CHARACTERS`
characters the version is refused, nothing of it shown and nothing decided.

Decisions come from flags (:func:`parse_decisions`: ``--accept-text POINTER=REASON``,
``--rewrite POINTER=TEXT``, ``--cut POINTER``, ``--bound POINTER=N``; a pointer names an item
or a place holding several) or from a terminal (:func:`ask_decisions`). :func:`apply` writes
them as a careful hand edit would: lines of ``contract.yaml`` changed in place (status,
``free_text`` entries, projection lines, the definition's texts, bounds), the input schema
rewritten as import writes it, a field's bound written in the closure; every edit is checked
by loading the result, and activation by linting it. It never marks reviewed a text it did
not show: a refused screen is never activated, and an item left undecided holds activation.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from toolgate._errors import ConfigError, ContractError
from toolgate._files import read_bounded
from toolgate.gate._contracts import (
    EVERY_ITEM,
    Contract,
    ContractSpec,
    FreeText,
    load_contract,
    parse_pointer,
)

__all__ = [
    "MAX_CHARACTERS",
    "MAX_ITEMS",
    "Decision",
    "Item",
    "Screen",
    "apply",
    "ask_decisions",
    "decide",
    "parse_decisions",
    "read_samples",
    "render",
    "screen",
]

MAX_ITEMS: Final = 2000  # items on one screen; beyond, the version is refused whole
MAX_CHARACTERS: Final = 400_000  # characters of text on one screen, likewise
MIN_REASON: Final = 10  # as contract.yaml's free_text asks
MAX_REWRITE: Final = 4096
SAMPLES_PER_POINTER: Final = 3
SAMPLE_SHOWN: Final = 80
MAX_SAMPLES_FILE: Final = 8 * 1024 * 1024
MAX_SAMPLE_LINES: Final = 1000
PROSE: Final = frozenset({"title", "description", "$comment"})  # rewritten or cut
CUTTABLE: Final = PROSE | {"default", "examples"}  # cut only
SETTLED_HERE: Final = frozenset({"unreviewed-text", "free-text-in-data", "draft-version"})
INPUT: Final = "input.schema.json"
DEFINITION_TEXTS: Final = (
    ("$.mcp.definition.title", "title"),
    ("$.mcp.definition.description", "description"),
    ("$.mcp.definition.annotations.title", "annotations.title"),
)

Kind = Literal["text", "data", "bound", "finding", "unserved"]
Action = Literal["accept", "rewrite", "cut", "bound"]


@dataclass(frozen=True)
class Item:
    """One thing the review shows, and what it asks.

    Attributes:
        kind: ``text``, ``data``, ``bound``, ``finding`` or ``unserved`` (shown only).
        pointer: Where: a ``$.``-path of ``contract.yaml``, a JSON Pointer of the input schema
            (``file`` is ``input.schema.json``) or a projected pointer (``/data/...``).
        text: What is shown (a text, a bound, a finding's message).
        actions: The decisions it takes; empty: it is shown and asks nothing here.
        file: The file it is in, relative to the version folder.
        note: What else is shown beside it (bounds, samples, why only accept).
        asks: Whether activation waits for its decision (a constrained projected field
            may be cut, and need not be).
    """

    kind: Kind
    pointer: str
    text: str
    actions: tuple[Action, ...]
    file: str = "contract.yaml"
    note: str = ""
    asks: bool = True  # a decision is needed before activation (else only offered)


@dataclass
class Screen:
    """One version's review: its items, or why it cannot be shown whole."""

    contract: Contract
    items: list[Item]
    refused: str = ""

    @property
    def decidable(self) -> list[Item]:
        """The items that take a decision."""
        return [item for item in self.items if item.actions]

    @property
    def asking(self) -> list[Item]:
        """The items activation waits for."""
        return [item for item in self.items if item.actions and item.asks]


@dataclass(frozen=True)
class Decision:
    """A decision on the items at or under ``pointer``."""

    action: Action
    pointer: str
    value: str = ""  # the reason, the new text, the bound
    flag: str = ""  # how it was given, for errors

    def covers(self, pointer: str) -> bool:
        """Whether this decision's pointer is ``pointer`` or a place holding it."""
        if pointer == self.pointer:
            return True
        joint = "." if self.pointer.startswith("$") else "/"
        return pointer.startswith(self.pointer.rstrip(joint) + joint)


@dataclass
class Outcome:
    """What :func:`apply` did to one version."""

    decided: list[tuple[Item, Decision]] = field(default_factory=list)
    undecided: list[Item] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)  # findings left, or why not activated
    written: list[Path] = field(default_factory=list)
    activated: bool = False


def read_samples(path: Path, tools: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Results of the tools, for sample values: a JSON Lines file of ``CallToolResult`` objects
    (each a sample of every tool reviewed) or of ``{"tool": NAME, "result": {...}}``.

    Raises:
        ConfigError: a file that cannot be read, is over 8 MiB or 1000 lines, or a line that is
            not such an object, naming the file and the line.
    """
    out: dict[str, list[dict[str, Any]]] = {tool: [] for tool in tools}
    data = read_bounded(path, MAX_SAMPLES_FILE, f"--samples {path}")
    lines = [line for line in data.splitlines() if line.strip()]
    if len(lines) > MAX_SAMPLE_LINES:
        raise ConfigError(f"--samples {path}: over {MAX_SAMPLE_LINES} results")
    for number, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"--samples {path}:{number}: not JSON: {exc}") from exc
        if (
            isinstance(value, dict)
            and isinstance(value.get("tool"), str)
            and isinstance(value.get("result"), dict)
        ):
            if value["tool"] in out:
                out[value["tool"]].append(value["result"])
        elif isinstance(value, dict):
            for results in out.values():
                results.append(value)
        else:
            raise ConfigError(
                f"--samples {path}:{number}: a CallToolResult object or {{tool, result}} per line"
            )
    return out


# --- the screen -------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    """A text as one line a terminal cannot disguise: JSON with every non-ASCII character,
    control, bidi or zero-width one escaped."""
    return json.dumps(value, ensure_ascii=True)


def screen(
    contract: Contract, findings: Iterable[Any], samples: list[dict[str, Any]] | None = None
) -> Screen:
    """The review of ``contract``: every item, or a refusal when it cannot be shown whole.

    Args:
        contract: The version.
        findings: Lint's findings for it (:func:`~toolgate.authoring._lint.lint_contracts`).
        samples: ``CallToolResult`` objects of the tool, for sample values of projected fields.
    """
    from toolgate.authoring._texts import input_texts

    items: list[Item] = []
    findings = list(findings)
    mcp = contract.spec.mcp
    definition = mcp.definition if mcp is not None else None
    if definition is not None:
        values = {
            "title": definition.title,
            "description": definition.description,
            "annotations.title": definition.annotations.title if definition.annotations else None,
        }
        for pointer, key in DEFINITION_TEXTS:
            if values[key]:
                items.append(Item("text", pointer, _shown(values[key]), ("accept", "rewrite", "cut")))
    schema = contract.input_schema
    if definition is not None and schema is not None:
        served = input_texts(schema)
        for pointer, text in served:
            actions = _text_actions(pointer)
            note = (
                "" if len(actions) > 1 else "a name or value of the schema's shape: accept, or import again"
            )
            items.append(Item("text", pointer, _shown(text), actions, INPUT, note))
        known = {pointer for pointer, _ in served}
        for pointer, text in input_texts(schema, unknown=True):
            if pointer not in known:
                items.append(
                    Item("unserved", pointer, _shown(text), (), INPUT, "not served: the proxy drops it")
                )
    free = {f.pointer for f in findings if f.rule == "free-text-in-data"}
    for i, pointer in enumerate(contract.spec.projection):
        seen = _sample_values(samples or [], pointer)
        shown = f"samples {', '.join(seen)}" if seen else ""
        note = "; ".join(part for part in (_field_bound(contract, pointer), shown) if part)
        settable: tuple[Action, ...] = ("bound",) if _bound_keywords(contract, pointer) else ()
        if f"$.projection[{i}]" in free:
            items.append(
                Item(
                    "data",
                    pointer,
                    "a string the outputSchema leaves free",
                    ("accept", "cut", *settable),
                    note=note,
                )
            )
        else:
            items.append(
                Item(
                    "data",
                    pointer,
                    "constrained (pattern, enum, const or format)",
                    ("cut", *settable),
                    note=note,
                    asks=False,
                )
            )
    if mcp is not None and definition is not None:
        passed = mcp.text_max_length
        said = (
            f"{passed} characters of the upstream's text pass to the user"
            if passed
            else "no upstream text passes"
        )
        items.append(Item("bound", "$.mcp.text_max_length", f"{passed}: {said}", ("accept", "bound")))
    for finding in findings:
        if finding.rule not in SETTLED_HERE:
            where = Path(finding.file).name
            items.append(
                Item("finding", finding.pointer or "/", f"{finding.rule}: {finding.message}", (), where)
            )
    characters = sum(len(item.text) + len(item.note) for item in items)
    if len(items) > MAX_ITEMS or characters > MAX_CHARACTERS:
        refused = (
            f"{len(items)} items, {characters} characters of text: more than a review shows whole "
            f"({MAX_ITEMS} items, {MAX_CHARACTERS} characters); nothing of it is shown or decided and it "
            "stays a draft: cut its texts down by hand (or import the tool from a smaller definition)"
        )
        return Screen(contract, [], refused)
    return Screen(contract, items)


def _text_actions(pointer: str) -> tuple[Action, ...]:
    last = parse_pointer(pointer)[-1] if pointer else ""
    if last in PROSE and _is_keyword_place(pointer):
        return ("accept", "rewrite", "cut")
    if last in CUTTABLE and _is_keyword_place(pointer):
        return ("accept", "cut")
    return ("accept",)


def _is_keyword_place(pointer: str) -> bool:
    """Whether the pointer's last token is a keyword of a schema (not a member named so):
    the token before it is not ``properties`` or another map of names."""
    tokens = parse_pointer(pointer)
    if len(tokens) < 2:
        return True
    return tokens[-2] not in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _field_bound(contract: Contract, pointer: str) -> str:
    """The bound the agent envelope holds the projected field at ``pointer`` to: the
    schema's own ``maxLength``/``maxItems`` there (else the envelope's default)."""
    tokens = dict(contract.data_projection).get(pointer)
    leaf = contract.leaf_bounds.get(tokens) if tokens is not None else None
    if leaf is None:
        return ""
    strings, items, each = leaf.from_schema
    parts = []
    if strings is not None:
        parts.append(f"a string at most {strings} characters")
    if items is not None:
        tail = f", each at most {each} characters" if each is not None else ""
        parts.append(f"an array at most {items} items{tail}")
    return "bound: " + (" or ".join(parts) if parts else "the envelope's default (the schema sets none)")


def _closure_parts(contract: Contract) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The (upstream, closure) of an imported contract's data schema, or None."""
    from toolgate.authoring._close import split
    from toolgate.authoring._rebound import DATA_DEF

    defs = contract.schema.get("$defs")
    return split(defs.get(DATA_DEF)) if isinstance(defs, dict) else None


def _closure_place(pointer: str) -> tuple[tuple[str, ...], str]:
    """A projected pointer's member path (``*`` every item) and the instance path the closure
    names its position by (an array's every item is index ``0``)."""
    tokens = tuple(parse_pointer(pointer)[1:])
    where = "".join(
        "/0" if t == EVERY_ITEM else "/" + t.replace("~", "~0").replace("/", "~1") for t in tokens
    )
    return tokens, where


def _bound_keywords(contract: Contract, pointer: str) -> tuple[str, ...]:
    """The keywords a bound set at the projected ``pointer`` writes (``maxLength`` for a
    string, ``maxItems`` for an array) in an imported closure; empty: none can be set here."""
    from toolgate.authoring._close import at_path

    parts = _closure_parts(contract)
    if parts is None:
        return ()
    position = at_path(parts[1], _closure_place(pointer)[0])
    kinds = position.get("type", ()) if isinstance(position, dict) else ()
    return tuple(k for kind, k in (("string", "maxLength"), ("array", "maxItems")) if kind in kinds)


def _bound_ceiling(contract: Contract, pointer: str, value: int) -> str:
    """Why ``value`` cannot bound the field at ``pointer`` (past what ``limits.max_bytes``
    holds), or ``""``."""
    from toolgate.gate._contracts import bound_ceilings

    strings, items = bound_ceilings(contract.spec.limits.max_bytes)
    for keyword in _bound_keywords(contract, pointer):
        ceiling, unit = (strings, "characters") if keyword == "maxLength" else (items, "items")
        if value > ceiling:
            return (
                f"{pointer}: a bound of {value} is above the {ceiling} {unit} limits.max_bytes "
                f"{contract.spec.limits.max_bytes} of {contract.path} holds"
            )
    return ""


def _sample_values(samples: list[dict[str, Any]], pointer: str) -> list[str]:
    """Up to :data:`SAMPLES_PER_POINTER` distinct values at ``pointer`` (``/data/...`` read in
    ``structuredContent``, ``*`` every item), each cut to :data:`SAMPLE_SHOWN` characters."""
    tokens = parse_pointer(pointer)[1:]
    found: list[str] = []
    for sample in samples:
        level = [sample.get("structuredContent")]
        for token in tokens:
            nxt: list[Any] = []
            for node in level:
                if token == EVERY_ITEM and isinstance(node, list):
                    nxt.extend(node)
                elif isinstance(node, dict) and token in node:
                    nxt.append(node[token])
            level = nxt
        for value in level:
            text = _shown(value)
            text = text if len(text) <= SAMPLE_SHOWN else f"{text[:SAMPLE_SHOWN]}... ({len(text)} characters)"
            if text not in found:
                found.append(text)
            if len(found) == SAMPLES_PER_POINTER:
                return found
    return found


def render(view: Screen) -> Iterator[str]:
    """The screen's lines, every item whole (or the one line of a refusal)."""
    contract = view.contract
    head = (
        f"== {contract.spec.tool} {contract.key.split('@')[-1]} ({contract.spec.status}): {contract.folder}"
    )
    yield head
    if view.refused:
        yield f"  refused: {view.refused}"
        return
    sections: tuple[tuple[Kind, str], ...] = (
        ("text", "texts the host's model reads (accept, rewrite or cut each):"),
        ("unserved", "texts in the files the proxy does not serve (shown; nothing to decide):"),
        (
            "data",
            "what the agent gets, the projection (a free string: accept with a reason, or cut; "
            "a string or array: set its bound):",
        ),
        ("bound", "the upstream's own text (accept, or set a bound):"),
        ("finding", "lint findings the review cannot settle (fix them by hand; activation waits):"),
    )
    for kind, title in sections:
        shown = [item for item in view.items if item.kind == kind]
        if not shown:
            continue
        yield title
        for item in shown:
            where = f"{item.file} {item.pointer}" if item.file == INPUT else item.pointer
            tail = f"  [{item.note}]" if item.note else ""
            asks = f"  ({'/'.join(item.actions)})" if item.actions else ""
            yield f"  {where}: {item.text}{asks}{tail}"


# --- decisions --------------------------------------------------------------------------------


def parse_decisions(
    accept: Iterable[str] = (),
    rewrite: Iterable[str] = (),
    cut: Iterable[str] = (),
    bound: Iterable[str] = (),
) -> list[Decision]:
    """The flags as decisions.

    Raises:
        ConfigError: a flag without ``=``, a reason shorter than 10 characters, an empty or
            over-long rewrite, a bound that is not a whole number, one pointer given twice.
    """
    out: list[Decision] = []
    for flag, action, values in (
        ("--accept-text", "accept", accept),
        ("--rewrite", "rewrite", rewrite),
        ("--bound", "bound", bound),
    ):
        for given in values:
            pointer, sep, value = given.partition("=")
            shown = f"{flag} {given[:120]!r}"
            if not sep or not pointer:
                raise ConfigError(f"{shown}: write POINTER=VALUE")
            if action == "accept" and len(value.strip()) < MIN_REASON:
                raise ConfigError(f"{shown}: give the reason, at least {MIN_REASON} characters")
            if action == "rewrite" and not (0 < len(value) <= MAX_REWRITE):
                raise ConfigError(f"{shown}: the new text is 1..{MAX_REWRITE} characters")
            if action == "bound" and not (value.strip().isdigit() and len(value.strip()) <= 9):
                raise ConfigError(f"{shown}: the bound is a whole number of characters (or bytes, levels)")
            out.append(Decision(action, pointer, value.strip() if action != "rewrite" else value, flag))  # type: ignore[arg-type]
    out.extend(Decision("cut", pointer, "", "--cut") for pointer in cut)
    seen: dict[str, str] = {}
    for decision in out:
        if decision.pointer in seen:
            raise ConfigError(
                f"{decision.flag} {decision.pointer}: {seen[decision.pointer]} decides it already: "
                "one decision each"
            )
        seen[decision.pointer] = decision.flag
    return out


def decide(view: Screen, decisions: list[Decision]) -> tuple[list[tuple[Item, Decision]], list[Decision]]:
    """Each item's decision, and the decisions that fit no item of this screen. The most
    specific pointer covering an item decides it: an accept or a cut of a place decides every
    item under it (a cut takes the place out whole); a rewrite or a bound names its item.

    Raises:
        ConfigError: a decision naming an item that cannot take it (a rewrite of a name, a cut
            of what cannot be cut, a bound of what is not a bound), said with what it takes.
    """
    tool = view.contract.spec.tool
    by_pointer = {item.pointer: item for item in view.decidable}
    for d in decisions:
        item = by_pointer.get(d.pointer)
        exact = d.action in ("rewrite", "bound") or (d.action == "cut" and item is not None)
        if item is not None and exact and d.action not in item.actions:
            note = f"; {item.note}" if item.note else ""
            raise ConfigError(
                f"{d.flag} {d.pointer}: {tool}: it takes {' or '.join(item.actions)}, not {d.action}{note}"
            )
        if item is not None and item.kind == "data" and d.action == "bound":
            over = _bound_ceiling(view.contract, d.pointer, int(d.value))
            if over or int(d.value) < 1:
                raise ConfigError(f"{d.flag} {over or d.pointer + ': a bound is at least 1'}")
    chosen: list[tuple[Item, Decision]] = []
    used: set[int] = set()
    for item in view.decidable:
        if item.kind == "data":  # a field's bound goes beside its accept or cut
            for i, d in enumerate(decisions):
                if d.action == "bound" and d.pointer == item.pointer:
                    chosen.append((item, d))
                    used.add(i)
        covering = [
            (i, d)
            for i, d in enumerate(decisions)
            if not (d.action == "bound" and item.kind == "data")
            and d.covers(item.pointer)
            and (
                d.pointer == item.pointer
                or d.action == "accept"
                or (
                    d.action == "cut"
                    and (d.pointer in by_pointer or item.kind == "data" or _cuttable(d, item))
                )
            )
            and (d.action in item.actions or (d.action == "cut" and d.pointer != item.pointer))
        ]
        if not covering:
            continue
        i, best = max(covering, key=lambda pair: len(pair[1].pointer))
        chosen.append((item, best))
        used.add(i)
    return chosen, [d for i, d in enumerate(decisions) if i not in used]


def _cuttable(decision: Decision, item: Item) -> bool:
    """A cut of a place in the input schema that may be cut (a ``default`` or ``examples`` holding
    an object or array): it takes every text under it."""
    return (
        item.file == INPUT and decision.pointer.startswith("/") and "cut" in _text_actions(decision.pointer)
    )


def ask_decisions(view: Screen, ask: Callable[[str], str], say: Callable[[str], None]) -> list[Decision]:
    """Each item that takes a decision, asked on a terminal: ``a``ccept (with a reason),
    ``r``ewrite, ``c``ut, ``b``ound, or ``s``kip (left undecided). A projected field's bound is
    asked beside its accept or cut: after it, the field is asked again without it."""
    keys: dict[str, Action] = {"a": "accept", "r": "rewrite", "c": "cut", "b": "bound"}
    prompts = {"accept": "reason (at least 10 characters)", "rewrite": "new text", "bound": "bound"}
    out: list[Decision] = []
    for item in view.decidable:
        where = f"{item.file} {item.pointer}" if item.file == INPUT else item.pointer
        actions = item.actions
        while True:
            offered = "  ".join(f"[{a[0]}]{a[1:]}" for a in actions) + "  [s]kip"
            answer = ask(f"{where}: {item.text}\n  {offered} > ").strip().lower()[:1]
            action = keys.get(answer)
            if answer in ("s", ""):
                break
            if action is None or action not in actions:
                say(f"  one of: {offered}")
                continue
            if action == "cut":
                out.append(Decision("cut", item.pointer, "", "cut"))
                break
            value = ask(f"  {prompts[action]} > ")
            flag = {"accept": "accept", "rewrite": "rewrite", "bound": "bound"}[action]
            try:
                out.extend(parse_decisions(**{flag: [f"{item.pointer}={value}"]}))
            except ConfigError as exc:
                say("  " + str(exc).rsplit(": ", 1)[-1])
                continue
            if item.kind == "data" and action == "bound":
                over = _bound_ceiling(view.contract, item.pointer, int(out[-1].value))
                if over or int(out[-1].value) < 1:
                    out.pop()
                    say("  " + (over or "a bound is at least 1"))
                    continue
                actions = tuple(a for a in actions if a != "bound")
                if actions:
                    continue
            break
    return out


# --- writing ----------------------------------------------------------------------------------


def apply(
    view: Screen,
    chosen: list[tuple[Item, Decision]],
    *,
    activate: bool,
    lint: Callable[[Contract], list[Any]],
) -> Outcome:
    """Write the decisions into the version's files, and ``status: active`` when ``activate``
    and the review is whole: every item shown and decided, and the edited version lints clean.

    Raises:
        ConfigError: a file changed since it was shown, or one not in the shape this edit
            understands (then the edit is said, for a hand edit).
    """
    outcome = Outcome(decided=list(chosen))
    decided = {id(item) for item, d in chosen if not (item.kind == "data" and d.action == "bound")}
    outcome.undecided = [item for item in view.asking if id(item) not in decided]
    if view.refused:
        outcome.blocking.append("not shown whole: " + view.refused)
        return outcome
    contract = view.contract
    folder = contract.folder
    names = ("contract.yaml", _input_name(contract), contract.spec.schema)
    originals = {name: (folder / name).read_bytes() for name in names if name}
    want_active = activate and not outcome.undecided
    if activate and outcome.undecided:
        outcome.blocking.append(f"{len(outcome.undecided)} items shown and not decided")
    files = _edited(contract, chosen, originals, active=want_active)
    with tempfile.TemporaryDirectory(prefix="toolgate-review-") as scratch:
        trial = Path(scratch) / folder.parent.name / folder.name  # as the loader reads a version
        shutil.copytree(folder, trial)
        for name, data in files.items():
            (trial / name).write_bytes(data)
        try:
            edited = load_contract(trial)
        except ContractError as exc:
            raise ConfigError(f"{folder}: the review's edit does not load ({exc}): edit it by hand") from exc
        _check_spec_edit(contract, edited.spec, chosen, active=want_active)
        _check_bounds(edited, chosen)
        left = [f for f in lint(edited) if want_active or f.rule not in SETTLED_HERE]
    if want_active and left:
        outcome.blocking.extend(f"{Path(f.file).name} {f.pointer or '/'}: {f.rule}" for f in left)
        files = _edited(contract, chosen, originals, active=False)
    for name, data in files.items():
        if data == originals[name]:
            continue
        path = folder / name
        if path.read_bytes() != originals[name]:
            raise ConfigError(f"{path}: changed while it was reviewed: run the review again")
        temporary = path.with_name(f".{path.name}.review")
        temporary.write_bytes(data)
        os.replace(temporary, path)
        outcome.written.append(path)
    outcome.activated = want_active and not left
    return outcome


def _input_name(contract: Contract) -> str:
    mcp = contract.spec.mcp
    return mcp.definition.input_schema if mcp is not None and mcp.definition is not None else ""


def _edited(
    contract: Contract, chosen: list[tuple[Item, Decision]], originals: dict[str, bytes], *, active: bool
) -> dict[str, bytes]:
    """The version's files with the decisions written in."""
    out = dict(originals)
    lines = originals["contract.yaml"].decode("utf-8").split("\n")
    if active:
        lines = _replace_line(lines, "", "status", "active")
    free = [(item.pointer, d.value) for item, d in chosen if item.kind == "data" and d.action == "accept"]
    cuts = {item.pointer for item, d in chosen if item.kind == "data" and d.action == "cut"}
    lines = _cut_projection(lines, cuts)
    if free:
        lines = _add_free_text(lines, free)
    for item, d in chosen:
        if item.kind == "text" and item.file == "contract.yaml" and d.action in ("rewrite", "cut"):
            lines = _definition_text(lines, item.pointer, d.value if d.action == "rewrite" else None)
        elif item.kind == "bound" and d.action == "bound":
            section, key = item.pointer[2:].rsplit(".", 1)
            lines = _replace_line(lines, section, key, str(int(d.value)))
    out["contract.yaml"] = "\n".join(lines).encode("utf-8")
    bounds = {item.pointer: int(d.value) for item, d in chosen if item.kind == "data" and d.action == "bound"}
    if bounds:
        name = contract.spec.schema
        out[name] = _bounded_schema(contract, originals[name], bounds)
    edits = {d.pointer: d for item, d in chosen if item.file == INPUT and d.action in ("rewrite", "cut")}
    if edits:
        name = _input_name(contract)
        schema = json.loads(originals[name])
        places = [p for p in edits if not any(o != p and Decision("cut", o).covers(p) for o in edits)]
        for pointer in sorted(places, key=_pointer_order, reverse=True):  # later list items first
            _edit_schema(schema, pointer, edits[pointer])
        out[name] = (json.dumps(schema, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    return out


def _bounded_schema(contract: Contract, original: bytes, bounds: dict[str, int]) -> bytes:
    """``schema.json`` with each projected field's own bound written where import keeps the
    closure's bounds (``at`` of ``x-toolgate-bounds``) and the closure derived again with them,
    as ``contracts rebound`` writes it."""
    from toolgate.authoring._close import BOUNDS_KEY, CLOSURE_ID, Unclosable, closure, own_bounds, split
    from toolgate.authoring._rebound import DATA_DEF

    schema = json.loads(original)
    defs = schema.get("$defs") if isinstance(schema, dict) else None
    parts = split(defs.get(DATA_DEF)) if isinstance(defs, dict) else None
    held = parts[1].get(BOUNDS_KEY) if parts is not None else None
    at = own_bounds(held) if isinstance(held, dict) else None
    if parts is None or not isinstance(held, dict) or at is None or not isinstance(defs, dict):
        raise ConfigError(f"{contract.schema_path}: not the closure import writes: set the bound by hand")
    upstream, skeleton = parts
    at = {where: dict(own) for where, own in at.items()}
    for pointer, value in bounds.items():
        where = _closure_place(pointer)[1]
        at[where] = {**at.get(where, {}), **dict.fromkeys(_bound_keywords(contract, pointer), value)}
    tool = str(skeleton["$id"])[len(CLOSURE_ID) :]
    embedded = {k: v for k, v in upstream.items() if k != "$id"}
    try:
        derived = closure(embedded, tool, max_string=held["max_string"], max_items=held["max_items"], at=at)
    except Unclosable as exc:
        raise ConfigError(f"{contract.schema_path}: cannot be bounded so at {exc}") from None
    defs[DATA_DEF] = {"allOf": [upstream, derived]}
    return (json.dumps(schema, indent=2) + "\n").encode("utf-8")


def _pointer_order(pointer: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in parse_pointer(pointer))


def _block(lines: list[str], section: str) -> tuple[int, int, int]:
    """(first line, end, indent) of the mapping at dotted ``section`` ('' the document)."""
    start, end, indent = 0, len(lines), 0
    for key in section.split(".") if section else []:
        prefix = " " * indent + key + ":"
        found = next(
            (i for i in range(start, end) if lines[i] == prefix or lines[i].startswith(prefix + " ")), None
        )
        if found is None:
            raise ConfigError(f"no {section} mapping where import writes it: edit it by hand")
        start, indent = found + 1, indent + 2
        end = next(
            (
                i
                for i in range(start, end)
                if lines[i].strip() and not lines[i].startswith(" " * indent) and not lines[i].startswith("#")
            ),
            end,
        )
    return start, end, indent


def _replace_line(lines: list[str], section: str, key: str, value: str | None) -> list[str]:
    """``key: value`` in ``section`` replaced (``None``: the line taken out)."""
    start, end, indent = _block(lines, section)
    prefix = " " * indent + key + ":"
    for i in range(start, end):
        if lines[i].startswith(prefix + " ") or lines[i] == prefix:
            if value is None:
                return [*lines[:i], *lines[i + 1 :]]
            return [*lines[:i], f"{prefix} {value}", *lines[i + 1 :]]
    raise ConfigError(
        f"no {section + '.' if section else ''}{key} line where import writes it: edit it by hand"
    )


def _definition_text(lines: list[str], pointer: str, text: str | None) -> list[str]:
    section, key = pointer[2:].rsplit(".", 1)
    return _replace_line(lines, section, key, None if text is None else json.dumps(text, ensure_ascii=False))


def _top_level_end(lines: list[str], key: str) -> tuple[int, int] | None:
    """(the ``key:`` line, the end of its block) at the top level, or None."""
    head = next((i for i, line in enumerate(lines) if line == f"{key}:" or line.startswith(f"{key}: ")), None)
    if head is None:
        return None
    end = head + 1
    while end < len(lines) and (lines[end].startswith(("- ", "  ")) or lines[end] == "-"):
        end += 1
    return head, end


def _cut_projection(lines: list[str], cuts: set[str]) -> list[str]:
    if not cuts:
        return lines
    found = _top_level_end(lines, "projection")
    if found is None:
        raise ConfigError("no projection list where import writes it: edit it by hand")
    head, end = found
    kept = [line for line in lines[head + 1 : end] if _list_value(line) not in cuts]
    block = [*lines[: head + 1], *kept, *lines[end:]]
    if not kept:
        block[head] = "projection: []"
    return block


def _list_value(line: str) -> str | None:
    if not line.startswith("- "):
        return None
    value = line[2:].strip()
    try:
        loaded = msgspec.yaml.decode(value.encode("utf-8"))
    except msgspec.DecodeError:
        return value
    return loaded if isinstance(loaded, str) else value


def _scalar(text: str) -> str:
    """A string as a hand writes it in YAML: plain when it reads back the same, else quoted."""
    plain = text.isprintable() and text == text.strip() and ": " not in text and " #" not in text
    if plain and text and text[0] not in "-?:,[]{}#&*!|>'\"%@`" and not text.endswith(":"):
        try:
            if msgspec.yaml.decode(text.encode("utf-8")) == text:
                return text
        except msgspec.DecodeError:
            pass
    return json.dumps(text, ensure_ascii=False)


def _add_free_text(lines: list[str], entries: list[tuple[str, str]]) -> list[str]:
    written = [
        part
        for pointer, reason in entries
        for part in (
            f"- pointer: {_scalar(pointer)}",
            f"  reason: {_scalar(reason)}",
        )
    ]
    found = _top_level_end(lines, "free_text")
    if found is not None:
        head, end = found
        if lines[head].strip() == "free_text: []":
            lines = [*lines[:head], "free_text:", *lines[head + 1 :]]
        return [*lines[:end], *written, *lines[end:]]
    after = _top_level_end(lines, "projection")
    at = after[1] if after is not None else len(lines)
    return [*lines[:at], "free_text:", *written, *lines[at:]]


def _edit_schema(schema: Any, pointer: str, decision: Decision) -> None:
    tokens = parse_pointer(pointer)
    parent: Any = schema
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    last = tokens[-1]
    if isinstance(parent, list):
        del parent[int(last)]
    elif decision.action == "cut":
        del parent[last]
    else:
        parent[last] = decision.value


def _check_bounds(edited: Contract, chosen: list[tuple[Item, Decision]]) -> None:
    """Each bound set on a projected field is the bound the edited version holds it to."""
    from toolgate.gate._contracts import schema_bound

    projection = dict(edited.data_projection)
    for item, d in chosen:
        if item.kind != "data" or d.action != "bound" or item.pointer not in projection:
            continue
        for keyword in _bound_keywords(edited, item.pointer):
            found = schema_bound(edited.schema, projection[item.pointer], keyword)
            if found != int(d.value):
                raise ConfigError(
                    f"{edited.schema_path}: {item.pointer} is held to {keyword} {found} after the edit, "
                    f"not {d.value}: set the bound by hand"
                )


def _check_spec_edit(
    contract: Contract, edited: ContractSpec, chosen: list[tuple[Item, Decision]], *, active: bool
) -> None:
    """The edited ``contract.yaml`` says what the decisions say and nothing else."""
    spec = contract.spec
    free = [
        FreeText(pointer=item.pointer, reason=d.value)
        for item, d in chosen
        if item.kind == "data" and d.action == "accept"
    ]
    cuts = {item.pointer for item, d in chosen if item.kind == "data" and d.action == "cut"}
    want = msgspec.structs.replace(
        spec,
        status="active" if active else spec.status,
        projection=tuple(p for p in spec.projection if p not in cuts),
        free_text=(*spec.free_text, *free),
    )
    mcp = spec.mcp
    if mcp is not None and mcp.definition is not None:
        definition = mcp.definition
        annotations = definition.annotations
        text_max_length = mcp.text_max_length
        for item, d in chosen:
            value = d.value if d.action == "rewrite" else None
            if item.pointer == "$.mcp.definition.title" and d.action != "accept":
                definition = msgspec.structs.replace(definition, title=value)
            elif item.pointer == "$.mcp.definition.description" and d.action != "accept":
                definition = msgspec.structs.replace(definition, description=value)
            elif (
                item.pointer == "$.mcp.definition.annotations.title" and d.action != "accept" and annotations
            ):
                annotations = msgspec.structs.replace(annotations, title=value)
            elif item.pointer == "$.mcp.text_max_length" and d.action == "bound":
                text_max_length = int(d.value)
        definition = msgspec.structs.replace(definition, annotations=annotations)
        want = msgspec.structs.replace(
            want, mcp=msgspec.structs.replace(mcp, definition=definition, text_max_length=text_max_length)
        )
    if edited != want:
        raise ConfigError(
            f"{contract.path}: not in the shape import writes, so the review cannot edit it in place: "
            "make the edit by hand"
        )
