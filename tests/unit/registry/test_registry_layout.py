"""toolgate.registry: subjects, the registered document, snapshots on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import msgspec
import pytest
from toolgate._errors import ConfigError
from toolgate.authoring._publish import signed_versions
from toolgate.gate._contracts import MISSING, ContractSet, load_contract, parse_pointer, resolve
from toolgate.gate._published import sign_marker
from toolgate.gate._signing import Keyring
from toolgate.mcp._import import fetch_listing, import_listing
from toolgate.registry._layout import (
    KEYWORD,
    REGISTRY_DIALECT,
    entry_of,
    fixtures_digest,
    parse_entry,
    parse_subject,
    registry_rendition,
    subject_of,
)
from toolgate.registry._snapshot import CURRENT, MANIFEST, SignedSet, read_manifest, write_snapshot

from tests import mcp_kit
from tests.unit.builders import CONTRACTS


def _entries(contracts: ContractSet) -> SignedSet:
    key = Keyring.load(CONTRACTS / "fixtures-keyring.toml", environ={}).publisher("sample-publisher")
    assert key is not None
    versions = list(signed_versions(contracts, key).values())
    marker = sign_marker(1, {pv.key: pv.digest for pv in versions}, key)
    return SignedSet(marker, "toolgate-set-value", versions, (("x-v1-value", (1,)),))


class TestSubjects:
    """One subject per tool and major version, read back unambiguously."""

    @pytest.mark.parametrize(("tool", "major"), [("job_status", 1), ("deployer.deploy-v2", 12), ("a-v1", 3)])
    def test_round_trip(self, tool: str, major: int) -> None:
        """subject_of and parse_subject are inverse, whatever the tool name holds."""
        assert parse_subject(subject_of(tool, major)) == (tool, major)

    @pytest.mark.parametrize("subject", ["orders-value", "job_status-v0-value", "x-v1-key", "-v1-value"])
    def test_other_subjects_are_not_toolgate_s(self, subject: str) -> None:
        """Subjects of other producers are left alone."""
        assert parse_subject(subject) is None


class TestRegisteredDocument:
    """The registered schema carries the contract beside it and reads back to the same version."""

    def test_round_trip_keeps_the_digest(self, contracts: ContractSet) -> None:
        """Every bundled version: draft-07 registered, its dialect and contract restored."""
        for contract in contracts:
            entry = entry_of(contract, {contract.spec.minor: "retired"})
            text = entry.registered_text()
            document = json.loads(text)
            assert document["$schema"] == REGISTRY_DIALECT
            assert document[KEYWORD]["dialect"] == contract.schema["$schema"]
            back = parse_entry(text, entry.subject, 1)
            assert back is not None
            assert back.schema == contract.schema
            assert back.spec == contract.spec
            assert back.digest == contract.digest
            assert back.statuses == {contract.spec.minor: "retired"}

    def test_a_schema_without_metadata_is_not_a_version(self) -> None:
        """Another producer's schema under a matching subject is skipped, not an error."""
        assert parse_entry('{"type": "object"}', "orders-v1-value", 3) is None

    def test_tampered_metadata_names_subject_and_version(self, contracts: ContractSet) -> None:
        """A schema edited after publishing no longer matches its digest."""
        contract = next(iter(contracts))
        document = json.loads(entry_of(contract, {0: "active"}).registered_text())
        document["title"] = "edited in the registry"
        subject = subject_of(contract.spec.tool, contract.spec.version)
        with pytest.raises(ConfigError, match=rf"subject {subject} version 7: .*digest"):
            parse_entry(json.dumps(document), subject, 7)

    def test_metadata_of_another_subject_is_refused(self, contracts: ContractSet) -> None:
        """A version registered under the wrong subject is named, not loaded."""
        contract = next(iter(contracts))
        text = entry_of(contract, {0: "active"}).registered_text()
        with pytest.raises(ConfigError, match="not a version of this subject"):
            parse_entry(text, subject_of(contract.spec.tool, contract.spec.version + 1), 1)

    def test_undecodable_metadata_is_one_error(self, contracts: ContractSet) -> None:
        """A wrong type in the metadata: one line naming subject, version and the path."""
        contract = next(iter(contracts))
        document = json.loads(entry_of(contract, {0: "active"}).registered_text())
        document[KEYWORD]["minor"] = "zero"
        with pytest.raises(ConfigError, match=r"subject s-v1-value version 2: x-toolgate does not decode"):
            parse_entry(json.dumps(document), "s-v1-value", 2)


