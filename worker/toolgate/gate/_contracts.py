"""Contracts: one folder per tool, one subfolder per version, decoded strictly.

Layout: ``contracts/<tool>/v<N>/contract.yaml`` plus the schema file it names and
``fixtures/{accept,reject}/*.json``. ``contract.yaml`` decodes into the frozen
:class:`ContractSpec`; any unknown key, wrong type, bad JSON Pointer or schema
that does not compile raises :class:`~toolgate._errors.ContractError` naming the
file and the path of the mistake, so a bad contract fails at start-up.

Schemas compile once with jsonschema-rs, Draft 2020-12, ``format`` asserted,
a retriever that refuses every remote or file ``$ref``, and the linear-time
regex engine for ``pattern`` (no backtracking at all, so no ReDoS); validator
messages are masked so a rejected value never reaches a message.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import jsonschema_rs
import msgspec
import msgspec.yaml
import re2

from toolgate._errors import ContractError
from toolgate.gate._cel import MAX_RULES, CelRule, SchemaView, compile_rule
from toolgate.gate._sensitive import Screen, Sensitive, check_policy, screen_for

# draft: loaded, linted and tested, never decides nor shadows (import-mcp writes drafts).
# disabled: reviewed and deliberately not served: loaded, linted and tested, never decides
# nor shadows, never listed by the MCP proxy; unlike draft, not a lint finding.
Status = Literal["active", "shadow", "retired", "draft", "disabled"]
NOT_LIVE: Final = frozenset({"draft", "disabled"})  # statuses that never decide nor shadow
JSON_CONTENT_TYPE: Final = "application/json"
TEXT_CONTENT_TYPE: Final = "text/plain"
MASK = "[masked]"
# Hard ceilings a contract may not raise: they bound what one message can cost.
MAX_BYTES_CEILING = 8 * 1024 * 1024
MAX_DEPTH_CEILING = 128  # jiter's own recursion limit is 200; stay well inside it
_TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# MCP tool names: 1-128 of [A-Za-z0-9_.-] (the MCP specification). A contract of an MCP tool
# is named <server>.<tool>, the server a plain lower-case name without dots, and the whole
# name is a bounded plain identifier (at most 128 characters) like everything that reaches
# an agent.
MCP_SERVER_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MCP_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
MAX_QUALIFIED_NAME = 128
_ERROR_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
_RE2_MAX_MEM = 8 << 20  # memory for one compiled text pattern (RE2's default)
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_MCP_TITLE = 256  # characters of a pinned title (and of an annotations title)
MAX_MCP_DESCRIPTION = 16384  # characters of a pinned description
MAX_ERROR_CODES = 64  # entries of mcp.error_codes
MAX_INPUT_SCHEMA_BYTES = 256 * 1024  # a pinned input schema file


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Transport limits, checked before and during the parse."""

    max_bytes: int
    max_depth: int


class Bind(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind", tag="bind", kw_only=True
):
    """The value at ``pointer`` must equal the request record's ``bind[request_key]``."""

    pointer: str
    request_key: str


class Freshness(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind", tag="freshness", kw_only=True
):
    """The RFC 3339 timestamp at ``pointer`` must be within ``max_age`` of now and no later
    than ``max_future_skew`` ahead of it."""

    pointer: str
    max_age_seconds: float
    max_future_skew_seconds: float = 0.0
    # How far before the request's issued_at the timestamp may be (clock skew between
    # the adapter and the platform); earlier, the result was made before it was asked for.
    issued_skew_seconds: float = 0.0


class OwnedId(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind", tag="owned_id", kw_only=True
):
    """The identifier at ``pointer`` must belong to the request: one of the list in
    ``bind[request_key]`` (``member``) or start with that string (``prefix``)."""

    pointer: str
    request_key: str
    match: Literal["member", "prefix"] = "member"


