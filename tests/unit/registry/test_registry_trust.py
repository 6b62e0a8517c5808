"""The registry channel reads only what a publisher signed, and only complete sets.

An in-memory stand-in of the registry API (the real one is in tests/integration/test_registry_trust.py)
lets each case change a registration the way someone with write access to the registry could.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import msgspec
import pytest
from toolgate._config import load_config
from toolgate._errors import ConfigError
from toolgate.authoring._publish import publish, pull
from toolgate.gate._contracts import ContractSet
from toolgate.gate._published import PublishedVersion, canonical_bytes, sign_marker
from toolgate.gate._signing import Key, Keyring
from toolgate.registry._client import RegistryClient, RegistryError
from toolgate.registry._connect import publishers_keyring
from toolgate.registry._layout import KEYWORD, marker_text, set_subject
from toolgate.registry._snapshot import (
    EmptyRegistry,
    IncompleteSet,
    Problem,
    RegistrySource,
    fetch_set,
    load_contracts,
    snapshot_generation,
)

from tests.unit.builders import CONTRACTS

KEYRING = CONTRACTS / "fixtures-keyring.toml"
OTHER_PRIVATE = "WJsp0uZd5BBD71OEtr017uIfGJdt9MElRow8lK0Y7R8="


class MemoryRegistry(RegistryClient):
    """The Confluent-compatible calls toolgate makes, on dictionaries (no compatibility check)."""

    def __init__(self) -> None:
        super().__init__("http://memory.invalid/apis/ccompat/v7")
        self.store: dict[str, list[str]] = {}
        self.levels: dict[str, str] = {}
        self.requests = 0

    def subjects(self) -> list[str]:
        self.requests += 1
        return sorted(self.store)

    def versions(self, subject: str) -> list[int]:
        self.requests += 1
        return list(range(1, len(self.store.get(subject, [])) + 1))

    def schema(self, subject: str, version: int) -> str:
        self.requests += 1
        return self.store[subject][version - 1]

    def register(self, subject: str, schema: str, *, what: str) -> int:
        self.store.setdefault(subject, []).append(schema)
        return len(self.store[subject])

    def compatibility(self, subject: str) -> str | None:
        return self.levels.get(subject)

    def set_compatibility(self, subject: str, level: str) -> None:
        self.levels[subject] = level


class DeadRegistry(MemoryRegistry):
    """A registry that does not answer."""

    def subjects(self) -> list[str]:
        raise RegistryError(f"schema registry {self.url}: unreachable: refused")


def sample_keyring() -> Keyring:
    return Keyring.load(KEYRING, environ={})


def publisher() -> Key:
    key = sample_keyring().publisher("sample-publisher")
    assert key is not None
    return key


def review_folder(tmp_path: Path) -> Path:
    """A contracts folder of review_status v1 alone (its bind rule refuses a foreign change)."""
    root = tmp_path / "contracts"
    shutil.copytree(CONTRACTS / "review_status", root / "review_status")
    return root


def tampered(registry: MemoryRegistry, subject: str, *, recompute: bool) -> str:
    """Register the subject's newest version again with its rules dropped, as an attacker could."""
    document = json.loads(registry.store[subject][-1])
    pv = msgspec.convert(document[KEYWORD]["published"][0], PublishedVersion)
    contract = pv.files["contract.yaml"]
    assert "rules:" in contract
    files = {**pv.files, "contract.yaml": contract.split("rules:")[0]}
    digest = pv.digest
    if recompute:
        import hashlib

        digest = hashlib.sha256(canonical_bytes(pv.tool, pv.version, files)).hexdigest()
    document[KEYWORD]["published"] = [
        msgspec.to_builtins(msgspec.structs.replace(pv, files=files, digest=digest))
    ]
    document[KEYWORD]["sequence"] += 100
    registry.register(subject, json.dumps(document), what="attacker")
    return f"{subject} version {len(registry.store[subject])}"


def shadowed(registry: RegistryClient, tmp_path: Path) -> None:
    """Publish the fixture's folder again with review_status v1 made shadow: the next generation."""
    contract = tmp_path / "contracts" / "review_status" / "v1" / "contract.yaml"
    contract.write_text(contract.read_text().replace("status: active", "status: shadow"))
    publish(ContractSet.load(tmp_path / "contracts"), registry, publisher())


@pytest.fixture
def registry(tmp_path: Path) -> MemoryRegistry:
    """A registry holding review_status v1 published by the sample publisher (generation 1)."""
    registry = MemoryRegistry()
    publish(ContractSet.load(review_folder(tmp_path)), registry, publisher())
    return registry