class TestFixturesDigest:
    """The fixtures' digest changes with any fixture file and only with them."""

    def test_a_changed_fixture_changes_it(self, tmp_path: Path) -> None:
        """Editing one fixture gives another digest; copying the folder the same one."""
        folder = tmp_path / "v1"
        shutil.copytree(CONTRACTS / "review_status" / "v1", folder)
        before = fixtures_digest(folder)
        assert before == fixtures_digest(CONTRACTS / "review_status" / "v1")
        (folder / "fixtures" / "accept" / "approved.json").write_text("{}")
        assert fixtures_digest(folder) != before

    def test_no_fixtures(self, tmp_path: Path) -> None:
        """A version without fixtures still has a digest (of nothing)."""
        assert len(fixtures_digest(tmp_path)) == 16


class TestSnapshot:
    """A snapshot becomes current whole, or not at all."""

    def test_written_snapshot_loads_as_the_published_set(
        self, contracts: ContractSet, tmp_path: Path
    ) -> None:
        """The folder the link names loads to the same versions and digests, with a manifest."""
        current = write_snapshot(_entries(contracts), tmp_path, "http://registry")
        assert current == tmp_path / CURRENT
        loaded = ContractSet.load(current)
        assert {c.key: c.digest for c in loaded} == {c.key: c.digest for c in contracts}
        manifest = read_manifest(current)
        assert manifest is not None
        assert manifest["source"] == "http://registry"
        assert manifest["generation"] == 1
        assert len(manifest["versions"]) == len(contracts)

    def test_a_set_that_fails_to_load_never_becomes_current(
        self, contracts: ContractSet, tmp_path: Path
    ) -> None:
        """A broken version: the error, and the previous snapshot still current."""
        current = write_snapshot(_entries(contracts), tmp_path, "r")
        target = current.resolve()
        snapshot = _entries(contracts)
        first = snapshot.versions[0]
        files = {**first.files, "contract.yaml": first.files["contract.yaml"] + "projection: [/nowhere]\n"}
        snapshot.versions[0] = msgspec.structs.replace(first, files=files)
        with pytest.raises(ConfigError):
            write_snapshot(snapshot, tmp_path, "r")
        assert current.resolve() == target
        assert not list(tmp_path.glob(".snapshot-*"))

    def test_an_empty_registry_never_replaces_the_set(self, contracts: ContractSet, tmp_path: Path) -> None:
        """A set of no versions at all is refused, naming the source."""
        write_snapshot(_entries(contracts), tmp_path, "r")
        empty = _entries(contracts)
        empty.versions.clear()
        with pytest.raises(ConfigError, match="r: set generation 1 is empty"):
            write_snapshot(empty, tmp_path, "r")
        assert (tmp_path / CURRENT / MANIFEST).is_file()

    def test_old_snapshots_are_pruned(self, contracts: ContractSet, tmp_path: Path) -> None:
        """The current snapshot and the one before stay (a reader may still be in it)."""
        for _ in range(4):
            write_snapshot(_entries(contracts), tmp_path, "r")
        kept = sorted(p.name for p in tmp_path.glob("snapshot-*"))
        assert len(kept) == 2
        assert (tmp_path / CURRENT).resolve().name == kept[-1]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> ContractSet:
    """deployer.deploy_status imported from the SDK server of tests/mcp_kit.py, pinned to its
    definition: a version of three files (contract.yaml, schema.json, input.schema.json)."""
    root = tmp_path_factory.mktemp("pinned")
    tools = anyio.run(fetch_listing, mcp_kit.server())
    import_listing(root, mcp_kit.SERVER, tools, only=["deploy_status"], out=lambda _line: None)
    mcp_kit.pin(root, mcp_kit.listing_json())
    return ContractSet.load(root)


