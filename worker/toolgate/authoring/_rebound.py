"""``toolgate contracts rebound``: set the bounds an imported contract's closure enforces.

Import closes a tool's ``outputSchema`` with one bound on every string (``--max-string``) and
one on every array (``--max-items``), written in the closure as ``x-toolgate-bounds`` and as
the ``maxLength``/``maxItems`` of each of its positions. A tool whose results are larger
(a file of 5,000 characters, a folder of 120 entries) needs larger bounds: :func:`rebound`
derives the closure again from the same upstream part with the bounds the reviewer gives
(a field's own bound, set by ``contracts review --bound``, stays),
each at most the contract's ``limits.max_bytes`` (a string cannot be longer, nor an array
hold more items than half as many), and writes ``schema.json`` back. Nothing else changes:
lint's ``closure-mismatch`` holds (the closure is the one derived from the upstream part
with the bounds it names), and so do the projection and the review. The agent envelope
follows: each projected leaf is bounded by what the schema guarantees there
(:attr:`toolgate.gate._contracts.Contract.leaf_bounds`), so a raised bound passes results
that long through to the agent.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from toolgate._errors import ConfigError
from toolgate.authoring._close import BOUNDS_KEY, CLOSURE_ID, Unclosable, closure, own_bounds, split
from toolgate.gate._contracts import bound_ceilings, load_contract

DATA_DEF = "structuredContent"  # where import puts the closed data schema in the envelope's $defs


def rebound(folder: Path, *, max_string: int | None, max_items: int | None) -> str:
    """Rewrite ``folder``'s ``schema.json`` with its closure derived for the given bounds
    (None: the bound stays). Returns one line saying what changed.

    Raises:
        ConfigError: not an imported contract version, or a bound out of range (naming it).
    """
    contract = load_contract(folder)
    path = contract.schema_path
    schema: dict[str, Any] = json.loads(path.read_text())
    defs = schema.get("$defs")
    if not isinstance(defs, dict):
        defs = {}
    parts = split(defs.get(DATA_DEF))
    if parts is None:
        raise ConfigError(f"{path}: not a schema import-mcp closed (no closure at /$defs/{DATA_DEF})")
    upstream, skeleton = parts
    bounds = skeleton.get(BOUNDS_KEY)
    if not isinstance(bounds, dict):
        raise ConfigError(f"{path}: /$defs/{DATA_DEF}/allOf/1 names no {BOUNDS_KEY}")
    highest = bound_ceilings(contract.spec.limits.max_bytes)
    wanted = {"max_string": max_string, "max_items": max_items}
    for (name, value), ceiling in zip(wanted.items(), highest, strict=True):
        if value is not None and not 1 <= value <= ceiling:
            limit = contract.spec.limits.max_bytes
            raise ConfigError(
                f"--{name.replace('_', '-')}: must be in 1..{ceiling} (limits.max_bytes {limit} of "
                f"{folder / 'contract.yaml'}; got {value})"
            )
    new = {name: value if value is not None else bounds[name] for name, value in wanted.items()}
    tool = str(skeleton["$id"])[len(CLOSURE_ID) :]
    embedded = {k: v for k, v in upstream.items() if k != "$id"}
    try:
        derived = closure(
            embedded, tool, max_string=new["max_string"], max_items=new["max_items"], at=own_bounds(bounds)
        )
    except Unclosable as exc:
        raise ConfigError(f"{path}: cannot be closed with these bounds at {exc}") from None
    defs[DATA_DEF] = {"allOf": [upstream, derived]}
    _replace(path, json.dumps(schema, indent=2) + "\n")
    said = ", ".join(f"{name} {bounds[name]} -> {new[name]}" for name in wanted if bounds[name] != new[name])
    return f"{path}: {said or 'the bounds are already these'}"


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a file beside it renamed into place."""
    handle, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


__all__ = ["DATA_DEF", "bound_ceilings", "rebound"]
