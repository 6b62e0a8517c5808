"""Draft 7, 6 and 2019-09 schemas, as the TypeScript SDK and zod-to-json-schema write them,
said in Draft 2020-12: the same verdict on every instance, or a one-line refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from toolgate.authoring._close import close
from toolgate.authoring._dialect import Unclosable, to_draft_2020_12

from tests import ROOT

LISTINGS = ROOT / "tests" / "mcp_listings"
DRAFT_7 = "http://json-schema.org/draft-07/schema#"

# zod-to-json-schema (target jsonSchema7, $refStrategy root) output for shapes zod users write.
TUPLE_WITH_REST = {  # z.object({point: z.tuple([z.string(), z.number()]).rest(z.boolean())})
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {
        "point": {
            "type": "array",
            "minItems": 2,
            "items": [{"type": "string"}, {"type": "number"}],
            "additionalItems": {"type": "boolean"},
        }
    },
    "required": ["point"],
    "additionalProperties": False,
}
REUSED = {  # the same zod object used twice: the second a $ref to the first's path, through a tuple
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {
        "pair": {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "items": [
                {
                    "type": "object",
                    "properties": {"id": {"type": "string", "maxLength": 3}},
                    "required": ["id"],
                },
                {"$ref": "#/properties/pair/items/0"},
            ],
        },
        "other": {"$ref": "#/properties/pair/items/0"},
    },
    "additionalProperties": False,
}
RECURSIVE = {  # z.lazy with a named definition
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {"root": {"$ref": "#/definitions/Node"}},
    "definitions": {
        "Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}},
            },
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "additionalProperties": False,
}
REF_WITH_SIBLINGS = {  # Draft 7 ignores every keyword beside $ref: maxLength does not apply
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {"code": {"$ref": "#/definitions/code", "maxLength": 2, "description": "the code"}},
    "definitions": {"code": {"type": "string"}},
}
DEPENDENCIES = {
    "$schema": DRAFT_7,
    "type": "object",
    "properties": {"card": {"type": "string"}, "billing": {"type": "string"}, "cvc": {"type": "string"}},
    "dependencies": {"card": ["billing"], "cvc": {"required": ["card"]}},
}
DRAFT_6_IF = {  # if/then/else are no Draft 6 keywords: a Draft 6 validator ignores them
    "$schema": "http://json-schema.org/draft-06/schema#",
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "if": {"properties": {"n": {"const": 1}}},
    "then": {"required": ["missing"]},
}
DRAFT_2019 = {
    "$schema": "https://json-schema.org/draft/2019-09/schema",
    "type": "object",
    "properties": {"t": {"type": "array", "items": [{"type": "string"}], "additionalItems": False}},
    "dependentRequired": {"t": ["u"]},
    "$defs": {"unused": {"type": "string"}},
}
INSTANCES: list[Any] = [
    {},
    {"point": ["a", 1]},
    {"point": ["a", 1, True, False]},
    {"point": ["a", 1, "x"]},
    {"point": [1, "a"]},
    {"pair": [{"id": "a"}, {"id": "b"}]},
    {"pair": [{"id": "a"}, {"id": "toolong"}]},
    {"pair": [{"id": "a"}, {}]},
    {"other": {"id": "abcd"}},
    {"other": {"id": "ab"}},
    {"root": {"name": "a", "children": [{"name": "b", "children": []}]}},
    {"root": {"name": "a", "children": [{"children": []}]}},
    {"root": {"name": "a", "extra": 1}},
    {"code": "abcdef"},
    {"code": 5},
    {"card": "4111"},
    {"card": "4111", "billing": "x"},
    {"cvc": "123"},
    {"cvc": "123", "card": "4111", "billing": "x"},
    {"n": 1},
    {"n": "one"},
    {"t": ["a"]},
    {"t": ["a", "b"]},
    {"t": ["a"], "u": 1},
    {"t": [1]},
]


def _validator(schema: dict[str, Any]) -> Any:
    kinds = {
        "http://json-schema.org/draft-07/schema#": jsonschema_rs.Draft7Validator,
        "http://json-schema.org/draft-06/schema#": jsonschema_rs.Draft6Validator,
        "https://json-schema.org/draft/2019-09/schema": jsonschema_rs.Draft201909Validator,
    }
    return kinds.get(schema.get("$schema", ""), jsonschema_rs.Draft202012Validator)(schema)


class TestSameMeaning:
    """A translated schema gives every instance the verdict the original draft gives it."""

    @pytest.mark.parametrize(
        "schema",
        [TUPLE_WITH_REST, REUSED, RECURSIVE, REF_WITH_SIBLINGS, DEPENDENCIES, DRAFT_6_IF, DRAFT_2019],
        ids=["tuple-rest", "reused-ref", "recursive", "ref-siblings", "dependencies", "draft6-if", "2019-09"],
    )
    def test_every_instance_has_the_same_verdict(self, schema: dict[str, Any]) -> None:
        """Each instance is valid under the translation exactly when it is under the original draft."""
        translated = to_draft_2020_12(schema)
        assert "$schema" not in translated
        original, now = _validator(schema), jsonschema_rs.Draft202012Validator(translated)
        verdicts = [(original.is_valid(i), now.is_valid(i)) for i in INSTANCES]
        differ = [i for i, (a, b) in zip(INSTANCES, verdicts, strict=True) if a != b]
        assert differ == []
        assert any(a for a, _ in verdicts)
        assert not all(a for a, _ in verdicts)

    def test_keywords_are_renamed_and_refs_follow(self) -> None:
        """definitions becomes $defs, array items prefixItems, and each $ref names the new place."""
        assert to_draft_2020_12(RECURSIVE)["properties"]["root"] == {"$ref": "#/$defs/Node"}
        pair = to_draft_2020_12(REUSED)["properties"]["pair"]
        assert pair["prefixItems"][1] == {"$ref": "#/properties/pair/prefixItems/0"}
        assert "items" not in pair
        split = to_draft_2020_12(DEPENDENCIES)
        assert split["dependentRequired"] == {"card": ["billing"]}
        assert split["dependentSchemas"] == {"cvc": {"required": ["card"]}}

    def test_a_2020_12_schema_is_returned_as_it_is(self) -> None:
        """A schema without $schema, or saying 2020-12, is not rewritten."""
        schema = {"type": "object", "items": [1], "definitions": {}}
        assert to_draft_2020_12(schema) is schema


class TestRefused:
    """What cannot be said the same way in 2020-12 is refused on one line naming the place."""

    @pytest.mark.parametrize(
        ("schema", "where", "why"),
        [
            ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}, "/", "not a draft"),
            ({"$schema": DRAFT_7, "type": "object", "prefixItems": []}, "/", "prefixItems is not a keyword"),
            (
                {"$schema": DRAFT_7, "type": "object", "properties": {"n": {"exclusiveMinimum": True}}},
                "/properties/n",
                "boolean exclusiveMinimum",
            ),
            (
                {"$schema": DRAFT_7, "type": "object", "properties": {"a": {"$ref": "#/properties/a/enum"}}},
                "/properties/a",
                "names no schema",
            ),
            ({"$schema": 7, "type": "object"}, "/", "not a draft"),
        ],
        ids=["draft-04", "later-keyword", "boolean-exclusive", "ref-into-enum", "not-a-string"],
    )
    def test_refusal_names_the_place(self, schema: dict[str, Any], where: str, why: str) -> None:
        """The refusal says where and why in one line."""
        with pytest.raises(Unclosable) as raised:
            to_draft_2020_12(schema)
        assert str(raised.value).startswith(f"{where}: ")
        assert why in str(raised.value)
        assert "\n" not in str(raised.value)


class TestTypeScriptServers:
    """Every tool schema of the three TypeScript reference servers (their real tools/list answers,
    tests/mcp_listings) closes once translated."""

    @pytest.mark.parametrize("server", ["everything", "filesystem", "memory"])
    def test_every_schema_closes(self, server: str) -> None:
        """Each inputSchema and outputSchema, Draft 7 as listed, closes without a refusal."""
        tools = json.loads(Path(LISTINGS / f"{server}.json").read_text())["tools"]
        schemas = [t[k] for t in tools for k in ("inputSchema", "outputSchema") if k in t]
        assert schemas
        assert all(s.get("$schema") == DRAFT_7 for s in schemas)
        for schema in schemas:
            written = close(schema, max_string=1024, max_items=100)
            assert "$schema" not in json.dumps(written["allOf"][0])
