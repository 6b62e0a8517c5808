"""How contract versions sit in a schema registry (the strategy ``docs/contracts.md`` documents).

Subjects: one per tool and major version, ``<tool>-v<major>-value`` (``job_status-v1-value``).
A major version may break its predecessor and a revision may not, so the compatibility rule
of a subject is the rule of a major version: ``BACKWARD`` (a new registration must accept
every value the latest one accepted), and a new major version starts a new subject.

Versions: each contract version ``v<major>.<minor>`` is one registration in its major's
subject, in order of ``minor``: the contract's schema as a JSON Schema, with the metadata
beside it under the annotation keyword ``x-toolgate``:

``minor``
    the revision; ``contract`` the decoded ``contract.yaml`` (status, limits, projection,
    rules, signature, ...); ``fixtures`` the digest of its fixture files; ``digest`` the
    version's contract digest (``toolgate_contract_info{digest}``); ``dialect`` the schema's own
    ``$schema``; ``statuses`` the status of every revision of the major version, by minor;
    ``sequence`` the registration's place in the subject (1, 2, ...), so that registering
    earlier statuses again is a new registration, not the old one (registries answer an
    identical document with the version that holds it); ``input_schema`` the pinned input
    schema of an MCP tool's definition (the file ``mcp.definition.input_schema`` names, which
    counts in the digest), absent for other contracts.

``published``
    the signed versions this registration carries (:class:`toolgate.gate._published.PublishedVersion`,
    usually its own revision; a re-registration for statuses carries the revisions whose
    ``contract.yaml`` changed): readers load these files, and only when the readers' keyring
    names their publisher and the signature holds. The rest of the metadata serves ``publish``
    and the registry's own compatibility check; a reader trusts none of it.

Sets: ``toolgate contracts publish`` writes a signed set marker LAST in the subject
``<set>-set-value`` (``toolgate-set-value`` by default, ``TOOLGATE_REGISTRY_SET_NAME``), one
registration per generation: ``{"$schema": draft-07, "x-toolgate-set": <SetMarker>}``. A reader
loads the versions the newest marker that verifies names, and only when all are there with
their digests.

Registries check JSON Schema compatibility with drafts 4 to 7 (Apicurio Registry cannot
parse a 2020-12 document), so the registered ``$schema`` is draft-07 and the contract's own
dialect travels in ``x-toolgate.dialect``: readers put it back. They resolve every ``#...``
reference from the root too: a schema embedding resources with a ``$id`` is registered as
:func:`registry_rendition` of it, and the schema itself travels in ``x-toolgate.schema``.
A status change (retiring ``v1`` once ``v1.1`` decides) re-registers the newest revision
with new ``statuses``: the schema of a registered revision never changes, and the newest
registration's ``statuses`` wins.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Final

import msgspec

from toolgate._errors import ConfigError
from toolgate.gate._contracts import Contract, ContractSpec, contract_digest
from toolgate.gate._published import PublishedVersion, SetMarker

__all__ = [
    "COMPATIBILITY",
    "DEFAULT_SET",
    "KEYWORD",
    "REGISTRY_DIALECT",
    "SET_KEYWORD",
    "Entry",
    "entry_of",
    "fixtures_digest",
    "marker_text",
    "parse_marker",
    "parse_published",
    "parse_subject",
    "registry_rendition",
    "set_subject",
    "subject_of",
]

KEYWORD: Final = "x-toolgate"
SET_KEYWORD: Final = "x-toolgate-set"
DEFAULT_SET: Final = "toolgate"
_SET_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
REGISTRY_DIALECT: Final = "http://json-schema.org/draft-07/schema#"
COMPATIBILITY: Final = "BACKWARD"
_SUBJECT: Final = re.compile(r"^(?P<tool>.+)-v(?P<major>[1-9][0-9]{0,5})-value$")


def subject_of(tool: str, major: int) -> str:
    """The subject of a tool's major version: ``<tool>-v<major>-value``."""
    return f"{tool}-v{major}-value"


def parse_subject(subject: str) -> tuple[str, int] | None:
    """``(tool, major)`` of a toolgate subject, None for any other subject."""
    match = _SUBJECT.fullmatch(subject)
    return (match["tool"], int(match["major"])) if match else None


def set_subject(name: str) -> str:
    """The subject of a set's markers: ``<name>-set-value``.

    Raises:
        ConfigError: a name that is not letters, digits, ``_``, ``.`` and ``-`` (at most 100).
    """
    if not _SET_NAME.fullmatch(name):
        raise ConfigError(
            f"TOOLGATE_REGISTRY_SET_NAME={name!r}: expected letters, digits, '_', '.' and '-' (at most 100)"
        )
    return f"{name}-set-value"


