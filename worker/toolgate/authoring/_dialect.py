"""A Draft 7, Draft 6 or Draft 2019-09 schema as the Draft 2020-12 schema that means the same.

Most MCP servers are built on the TypeScript SDK, which writes
``"$schema": "http://json-schema.org/draft-07/schema#"`` into every tool schema
(zod-to-json-schema, or zod's own ``toJSONSchema`` with ``target: "draft-7"``). The gate
validates Draft 2020-12, so :func:`to_draft_2020_12` rewrites such a schema keyword by
keyword where the two drafts say the same thing in other words:

* ``$schema`` is dropped (the gate's dialect is 2020-12);
* ``definitions`` becomes ``$defs``, and every local ``$ref`` into a renamed place is
  rewritten to the place's new pointer;
* ``items`` given an array becomes ``prefixItems``, and ``additionalItems`` beside it
  becomes ``items`` (beside a single ``items`` schema, ``additionalItems`` applies to
  nothing and is dropped);
* ``dependencies`` (Draft 7 and 6) splits into ``dependentRequired`` (a list of names) and
  ``dependentSchemas`` (a schema); in Draft 2019-09 and 2020-12 it is no keyword (their
  validators ignore it) and is dropped, so that the gate's compiler, which still applies it,
  does not;
* a ``$ref`` in Draft 7 or 6 makes every other keyword beside it inert: those keywords are
  dropped, except the texts a reviewer reads (``title``, ``description``, ``$comment``,
  ``default``, ``examples``), which validate nothing in either draft;
* in Draft 6, ``if``/``then``/``else`` are not keywords (a Draft 6 validator ignores them):
  dropped.

What cannot be said the same way is refused (:class:`Unclosable`, one line naming the
place): Draft 4 and older (a boolean ``exclusiveMinimum``), a keyword
of a later draft used in an earlier one (it would start to apply), ``$recursiveRef``, a
``$ref`` to a place that is not a schema, and any other ``$schema``. A 2020-12 schema (or
one without ``$schema``) is returned as it is, but for a ``dependencies`` it holds.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote, unquote


class Unclosable(ValueError):
    """A schema that cannot be said the same way in Draft 2020-12; ``pointer`` names the place.
    (:func:`toolgate.authoring._close.closed` raises its own ``Unclosable`` with the same line.)"""

    def __init__(self, pointer: str, reason: str) -> None:
        super().__init__(f"{pointer or '/'}: {reason}")
        self.pointer = pointer
        self.reason = reason


DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
_DIALECTS: Final = {
    "json-schema.org/draft-07/schema": 7,
    "json-schema.org/draft-06/schema": 6,
    "json-schema.org/draft/2019-09/schema": 2019,
    "json-schema.org/draft/2020-12/schema": 2020,
}
# Keywords whose value is one schema, a map of schemas, or a list of schemas.
_ONE: Final = (
    "additionalProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
)
_MAP: Final = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
_LIST: Final = ("allOf", "anyOf", "oneOf")
# Keywords of later drafts: in an earlier draft they are unknown (ignored), in 2020-12 they
# apply. Such a schema says something else once translated: refused.
_LATER_THAN_7: Final = (
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "minContains",
    "maxContains",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
)
_LATER: Final = {
    6: _LATER_THAN_7,
    7: _LATER_THAN_7,
    2019: ("prefixItems", "$dynamicRef", "$dynamicAnchor", "$recursiveRef"),
}
# Beside a Draft 6/7 $ref, what is kept: texts (they validate nothing in either draft) and
# the containers of definitions (a $ref resolves into them whatever they sit beside).
_KEPT_BESIDE_REF: Final = frozenset(
    {"title", "description", "$comment", "default", "examples", "definitions", "$defs", "$schema", "$id"}
)


def dialect(schema: dict[str, Any]) -> int:
    """The draft ``schema`` says it is (2020 when it says none).

    Raises:
        Unclosable: a ``$schema`` that is not Draft 6, 7, 2019-09 or 2020-12.
    """
    named = schema.get("$schema", DRAFT_2020_12)
    if isinstance(named, str):
        bare = named.split("://", 1)[-1].rstrip("#")
        if named.split("://", 1)[0] in ("http", "https") and bare in _DIALECTS:
            return _DIALECTS[bare]
    raise Unclosable(
        "",
        f"$schema {str(named)[:80]!r} is not a draft the gate reads (Draft 2020-12, or Draft 2019-09, "
        "7 or 6 translated to it)",
    )


def _join(pointer: str, token: str | int) -> str:
    if isinstance(token, int):
        return f"{pointer}/{token}"
    return pointer + "/" + token.replace("~", "~0").replace("/", "~1")


class _Translation:
    def __init__(self, draft: int) -> None:
        self.draft = draft
        self.moved: dict[str, str] = {}  # every schema's old pointer -> its new pointer
        self.refs: list[tuple[dict[str, Any], str]] = []  # translated nodes holding a $ref

    def schema(self, node: Any, old: str, new: str, depth: int = 0) -> Any:
        self.moved[old] = new
        if depth > 128:
            raise Unclosable(old, "a schema nested deeper than 128: not translated")
        if not isinstance(node, dict):
            return node  # true/false (Draft 6 and later), or what the gate will refuse anyway
        later = next((k for k in _LATER.get(self.draft, ()) if k in node), None)
        if later is not None:
            raise Unclosable(
                old, f"{later} is not a keyword of this schema's draft: translated to 2020-12 it would apply"
            )
        if self.draft < 2019 and "$ref" in node:
            # The rest is inert in these drafts: dropped, so it stays inert in 2020-12.
            node = {k: v for k, v in node.items() if k == "$ref" or k in _KEPT_BESIDE_REF}
        if self.draft == 6:
            node = {k: v for k, v in node.items() if k not in ("if", "then", "else")}
        for keyword in ("exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(node.get(keyword), bool):
                raise Unclosable(old, f"a boolean {keyword} is Draft 4: give a Draft 6 or later schema")
        out: dict[str, Any] = {}
        items = node.get("items")
        for key, value in node.items():
            where = _join(old, key)
            if key == "$schema" and not old:
                continue
            if key in _ONE:
                out[key] = self.schema(value, where, _join(new, key), depth + 1)
            elif key in _MAP and isinstance(value, dict):
                target = "$defs" if key == "definitions" else key
                merged = out.setdefault(target, {})
                if target == "$defs" and merged.keys() & value.keys():
                    raise Unclosable(old, "definitions and $defs name the same schema: not translated")
                for name, sub in value.items():
                    merged[name] = self.schema(
                        sub, _join(where, name), _join(_join(new, target), name), depth + 1
                    )
            elif key in _LIST and isinstance(value, list):
                out[key] = [
                    self.schema(sub, _join(where, i), _join(_join(new, key), i), depth + 1)
                    for i, sub in enumerate(value)
                ]
            elif key == "items" and isinstance(value, list) and self.draft < 2020:
                out["prefixItems"] = [
                    self.schema(sub, _join(where, i), _join(_join(new, "prefixItems"), i), depth + 1)
                    for i, sub in enumerate(value)
                ]
            elif key == "items":
                out[key] = self.schema(value, where, _join(new, key), depth + 1)
            elif key == "additionalItems" and self.draft < 2020:
                if isinstance(items, list):
                    out["items"] = self.schema(value, where, _join(new, "items"), depth + 1)
            elif key == "dependencies" and self.draft >= 2019:
                continue  # no keyword of 2019-09: inert there, dropped so it stays inert
            elif key == "dependencies" and isinstance(value, dict):
                for name, sub in value.items():
                    if isinstance(sub, list):
                        out.setdefault("dependentRequired", {})[name] = sub
                    else:
                        target = _join(_join(new, "dependentSchemas"), name)
                        out.setdefault("dependentSchemas", {})[name] = self.schema(
                            sub, _join(where, name), target, depth + 1
                        )
            else:
                out[key] = value
        if isinstance(out.get("$ref"), str):
            self.refs.append((out, old))
        return out

    def rewrite_refs(self) -> None:
        for node, where in self.refs:
            ref = node["$ref"]
            if ref == "#" or not ref.startswith("#/"):
                continue  # the root, or what the closing refuses with its own line
            target = self.moved.get(unquote(ref[1:]))
            if target is None:
                raise Unclosable(where, f"$ref {ref[:80]!r} names no schema of the document: not translated")
            node["$ref"] = "#" + quote(target, safe="/~$!'()*+,;=:@")


_SUBSCHEMA_LISTS: Final = (*_LIST, "prefixItems")
_SUBSCHEMA_MAPS: Final = (*_MAP, "definitions")


def _has_dependencies(node: Any, depth: int = 0) -> bool:
    """Whether a 2020-12 ``dependencies`` keyword sits at some schema position of ``node``."""
    if not isinstance(node, dict):
        return False
    if "dependencies" in node or depth > 128:
        return True  # (too deep: the copy refuses it)
    subs: list[Any] = [node.get(k) for k in _ONE]
    subs.extend(sub for k in _SUBSCHEMA_MAPS if isinstance(node.get(k), dict) for sub in node[k].values())
    subs.extend(sub for k in _SUBSCHEMA_LISTS if isinstance(node.get(k), list) for sub in node[k])
    subs.append(node.get("items"))
    return any(_has_dependencies(sub, depth + 1) for sub in subs)


def _without_dependencies(node: Any, where: str = "", depth: int = 0) -> Any:
    """A copy of 2020-12 ``node`` without ``dependencies`` at any schema position.

    Raises:
        Unclosable: a schema nested deeper than 128.
    """
    if not isinstance(node, dict):
        return node
    if depth > 128:
        raise Unclosable(where, "a schema nested deeper than 128: not translated")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "dependencies":
            continue
        at = _join(where, key)
        if key in _ONE or key == "items":
            out[key] = _without_dependencies(value, at, depth + 1)
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            out[key] = {n: _without_dependencies(sub, _join(at, n), depth + 1) for n, sub in value.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [_without_dependencies(sub, _join(at, i), depth + 1) for i, sub in enumerate(value)]
        else:
            out[key] = value
    return out


def to_draft_2020_12(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` in Draft 2020-12, meaning the same (see the module docstring); a 2020-12
    schema, or one that names no draft, is returned as it is, ``$schema`` included, unless
    it holds a ``dependencies`` (no keyword there): then a copy without it.

    Raises:
        Unclosable: a ``$schema`` the gate does not read, or a schema that cannot be said
            the same way in 2020-12 (the place and why).
    """
    draft = dialect(schema)
    if draft == 2020:
        if _has_dependencies(schema):
            return dict(_without_dependencies(schema))
        return schema
    translation = _Translation(draft)
    out = translation.schema(schema, "", "")
    translation.rewrite_refs()
    assert isinstance(out, dict)
    return out


__all__ = ["DRAFT_2020_12", "Unclosable", "dialect", "to_draft_2020_12"]
