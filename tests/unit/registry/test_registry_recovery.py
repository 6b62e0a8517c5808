"""A registry that lost its contents is published again at a higher generation, as
docs/contracts.md says: the readers take the new set, and still refuse content changed under
the generation they read it at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toolgate.authoring._publish import publish
from toolgate.gate._contracts import ContractSet
from toolgate.registry._snapshot import SEEN, IncompleteSet, Problem, fetch_set

from tests.unit.registry.test_registry_trust import (
    MemoryRegistry,
    publisher,
    review_folder,
    sample_keyring,
    source,
)


@pytest.fixture
def registry(tmp_path: Path) -> MemoryRegistry:
    """A registry holding review_status v1 published by the sample publisher (generation 1)."""
    registry = MemoryRegistry()
    publish(ContractSet.load(review_folder(tmp_path)), registry, publisher())
    return registry


def changed_folder(tmp_path: Path) -> Path:
    """review_status v1 with one more file: the same subject and version, other content."""
    root = review_folder(tmp_path)
    (root / "review_status" / "v1" / "NOTES.txt").write_text("rebuilt\n")
    return root


class TestRecoveryAfterALostRegistry:
    """A newer verified generation may bring other content under a subject version read before."""

    def test_publish_generation_50_loads(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """The registry restarted empty and republished with other content at generation 50: the
        reader loads generation 50 and records it against the registration."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        rebuilt = MemoryRegistry()
        publish(ContractSet.load(changed_folder(tmp_path / "again")), rebuilt, publisher(), generation=50)
        reader.client = rebuilt
        assert reader.poll()
        assert reader.generation == 50
        assert (reader.current / "review_status" / "v1" / "NOTES.txt").exists()
        seen = json.loads((tmp_path / "snap" / SEEN).read_text())
        assert seen["review_status-v1-value/1"]["generation"] == 50
        assert reader.published_generation() == 50

    def test_a_change_under_the_same_generation_is_still_refused(
        self, registry: MemoryRegistry, tmp_path: Path
    ) -> None:
        """Other content for a registration read under generation 1, with the marker still at 1: refused."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        other = MemoryRegistry()
        publish(ContractSet.load(changed_folder(tmp_path / "other")), other, publisher())
        registry.store["review_status-v1-value"][0] = other.store["review_status-v1-value"][0]
        registry.register("noise-v1-value", "{}", what="noise")
        problems: list[Problem] = []
        with pytest.raises(IncompleteSet):
            fetch_set(registry, sample_keyring(), seen=reader._digests, problems=problems)
        assert "changed since this reader first read it under set generation 1" in problems[0].message

    def test_the_older_seen_file_is_read(self, registry: MemoryRegistry, tmp_path: Path) -> None:
        """A seen file of digests only (the earlier format) counts as read at the loaded generation."""
        reader = source(registry, tmp_path / "snap")
        reader.start()
        path = tmp_path / "snap" / SEEN
        old = {k: v["digests"] for k, v in json.loads(path.read_text()).items()}
        path.write_text(json.dumps(old))
        again = source(registry, tmp_path / "snap")
        assert again._digests["review_status-v1-value/1"].generation == 1
