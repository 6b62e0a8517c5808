"""Published contract versions and set markers: signed by a publisher key, verified by readers."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import msgspec
import pytest
from toolgate._errors import ConfigError, ContractTrustError
from toolgate.gate._contracts import ContractSet
from toolgate.gate._published import (
    PublishedVersion,
    SetMarker,
    canonical_bytes,
    files_of,
    missing_versions,
    sign_marker,
    sign_version,
    verify_marker,
    verify_version,
    version_label,
    write_version,
)
from toolgate.gate._signing import Key, Keyring

from tests.unit.builders import CONTRACTS

SAMPLE = "sample-publisher"
OTHER_PRIVATE = "WJsp0uZd5BBD71OEtr017uIfGJdt9MElRow8lK0Y7R8="
OTHER_PUBLIC = "F6LOfsnd/zpiL8gIgiPa0q9oVP4/VEbuWiMhtV0vgpk="
FILES = {"contract.yaml": "tool: t\n", "schema.json": '{"type": "object"}\n', "fixtures/valid/a.json": "{}"}


def sample_keyring() -> Keyring:
    return Keyring.load(CONTRACTS / "fixtures-keyring.toml", environ={})


def sample_key() -> Key:
    key = sample_keyring().publisher(SAMPLE)
    assert key is not None
    return key


def keyring_file(tmp_path: Path, body: str) -> Keyring:
    path = tmp_path / "keyring.toml"
    path.write_text(body, encoding="utf-8")
    return Keyring.load(path, environ={})


class TestPublisherKeys:
    """Publisher keys are the keyring's [publishers.<id>] table, apart from adapter keys."""

    def test_sample_publisher_is_loaded_apart(self) -> None:
        """The sample keyring's publisher is a publisher key and not an adapter key."""
        ring = sample_keyring()
        assert ring.publisher(SAMPLE) is not None
        assert ring.get(SAMPLE) is None
        assert "publisher sample-publisher=inline" in ring.sources()

    def test_adapter_key_is_not_a_publisher(self) -> None:
        """An adapter key id never verifies a published version."""
        pv = sign_version("t", "1", FILES, sample_key())
        forged = msgspec.structs.replace(pv, publisher="jobs-adapter-2026")
        with pytest.raises(ContractTrustError, match="unknown publisher 'jobs-adapter-2026'"):
            verify_version(forged, sample_keyring())

    def test_only_ed25519(self, tmp_path: Path) -> None:
        """A publisher key of another algorithm fails naming the table and the field."""
        with pytest.raises(ConfigError, match=r"keyring\.toml.*publishers"):
            keyring_file(tmp_path, '[publishers.p]\nalgorithm = "hmac-sha256"\nsecret = "x"\n')

    def test_public_key_required(self, tmp_path: Path) -> None:
        """A publisher without a key fails naming its path in the file."""
        with pytest.raises(ConfigError, match=r"\$\.publishers\.p needs public_key"):
            keyring_file(tmp_path, "[publishers.p]\n")

    def test_public_key_alone_cannot_sign(self, tmp_path: Path) -> None:
        """A reader's keyring (public key alone) verifies but cannot sign."""
        ring = keyring_file(tmp_path, f'[publishers.p]\npublic_key = "{OTHER_PUBLIC}"\n')
        key = ring.publisher("p")
        assert key is not None
        with pytest.raises(ConfigError, match="no private key"):
            sign_version("t", "1", FILES, key)


