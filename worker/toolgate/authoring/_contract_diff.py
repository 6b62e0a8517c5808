"""Contract diff: a contract version against another, and every version against its predecessor.

:func:`diff_contracts` is the schema diff (:mod:`toolgate.authoring._schema_diff`, where the
meaning of ``breaking`` and ``widens`` and the schema kinds are described) followed by the
changes of ``contract.yaml``; :func:`contract_history` runs it over each tool's versions.

Classification (contracts, :func:`diff_contracts`, on top of the schema's)::

    kind                         breaking  widens
    projection-added             -         yes   a field now reaches the agent
    projection-removed           yes       -
    display-text-added           -         yes
    display-text-removed         yes       -
    display-text-max-length-*    lowered: breaking; raised: widens
    max-bytes-* / max-depth-*    lowered: breaking; raised: widens
    rule-added                   yes       -     a semantic check now rejects
    rule-removed                 -         yes
    rule-changed                 a number lowered: breaking; raised: widens; other: both
    signature-added              yes       -
    signature-removed            -         yes   unsigned results now reach the agent
    signature-changed            yes       yes
    retryable-code-added         -         yes
    retryable-code-removed       yes       -
    status-changed               to retired: breaking; from retired: widens; else neither
    adapter-versions-changed     a glob removed: breaking; added: widens
    unversioned-adapters-changed opted in: widens; opted out: breaking
    tool-changed                 yes       -
    sensitive-secrets-changed, sensitive-personal-changed
                                 stricter (allow < redact < reject): breaking; looser: widens
    sensitive-allow-added        -         yes   a field no longer screened
    sensitive-allow-removed      yes       -
    content-type-changed, text-pattern-changed   yes  yes
    definition-added             -         yes   the MCP proxy may now list the tool
    definition-removed           yes       -
    definition-text-changed      -         yes   a title, description or annotation the host's
                                                 model reads: review it
    definition-digest-changed    -         -     the upstream definition it was imported from
    input-text-added, input-text-changed, input-text-removed
                                 -         added/changed: yes   a string of the input schema
                                                 (a name, a value, any keyword's, x- ones too:
                                                 "not served" says the proxy drops it): review it
    input-*                      the input schema's own diff (pointer input.schema.json:/...):
                                 a call the old one took refused: breaking; more taken: widens

Contract settings use the ``$.``-path into ``contract.yaml`` (``$.limits.max_bytes``) as
``Change.pointer``; projection, display and rule changes use their data pointer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import msgspec

from toolgate.authoring._schema_diff import Change, diff_schemas
from toolgate.gate._contracts import Contract, ContractSet, ContractSpec
from toolgate.gate._sensitive import DEFAULT_POLICY

__all__ = ["Step", "contract_history", "diff_contracts"]


def diff_contracts(old: Contract, new: Contract) -> list[Change]:
    """Compare two loaded contract versions: their schemas, then their ``contract.yaml``.

    Returns:
        :func:`diff_schemas` of the two schemas followed by the contract changes
        (projection, display text, limits, rules, signature, retry, status, routing).
    """
    return list(
        dict.fromkeys(
            [
                *diff_schemas(old.schema, new.schema),
                *_spec_changes(old.spec, new.spec),
                *_definition_changes(old, new),
            ]
        )
    )


def _definition_changes(old: Contract, new: Contract) -> Iterator[Change]:
    """The pinned MCP tool definitions: texts, annotations, digest and input schema."""
    before = old.spec.mcp.definition if old.spec.mcp is not None else None
    after = new.spec.mcp.definition if new.spec.mcp is not None else None
    at = "$.mcp.definition"
    if before is None or after is None:
        if before is not after:
            added = after is not None
            yield Change(
                pointer=at,
                kind="definition-added" if added else "definition-removed",
                breaking=not added,
                widens=added,
                message="a pinned tool definition "
                + ("added" if added else "removed: the proxy stops serving it"),
            )
        return
    texts = (
        ("title", before.title, after.title),
        ("description", before.description, after.description),
        ("annotations", msgspec.to_builtins(before.annotations), msgspec.to_builtins(after.annotations)),
    )
    for name, was, now in texts:
        if was != now:
            yield Change(
                pointer=f"{at}.{name}",
                kind="definition-text-changed",
                breaking=False,
                widens=True,
                message=f"the {name} the host's model reads changed: {_changed_pair(was, now)}",
            )
    if before.digest != after.digest:
        yield Change(
            pointer=f"{at}.digest",
            kind="definition-digest-changed",
            breaking=False,
            message=f"another upstream definition: {before.digest[:19]}... -> {after.digest[:19]}...",
        )
    if old.input_schema is not None and new.input_schema is not None:
        for change in diff_schemas(old.input_schema, new.input_schema):
            yield msgspec.structs.replace(
                change, pointer=f"{after.input_schema}:{change.pointer or '/'}", kind=f"input-{change.kind}"
            )
        yield from _input_text_changes(old.input_schema, new.input_schema, after.input_schema)


def _input_text_changes(old: Any, new: Any, file: str) -> Iterator[Change]:
    """Every string of the input schema added, changed or removed, quoted: a definition
    that changes only an ``x-`` keyword's text still shows the reviewer that text."""
    from toolgate.authoring._texts import input_texts

    served = {pointer for pointer, _ in input_texts(new)}
    before: dict[str, list[str]] = {}
    for pointer, text in input_texts(old, unknown=True):
        before.setdefault(pointer, []).append(text)
    after: dict[str, list[str]] = {}
    for pointer, text in input_texts(new, unknown=True):
        after.setdefault(pointer, []).append(text)
    for pointer in sorted(set(before) | set(after)):
        was, now = sorted(before.get(pointer, [])), sorted(after.get(pointer, []))
        if was == now:
            continue
        kind = "input-text-added" if not was else "input-text-removed" if not now else "input-text-changed"
        note = "" if pointer in served or not now else " (not served: the proxy drops it)"
        if len(was) == len(now) == 1:
            shown = _changed_pair(was[0], now[0])
        else:
            shown = f"{', '.join(map(_quoted, was)) or '-'} -> {', '.join(map(_quoted, now)) or '-'}"
        yield Change(
            pointer=f"{file}:{pointer}",
            kind=kind,
            breaking=False,
            widens=bool(now),
            message=shown + note,
        )