class TestPinnedInputSchema:
    """An MCP contract's pinned input schema travels with the version, so its digest holds."""

    def test_round_trip_keeps_the_input_schema_and_digest(self, pinned: ContractSet) -> None:
        """The registered document carries the input schema; reading it back gives the same digest."""
        (contract,) = list(pinned)
        assert contract.input_schema is not None
        entry = entry_of(contract, {0: "active"})
        text = entry.registered_text()
        assert json.loads(text)[KEYWORD]["input_schema"] == contract.input_schema
        back = parse_entry(text, entry.subject, 1)
        assert back is not None
        assert back.input_schema == contract.input_schema
        assert back.digest == contract.digest
        assert back.same_version(entry)

    def test_snapshot_writes_the_input_schema_file(self, pinned: ContractSet, tmp_path: Path) -> None:
        """The snapshot folder holds the file mcp.definition.input_schema names and loads to the digest."""
        (contract,) = list(pinned)
        current = write_snapshot(_entries(pinned), tmp_path, "http://registry")
        folder = current / contract.spec.tool / "v1"
        assert json.loads((folder / "input.schema.json").read_text()) == contract.input_schema
        assert load_contract(folder).digest == contract.digest

    def test_a_changed_input_schema_is_another_version(self, pinned: ContractSet) -> None:
        """A registered version whose input schema differs is not the same version."""
        (contract,) = list(pinned)
        entry = entry_of(contract, {0: "active"})
        assert entry.input_schema is not None
        other = msgspec.structs.replace(entry, input_schema={**entry.input_schema, "title": "x"})
        assert not entry.same_version(other)

    def test_a_missing_input_schema_is_refused(self, pinned: ContractSet) -> None:
        """Metadata of a pinned MCP version without its input schema: one error naming the subject."""
        (contract,) = list(pinned)
        entry = entry_of(contract, {0: "active"})
        document = json.loads(entry.registered_text())
        del document[KEYWORD]["input_schema"]
        with pytest.raises(ConfigError, match=rf"{entry.subject} version 3: x-toolgate.input_schema"):
            parse_entry(json.dumps(document), entry.subject, 3)


def _refs(node: object) -> list[str]:
    """Every ``$ref`` string in a JSON document."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref" and isinstance(v, str)] + [
            r for v in node.values() for r in _refs(v)
        ]
    return [r for v in node for r in _refs(v)] if isinstance(node, list) else []


def _resolves_from_root(document: dict[str, object], ref: str) -> bool:
    """Whether a ``#/...`` reference names a place of ``document`` read from its root."""
    return resolve(document, parse_pointer(ref[1:])) is not MISSING


class TestRegistryRendition:
    """What a registry's compatibility check reads: every reference resolves from the document's
    root; the schema itself travels beside it and reads back unchanged."""

    def test_embedded_resources_resolve_from_the_root(self, pinned: ContractSet) -> None:
        """An imported MCP schema: nested $id gone, every #... reference names a place from the root."""
        (contract,) = list(pinned)
        text = entry_of(contract, {0: "active"}).registered_text()
        document = json.loads(text)
        registered = {k: v for k, v in document.items() if k != KEYWORD}
        refs = _refs(registered)
        assert refs
        assert all(_resolves_from_root(registered, r) for r in refs if r.startswith("#"))
        own = [r for r in _refs(contract.schema) if r.startswith("#")]
        assert any(not _resolves_from_root(contract.schema, r) for r in own), "needs no rendition"
        assert document[KEYWORD]["schema"] == {k: v for k, v in contract.schema.items() if k != "$schema"}
        back = parse_entry(text, subject_of(contract.spec.tool, 1), 1)
        assert back is not None
        assert (back.schema, back.digest) == (contract.schema, contract.digest)

    def test_a_plain_schema_is_registered_as_it_is(self, contracts: ContractSet) -> None:
        """Without embedded resources the document is the schema: no copy beside it."""
        for contract in contracts:
            document = json.loads(entry_of(contract, {0: "active"}).registered_text())
            assert "schema" not in document[KEYWORD]

    def test_members_named_like_keywords_stay(self) -> None:
        """A property named $id (a schema, not a string) and string data are left as they are."""
        schema = {
            "$defs": {
                "inner": {
                    "$id": "urn:x",
                    "properties": {"$id": {"type": "string"}, "a": {"$ref": "#/$defs/b"}},
                    "$defs": {"b": {"type": "integer"}},
                }
            },
            "$ref": "#/$defs/inner",
        }
        got = registry_rendition(schema)
        inner = got["$defs"]["inner"]
        assert "$id" not in inner
        assert inner["properties"]["$id"] == {"type": "string"}
        assert inner["properties"]["a"]["$ref"] == "#/$defs/inner/$defs/b"
        assert got["$ref"] == "#/$defs/inner"
