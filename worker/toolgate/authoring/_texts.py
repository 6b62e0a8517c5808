"""The texts of an input schema that a host's model reads, and the schema a host is served.

A model reads every string of a tool definition, not only ``description``: member names,
``enum``/``const``/``pattern`` values, ``format``, ``contentMediaType``, defaults, examples,
and any keyword a validator does not know (``x-llm-instructions``). Two functions keep the
review and the host in step:

* :func:`served_schema`: the schema with only JSON Schema keywords (:data:`KEYWORDS`) at
  every schema position; an unknown keyword, ``x-`` ones included, is dropped with all it
  holds. ``toolgate mcp-proxy`` advertises this, never the unknown rest.
* :func:`schema_texts`: every string of :func:`served_schema` (values anywhere, member
  names of ``properties`` and the other maps, names inside ``default``/``examples``/
  ``const``/``enum`` objects) with its JSON Pointer, but the JSON type names of ``type``.
  Lint lists each as ``unreviewed-text``.

So what the host receives is exactly what lint listed (tests/unit/authoring/test_texts.py
holds it over generated schemas).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

# Keywords whose value is a map of names to schemas, one schema, or a list of schemas.
SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
SCHEMA_ONE: Final = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
SCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
VALUES: Final = frozenset(
    {
        "$schema",
        "$id",
        "$ref",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$vocabulary",
        "$comment",
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "dependencies",
        "format",
        "contentEncoding",
        "contentMediaType",
        "title",
        "description",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "examples",
    }
)
KEYWORDS: Final = SCHEMA_MAPS | SCHEMA_ONE | SCHEMA_LISTS | VALUES
JSON_TYPES: Final = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _join(pointer: str, token: str | int) -> str:
    return f"{pointer}/{str(token).replace('~', '~0').replace('/', '~1')}"


def served_schema(schema: Any) -> Any:
    """``schema`` with only :data:`KEYWORDS` at every schema position (a copy)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword not in KEYWORDS:
            continue
        if keyword in SCHEMA_MAPS and isinstance(value, dict):
            out[keyword] = {name: served_schema(sub) for name, sub in value.items()}
        elif keyword in SCHEMA_ONE:
            out[keyword] = served_schema(value)
        elif keyword in SCHEMA_LISTS and isinstance(value, list):
            out[keyword] = [served_schema(sub) for sub in value]
        else:
            out[keyword] = value
    return out


def _value_texts(pointer: str, value: Any) -> Iterator[tuple[str, str]]:
    """Every string in a JSON value: strings, and member names (at the member's pointer)."""
    stack: list[tuple[str, Any]] = [(pointer, value)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, str):
            yield at, node
        elif isinstance(node, dict):
            for name, item in node.items():
                yield _join(at, name), name
                stack.append((_join(at, name), item))
        elif isinstance(node, list):
            stack.extend((_join(at, i), item) for i, item in enumerate(node))


def schema_texts(schema: Any, pointer: str = "", *, unknown: bool = False) -> Iterator[tuple[str, str]]:
    """Every (pointer, text) of :func:`served_schema` of ``schema`` a model reads
    (``unknown``: of ``schema`` itself, unknown keywords and all they hold included)."""
    stack: list[tuple[str, Any]] = [(pointer, schema)]
    while stack:
        at, node = stack.pop()
        if not isinstance(node, dict):
            continue
        for keyword, value in node.items():
            where = _join(at, keyword)
            if keyword not in KEYWORDS:
                if unknown:
                    yield where, keyword
                    yield from _value_texts(where, value)
                continue
            if keyword in SCHEMA_MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    yield _join(where, name), name
                    stack.append((_join(where, name), sub))
            elif keyword in SCHEMA_ONE:
                stack.append((where, value))
            elif keyword in SCHEMA_LISTS and isinstance(value, list):
                stack.extend((_join(where, i), sub) for i, sub in enumerate(value))
            elif keyword == "type":
                kinds = value if isinstance(value, list) else [value]
                for i, kind in enumerate(kinds):
                    if isinstance(kind, str) and kind not in JSON_TYPES:
                        yield (_join(where, i) if isinstance(value, list) else where), kind
            else:
                yield from _value_texts(where, value)


def input_texts(schema: Any, *, unknown: bool = False) -> list[tuple[str, str]]:
    """Every (pointer, text) of an input schema that a host is served and its model reads
    (:func:`schema_texts`): of an imported one, the upstream part (``/allOf/0``) but its
    toolgate ``$id``; the closure beside it is derived from that part (lint says
    ``input-closure-mismatch`` otherwise): its names are the upstream's, its identifiers
    toolgate's. ``unknown``: the texts the host is not served as well."""
    from toolgate.authoring._close import split

    if not isinstance(schema, dict):
        return []
    parts = split({k: v for k, v in schema.items() if k not in ("$schema", "type")})
    if parts is None:
        found = list(schema_texts(schema, unknown=unknown))
    else:
        top = {k: v for k, v in schema.items() if k not in ("$schema", "allOf")}
        upstream = schema_texts(parts[0], "/allOf/0", unknown=unknown)
        found = [*schema_texts(top, unknown=unknown), *(t for t in upstream if t[0] != "/allOf/0/$id")]
    return sorted(found)


__all__ = ["JSON_TYPES", "KEYWORDS", "input_texts", "schema_texts", "served_schema"]