class Cel(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind", tag="cel", kw_only=True):
    """A reviewed CEL expression that must be true (:mod:`toolgate.gate._cel`): ``name``
    names it in codes' details, metrics and fixtures."""

    name: str
    expr: str
    description: str = ""


Rule = Bind | Freshness | OwnedId | Cel


SignatureScheme = Literal["v2", "v1"]


class Signature(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The adapter signs the request id, attempt and digest of the raw bytes (scheme v2,
    see :mod:`toolgate.gate._signing`); the key is named by id. ``schemes`` lists the
    schemes verified, in order: the old ``v1`` (no attempt) only where a contract says so."""

    algorithm: Literal["hmac-sha256", "ed25519"]
    key_id: str
    schemes: tuple[SignatureScheme, ...] = ("v2",)


class DisplayText(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A human-readable string passed apart from ``data``, marked untrusted, bounded."""

    pointer: str
    max_length: int


class McpErrorCode(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """An upstream ``isError`` text a person mapped to a code of their own: ``match`` is an
    RE2 pattern matched in full against the result's text blocks (joined by newlines)."""

    match: str
    code: str
    retryable: bool | None = None  # None: the section's error_retryable


class McpAnnotations(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, rename="camel", omit_defaults=True
):
    """MCP ``ToolAnnotations`` as reviewed (hints to the host, never enforced)."""

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None


class McpDefinition(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The pinned tool definition: what ``toolgate mcp-proxy`` lists, and nothing else.

    ``input_schema`` names a file beside ``contract.yaml`` holding the reviewed
    ``inputSchema`` (Draft 2020-12); ``digest`` is :func:`toolgate.gate._mcp.definition_digest`
    of the upstream definition it was imported from: a live definition with another digest
    is withdrawn until it is reviewed again.
    """

    description: str | None = None
    input_schema: str
    digest: str
    title: str | None = None
    annotations: McpAnnotations | None = None


STRUCTURED_OBJECT = "object"
STRUCTURED_VALUE = "value"
WRAPPED_MEMBER = "value"  # the member of data that holds a structuredContent of any JSON type


class McpResultSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The tool answers with an MCP ``CallToolResult`` (see :mod:`toolgate.gate._mcp`)."""

    server: str  # the MCP server the tool comes from (qualifies the tool name)
    tool: str  # the tool's MCP name
    error_code: str = "TOOL_ERROR"  # the failure code of an isError result
    error_retryable: bool = False  # whether the upstream calls an isError result retryable
    text_max_length: int = 1000  # text blocks to untrusted_text, cut to this (0: not passed)
    error_codes: tuple[McpErrorCode, ...] = ()  # isError text -> a reviewed code, first match
    definition: McpDefinition | None = None  # the pinned definition (None: not served)
    argument_rules: tuple[Cel, ...] = ()  # over args and now, before the upstream runs
    # "object": structuredContent is data, an object; "value": data is {"value": structuredContent},
    # any JSON value (MCP 2026-07-28: an array, a string, a number, a boolean or null too).
    structured_content: str = STRUCTURED_OBJECT


def qualified_name(server: str, tool: str) -> str:
    """The contract name of an MCP tool: ``<server>.<tool>``."""
    return f"{server}.{tool}"


class FreeText(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A projected string allowed to carry free text in ``data``, and why (for reviewers).

    ``toolgate contracts lint`` flags every string projected into ``data`` that has no
    ``pattern``, ``enum``, ``const`` or ``format``: free text belongs in ``display_text``.
    """

    pointer: str
    reason: str


class Retry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Failure codes the agent may retry, while the request has attempts left."""

    retryable_codes: tuple[str, ...] = ()


class ContractSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The decoded ``contract.yaml``."""

    tool: str
    version: int  # the major version: a breaking change needs a new one
    minor: int = 0  # compatible revisions of a major version (folder v<version>.<minor>)
    status: Status
    schema: str
    limits: Limits
    projection: tuple[str, ...]
    content_type: Literal["application/json", "text/plain"] = JSON_CONTENT_TYPE
    text_pattern: str | None = None
    adapter_versions: tuple[str, ...] = ("*",)
    # A message without tg-adapter-version is decided only by a version that opts in
    # here: otherwise dropping the header would skip version selection.
    unversioned_adapters: bool = False
    rules: tuple[Rule, ...] = ()
    signature: Signature | None = None
    display_text: tuple[DisplayText, ...] = ()
    free_text: tuple[FreeText, ...] = ()
    retry: Retry = msgspec.field(default_factory=Retry)
    description: str = ""
    mcp: McpResultSpec | None = None
    sensitive: Sensitive | None = None  # secrets and personal data (gate/_sensitive.py)


Pointer = tuple[str, ...]


def version_label(spec: ContractSpec) -> str:
    """The version as metrics label it: ``2`` or, for a minor revision, ``2.1``."""
    return version_name(spec)[1:]


def contract_digest(
    spec: ContractSpec, schema: dict[str, Any], input_schema: dict[str, Any] | None = None
) -> str:
    """What a version enforces, as 16 hex digits: SHA-256 over its decoded ``contract.yaml``
    and its schema (and an MCP tool's pinned input schema), canonical JSON (comments, key
    order and whitespace do not count).

    Workers export it in ``toolgate_contract_info{digest}``; ``toolgate replay --apply``
    compares it with the local contracts'.
    """
    document: dict[str, Any] = {"contract": msgspec.to_builtins(spec), "schema": schema}
    if spec.sensitive is None:  # a version without it enforces what it did before it existed
        del document["contract"]["sensitive"]
    if input_schema is not None:
        document["input_schema"] = input_schema
    canonical = json.dumps(
        document,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def version_name(spec: ContractSpec) -> str:
    """The folder name of a version: ``v2`` or, for a minor revision, ``v2.1``."""
    return f"v{spec.version}" if spec.minor == 0 else f"v{spec.version}.{spec.minor}"


def parse_pointer(pointer: str) -> Pointer:
    """Split an RFC 6901 JSON Pointer into unescaped tokens.

    Raises:
        ValueError: the pointer is not absolute or has a bad escape.
    """
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise ValueError(f"JSON Pointer {pointer!r} must start with '/'")
    tokens = []
    for raw in pointer[1:].split("/"):
        if re.search(r"~(?![01])", raw):
            raise ValueError(f"JSON Pointer {pointer!r} has a bad '~' escape")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


_MISSING: Any = object()
# A projection pointer's token for "every item of this array": /data/entities/*/name gives
# the agent data.entities, an array holding each item's name (toolgate.gate._project).
EVERY_ITEM: Final = "*"


def resolve(doc: Any, tokens: Pointer) -> Any:
    """The value at ``tokens`` in ``doc``, or :data:`MISSING`."""
    # Fast path, member names all the way down: a JSON value raises KeyError or
    # TypeError (a list, a string, a number) wherever the careful walk would stop.
    value = doc
    try:
        for token in tokens:
            value = value[token]
    except (KeyError, TypeError):
        return _resolve_step_by_step(doc, tokens)
    return value


def _resolve_step_by_step(doc: Any, tokens: Pointer) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            doc = doc.get(token, _MISSING)
            if doc is _MISSING:
                return _MISSING
        elif isinstance(doc, list) and token.isdigit():
            index = int(token)
            if index >= len(doc):
                return _MISSING
            doc = doc[index]
        else:
            return _MISSING
    return doc


MISSING = _MISSING


def _refuse_retrieval(uri: str) -> Any:
    raise ValueError(f"remote and file $ref are refused: {uri}")


def _compile_options() -> dict[str, Any]:
    return {
        "validate_formats": True,
        "ignore_unknown_formats": False,
        "retriever": _refuse_retrieval,
        "mask": MASK,
        "pattern_options": jsonschema_rs.RegexOptions(),
    }


def compile_schema(schema: dict[str, Any]) -> Any:
    """Compile a schema the one way toolgate allows (see the module docstring)."""
    return jsonschema_rs.Draft202012Validator(schema, **_compile_options())


def compile_subschemas(schema: dict[str, Any]) -> Any:
    """Every subschema of a Draft 2020-12 ``schema`` compiled with :func:`compile_schema`'s
    options: a ``jsonschema_rs.ValidatorMap`` keyed by URI-fragment JSON pointer."""
    return jsonschema_rs.validator_map_for(schema, **_compile_options())


class Contract:
    """A loaded, compiled contract version, ready for the gate."""

    __slots__ = (
        "argument_rules",
        "array_bounds",
        "cel_rules",
        "data_projection",
        "declared_names",
        "digest",
        "display",
        "error_patterns",
        "folder",
        "input_schema",
        "input_schema_path",
        "input_validator",
        "integer_fields",
        "integer_items",
        "key",
        "leaf_bounds",
        "path",
        "retryable_codes",
        "rules",
        "schema",
        "schema_path",
        "screen",
        "spec",
        "text_regex",
        "validator",
    )

    def __init__(
        self,
        spec: ContractSpec,
        folder: Path,
        schema: dict[str, Any],
        input_schema: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.folder = folder
        self.path = folder / "contract.yaml"
        self.schema_path = folder / spec.schema
        self.schema = schema
        self.key = f"{spec.tool}@{version_name(spec)}"
        where = str(self.path)
        definition = spec.mcp.definition if spec.mcp is not None else None
        self.input_schema_path: Path | None = None
        self.input_validator: Any = None
        if definition is not None:
            self.input_schema_path = folder / definition.input_schema
            if input_schema is None:
                input_schema = _read_input_schema(self.path, folder, definition.input_schema)
            self.input_validator = _compile_or_refuse(input_schema, self.input_schema_path)
        self.input_schema = input_schema if definition is not None else None
        self.digest = contract_digest(spec, schema, self.input_schema)
        self.declared_names = declared_names(schema)
        self.retryable_codes = frozenset(spec.retry.retryable_codes)
        self.validator = _compile_or_refuse(schema, self.schema_path)
        self.cel_rules, self.argument_rules = _compile_cel(spec, schema, self.input_schema, where)
        self.error_patterns: tuple[tuple[TextPattern, str, bool], ...] = ()
        if spec.mcp is not None:
            self.error_patterns = tuple(
                (
                    compile_text_pattern(entry.match, where, f"$.mcp.error_codes[{i}].match"),
                    entry.code,
                    spec.mcp.error_retryable if entry.retryable is None else entry.retryable,
                )
                for i, entry in enumerate(spec.mcp.error_codes)
            )
            _codes_in_failure_enum(spec.mcp, schema, where, self.schema_path)
        self.text_regex: TextPattern | None = None
        if spec.content_type == TEXT_CONTENT_TYPE:
            if spec.text_pattern is None:
                raise ContractError(where, "$.text_pattern", "text/plain contracts need text_pattern")
            self.text_regex = compile_text_pattern(spec.text_pattern, where, "$.text_pattern")
            if not self.text_regex.groupindex:
                raise ContractError(where, "$.text_pattern", "the pattern needs named groups")
        elif spec.text_pattern is not None:
            raise ContractError(where, "$.text_pattern", "only text/plain contracts take one")
        self.data_projection = tuple(
            (p, _data_pointer(where, f"$.projection[{i}]", p, every_item=True))
            for i, p in enumerate(spec.projection)
        )
        for i, (pointer, tokens) in enumerate(self.data_projection):
            if EVERY_ITEM in tokens:
                _every_item_pointer(where, f"$.projection[{i}]", schema, pointer, tokens)
        # Projected fields the schema types as integers: a JSON number like 1.0, 1e0 or
        # -0.0 passes "type": "integer" and is emitted as the integer it equals.
        self.integer_fields = frozenset(
            tokens for _, tokens in self.data_projection if _integer_typed(schema, tokens, items=False)
        )
        self.integer_items = frozenset(
            tokens for _, tokens in self.data_projection if _integer_typed(schema, tokens, items=True)
        )
        _no_overlaps(where, self.data_projection)
        self.leaf_bounds, self.array_bounds = _envelope_bounds(
            where, spec.schema, spec, schema, self.data_projection
        )
        self.display = tuple(
            (d.max_length, _data_pointer(where, f"$.display_text[{i}].pointer", d.pointer))
            for i, d in enumerate(spec.display_text)
        )
        names: dict[str, int] = {}
        for i, (_, tokens) in enumerate(self.display):
            if tokens[-1] in names:
                raise ContractError(
                    where,
                    f"$.display_text[{i}].pointer",
                    f"untrusted_text.{tokens[-1]} is already $.display_text[{names[tokens[-1]]}]",
                )
            names[tokens[-1]] = i
        for i, rule in enumerate(spec.rules):
            if not isinstance(rule, Cel):  # a cel rule names no pointer (gate/_cel.py checks it)
                _data_pointer(where, f"$.rules[{i}].pointer", rule.pointer)
        self.rules = spec.rules
        mcp_text = spec.mcp.text_max_length if spec.mcp is not None and spec.mcp.text_max_length > 0 else None
        allowed = check_policy(
            spec.sensitive,
            where,
            spec.projection,
            tuple(d.pointer for d in spec.display_text),
            mcp_text is not None,
        )
        self.screen: Screen = screen_for(spec.sensitive, allowed, self.display, mcp_text)

    def __repr__(self) -> str:
        return f"<Contract {self.key} {self.spec.status}>"


def _compile_or_refuse(schema: dict[str, Any], schema_path: Path) -> Any:
    try:
        return compile_schema(schema)
    except (ValueError, jsonschema_rs.ValidationError) as exc:
        # One line: where in the schema and why (a pattern the linear-time engine
        # cannot run, such as a look-around or a back-reference, fails here).
        at = getattr(exc, "instance_path", None)
        path = "".join(f"/{p}" for p in at) if at else ""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ContractError(str(schema_path), path, f"schema does not compile: {first}") from exc


def _read_input_schema(path: Path, folder: Path, name: str) -> dict[str, Any]:
    """The pinned ``inputSchema`` file beside ``contract.yaml``: a JSON object that says
    ``"type": "object"`` (MCP's one shape of arguments)."""
    at = "$.mcp.definition.input_schema"
    file = folder / name
    if file.resolve().parent != folder.resolve():
        raise ContractError(str(path), at, "the input schema must sit beside contract.yaml")
    try:
        with file.open("rb") as stream:
            raw = stream.read(MAX_INPUT_SCHEMA_BYTES + 1)
    except OSError as exc:
        raise ContractError(str(path), at, f"cannot read {file}: {exc.strerror}") from exc
    if len(raw) > MAX_INPUT_SCHEMA_BYTES:
        raise ContractError(str(file), "", f"an input schema is at most {MAX_INPUT_SCHEMA_BYTES} bytes")
    try:
        schema = json.loads(raw)
    except ValueError as exc:
        raise ContractError(str(file), "", f"not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ContractError(str(file), "", "an input schema must be a JSON object")
    if schema.get("type") != "object":
        raise ContractError(str(file), "/type", 'an MCP input schema says "type": "object"')
    return schema


def failure_codes(schema: dict[str, Any]) -> frozenset[str] | None:
    """The values the schema's failure branch allows for ``error.code`` (``enum`` or
    ``const`` wherever ``outcome`` is ``failure``), or None where it names none."""
    codes: set[str] = set()
    found = False
    for node in _every_node(schema):
        members = node.get("properties")
        if not isinstance(members, dict) or "outcome" not in members or "error" not in members:
            continue
        outcomes = in_place(schema, members["outcome"])
        if not any(n.get("const") == "failure" or n.get("enum") == ["failure"] for n in outcomes):
            continue
        for error in in_place(schema, members["error"]):
            fields = error.get("properties")
            if not isinstance(fields, dict) or "code" not in fields:
                continue
            for code in in_place(schema, fields["code"]):
                if isinstance(code.get("enum"), list):
                    found = True
                    codes.update(c for c in code["enum"] if isinstance(c, str))
                if isinstance(code.get("const"), str):
                    found = True
                    codes.add(code["const"])
    return frozenset(codes) if found else None


def _every_node(schema: Any) -> Iterator[dict[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node
            stack.extend(node.values())


def _codes_in_failure_enum(mcp: McpResultSpec, schema: dict[str, Any], where: str, schema_path: Path) -> None:
    """Every code an isError result can carry is one the schema's failure branch allows."""
    allowed = failure_codes(schema)
    if allowed is None:
        if mcp.error_codes:
            raise ContractError(
                where,
                "$.mcp.error_codes",
                f"{schema_path.name} names no failure error.code enum to hold these codes",
            )
        return
    named = [("$.mcp.error_code", mcp.error_code)] + [
        (f"$.mcp.error_codes[{i}].code", entry.code) for i, entry in enumerate(mcp.error_codes)
    ]
    for at, code in named:
        if code not in allowed:
            raise ContractError(
                where,
                at,
                f"{code} is not in {schema_path.name}'s failure error.code enum "
                f"({', '.join(sorted(allowed)) or 'empty'}): add it there",
            )


def declared_names(schema: Any) -> frozenset[str]:
    """Every member name the schema declares anywhere (``properties``, ``required``,
    ``dependentRequired``, ``dependentSchemas``): the names diagnostics may show."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for keyword in ("properties", "dependentRequired", "dependentSchemas"):
            members = node.get(keyword)
            if isinstance(members, dict):
                names.update(k for k in members if isinstance(k, str))
        required = node.get("required")
        if isinstance(required, list):
            names.update(r for r in required if isinstance(r, str))
        stack.extend(node.values())
    return frozenset(names)


_IN_PLACE = ("allOf", "anyOf", "oneOf", "then", "else")


def in_place(
    root: Any, node: Any, keywords: tuple[str, ...] = _IN_PLACE, most: int | None = None
) -> list[dict[str, Any]]:
    """``node`` and the subschemas applied to the same instance (local ``$ref`` targets and the
    ``keywords`` branches: by default allOf, anyOf, oneOf, then, else), each once; at most
    ``most`` of them when given."""
    found: list[dict[str, Any]] = []
    seen: set[int] = set()
    stack = [node]
    while stack and (most is None or len(found) < most):
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            try:
                target = resolve(root, parse_pointer(ref[1:]))
            except ValueError:
                target = MISSING
            if target is not MISSING:
                stack.append(target)
        for keyword in keywords:
            branch = node.get(keyword)
            stack.extend(branch if isinstance(branch, list) else [branch])
    return found


def item_schemas(node: Mapping[str, Any]) -> list[Any]:
    """The subschemas ``node`` applies to its array's items: ``items`` and every ``prefixItems``."""
    found = [node["items"]] if isinstance(node.get("items"), dict) else []
    prefix = node.get("prefixItems")
    return found + (list(prefix) if isinstance(prefix, list) else [])


def _level_at(schema: Any, tokens: Pointer) -> list[dict[str, Any]]:
    """The subschemas applied to the value at ``tokens``; :data:`EVERY_ITEM` steps into items."""
    level = in_place(schema, schema)
    for token in tokens:
        below: list[dict[str, Any]] = []
        for node in level:
            if token == EVERY_ITEM:
                for item in item_schemas(node):
                    below += in_place(schema, item)
                continue
            members = node.get("properties")
            if isinstance(members, dict) and token in members:
                below += in_place(schema, members[token])
        level = below
    return level


def _types_at(schema: Any, tokens: Pointer, *, items: bool = False) -> set[str]:
    """The ``type`` names of the subschemas at ``tokens`` (or of their array items)."""
    level = _level_at(schema, (*tokens, EVERY_ITEM) if items else tokens)
    return _type_names(level)


def _type_names(level: list[dict[str, Any]]) -> set[str]:
    types: set[str] = set()
    for node in level:
        kind = node.get("type")
        if isinstance(kind, str):
            types.add(kind)
        elif isinstance(kind, list):
            types.update(k for k in kind if isinstance(k, str))
    return types


def _integer_typed(schema: Any, tokens: Pointer, *, items: bool) -> bool:
    """Whether the subschemas at ``tokens`` (or its array items) say integer and none
    there allows other numbers."""
    types = _types_at(schema, tokens, items=items)
    return "integer" in types and "number" not in types


# --- the agent envelope's bounds -------------------------------------------------------
# Each projected leaf of the agent envelope (toolgate.gate._project) is bounded by what the
# contract's schema guarantees at its pointer: the longest string (maxLength), the most items
# (maxItems), the longest string item of an array (its items' maxLength). Where the schema
# guarantees none, the envelope's defaults hold. A bound past limits.max_bytes is refused at
# load: no value that long can arrive, so the schema says something it does not mean.
ENVELOPE_MAX_LENGTH: Final = 4096  # a projected string where the schema sets no maxLength
ENVELOPE_MAX_ITEMS: Final = 1000  # a projected array where the schema sets no maxItems
_BOUND_STEPS: Final = 20_000  # subschemas visited for one bound: a larger shape gets the default
_BOUND_DEPTH: Final = 64  # $ref hops and nesting followed for one bound
_IMPOSSIBLE: Any = object()  # no value can be at the place (a closed object, another type)


class LeafBounds(msgspec.Struct, frozen=True):
    """The agent envelope's bounds at one projected leaf, and where each came from (the
    schema's own keyword, or None: the envelope's default)."""

    max_length: int
    max_items: int
    items_max_length: int
    from_schema: tuple[int | None, int | None, int | None] = (None, None, None)


def bound_ceilings(max_bytes: int) -> tuple[int, int]:
    """The highest (string length, item count) a result of ``max_bytes`` can hold: a string
    of more characters, or an array of more items (each at least a digit and a comma), cannot fit."""
    return max_bytes, max(1, max_bytes // 2)


class _BoundWalk:
    """The bound ``keyword`` (``maxLength`` or ``maxItems``) every value the schema accepts
    at an instance path satisfies: ``allOf``, ``$ref`` and the node itself all apply (the
    tightest holds); ``anyOf``/``oneOf`` branches each may (the loosest holds, and a branch
    with none leaves none). A branch where no value can be at the path (a closed object
    without the member, another type) does not count. ``$ref`` resolves in the resource of
    the nearest ``$id`` (an imported closure's ``#/$defs/...``)."""

    def __init__(self, root: Any, keyword: str) -> None:
        self.root = root
        self.keyword = keyword
        self.kind = "string" if keyword == "maxLength" else "array"
        self.steps = 0

    def bound(self, tokens: Pointer) -> int | None:
        try:
            found = self.at(self.root, self.root, tokens, 0)
        except RecursionError:
            return None
        return found if isinstance(found, int) else None

    def at(self, node: Any, base: Any, tokens: Pointer, depth: int) -> Any:
        """An int, None (unbounded) or :data:`_IMPOSSIBLE`."""
        self.steps += 1
        if self.steps > _BOUND_STEPS or depth > _BOUND_DEPTH:
            raise RecursionError  # too large a shape: no bound is claimed
        if node is False:
            return _IMPOSSIBLE
        if not isinstance(node, dict):
            return None
        if isinstance(node.get("$id"), str):
            base = node
        every: list[Any] = [self.own(node, tokens, base, depth)]
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = _MISSING
            if ref.startswith("#"):
                try:
                    target = resolve(base, parse_pointer(ref[1:]))
                except ValueError:
                    target = _MISSING
            every.append(None if target is _MISSING else self.at(target, base, tokens, depth + 1))
        members = node.get("allOf")
        if isinstance(members, list):
            every += [self.at(m, base, tokens, depth + 1) for m in members]
        for keyword in ("anyOf", "oneOf"):
            branches = node.get(keyword)
            if isinstance(branches, list) and branches:
                every.append(_loosest([self.at(b, base, tokens, depth + 1) for b in branches]))
        if any(b is _IMPOSSIBLE for b in every):
            return _IMPOSSIBLE
        counts = [b for b in every if isinstance(b, int)]
        return min(counts) if counts else None

    def own(self, node: dict[str, Any], tokens: Pointer, base: Any, depth: int) -> Any:
        """What ``node``'s own keywords say at ``tokens`` (not its applicators)."""
        kind = node.get("type")
        types = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else None
        if not tokens:
            if "const" in node or isinstance(node.get("enum"), list):
                values = [node["const"]] if "const" in node else node["enum"]
                sizes = [len(v) for v in values if isinstance(v, str if self.kind == "string" else list)]
                return max(sizes) if sizes else _IMPOSSIBLE
            if types is not None and self.kind not in types:
                return _IMPOSSIBLE
            value = node.get(self.keyword)
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        token, rest = tokens[0], tokens[1:]
        if token == EVERY_ITEM:
            if types is not None and "array" not in types:
                return _IMPOSSIBLE
            prefix = node.get("prefixItems")
            items = node.get("items", True if isinstance(prefix, list) else None)
            if items is None:
                return None
            places = (list(prefix) if isinstance(prefix, list) else []) + [items]
            return _loosest([self.at(p, base, rest, depth + 1) for p in places])
        if types is not None and "object" not in types:
            return _IMPOSSIBLE
        members = node.get("properties")
        if isinstance(members, dict) and token in members:
            return self.at(members[token], base, rest, depth + 1)
        if "patternProperties" in node:
            return None
        extra = node.get("additionalProperties")
        if extra is False or isinstance(extra, dict):
            return self.at(extra, base, rest, depth + 1)
        return None


def _loosest(branches: list[Any]) -> Any:
    """The bound that holds whichever branch applied (branches that admit nothing aside)."""
    open_ = [b for b in branches if b is not _IMPOSSIBLE]
    if not open_:
        return _IMPOSSIBLE
    if any(b is None for b in open_):
        return None
    return max(open_)


def schema_bound(schema: Any, tokens: Pointer, keyword: str) -> int | None:
    """The ``maxLength`` or ``maxItems`` every value ``schema`` accepts at ``tokens`` (member
    names, :data:`EVERY_ITEM` for every item) satisfies, or None where it guarantees none."""
    return _BoundWalk(schema, keyword).bound(tokens)


def _envelope_bounds(
    where: str, schema_file: str, spec: ContractSpec, schema: Any, projection: tuple[tuple[str, Pointer], ...]
) -> tuple[dict[Pointer, LeafBounds], dict[Pointer, int]]:
    """Each projected leaf's bounds, and each array projected item by item's ``maxItems``
    (keyed by its tokens).

    Raises:
        ContractError: a bound the schema sets past what limits.max_bytes lets arrive.
    """
    strings, items = bound_ceilings(spec.limits.max_bytes)
    leaves: dict[Pointer, LeafBounds] = {}
    arrays: dict[Pointer, int] = {}

    def bound(i: int, tokens: Pointer, keyword: str, default: int, ceiling: int) -> tuple[int, int | None]:
        found = schema_bound(schema, tokens, keyword)
        if found is not None and found > ceiling:
            raise ContractError(
                where,
                f"$.projection[{i}]",
                f"{schema_file} bounds {_pointer_text(tokens)} at {keyword} {found}, past limits.max_bytes "
                f"{spec.limits.max_bytes} (at most {ceiling}): lower the {keyword} (an imported schema: "
                "toolgate contracts rebound) or raise limits.max_bytes",
            )
        return (found if found is not None else min(default, ceiling)), found

    for i, (_, tokens) in enumerate(projection):
        for at in range(1, len(tokens) - 1):
            if tokens[at + 1] == EVERY_ITEM and tokens[: at + 1] not in arrays:
                arrays[tokens[: at + 1]] = bound(i, tokens[: at + 1], "maxItems", ENVELOPE_MAX_ITEMS, items)[
                    0
                ]
        length, own_length = bound(i, tokens, "maxLength", ENVELOPE_MAX_LENGTH, strings)
        count, own_count = bound(i, tokens, "maxItems", ENVELOPE_MAX_ITEMS, items)
        item, own_item = bound(i, (*tokens, EVERY_ITEM), "maxLength", ENVELOPE_MAX_LENGTH, strings)
        leaves[tokens] = LeafBounds(length, count, item, (own_length, own_count, own_item))
    return leaves, arrays


def _pointer_text(tokens: Pointer) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


class TextPattern(Protocol):
    """A compiled text pattern (RE2): what the gate's text extraction uses of it."""

    @property
    def groupindex(self) -> Mapping[str, int]: ...

    def fullmatch(self, text: str) -> Any: ...


def compile_text_pattern(pattern: str, where: str, path: str) -> TextPattern:
    """Compile a text contract's pattern with RE2: linear time in the input, no backtracking.

    RE2 has no look-around and no back-references; a pattern that needs them is refused
    here, naming the file and field, rather than run on a backtracking engine.

    Raises:
        ContractError: the pattern does not compile with RE2.
    """
    options = re2.Options()
    options.log_errors = False  # the error is reported once, as a ContractError
    options.max_mem = _RE2_MAX_MEM
    try:
        compiled: TextPattern = re2.compile(pattern, options)
    except re2.error as exc:
        reason = (
            exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        )
        raise ContractError(where, path, f"not a linear-time (RE2) regular expression: {reason}") from None
    return compiled


def _data_pointer(where: str, path: str, pointer: str, *, every_item: bool = False) -> Pointer:
    try:
        tokens = parse_pointer(pointer)
    except ValueError as exc:
        raise ContractError(where, path, str(exc)) from exc
    if len(tokens) < 2 or tokens[0] != "data":
        raise ContractError(where, path, f"pointer {pointer!r} must point inside /data")
    if EVERY_ITEM in tokens and not every_item:
        raise ContractError(
            where,
            path,
            f"pointer {pointer!r}: '{EVERY_ITEM}' (every item of an array) is for projection only",
        )
    return tokens


def _every_item_pointer(where: str, path: str, schema: Any, pointer: str, tokens: Pointer) -> None:
    """Each ``*`` of a projection pointer stands where the schema holds an array (or null)
    of objects with one schema for every item, and a member name follows it: the agent gets
    an array of closed objects, each holding the named members of one item. Judged on the
    ``type`` keywords this walk reaches (a reference into an embedded resource it cannot
    follow leaves the place untyped, and the closed output schema still refuses any item
    that is not an object).

    Raises:
        ContractError: naming the pointer and what the schema says there.
    """
    for at, token in enumerate(tokens):
        if token != EVERY_ITEM:
            continue
        if at == len(tokens) - 1:
            raise ContractError(
                where,
                path,
                f"{pointer} ends in '{EVERY_ITEM}': project an array of scalars by its own pointer, "
                f"or name the items' members ({pointer}/<member>)",
            )
        array = _level_at(schema, tokens[:at])
        kinds = _type_names(array)
        shown = "/" + "/".join(tokens[:at])
        if kinds and not ("array" in kinds and kinds <= {"array", "null"}):
            message = f"{pointer}: the schema must type {shown} as an array, not {sorted(kinds)}"
            raise ContractError(where, path, message)
        if any(isinstance(node.get("prefixItems"), list) for node in array):
            raise ContractError(
                where, path, f"{pointer}: '{EVERY_ITEM}' needs one schema for every item, not prefixItems"
            )
        items = _type_names(_level_at(schema, tokens[: at + 1]))
        if items and items != {"object"}:
            raise ContractError(
                where,
                path,
                f"{pointer}: the schema must type the items of {shown} as objects, not {sorted(items)}",
            )


def _no_overlaps(where: str, projection: tuple[tuple[str, Pointer], ...]) -> None:
    """Each projected field is one leaf of the agent's object: no pointer may repeat
    another or lie inside it (``/data/a`` and ``/data/a/b`` cannot both be leaves).
    Linear in the pointers' tokens: a projection of thousands of fields loads at once."""
    leaves: dict[Pointer, int] = {}  # a leaf's tokens -> its index
    inner: dict[Pointer, int] = {}  # a proper prefix of a leaf -> the first such leaf's index
    for i, (pointer, tokens) in enumerate(projection):
        j = leaves.get(tokens, inner.get(tokens))
        for cut in range(1, len(tokens)):
            if j is None:
                j = leaves.get(tokens[:cut])
        if j is not None:
            relation = "repeats" if projection[j][1] == tokens else "overlaps"
            raise ContractError(
                where, f"$.projection[{i}]", f"{pointer} {relation} {projection[j][0]} ($.projection[{j}])"
            )
        leaves[tokens] = i
        for cut in range(1, len(tokens)):
            inner.setdefault(tokens[:cut], i)


def _compile_cel(
    spec: ContractSpec, schema: dict[str, Any], input_schema: dict[str, Any] | None, where: str
) -> tuple[tuple[CelRule, ...], tuple[CelRule, ...]]:
    """The contract's ``cel`` rules and MCP argument rules, compiled and checked once."""
    default_items = spec.limits.max_bytes // 2  # the most items max_bytes can hold
    view = SchemaView(lambda tokens: _level_at(schema, tokens), default_items)
    specs = [(i, r) for i, r in enumerate(spec.rules) if isinstance(r, Cel)]
    arguments = spec.mcp.argument_rules if spec.mcp is not None else ()
    for path, listed in (("$.rules", specs), ("$.mcp.argument_rules", arguments)):
        if len(listed) > MAX_RULES:
            raise ContractError(where, path, f"at most {MAX_RULES} cel rules")
    names = [r.name for _, r in specs]
    for i, rule in specs:
        if names.count(rule.name) > 1:
            raise ContractError(where, f"$.rules[{i}].name", f"rule name {rule.name!r} repeats")
    if arguments and (spec.mcp is None or spec.mcp.definition is None):
        raise ContractError(where, "$.mcp.argument_rules", "argument rules need mcp.definition")
    results = tuple(
        compile_rule(
            r.name, r.expr, r.description, kind="result", where=where, path=f"$.rules[{i}]", schema=view
        )
        for i, r in specs
    )
    given = input_schema if input_schema is not None else {}
    args_view = SchemaView(lambda tokens: _level_at(given, tokens), default_items)
    argument_names = [r.name for r in arguments]
    compiled = []
    for i, rule in enumerate(arguments):
        if argument_names.count(rule.name) > 1:
            raise ContractError(where, f"$.mcp.argument_rules[{i}].name", f"rule name {rule.name!r} repeats")
        compiled.append(
            compile_rule(
                rule.name,
                rule.expr,
                rule.description,
                kind="arguments",
                where=where,
                path=f"$.mcp.argument_rules[{i}]",
                schema=args_view,
            )
        )
    return results, tuple(compiled)


def load_contract(folder: Path) -> Contract:
    """Load and compile ``folder/contract.yaml`` and its schema.

    Raises:
        ContractError: naming the file and the path of the mistake.
    """
    path = folder / "contract.yaml"
    try:
        spec = msgspec.yaml.decode(path.read_bytes(), type=ContractSpec, strict=True)
    except OSError as exc:
        raise ContractError(str(path), "", f"cannot read: {exc.strerror}") from exc
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).partition(" - at `")
        at = at.rstrip("`")
        if at == "$.version":
            message = _version_hint(path, message)
        raise ContractError(str(path), at, message) from exc
    except msgspec.DecodeError as exc:
        raise ContractError(str(path), "", f"not valid YAML: {exc}") from exc
    _check_spec(spec, path, folder)
    schema_file = folder / spec.schema
    if schema_file.resolve().parent != folder.resolve():
        raise ContractError(str(path), "$.schema", "the schema must sit beside contract.yaml")
    try:
        schema = json.loads(schema_file.read_bytes())
    except OSError as exc:
        raise ContractError(str(path), "$.schema", f"cannot read {schema_file}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ContractError(str(schema_file), "", f"not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ContractError(str(schema_file), "", "a schema must be a JSON object")
    return Contract(spec, folder, schema)


def _looked_in(base: Path) -> str:
    """Where a contracts path was looked for, and which settings name another one."""
    where = f" (relative to the working directory {Path.cwd()})" if not base.is_absolute() else ""
    return f"{where}; name the contracts folder with --contracts DIR or TOOLGATE_CONTRACTS_DIR"


def _version_hint(path: Path, message: str) -> str:
    """For ``version: 1.1`` (or ``"1.1"``): how a compatible revision is written instead."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return message
    written = re.search(r"""^version:\s*["']?(\d+)\.(\d+)["']?\s*(?:#.*)?$""", text, re.MULTILINE)
    if written is None:
        return message
    major, minor = int(written.group(1)), int(written.group(2))
    return (
        f"version is the major version, a whole number: a compatible revision is written "
        f"'version: {major}' and 'minor: {minor}', in folder v{major}.{minor} "
        f"(not 'version: {written.group(1)}.{written.group(2)}')"
    )


def _check_spec(spec: ContractSpec, path: Path, folder: Path) -> None:
    where = str(path)
    if spec.mcp is not None:
        _check_mcp(spec, spec.mcp, where)
    elif not _TOOL_NAME.fullmatch(spec.tool):
        raise ContractError(where, "$.tool", f"tool name must match {_TOOL_NAME.pattern}")
    if folder.parent.name != spec.tool:
        raise ContractError(where, "$.tool", f"tool {spec.tool!r} sits in folder {folder.parent.name!r}")
    if folder.name != version_name(spec):
        raise ContractError(
            where, "$.version", f"version {version_name(spec)} sits in folder {folder.name!r}"
        )
    if not 0 < spec.limits.max_bytes <= MAX_BYTES_CEILING:
        raise ContractError(where, "$.limits.max_bytes", f"must be in 1..{MAX_BYTES_CEILING}")
    if not 0 < spec.limits.max_depth <= MAX_DEPTH_CEILING:
        raise ContractError(where, "$.limits.max_depth", f"must be in 1..{MAX_DEPTH_CEILING}")
    for i, code in enumerate(spec.retry.retryable_codes):
        if not _ERROR_CODE.fullmatch(code):
            raise ContractError(where, f"$.retry.retryable_codes[{i}]", "not an error code")
    for i, display in enumerate(spec.display_text):
        if not 0 < display.max_length <= 4096:
            raise ContractError(where, f"$.display_text[{i}].max_length", "must be in 1..4096")
        if display.pointer in spec.projection:
            raise ContractError(
                where, f"$.display_text[{i}].pointer", "display text must not also be projected into data"
            )
    for i, free in enumerate(spec.free_text):
        if free.pointer not in spec.projection:
            raise ContractError(where, f"$.free_text[{i}].pointer", "names no projected field")
        if len(free.reason.strip()) < 10:
            raise ContractError(
                where, f"$.free_text[{i}].reason", "give the reason free text is needed in data"
            )
    for i, rule in enumerate(spec.rules):
        if isinstance(rule, Freshness) and (
            rule.max_age_seconds <= 0 or rule.max_future_skew_seconds < 0 or rule.issued_skew_seconds < 0
        ):
            raise ContractError(where, f"$.rules[{i}]", "freshness windows must be positive")
    if spec.signature is not None and (
        not spec.signature.schemes or len(set(spec.signature.schemes)) != len(spec.signature.schemes)
    ):
        raise ContractError(where, "$.signature.schemes", "list each scheme once, at least one")


def _check_mcp(spec: ContractSpec, mcp: McpResultSpec, where: str) -> None:
    if not MCP_SERVER_NAME.fullmatch(mcp.server):
        raise ContractError(where, "$.mcp.server", f"server name must match {MCP_SERVER_NAME.pattern}")
    if not MCP_TOOL_NAME.fullmatch(mcp.tool):
        raise ContractError(where, "$.mcp.tool", f"MCP tool name must match {MCP_TOOL_NAME.pattern}")
    qualified = qualified_name(mcp.server, mcp.tool)
    if len(qualified) > MAX_QUALIFIED_NAME:
        raise ContractError(where, "$.mcp.tool", f"<server>.<tool> exceeds {MAX_QUALIFIED_NAME} characters")
    if spec.tool != qualified:
        raise ContractError(where, "$.tool", f"an MCP tool's contract is named {qualified!r}")
    if spec.content_type != JSON_CONTENT_TYPE:
        raise ContractError(where, "$.content_type", "an MCP result is application/json")
    if not _ERROR_CODE.fullmatch(mcp.error_code):
        raise ContractError(where, "$.mcp.error_code", "not an error code")
    if not 0 <= mcp.text_max_length <= spec.limits.max_bytes:
        raise ContractError(
            where,
            "$.mcp.text_max_length",
            f"must be in 0..{spec.limits.max_bytes} (limits.max_bytes: the text cannot be longer)",
        )
    if mcp.structured_content not in (STRUCTURED_OBJECT, STRUCTURED_VALUE):
        raise ContractError(
            where,
            "$.mcp.structured_content",
            f"{STRUCTURED_OBJECT!r} (data is structuredContent, an object) or {STRUCTURED_VALUE!r} "
            f"(data is {{{WRAPPED_MEMBER!r}: structuredContent}}, any JSON value)",
        )
    if spec.display_text:
        raise ContractError(where, "$.display_text", "an MCP result's display text is its text blocks")
    if len(mcp.error_codes) > MAX_ERROR_CODES:
        raise ContractError(where, "$.mcp.error_codes", f"at most {MAX_ERROR_CODES} entries")
    for i, entry in enumerate(mcp.error_codes):
        if not _ERROR_CODE.fullmatch(entry.code):
            raise ContractError(where, f"$.mcp.error_codes[{i}].code", f"must match {_ERROR_CODE.pattern}")
        if not entry.match:
            raise ContractError(where, f"$.mcp.error_codes[{i}].match", "an empty pattern")
    if mcp.definition is not None:
        _check_definition(mcp.definition, where)


def _check_definition(definition: McpDefinition, where: str) -> None:
    at = "$.mcp.definition"
    if not DIGEST_PATTERN.fullmatch(definition.digest):
        raise ContractError(where, f"{at}.digest", "must be sha256: and 64 lower-case hex digits")
    if definition.title is not None and not 0 < len(definition.title) <= MAX_MCP_TITLE:
        raise ContractError(where, f"{at}.title", f"must be 1..{MAX_MCP_TITLE} characters")
    if definition.description is not None and len(definition.description) > MAX_MCP_DESCRIPTION:
        raise ContractError(where, f"{at}.description", f"at most {MAX_MCP_DESCRIPTION} characters")
    annotations = definition.annotations
    if annotations is not None and annotations.title is not None and len(annotations.title) > MAX_MCP_TITLE:
        raise ContractError(where, f"{at}.annotations.title", f"at most {MAX_MCP_TITLE} characters")


class ContractSet:
    """Every contract version under a folder, indexed for the gate.

    Version selection: a message's ``tg-adapter-version`` is matched against each
    version's ``adapter_versions`` glob patterns; the highest non-shadow version that
    matches is the one that decides (a ``retired`` one rejects). ``shadow`` versions
    are evaluated beside it and never decide. A message without the header is served
    only by versions with ``unversioned_adapters: true`` (shadows alike): none, and
    it is ``UNKNOWN_CONTRACT_VERSION``.
    """

    def __init__(self, contracts: list[Contract], generation: int = 0) -> None:
        if generation < 0:
            raise ValueError(f"a contract set's generation is 0 or more, not {generation}")
        self.contracts = sorted(contracts, key=lambda c: (c.spec.tool, c.spec.version, c.spec.minor))
        # The set's identity (docs/design.md, One contract set for the group): the
        # publisher's generation (0: unordered, a folder) and what the set enforces.
        self.generation = generation
        self.digest = set_digest(self.contracts)
        self.label = set_label(generation, self.digest)
        self._by_tool: dict[str, list[Contract]] = {}
        for contract in self.contracts:
            self._by_tool.setdefault(contract.spec.tool, []).append(contract)
        for versions in self._by_tool.values():
            versions.sort(key=lambda c: (c.spec.version, c.spec.minor), reverse=True)
        # select() runs per message and fnmatch is slow: remember answers, boundedly
        # (adapter versions are attacker-chosen, so the cache is cleared when full).
        self._selected: dict[tuple[str, str | None], Contract | None] = {}

    @classmethod
    def load(cls, root: str | Path, generation: int = 0) -> ContractSet:
        """Load every ``<tool>/v<N>/contract.yaml`` under ``root``.

        Raises:
            ContractError: the first contract that fails, with file and path.
        """
        base = Path(root)
        if not base.is_dir():
            problem = "is a file, not a folder" if base.exists() else "not found"
            raise ContractError(str(base.absolute()), "", f"contracts folder {problem}{_looked_in(base)}")
        folders = sorted(p.parent for p in base.glob("*/v*/contract.yaml"))
        if not folders:
            raise ContractError(
                str(base.absolute()),
                "",
                f"no contracts found (expected <tool>/v<N>/contract.yaml){_looked_in(base)}",
            )
        return cls([load_contract(folder) for folder in folders], generation)

    def __iter__(self) -> Iterator[Contract]:
        return iter(self.contracts)

    def __len__(self) -> int:
        return len(self.contracts)

    @property
    def tools(self) -> list[str]:
        """Tool names with at least one version."""
        return sorted(self._by_tool)

    def versions(self, tool: str) -> list[Contract]:
        """All versions of ``tool``, newest first."""
        return self._by_tool.get(tool, [])

    def select(self, tool: str, adapter_version: str | None) -> Contract | None:
        """The version that decides for this tool and adapter version (may be retired)."""
        cache_key = (tool, adapter_version)
        try:
            return self._selected[cache_key]
        except KeyError:
            pass
        if len(self._selected) >= 4096:
            self._selected.clear()
        chosen = self._select(tool, adapter_version)
        self._selected[cache_key] = chosen
        return chosen

    def _select(self, tool: str, adapter_version: str | None) -> Contract | None:
        for contract in self._by_tool.get(tool, ()):
            status = contract.spec.status
            if status == "shadow" or status in NOT_LIVE or not serves(contract, adapter_version):
                continue
            if adapter_version is None and contract.spec.status == "retired":
                continue
            return contract
        return None

    def shadows(self, tool: str, adapter_version: str | None) -> list[Contract]:
        """Shadow versions that match this message, to be evaluated beside the decider."""
        return [
            c for c in self._by_tool.get(tool, ()) if c.spec.status == "shadow" and serves(c, adapter_version)
        ]


def set_digest(contracts: Iterable[Contract]) -> str:
    """What a set of versions enforces, as 64 hex digits: SHA-256 over the sorted
    (tool, version label, status, contract digest) of every version, one per line."""
    lines = sorted(
        f"{c.spec.tool}\t{version_label(c.spec)}\t{c.spec.status}\t{c.digest}\n" for c in contracts
    )
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def set_label(generation: int, digest: str) -> str:
    """The set as records and metrics name it: ``g<generation>-<first 12 digest digits>``."""
    return f"g{generation}-{digest[:12]}"


def serves(contract: Contract, adapter_version: str | None) -> bool:
    """Whether ``contract`` serves this ``tg-adapter-version``: one of its globs matches, or
    the header is missing and the version opts in to unversioned adapters."""
    if adapter_version is None:
        return contract.spec.unversioned_adapters
    return any(fnmatch.fnmatchcase(adapter_version, pattern) for pattern in contract.spec.adapter_versions)
