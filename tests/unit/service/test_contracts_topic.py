"""The contracts topic as a contract source: only complete sets, only what a publisher signed."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import msgspec
import pytest
from toolgate._config import Config, Topics
from toolgate._errors import ConfigError
from toolgate.authoring._publish import signed_versions
from toolgate.gate._contracts import ContractSet
from toolgate.gate._published import PublishedVersion, canonical_bytes, sign_marker
from toolgate.gate._signing import Key, Keyring
from toolgate.operations._publish_topic import publish_to_topic, read_published
from toolgate.service._contract_source import SET_KEY, TopicContractSource, version_key

from tests.fakes.kafka import FakeBroker, FakeClients
from tests.unit.builders import CONTRACTS

CONFIG = Config(topics=Topics.under("t"))
TOPIC = CONFIG.topics.contracts


def world() -> tuple[FakeBroker, FakeClients]:
    broker = FakeBroker()
    broker.create_topic(TOPIC, 1)
    return broker, FakeClients(broker)


def versions(key: Key, root: Path = CONTRACTS) -> list[PublishedVersion]:
    return list(signed_versions(ContractSet.load(root), key).values())


class TestCompleteSetsOnly:
    """A reader loads a set only when every version its marker names is there with that digest."""

    async def test_a_published_set_loads_with_its_generation(
        self, keyring: Keyring, key: Key, tmp_path: Path
    ) -> None:
        """publish_to_topic writes versions then the marker; the reader loads generation 1, then 2."""
        _broker, clients = world()
        first = await publish_to_topic(CONFIG, versions(key), key, clients=clients)
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets")
        await source.start(5)
        try:
            loaded = source.load()
            assert (first.generation, loaded.generation) == (1, 1)
            assert loaded.digest == ContractSet.load(CONTRACTS).digest
            again = await publish_to_topic(CONFIG, versions(key), key, clients=clients)
            assert (again.generation, again.written) == (2, [])  # unchanged versions are not rewritten
            assert await source.refresh(5)
            assert source.changed()
            assert source.load().generation == 2
            assert not source.changed()
        finally:
            await source.stop()

    async def test_a_marker_naming_a_missing_version_is_not_loaded(
        self, keyring: Keyring, key: Key, tmp_path: Path
    ) -> None:
        """A marker whose versions are not all there yet (a publish in progress) leaves no set to load."""
        broker, clients = world()
        signed = versions(key)
        for pv in signed[1:]:
            broker.append(TOPIC, msgspec.json.encode(pv), key=version_key(pv.tool, pv.version))
        marker = sign_marker(1, {pv.key: pv.digest for pv in signed}, key)
        broker.append(TOPIC, msgspec.json.encode(marker), key=SET_KEY)
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets")
        with pytest.raises(ConfigError, match=f"lacks {signed[0].key}"):
            await source.start(5)
        await source.stop()

    async def test_an_empty_topic_says_how_to_publish(self, keyring: Keyring, tmp_path: Path) -> None:
        """No set at all: the error names the topic and the publish command."""
        _broker, clients = world()
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets")
        with pytest.raises(ConfigError, match=r"t\.contracts.*toolgate contracts publish --to topic"):
            await source.start(5)
        await source.stop()


class TestOnlyWhatAPublisherSigned:
    """A version changed by anyone but its signing publisher is refused with one line naming it."""

    async def test_a_rule_dropped_and_the_digest_recomputed_is_refused(
        self, keyring: Keyring, key: Key, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """review_status v1 rewritten without its bind rule (digest recomputed, old signature): refused,
        said once, and the set that names the signed digest stays incomplete."""
        caplog.set_level(logging.WARNING, logger="toolgate.contracts")
        broker, clients = world()
        await publish_to_topic(CONFIG, versions(key), key, clients=clients)
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets")
        await source.start(5)
        try:
            signed = next(pv for pv in versions(key) if pv.key == "review_status/1")
            loose = signed.files["contract.yaml"].replace("  - kind: bind", "  - kind: bind_dropped")
            files = {**signed.files, "contract.yaml": loose}
            forged = msgspec.structs.replace(
                signed,
                files=files,
                digest=hashlib.sha256(canonical_bytes(signed.tool, signed.version, files)).hexdigest(),
            )
            for _ in range(2):
                broker.append(TOPIC, msgspec.json.encode(forged), key=b"version/review_status/1")
            assert not await source.refresh(5)
            lines = [r for r in caplog.records if r.getMessage() == "contracts topic record refused"]
            assert len(lines) == 1
            assert lines[0].key == "version/review_status/1"  # type: ignore[attr-defined]
            assert "bad signature" in lines[0].reason  # type: ignore[attr-defined]
            assert source.load().digest == ContractSet.load(CONTRACTS).digest  # the signed set stays
        finally:
            await source.stop()

    async def test_an_unknown_publisher_is_refused(self, key: Key, tmp_path: Path) -> None:
        """A reader whose keyring names no publisher of the set refuses every record: no set loads."""
        _broker, clients = world()
        await publish_to_topic(CONFIG, versions(key), key, clients=clients)
        source = TopicContractSource(TOPIC, clients, Keyring(), tmp_path / "sets")
        with pytest.raises(ConfigError, match="no complete contract set"):
            await source.start(5)
        await source.stop()


class TestPublishing:
    """publish --to topic: generations only go up; the topic's state is read back."""

    async def test_a_generation_not_above_the_topics_is_refused(self, key: Key, keyring: Keyring) -> None:
        """--generation at or below the topic's newest is refused naming both."""
        _broker, clients = world()
        await publish_to_topic(CONFIG, versions(key), key, generation=5, clients=clients)
        with pytest.raises(ConfigError, match=r"--generation 5: t\.contracts already holds generation 5"):
            await publish_to_topic(CONFIG, versions(key), key, generation=5, clients=clients)
        state = await read_published(CONFIG, clients, keyring)
        assert state.marker is not None
        assert state.generation == 5
        assert set(state.versions) == set(state.marker.versions)

    async def test_a_missing_topic_names_topics_ensure(self, key: Key) -> None:
        """Publishing to a topic that does not exist says to run topics ensure."""
        clients = FakeClients(FakeBroker())
        with pytest.raises(ConfigError, match="toolgate topics ensure"):
            await publish_to_topic(CONFIG, versions(key), key, clients=clients)

    def test_version_keys(self) -> None:
        """A version's key is version/<tool>/<version>."""
        assert version_key("review_status", "1.1") == b"version/review_status/1.1"
