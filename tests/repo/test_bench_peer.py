"""The worker bench builds the peer once into its cache and fills its pipeline template."""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("worker_bench", ROOT / "ops" / "bench" / "worker_bench.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("worker_bench", module)
    spec.loader.exec_module(module)
    return module


bench = _load()

TEMPLATE = """\
# Fill in the {placeholders}; {processors} is mentioned in a comment only.
http:
  address: 127.0.0.1:4195
input:
  kafka_franz_lite:
    seed_brokers: [{boot}]
    topics: [{intake}]
    consumer_group: {group}
pipeline:
  processors:
    - json_schema:
        schema_path: file://{schema_path}
output:
  switch:
    cases:
      - check: errored()
        output:
          kafka_franz_lite: {topic: {invalid}, key: ${! @kafka_key }}
      - output:
          kafka_franz_lite: {topic: {valid}, key: ${! @kafka_key }}
"""
VALUES = {
    "boot": "127.0.0.1:19092",
    "intake": "t.intake",
    "group": "t.group",
    "schema_path": "/tmp/schema.json",
    "valid": "t.agent",
    "invalid": "t.quarantine",
}

# Stands in for the Go toolchain: "version" names it, "build -o OUT ./cmd/peer" writes OUT
# (when the sources were laid out as the peer's README says) and counts the builds.
FAKE_GO = """\
#!/bin/sh
if [ "$1" = version ]; then echo "go version {version}"; exit 0; fi
test -f cmd/peer/main.go && test -f go.mod || {{ echo "no sources in $PWD" >&2; exit 1; }}
test "$GOFLAGS" = "-mod=mod" || {{ echo "GOFLAGS=$GOFLAGS" >&2; exit 1; }}
echo built >> "{counter}"
echo binary > "$3"
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "peer"
    folder.mkdir()
    for name in bench.PEER_FILES:
        (folder / name).write_text(TEMPLATE if name.endswith(".template") else f"{name}\n")
    return folder


def fake_go(tmp_path: Path, version: str = "go1.26.8") -> tuple[str, Path]:
    counter = tmp_path / "builds"
    go = tmp_path / "bin" / "go"
    go.parent.mkdir(exist_ok=True)
    go.write_text(FAKE_GO.format(version=version, counter=counter))
    go.chmod(go.stat().st_mode | stat.S_IEXEC)
    return str(go), counter


class TestPipeline:
    def test_every_placeholder_is_filled_and_the_port_moved(self) -> None:
        """The template's placeholders get the run's values; its HTTP server a port of its own."""
        text = bench.peer_pipeline(TEMPLATE, VALUES, 40123)
        code = [line for line in text.splitlines() if not line.startswith("#")]
        assert not [line for line in code if "{" in line and "${!" not in line]
        assert "address: 127.0.0.1:40123" in text
        assert "topics: [t.intake]" in text
        assert "schema_path: file:///tmp/schema.json" in text
        assert "${! @kafka_key }" in text

    def test_a_placeholder_left_is_named(self) -> None:
        """A template naming a value the bench does not give fails with that name."""
        with pytest.raises(RuntimeError, match=r"\{valid\}"):
            bench.peer_pipeline(TEMPLATE, {k: v for k, v in VALUES.items() if k != "valid"}, 1)


class TestBuild:
    def test_built_once_into_the_cache_then_reused(
        self, tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The second call finds the binary the first built, outside the checkout."""
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        go, counter = fake_go(tmp_path)
        first, built = bench.build_peer(source, go)
        again, rebuilt = bench.build_peer(source, go)
        assert (built, rebuilt) == (True, False)
        assert first == again
        assert first.is_relative_to(tmp_path / "cache")
        assert counter.read_text().splitlines() == ["built"]

    def test_a_changed_source_or_toolchain_builds_afresh(
        self, tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The cache is keyed by the sources and by go version."""
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        go, counter = fake_go(tmp_path)
        original, _ = bench.build_peer(source, go)
        (source / "main.go").write_text("changed\n")
        edited, _ = bench.build_peer(source, go)
        newer, _ = fake_go(tmp_path, version="go1.27.0")
        upgraded, _ = bench.build_peer(source, newer)
        assert len({original, edited, upgraded}) == 3
        assert len(counter.read_text().splitlines()) == 3

    def test_a_failed_build_names_its_folder(
        self, tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The build's own error output is in the message, and no binary is left to reuse."""
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        go, _ = fake_go(tmp_path)
        (tmp_path / "bin" / "go").write_text(
            '#!/bin/sh\n[ "$1" = version ] && exit 0\necho broken >&2\nexit 1\n'
        )
        with pytest.raises(RuntimeError, match=r"building the peer in .*src failed:\nbroken"):
            bench.build_peer(source, go)
        assert not [p for p in (tmp_path / "cache").rglob("peer") if p.is_file()]

    def test_without_go_the_peer_is_skipped_with_a_reason(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No Go on PATH: no peer, and one line saying why."""
        monkeypatch.setenv("PATH", str(tmp_path))
        peer, reason = bench.find_peer(None)
        assert peer is None
        assert "no Go toolchain" in reason
        assert os.environ["PATH"] == str(tmp_path)