def marker_text(marker: SetMarker) -> str:
    """The document registered for a set marker."""
    document = {"$schema": REGISTRY_DIALECT, SET_KEYWORD: msgspec.to_builtins(marker)}
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def parse_marker(text: str, subject: str, version: int) -> SetMarker:
    """The set marker a registration holds.

    Raises:
        ConfigError: not a marker, naming the subject and version.
    """
    where = f"schema registry subject {subject} version {version}"
    try:
        document = json.loads(text)
        return msgspec.convert(document[SET_KEYWORD], SetMarker, strict=True)
    except (ValueError, TypeError, KeyError, msgspec.ValidationError) as exc:
        raise ConfigError(f"{where}: not a set marker ({type(exc).__name__}: {str(exc)[:200]})") from exc


def parse_published(document: dict[str, Any], subject: str, version: int) -> list[PublishedVersion] | None:
    """The signed versions a registration carries (not verified yet); None when it carries none.

    Raises:
        ConfigError: ``published`` that does not decode, or a version of another subject.
    """
    where = f"schema registry subject {subject} version {version}"
    meta = document.get(KEYWORD)
    if not isinstance(meta, dict) or "published" not in meta:
        return None
    try:
        versions = msgspec.convert(meta["published"], list[PublishedVersion], strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {KEYWORD}.published does not decode: {exc}") from exc
    parsed = parse_subject(subject)
    for pv in versions:
        if parsed is None or (pv.tool, pv.version.partition(".")[0]) != (parsed[0], str(parsed[1])):
            raise ConfigError(f"{where}: holds {pv.tool} version {pv.version}, not a version of this subject")
    return versions


def fixtures_digest(folder: Path) -> str:
    """16 hex digits of SHA-256 over a version's fixture files (relative path and bytes)."""
    h = hashlib.sha256()
    base = folder / "fixtures"
    for path in sorted(p for p in base.rglob("*.json") if p.is_file()) if base.is_dir() else ():
        h.update(path.relative_to(base).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One contract version as the registry holds it."""

    spec: ContractSpec
    schema: dict[str, Any]  # the contract's own schema, its dialect restored
    fixtures: str
    digest: str
    statuses: dict[int, str]  # minor -> status, as of this registration
    sequence: int = 0  # the registration's place in its subject
    input_schema: dict[str, Any] | None = None  # an MCP tool's pinned input schema

    @property
    def key(self) -> str:
        """``tool@v<major>[.<minor>]``, as :attr:`Contract.key`."""
        v = f"v{self.spec.version}" if self.spec.minor == 0 else f"v{self.spec.version}.{self.spec.minor}"
        return f"{self.spec.tool}@{v}"

    @property
    def subject(self) -> str:
        """Its subject."""
        return subject_of(self.spec.tool, self.spec.version)

    def registered_text(self, published: list[PublishedVersion] | None = None) -> str:
        """The schema document registered for it: draft-07, the metadata under ``x-toolgate``
        with the signed versions it carries. A schema embedding resources of its own (an
        imported MCP tool's: the outputSchema and its closure, each with a ``$id``) is
        registered as :func:`registry_rendition` of it, which the registry's compatibility
        check resolves, and the schema itself travels in ``x-toolgate.schema``."""
        body = {k: v for k, v in self.schema.items() if k != "$schema"}
        rendition = registry_rendition(body)
        document = {"$schema": REGISTRY_DIALECT, **rendition}
        document[KEYWORD] = {
            "minor": self.spec.minor,
            "contract": msgspec.to_builtins(self.spec),
            "fixtures": self.fixtures,
            "digest": self.digest,
            "dialect": self.schema.get("$schema"),
            "statuses": {str(m): s for m, s in sorted(self.statuses.items())},
            "sequence": self.sequence,
        }
        if self.input_schema is not None:
            document[KEYWORD]["input_schema"] = self.input_schema
        if rendition != body:
            document[KEYWORD]["schema"] = body
        if published is not None:
            document[KEYWORD]["published"] = msgspec.to_builtins(published)
        return json.dumps(document, sort_keys=True, separators=(",", ":"))

    def same_version(self, other: Entry) -> bool:
        """The same contract version, statuses aside (what a registration may not change)."""
        return (
            msgspec.structs.replace(self.spec, status="active")
            == msgspec.structs.replace(other.spec, status="active")
            and self.schema == other.schema
            and self.fixtures == other.fixtures
            and self.input_schema == other.input_schema
        )

    def files(self, status: str) -> dict[str, bytes]:
        """The files of the version's folder, by name: ``contract.yaml`` (with ``status``), its
        schema and, for an MCP tool with a pinned definition, its input schema."""
        files = {
            "contract.yaml": contract_file(self, status),
            self.spec.schema: (json.dumps(self.schema, indent=2) + "\n").encode(),
        }
        definition = self.spec.mcp.definition if self.spec.mcp is not None else None
        if definition is not None and self.input_schema is not None:
            files[definition.input_schema] = (json.dumps(self.input_schema, indent=2) + "\n").encode()
        return files


def entry_of(contract: Contract, statuses: dict[int, str]) -> Entry:
    """The registry entry of a loaded contract version."""
    return Entry(
        spec=contract.spec,
        schema=contract.schema,
        fixtures=fixtures_digest(contract.folder),
        digest=contract.digest,
        statuses=statuses,
        input_schema=contract.input_schema,
    )


def parse_entry(text: str, subject: str, version: int) -> Entry | None:
    """The entry a registered schema holds; None when it carries no ``x-toolgate`` metadata.

    Raises:
        ConfigError: metadata that does not decode, naming the subject and version.
    """
    where = f"schema registry subject {subject} version {version}"
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: the schema is not JSON: {exc}") from exc
    if not isinstance(document, dict) or KEYWORD not in document:
        return None
    meta = document.pop(KEYWORD)
    try:
        decoded = msgspec.convert(meta, _Meta, strict=True)
        spec = msgspec.convert(decoded.contract, ContractSpec, strict=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {KEYWORD} does not decode: {exc}") from exc
    parsed = parse_subject(subject)
    if parsed is None or parsed != (spec.tool, spec.version) or decoded.minor != spec.minor:
        raise ConfigError(
            f"{where}: holds {spec.tool} v{spec.version}.{spec.minor} (minor {decoded.minor}), "
            f"not a version of this subject"
        )
    schema = (
        decoded.schema
        if decoded.schema is not None
        else {k: v for k, v in document.items() if k != "$schema"}
    )
    if decoded.dialect is not None:
        schema = {"$schema": decoded.dialect, **schema}
    try:
        statuses = {int(m): s for m, s in decoded.statuses.items()}
    except ValueError as exc:
        raise ConfigError(f"{where}: {KEYWORD}.statuses: keys must be minor numbers") from exc
    definition = spec.mcp.definition if spec.mcp is not None else None
    if (definition is None) != (decoded.input_schema is None):
        wrong = "missing for the pinned MCP definition" if definition else "without an MCP definition"
        raise ConfigError(f"{where}: {KEYWORD}.input_schema: {wrong}")
    if contract_digest(spec, schema, decoded.input_schema) != decoded.digest:
        raise ConfigError(
            f"{where}: {spec.tool} v{spec.version}.{spec.minor} does not match the digest it was "
            f"published with ({decoded.digest})"
        )
    return Entry(
        spec=spec,
        schema=schema,
        fixtures=decoded.fixtures,
        digest=decoded.digest,
        statuses=statuses,
        sequence=decoded.sequence,
        input_schema=decoded.input_schema,
    )


class _Meta(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    minor: int
    contract: dict[str, Any]
    fixtures: str
    digest: str
    dialect: str | None
    statuses: dict[str, str]
    sequence: int = 0
    input_schema: dict[str, Any] | None = None
    published: list[Any] | None = None  # checked by parse_published, against a keyring
    schema: dict[str, Any] | None = None  # the schema, where the document is its rendition


def registry_rendition(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as a registry's compatibility check resolves it: registries resolve every
    ``#...`` reference against the document's root, so each resource embedded with a ``$id``
    loses that ``$id`` and its fragment references are rewritten to point at the same place
    from the root (``#/$defs/p0`` inside the resource at ``/$defs/structuredContent/allOf/1``
    becomes ``#/$defs/structuredContent/allOf/1/$defs/p0``). A schema without embedded
    resources is returned as it is. The validators never read the rendition: readers load the
    schema from ``x-toolgate.schema`` (or the document, where there is none)."""

    def copy(node: Any, at: str, base: str) -> Any:
        if isinstance(node, list):
            return [copy(item, f"{at}/{i}", base) for i, item in enumerate(node)]
        if not isinstance(node, dict):
            return node
        if at and isinstance(node.get("$id"), str):
            base = at  # a resource of its own: its fragments are relative to here
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$id" and at and isinstance(value, str):
                continue
            if key == "$ref" and isinstance(value, str) and value.startswith("#") and base:
                out[key] = "#" + base + value[1:] if value.startswith("#/") or value == "#" else value
            else:
                out[key] = copy(value, at + "/" + key.replace("~", "~0").replace("/", "~1"), base)
        return out

    rendition: dict[str, Any] = copy(schema, "", "")
    return rendition


def contract_file(entry: Entry, status: str) -> bytes:
    """``contract.yaml`` of an entry, with the status the registry's newest registration gives it."""
    spec = msgspec.structs.replace(entry.spec, status=status)
    return msgspec.yaml.encode(spec)


def check_statuses(statuses: dict[int, str], where: str) -> None:
    """Every status is one a contract may have."""
    for minor, status in statuses.items():
        if status not in ("active", "shadow", "retired", "draft"):
            raise ConfigError(f"{where}: {KEYWORD}.statuses[{minor}]: unknown status {status!r}")