class TestSignVerify:
    """A version verifies as signed, and any change by someone without the key is refused."""

    def test_round_trip(self, tmp_path: Path) -> None:
        """A signed version verifies against the publisher's public key alone."""
        pv = sign_version("t", "1.1", FILES, sample_key())
        assert pv.digest == hashlib.sha256(canonical_bytes("t", "1.1", FILES)).hexdigest()
        public = "VKZmryE+jq8zGWhCaTg+FeMAtsw8x4AI3RAYR/2+58U="
        verify_version(pv, keyring_file(tmp_path, f'[publishers.{SAMPLE}]\npublic_key = "{public}"\n'))

    def test_rule_dropped_digest_kept(self) -> None:
        """Changed files under the old digest fail as a digest mismatch naming tool and version."""
        pv = sign_version("review_status", "1.1", FILES, sample_key())
        changed = msgspec.structs.replace(pv, files={**pv.files, "contract.yaml": "tool: t\nrules: []\n"})
        with pytest.raises(ContractTrustError, match=r"review_status version 1\.1: digest mismatch"):
            verify_version(changed, sample_keyring())

    def test_rule_dropped_digest_recomputed(self) -> None:
        """Changed files with a recomputed digest fail as a bad signature."""
        pv = sign_version("review_status", "1.1", FILES, sample_key())
        files = {**pv.files, "contract.yaml": "tool: t\nrules: []\n"}
        digest = hashlib.sha256(canonical_bytes("review_status", "1.1", files)).hexdigest()
        changed = msgspec.structs.replace(pv, files=files, digest=digest)
        with pytest.raises(ContractTrustError, match=r"review_status version 1\.1: bad signature"):
            verify_version(changed, sample_keyring())

    def test_other_key_same_id(self, tmp_path: Path) -> None:
        """A version signed by another key under the publisher's id is refused."""
        ring = keyring_file(tmp_path, f'[publishers.{SAMPLE}]\nprivate_key = "{OTHER_PRIVATE}"\n')
        key = ring.publisher(SAMPLE)
        assert key is not None
        with pytest.raises(ContractTrustError, match="bad signature"):
            verify_version(sign_version("t", "1", FILES, key), sample_keyring())

    def test_renamed_version(self) -> None:
        """The signature covers the tool and version: the same files under another version fail."""
        pv = sign_version("t", "1", FILES, sample_key())
        with pytest.raises(ContractTrustError, match="t version 2: digest mismatch"):
            verify_version(msgspec.structs.replace(pv, version="2"), sample_keyring())

    def test_signature_not_base64(self) -> None:
        """A signature that does not decode is a bad signature, not a crash."""
        pv = msgspec.structs.replace(sign_version("t", "1", FILES, sample_key()), signature="%%%")
        with pytest.raises(ContractTrustError, match="bad signature"):
            verify_version(pv, sample_keyring())

    def test_canonical_bytes_order_free(self) -> None:
        """The digest depends on the files, not on the order they are listed in."""
        reordered = dict(reversed(list(FILES.items())))
        assert canonical_bytes("t", "1", reordered) == canonical_bytes("t", "1", FILES)
        assert canonical_bytes("t", "1", FILES) != canonical_bytes("t", "1", {**FILES, "x.json": ""})

    def test_json_round_trip(self) -> None:
        """A version sent as JSON (any channel) verifies once decoded."""
        pv = sign_version("t", "1", {**FILES, "note.md": "caf\u00e9 \u2713\n"}, sample_key())
        decoded = msgspec.json.decode(msgspec.json.encode(pv), type=PublishedVersion)
        verify_version(decoded, sample_keyring())

    def test_unknown_field_refused(self) -> None:
        """A version record with a field the format lacks does not decode."""
        data = msgspec.to_builtins(sign_version("t", "1", FILES, sample_key())) | {"extra": 1}
        with pytest.raises(msgspec.ValidationError, match="extra"):
            msgspec.convert(data, PublishedVersion)


class TestFilePaths:
    """Only plain relative paths inside the version folder are signed, verified or written."""

    @pytest.mark.parametrize("path", ["../x.json", "/etc/passwd", "a/../../b", ".hidden", "a\\b", ""])
    def test_unsafe_path_refused(self, path: str) -> None:
        """A path that could leave the version folder is refused naming the file."""
        with pytest.raises(ContractTrustError, match="file"):
            sign_version("t", "1", {**FILES, path: "x"}, sample_key())

    def test_contract_yaml_required(self) -> None:
        """A version without contract.yaml is refused."""
        with pytest.raises(ContractTrustError, match=r"no contract\.yaml"):
            sign_version("t", "1", {"schema.json": "{}"}, sample_key())

    @pytest.mark.parametrize("tool", ["..", "a/b", ".x"])
    def test_write_refuses_unsafe_tool(self, tmp_path: Path, tool: str) -> None:
        """A tool name that would leave the snapshot folder is never written."""
        pv = msgspec.structs.replace(sign_version("t", "1", FILES, sample_key()), tool=tool)
        with pytest.raises(ContractTrustError, match="not a plain folder name"):
            write_version(pv, tmp_path / "root")
        assert not (tmp_path / "root").exists()