def _quoted(text: str) -> str:
    """A text a reviewer reads in full up to 160 characters, escaped onto one line."""
    return ascii(text[:160]) + (f"... ({len(text)} characters)" if len(text) > 160 else "")


SHOWN_WHOLE = 160  # a changed text up to this long is shown whole
CHANGE_CONTEXT = 40  # characters shown before and after what changed in a longer one
CHANGE_SHOWN = 400  # of what changed, at most this many characters are shown


def _changed_pair(was: Any, now: Any) -> str:
    """``OLD -> NEW``, each escaped onto one line: whole when both are short, else each cut
    around what changed (the common start and end left out but for some context), so that
    a sentence added anywhere in a long text is shown, not cut off before it."""
    old = was if isinstance(was, str) else repr(was)
    new = now if isinstance(now, str) else repr(now)
    if len(old) <= SHOWN_WHOLE and len(new) <= SHOWN_WHOLE:
        return f"{old!a} -> {new!a}"
    prefix = 0
    while prefix < min(len(old), len(new)) and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(old), len(new)) - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return f"{_around(old, prefix, len(old) - suffix)} -> {_around(new, prefix, len(new) - suffix)}"


def _around(text: str, start: int, end: int) -> str:
    """``text[start:end]`` (what changed, at most :data:`CHANGE_SHOWN` characters) with
    :data:`CHANGE_CONTEXT` characters either side, escaped, saying where it sits."""
    first = max(0, start - CHANGE_CONTEXT)
    last = min(len(text), min(end, start + CHANGE_SHOWN) + CHANGE_CONTEXT)
    if first == 0 and last == len(text):
        return ascii(text)
    head = "..." if first > 0 else ""
    tail = "..." if last < len(text) else ""
    return f"{head}{text[first:last]!a}{tail} (characters {first + 1}-{last} of {len(text)})"


