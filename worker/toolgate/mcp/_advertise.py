"""What ``toolgate mcp-proxy`` tells the host about a tool, from the reviewed contract alone.

* :func:`advertised_output_schema` (:mod:`toolgate.authoring._advertised`, which lint reads
  too): the schema of the projected ``data`` the host receives as ``structuredContent``.
* :func:`advertised_input_schema`: the reviewed input schema flat and closed, references
  inlined, for hosts whose validators or forms read it (the proxy checks the full one).
* :func:`argument_errors`: why arguments fail the reviewed input schema, written from the
  schema alone (the JSON pointer and the keyword, ``argument /timezone: required``), never
  an argument's value or a name the schema does not declare.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toolgate.authoring._advertised import advertised_output_schema, clamp, closure_bounds, finite_number
from toolgate.gate._contracts import Contract, declared_names, parse_pointer, resolve

MAX_ARGUMENT_LINES = 8
_MAX_LINE = 200


_INLINE_BUDGET = 20_000  # nodes one advertised input schema may hold once references are inlined
_RESOURCE_KEYWORDS = frozenset({"$id", "$schema", "$defs", "definitions", "$anchor", "$dynamicAnchor"})


class _Inliner:
    """A schema with its local ``$ref``s replaced by what they name: no ``$id``, no
    ``$defs``, no reference left (a cycle, or past the budget, becomes ``{}``, which the
    host reads as "any value": the proxy checks the full schema)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.nodes = 0

    def copy(self, node: Any, trail: tuple[str, ...] = ()) -> Any:
        self.nodes += 1
        if isinstance(node, list):
            return [self.copy(v, trail) for v in node]
        if not isinstance(node, dict):
            return node
        if self.nodes > _INLINE_BUDGET or len(trail) > 32:
            return {}
        ref = node.get("$ref")
        out = {k: self.copy(v, trail) for k, v in node.items() if k != "$ref" and k not in _RESOURCE_KEYWORDS}
        if not isinstance(ref, str):
            return out
        target: Any = {}
        if ref.startswith("#") and ref not in trail:
            try:
                target = self.copy(resolve(self.root, parse_pointer(ref[1:])), (*trail, ref))
            except ValueError:
                target = {}
        if not out:
            return target
        out.setdefault("allOf", []).append(target)
        return out


def advertised_input_schema(contract: Contract) -> dict[str, Any]:
    """The input schema ``tools/list`` shows a host: flat and closed (``type: object``, the
    top-level ``properties`` each as the reviewed schema says, ``required``,
    ``additionalProperties: false``), with every reference inlined, so a host's validator
    compiles it (the TypeScript SDK's Ajv, Draft 7) and a host that types arguments from
    the top-level properties finds them. The proxy checks arguments with the full closed
    schema (:func:`argument_errors`)."""
    from toolgate.authoring._close import at_path, split

    schema = contract.input_schema or {"type": "object"}
    parts = split({"allOf": schema.get("allOf")}) if set(schema) <= {"$schema", "type", "allOf"} else None
    if parts is None:  # written by hand: its own references inlined
        flat = _Inliner(schema).copy(schema)
        flat["type"] = "object"
        return flat  # type: ignore[no-any-return]
    upstream, skeleton = parts
    inliner = _Inliner(upstream)
    top = at_path(skeleton, ())
    names = list(top.get("properties", {})) if isinstance(top, dict) else []
    listed = upstream.get("properties")
    declared: dict[str, Any] = listed if isinstance(listed, dict) else {}
    properties: dict[str, Any] = {}
    for name in names:
        member = inliner.copy(declared[name]) if name in declared else {}
        position = at_path(skeleton, (name,))
        if isinstance(member, dict) and isinstance(position, dict):
            kinds = position.get("type")
            if "type" not in member and isinstance(kinds, list) and kinds:
                member["type"] = kinds[0] if len(kinds) == 1 else kinds
            for bound in ("maxLength", "maxItems"):
                if bound in position and bound not in member:
                    member[bound] = position[bound]
        properties[name] = member
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    required = upstream.get("required")
    if isinstance(required, list) and [r for r in required if r in properties]:
        out["required"] = [r for r in required if r in properties]
    bounds = closure_bounds({"allOf": schema["allOf"]})
    if bounds is not None:
        clamp(out, *bounds)
    return out


def _keyword(error: Any) -> str:
    for part in reversed(list(error.schema_path)):
        if isinstance(part, str) and part and not part.isdigit():
            return part
    return "schema"


def argument_errors(
    contract: Contract, arguments: dict[str, Any], *, errors: Iterable[Any] | None = None
) -> list[str]:
    """Why ``arguments`` fail the reviewed input schema: at most :data:`MAX_ARGUMENT_LINES`
    lines ``argument <pointer>: <keyword>[ <bound from the schema>]`` (``arguments: ...`` for
    the arguments object itself); empty when they pass. ``errors``: the validator's errors
    already found (the first one only, for arguments too large to look for all)."""
    validator = contract.input_validator
    if errors is None and (validator is None or validator.is_valid(arguments)):
        return []
    names = declared_names(contract.input_schema)
    lines: list[str] = []
    seen: set[str] = set()
    total = examined = 0
    found = errors if errors is not None else validator.iter_errors(arguments) if validator else ()
    for error in found:
        examined += 1
        if examined > 1000:  # looked at no further: a bound on the work one call can cause
            break
        tokens = [str(t) if isinstance(t, int) or t in names else "*" for t in error.instance_path]
        keyword = _keyword(error)
        kind = error.kind
        if keyword == "required":
            missing = getattr(kind, "property", None)
            if isinstance(missing, str) and missing in names:
                tokens.append(missing)
        pointer = "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
        bound = getattr(kind, "limit", None)
        detail = f" {bound:g}" if finite_number(bound) else ""
        where = f"argument {pointer}" if pointer else "arguments"
        line = f"{where}: {keyword}{detail}"[:_MAX_LINE]
        # An imported input schema is the upstream's beside its closure: both refuse a wrong
        # type at the same place, and the model needs to read it once.
        if line in seen:
            continue
        seen.add(line)
        total += 1
        if len(lines) < MAX_ARGUMENT_LINES:
            lines.append(line)
    if total > len(lines):
        lines.append(f"... and {total - len(lines)} more")
    return lines


__all__ = ["MAX_ARGUMENT_LINES", "advertised_input_schema", "advertised_output_schema", "argument_errors"]