class TestFolders:
    """A bundled version folder signs, writes back and loads as the same contract."""

    def test_bundled_version_round_trip(self, tmp_path: Path) -> None:
        """files_of + sign + write_version gives a folder whose contract has the original digest."""
        original = next(c for c in ContractSet.load(CONTRACTS) if c.key == "review_status@v1")
        files = files_of(original.folder)
        assert "contract.yaml" in files
        assert any(p.startswith("fixtures/") for p in files)
        pv = sign_version("review_status", version_label(1, 0), files, sample_key())
        folder = write_version(pv, tmp_path)
        assert folder == tmp_path / "review_status" / "v1"
        loaded = ContractSet.load(tmp_path)
        assert [c.digest for c in loaded] == [original.digest]

    def test_cel_rules_travel_signed(self, tmp_path: Path) -> None:
        """job_status's cel rules arrive as signed and decide; a rule loosened in transit is refused."""
        original = next(c for c in ContractSet.load(CONTRACTS) if c.key == "job_status@v1")
        pv = sign_version("job_status", version_label(1, 0), files_of(original.folder), sample_key())
        loaded = next(iter(ContractSet.load(write_version(pv, tmp_path).parent.parent)))
        assert [r.expr for r in loaded.cel_rules] == [r.expr for r in original.cel_rules]
        text = pv.files["contract.yaml"]
        loosened = text.replace("expr: data.state != 'succeeded' || has(data.finished_at)", "expr: 'true'")
        assert loosened != text
        files = {**pv.files, "contract.yaml": loosened}
        digest = hashlib.sha256(canonical_bytes("job_status", "1", files)).hexdigest()
        for changed in (
            msgspec.structs.replace(pv, files=files),
            msgspec.structs.replace(pv, files=files, digest=digest),
        ):
            with pytest.raises(
                ContractTrustError, match=r"job_status version 1: (digest mismatch|bad signature)"
            ):
                verify_version(changed, sample_keyring())

    def test_not_utf8_refused(self, tmp_path: Path) -> None:
        """A file that is not UTF-8 text is refused naming it."""
        (tmp_path / "contract.yaml").write_bytes(b"\xff\xfe")
        with pytest.raises(ConfigError, match=r"contract\.yaml: not UTF-8"):
            files_of(tmp_path)

    def test_labels(self) -> None:
        """A version's label is the folder's name without its v."""
        assert (version_label(1, 0), version_label(2, 3)) == ("1", "2.3")


class TestSetMarker:
    """A set marker is signed, and names a set complete only when every version is there."""

    def test_round_trip_and_complete(self) -> None:
        """A signed marker verifies, and missing_versions names what is absent or different."""
        a = sign_version("a", "1", FILES, sample_key())
        marker = sign_marker(3, {a.key: a.digest, "b/1": "0" * 64}, sample_key())
        verify_marker(msgspec.json.decode(msgspec.json.encode(marker), type=SetMarker), sample_keyring())
        assert missing_versions(marker, {a.key: a.digest}) == ["b/1"]
        assert missing_versions(marker, {a.key: "f" * 64, "b/1": "0" * 64}) == ["a/1"]
        assert missing_versions(marker, {a.key: a.digest, "b/1": "0" * 64, "c/1": "1"}) == []

    def test_generation_changed(self) -> None:
        """A marker replayed under another generation fails its signature."""
        marker = sign_marker(3, {"a/1": "0" * 64}, sample_key())
        with pytest.raises(ContractTrustError, match="set version generation 9: bad signature"):
            verify_marker(msgspec.structs.replace(marker, generation=9), sample_keyring())

    def test_version_swapped(self) -> None:
        """A marker naming another digest than its publisher signed fails."""
        marker = sign_marker(3, {"a/1": "0" * 64}, sample_key())
        swapped = msgspec.structs.replace(marker, versions={"a/1": "1" * 64})
        with pytest.raises(ContractTrustError, match="bad signature"):
            verify_marker(swapped, sample_keyring())

    def test_unknown_publisher(self) -> None:
        """A marker from a publisher the keyring lacks is refused naming it."""
        marker = msgspec.structs.replace(sign_marker(1, {}, sample_key()), publisher="mallory")
        with pytest.raises(ContractTrustError, match="unknown publisher 'mallory'"):
            verify_marker(marker, sample_keyring())

    def test_generation_from_one(self) -> None:
        """A generation below 1 is refused when signing."""
        with pytest.raises(ConfigError, match="generation 0"):
            sign_marker(0, {}, sample_key())

    def test_signature_is_base64(self) -> None:
        """The signature is 64 bytes of Ed25519 in standard base64."""
        assert len(base64.b64decode(sign_marker(1, {}, sample_key()).signature)) == 64