def _spec_changes(old: ContractSpec, new: ContractSpec) -> Iterator[Change]:
    if old.tool != new.tool:
        yield Change(
            pointer="$.tool", kind="tool-changed", breaking=True, message=f"tool {old.tool!r} -> {new.tool!r}"
        )
    if old.content_type != new.content_type:
        yield Change(
            pointer="$.content_type",
            kind="content-type-changed",
            breaking=True,
            widens=True,
            message=f"content type {old.content_type} -> {new.content_type}",
        )
    if old.text_pattern != new.text_pattern:
        yield Change(
            pointer="$.text_pattern",
            kind="text-pattern-changed",
            breaking=True,
            widens=True,
            message="text extraction pattern changed; compared conservatively",
        )
    if old.status != new.status:
        yield Change(
            pointer="$.status",
            kind="status-changed",
            breaking=new.status == "retired",
            widens=old.status == "retired",
            message=f"status {old.status} -> {new.status}",
        )
    removed_globs = sorted(set(old.adapter_versions) - set(new.adapter_versions))
    added_globs = sorted(set(new.adapter_versions) - set(old.adapter_versions))
    if removed_globs or added_globs:
        yield Change(
            pointer="$.adapter_versions",
            kind="adapter-versions-changed",
            breaking=bool(removed_globs),
            widens=bool(added_globs),
            message=f"adapter versions served: removed {removed_globs}, added {added_globs}",
        )
    if old.unversioned_adapters != new.unversioned_adapters:
        yield Change(
            pointer="$.unversioned_adapters",
            kind="unversioned-adapters-changed",
            breaking=not new.unversioned_adapters,
            widens=new.unversioned_adapters,
            message="messages without tg-adapter-version are "
            + ("now served" if new.unversioned_adapters else "no longer served"),
        )
    for field in ("max_bytes", "max_depth"):
        before, after = getattr(old.limits, field), getattr(new.limits, field)
        if before != after:
            lowered = after < before
            yield Change(
                pointer=f"$.limits.{field}",
                kind=f"{field.replace('_', '-')}-{'lowered' if lowered else 'raised'}",
                breaking=lowered,
                widens=not lowered,
                message=f"{field} {before} -> {after}",
            )
    yield from _projection_changes(old, new)
    yield from _rule_changes(old, new)
    yield from _signature_changes(old, new)
    yield from _sensitive_changes(old, new)
    before_codes, after_codes = set(old.retry.retryable_codes), set(new.retry.retryable_codes)
    for code in sorted(after_codes - before_codes):
        yield Change(
            pointer="$.retry.retryable_codes",
            kind="retryable-code-added",
            breaking=False,
            widens=True,
            message=f"{code} may now be retried by the agent",
        )
    for code in sorted(before_codes - after_codes):
        yield Change(
            pointer="$.retry.retryable_codes",
            kind="retryable-code-removed",
            breaking=True,
            message=f"{code} is no longer retryable for the agent",
        )


_STRICTNESS = {"allow": 0, "redact": 1, "reject": 2}  # sensitive actions, least to most held back


def _sensitive_changes(old: ContractSpec, new: ContractSpec) -> Iterator[Change]:
    """``sensitive``: an action made stricter is breaking (a result rejected, or a span the agent
    had redacted), a looser one widens; an allow pointer added widens, one removed is breaking."""
    before, after = old.sensitive or DEFAULT_POLICY, new.sensitive or DEFAULT_POLICY
    for field in ("secrets", "personal"):
        was, now = getattr(before, field), getattr(after, field)
        if was != now:
            yield Change(
                pointer=f"$.sensitive.{field}",
                kind=f"sensitive-{field}-changed",
                breaking=_STRICTNESS[now] > _STRICTNESS[was],
                widens=_STRICTNESS[now] < _STRICTNESS[was],
                message=f"{field} {was} -> {now}",
            )
    was_allowed = {a.pointer for a in before.allow}
    now_allowed = {a.pointer for a in after.allow}
    for pointer in sorted(now_allowed - was_allowed):
        yield Change(
            pointer=pointer,
            kind="sensitive-allow-added",
            breaking=False,
            widens=True,
            message=f"{pointer} is no longer screened for secrets and personal data",
        )
    for pointer in sorted(was_allowed - now_allowed):
        yield Change(
            pointer=pointer,
            kind="sensitive-allow-removed",
            breaking=True,
            message=f"{pointer} is screened for secrets and personal data again",
        )