def source(registry: RegistryClient, root: Path, keyring: Keyring | None = None) -> RegistrySource:
    return RegistrySource(registry, root, 1, keyring or sample_keyring())


class TestPublish:
    """Publish signs every version and writes the set marker last, one generation per change."""

    def test_versions_then_marker(self, registry: MemoryRegistry) -> None:
        """The marker is the set subject's one registration, naming the signed version."""
        markers = registry.store[set_subject("toolgate")]
        assert len(markers) == 1
        marker = json.loads(markers[0])["x-toolgate-set"]
        assert marker["generation"] == 1
        assert list(marker["versions"]) == ["review_status/1"]
        assert registry.levels[set_subject("toolgate")] == "NONE"

    def test_unchanged_writes_no_marker(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """Publishing the same folder again registers nothing, not even a marker."""
        done = publish(ContractSet.load(tmp_path / "contracts"), registry, publisher())
        assert [d.action for d in done] == ["unchanged"]
        assert len(registry.store[set_subject("toolgate")]) == 1

    def test_status_change_is_next_generation(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A status change registers the signed version again and marker generation 2."""
        shadowed(registry, tmp_path)
        subjects = [
            json.loads(text)[KEYWORD]["statuses"] for text in registry.store["review_status-v1-value"]
        ]
        assert subjects == [{"0": "active"}, {"0": "shadow"}]
        fetched = fetch_set(registry, sample_keyring())
        assert fetched.marker.generation == 2
        assert "status: shadow" in fetched.versions[0].files["contract.yaml"]

    def test_generation_must_rise(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """--generation at or below the registry's newest marker is refused naming both."""
        with pytest.raises(
            ConfigError, match="--generation 1: toolgate-set-value already holds generation 1"
        ):
            publish(ContractSet.load(tmp_path / "contracts"), registry, publisher(), generation=1)

    def test_sets_apart(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """Another set name has markers of its own, generation 1 again."""
        publish(ContractSet.load(tmp_path / "contracts"), registry, publisher(), set_name="team-b")
        assert fetch_set(registry, sample_keyring(), set_name="team-b").marker.generation == 1


class TestReaderRefuses:
    """A reader refuses what its publisher did not sign, with one line naming subject and version."""

    @pytest.mark.parametrize(("recompute", "reason"), [(True, "bad signature"), (False, "digest mismatch")])
    def test_rule_dropped(
        self,
        registry: MemoryRegistry,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
        recompute: bool,
        reason: str,
    ) -> None:
        """A re-registration with a rule dropped is refused, once, and the signed set stays loaded."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        before = (reader.current / "review_status" / "v1" / "contract.yaml").read_text()
        where = tampered(registry, "review_status-v1-value", recompute=recompute)
        caplog.set_level(logging.INFO, "toolgate.registry")
        reader.poll()
        registry.register("noise-v1-value", "{}", what="noise")  # makes the reader read again
        reader.poll()
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(lines) == 1
        assert f"schema registry subject {where}: refused" in lines[0]
        assert reason in lines[0]
        assert (reader.current / "review_status" / "v1" / "contract.yaml").read_text() == before

    def test_marker_naming_the_tampered_version(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A marker an attacker signs with another key is refused; the publisher's stays in force."""
        tampered(registry, "review_status-v1-value", recompute=True)
        mallory = Keyring.load(
            _keyring(tmp_path, f'[publishers.sample-publisher]\nprivate_key = "{OTHER_PRIVATE}"\n')
        )
        key = mallory.publisher("sample-publisher")
        assert key is not None
        latest = json.loads(registry.store["review_status-v1-value"][-1])[KEYWORD]["published"][0]
        forged = sign_marker(2, {"review_status/1": latest["digest"]}, key)
        registry.register(set_subject("toolgate"), marker_text(forged), what="attacker")
        problems: list[Problem] = []
        fetched = fetch_set(registry, sample_keyring(), problems=problems)
        assert fetched.marker.generation == 1
        assert "rules:" in fetched.versions[0].files["contract.yaml"]
        assert any("toolgate-set-value version 2: refused" in p.message for p in problems)

    def test_content_changed_in_place(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A registration whose content changes after a reader read it is refused, even when signed."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        other = MemoryRegistry()
        shadowed(other, tmp_path)
        registry.store["review_status-v1-value"][0] = other.store["review_status-v1-value"][0]
        registry.register("noise-v1-value", "{}", what="noise")
        problems: list[Problem] = []
        with pytest.raises(IncompleteSet, match="review_status/1"):
            fetch_set(registry, sample_keyring(), seen=reader._digests, problems=problems)
        assert [p.key for p in problems] == ["review_status-v1-value/1"]
        assert "content changed since this reader first read it" in problems[0].message
        assert "review_status-v1-value/1" in json.loads(
            (tmp_path / "snap" / "registrations.json").read_text()
        )

    def test_unknown_publisher(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A keyring that does not name the publisher loads nothing from it."""
        ring = Keyring.load(
            _keyring(
                tmp_path, '[publishers.other]\npublic_key = "F6LOfsnd/zpiL8gIgiPa0q9oVP4/VEbuWiMhtV0vgpk="\n'
            )
        )
        problems: list[Problem] = []
        with pytest.raises(EmptyRegistry, match="no signed contract set in subject toolgate-set-value"):
            fetch_set(registry, ring, problems=problems)
        assert "unknown publisher 'sample-publisher'" in problems[0].message

    def test_publish_ignores_a_forged_registration(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A forged registration neither blocks the publisher nor counts as its version."""
        tampered(registry, "review_status-v1-value", recompute=True)
        done = publish(ContractSet.load(tmp_path / "contracts"), registry, publisher())
        assert [d.action for d in done] == ["unchanged"]

    def test_publish_signs_a_registry_filled_before_signing(self, tmp_path: Path) -> None:
        """Unsigned registrations and no marker: publish registers the signed versions and marker 1."""
        registry = MemoryRegistry()
        publish(ContractSet.load(review_folder(tmp_path)), registry, publisher())
        document = json.loads(registry.store["review_status-v1-value"][0])
        del document[KEYWORD]["published"]
        registry.store = {"review_status-v1-value": [json.dumps(document)]}
        with pytest.raises(EmptyRegistry):
            fetch_set(registry, sample_keyring())
        done = publish(ContractSet.load(tmp_path / "contracts"), registry, publisher())
        assert [d.action for d in done] == ["statuses", "set"]
        assert fetch_set(registry, sample_keyring()).marker.generation == 1


class TestReaderIgnores:
    """What a reader ignores it says once per subject and version."""

    def test_raw_registration(
        self, registry: MemoryRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A looser registration without x-toolgate is ignored with one line, however often read."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        registry.register("review_status-v1-value", '{"type": "object"}', what="raw")
        caplog.set_level(logging.INFO, "toolgate.registry")
        reader.poll()
        registry.register("noise-v1-value", "{}", what="noise")
        reader.poll()
        lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
        assert lines == [
            "schema registry subject review_status-v1-value version 2: a registration without "
            "x-toolgate metadata; ignored"
        ]

    def test_unsigned_registration(self, registry: MemoryRegistry) -> None:
        """A toolgate registration from before signing is ignored, saying how to sign it."""
        document = json.loads(registry.store["review_status-v1-value"][0])
        del document[KEYWORD]["published"]
        registry.register("review_status-v1-value", json.dumps(document), what="old")
        problems: list[Problem] = []
        fetch_set(registry, sample_keyring(), problems=problems)
        assert "--publisher-key" in problems[0].message


class TestCompleteSetsOnly:
    """A registry holding part of a set, or an older set, never replaces a complete snapshot."""

    def _partial(self, registry: MemoryRegistry) -> None:
        marker = sign_marker(2, {"review_status/1": "0" * 64}, publisher())
        registry.register(set_subject("toolgate"), marker_text(marker), what="partial")

    def test_partial_set_keeps_the_snapshot(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A marker naming an absent version leaves the loaded set and generation in place."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        assert load_contracts(reader.current).label.startswith("g1-")
        target = reader.current.resolve()
        self._partial(registry)
        assert not reader.poll()
        assert reader.current.resolve() == target
        assert reader.generation == 1

    def test_partial_set_at_start(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """With no snapshot on disk a partial set fails the start, naming what is absent."""
        self._partial(registry)
        with pytest.raises(ConfigError, match=r"generation 2 is incomplete: review_status/1 absent"):
            source(registry, tmp_path / "snap").start()

    def test_partial_set_after_restart(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A restart while the registry holds part of a set starts from the complete snapshot."""
        source(registry, tmp_path / "snap").start()
        self._partial(registry)
        states: list[bool] = []
        reader = RegistrySource(registry, tmp_path / "snap", 1, sample_keyring(), on_state=states.append)
        reader.start()
        assert states == [True]
        assert snapshot_generation(reader.current) == 1

    def test_older_generation_kept_out(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A registry rebuilt with an older generation does not roll the loaded set back."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        shadowed(registry, tmp_path)
        assert reader.poll()
        assert reader.generation == 2
        rebuilt = MemoryRegistry()
        publish(ContractSet.load(review_folder(tmp_path / "again")), rebuilt, publisher())
        reader.client = rebuilt
        assert not reader.poll()
        assert reader.generation == 2


class TestRefreshNow:
    """A worker catching up fetches now, within its deadline."""

    def test_new_set_fetched_at_once(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A set published after the last poll is loaded by refresh_now, not at the next poll."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        shadowed(registry, tmp_path)
        assert reader.refresh_now(time.monotonic() + 5)
        assert reader.generation == 2

    def test_passed_deadline_asks_nothing(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A deadline already passed returns at once, the registry not asked."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        asked = registry.requests
        assert not reader.refresh_now(time.monotonic() - 1)
        assert registry.requests == asked

    def test_requests_bounded_by_the_deadline(self) -> None:
        """Within until(), a request after the deadline fails at once, naming it."""
        client = RegistryClient("http://127.0.0.1:9/apis/ccompat/v7", timeout=10)
        with client.until(time.monotonic() - 1), pytest.raises(RegistryError, match="no time left"):
            client.subjects()


class TestPull:
    """Pull writes the complete set as signed, fixtures included."""

    def test_pull_round_trip(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """The pulled folder holds the same files as the published one."""
        generation, written = pull(registry, tmp_path / "pulled", sample_keyring())
        assert (generation, written) == (1, ["review_status@v1"])
        original = sorted(
            p.relative_to(tmp_path / "contracts") for p in (tmp_path / "contracts").rglob("*.*")
        )
        copied = sorted(p.relative_to(tmp_path / "pulled") for p in (tmp_path / "pulled").rglob("*.*"))
        assert copied == original


class TestReadersKeyring:
    """A registry source needs a keyring naming publishers, said on one line naming the setting."""

    def test_no_keyring(self) -> None:
        """No TOOLGATE_KEYRING: the error names it and the option it serves."""
        config = load_config(environ={"TOOLGATE_CONTRACTS_DIR": "registry+http://r"})
        with pytest.raises(ConfigError, match=r"--contracts registry.*TOOLGATE_KEYRING"):
            publishers_keyring(config, "--contracts registry+http://r")

    def test_keyring_without_publishers(self, tmp_path: Path) -> None:
        """A keyring of adapter keys alone would trust nothing: refused naming the file."""
        path = tmp_path / "k.toml"
        path.write_text("")
        config = load_config(environ={"TOOLGATE_KEYRING": str(path)})
        with pytest.raises(ConfigError, match=r"k\.toml has no \[publishers"):
            publishers_keyring(config, "pull")

    def test_dead_registry_no_snapshot(self, tmp_path: Path) -> None:
        """Unreachable at start with nothing on disk: one error naming both."""
        with pytest.raises(ConfigError, match=r"unreachable.*no snapshot of it"):
            source(DeadRegistry(), tmp_path / "snap").start()


def _keyring(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "ring.toml"
    path.write_text(body)
    return path


class TestReadersState:
    """The keyring and the digests read before are the reader's state on disk."""

    def test_keyring_change_taken_up(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A publisher removed from the keyring file signs no new set; put back, its set loads."""
        ring = tmp_path / "readers.toml"
        shutil.copy(KEYRING, ring)
        reader = RegistrySource(registry, tmp_path / "snap", 1, Keyring.load(ring), keyring_file=ring)
        reader.start()
        trusted = ring.read_text()
        ring.write_text(trusted.split("[publishers.sample-publisher]")[0])
        shadowed(registry, tmp_path)
        assert not reader.poll()
        assert reader.generation == 1
        ring.write_text(trusted + "\n")  # another size: seen as changed
        assert reader.poll()
        assert reader.generation == 2

    def test_unreadable_seen_file_starts_afresh(
        self, registry: MemoryRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A damaged registrations.json is named in one warning and rebuilt."""
        (tmp_path / "snap").mkdir()
        (tmp_path / "snap" / "registrations.json").write_text("{not json")
        caplog.set_level(logging.WARNING, "toolgate.registry")
        source(registry, tmp_path / "snap").start()
        assert [r.getMessage().split(":")[0] for r in caplog.records] == [
            str(tmp_path / "snap" / "registrations.json")
        ]
        assert "review_status-v1-value/1" in json.loads(
            (tmp_path / "snap" / "registrations.json").read_text()
        )