def _projection_changes(old: ContractSpec, new: ContractSpec) -> Iterator[Change]:
    for pointer in new.projection:
        if pointer not in old.projection:
            yield Change(
                pointer=pointer,
                kind="projection-added",
                breaking=False,
                widens=True,
                message="now projected: this field reaches the agent",
            )
    for pointer in old.projection:
        if pointer not in new.projection:
            yield Change(
                pointer=pointer,
                kind="projection-removed",
                breaking=True,
                message="no longer projected: agents stop receiving this field",
            )
    before = {d.pointer: d.max_length for d in old.display_text}
    after = {d.pointer: d.max_length for d in new.display_text}
    for pointer, length in after.items():
        if pointer not in before:
            yield Change(
                pointer=pointer,
                kind="display-text-added",
                breaking=False,
                widens=True,
                message=f"now passed to the agent as untrusted text, up to {length} characters",
            )
        elif length != before[pointer]:
            lowered = length < before[pointer]
            yield Change(
                pointer=pointer,
                kind=f"display-text-max-length-{'lowered' if lowered else 'raised'}",
                breaking=lowered,
                widens=not lowered,
                message=f"display text cut at {before[pointer]} -> {length} characters",
            )
    for pointer in before:
        if pointer not in after:
            yield Change(
                pointer=pointer,
                kind="display-text-removed",
                breaking=True,
                message="no longer passed to the agent as display text",
            )


def _rule_changes(old: ContractSpec, new: ContractSpec) -> Iterator[Change]:
    def keyed(spec: ContractSpec) -> dict[tuple[str, str], dict[str, Any]]:
        return {(type(r).__name__, r.pointer): msgspec.structs.asdict(r) for r in spec.rules}

    before, after = keyed(old), keyed(new)
    for (kind, pointer), fields in after.items():
        if (kind, pointer) not in before:
            yield Change(
                pointer=pointer,
                kind="rule-added",
                breaking=True,
                message=f"{kind} rule added: results that fail it are rejected",
            )
            continue
        for field, value in fields.items():
            previous = before[(kind, pointer)][field]
            if value == previous:
                continue
            numeric = _number(value) and _number(previous)
            yield Change(
                pointer=pointer,
                kind="rule-changed",
                breaking=not numeric or value < previous,
                widens=not numeric or value > previous,
                message=f"{kind} rule: {field} {previous!r} -> {value!r}",
            )
    for kind, pointer in before:
        if (kind, pointer) not in after:
            yield Change(
                pointer=pointer,
                kind="rule-removed",
                breaking=False,
                widens=True,
                message=f"{kind} rule removed: results it rejected now reach the agent",
            )


def _signature_changes(old: ContractSpec, new: ContractSpec) -> Iterator[Change]:
    if old.signature == new.signature:
        return
    if old.signature is None:
        yield Change(
            pointer="$.signature",
            kind="signature-added",
            breaking=True,
            message="results must now carry a valid adapter signature",
        )
    elif new.signature is None:
        yield Change(
            pointer="$.signature",
            kind="signature-removed",
            breaking=False,
            widens=True,
            message="unsigned results now reach the agent",
        )
    else:
        yield Change(
            pointer="$.signature",
            kind="signature-changed",
            breaking=True,
            widens=True,
            message=f"signature {old.signature.algorithm}/{old.signature.key_id} -> "
            f"{new.signature.algorithm}/{new.signature.key_id}",
        )


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One version of a tool against its predecessor."""

    old: str
    new: str
    changes: tuple[Change, ...]
    new_major: bool

    @property
    def ok(self) -> bool:
        """A breaking change is allowed only with a new major version."""
        return self.new_major or not any(c.breaking for c in self.changes)


def contract_history(contracts: ContractSet) -> list[Step]:
    """Every bundled version diffed against its predecessor (by major, then minor)."""
    steps = []
    for tool in contracts.tools:
        versions = sorted(contracts.versions(tool), key=lambda c: (c.spec.version, c.spec.minor))
        for old, new in itertools.pairwise(versions):
            steps.append(
                Step(
                    old=old.key,
                    new=new.key,
                    changes=tuple(diff_contracts(old, new)),
                    new_major=new.spec.version > old.spec.version,
                )
            )
    return steps


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
