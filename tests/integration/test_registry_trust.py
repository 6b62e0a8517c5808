"""Against the real registry: readers load what the publisher signed, and only complete sets.

Each case changes the registry the way anyone with write access to its API could (no toolgate
code on that side): a version registered again with its bind rule dropped and every digest
recomputed, a raw registration without ``x-toolgate``, a set marker naming a version that is
not there. Every reader (the worker's and proxy's source, ``toolgate contracts pull``) refuses or
ignores it with one line naming the subject and version, and the loaded set stays the signed one.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._published import sign_marker
from toolgate.registry import RegistryClient, RegistrySource, subject_of
from toolgate.registry._layout import KEYWORD, marker_text, set_subject
from toolgate.registry._snapshot import load_contracts

from tests import ROOT
from tests.integration.registry_kit import (
    KIT_SET,
    drop_rules,
    new_tool,
    publish_set,
    publisher_key,
    reader,
    reader_env,
    registry_client,
    write_version,
)
from tests.unit.builders import NOW, message, review_request, review_value

RAW = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"})


@pytest.fixture(scope="module")
def client() -> RegistryClient:
    return registry_client()


def _published(client: RegistryClient, tmp_path: Path) -> str:
    """A new tool (review_status's contract, bind rule included) published as this process's set."""
    tool = new_tool()
    write_version(tmp_path / "authored", tool, "v1")
    publish_set(ContractSet.load(tmp_path / "authored"), client)
    return tool


def _published_and_read(client: RegistryClient, tmp_path: Path) -> tuple[str, RegistrySource]:
    """:func:`_published`, and a source that has loaded it."""
    tool = _published(client, tmp_path)
    source = reader(client, tmp_path / "snapshots")
    source.start()
    return tool, source


def _foreign_approval_accepted(current: Path, tool: str) -> bool:
    """Whether the loaded set accepts an approval of CR-9999 for a request bound to CR-1042."""
    gate = Gate(load_contracts(current))
    value = {**review_value(change_id="CR-9999"), "tool": tool}
    verdict = gate.evaluate(message(value, tool=tool), review_request(tool=tool), NOW)
    return verdict.accepted


def _pull(client: RegistryClient, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolgate", "contracts", "pull", "--registry", client.url, str(dest)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **reader_env()},
    )


class TestForeignChange:
    """A version changed by anyone but its publisher is refused by every reader, in one line."""

    def test_rule_dropped_and_digests_recomputed(
        self, client: RegistryClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The running source, a new one and pull refuse it; the bind rule still rejects CR-9999."""
        tool, running = _published_and_read(client, tmp_path)
        assert not _foreign_approval_accepted(running.current, tool)
        where = drop_rules(client, tool)
        caplog.set_level(logging.INFO, "toolgate.registry")
        assert running.poll() is False
        client.register(subject_of(new_tool(), 1), RAW, what="a change to read again")
        assert running.poll() is False
        fresh = reader(client, tmp_path / "fresh")
        fresh.start()
        lines = [r.getMessage() for r in caplog.records if where in r.getMessage()]
        assert len(lines) == 2  # once per reader, however often it reads the registry
        assert all(f"schema registry subject {where}: refused" in line for line in lines)
        assert all("bad signature" in line for line in lines)
        assert not _foreign_approval_accepted(running.current, tool)
        assert not _foreign_approval_accepted(fresh.current, tool)
        pulled = _pull(client, tmp_path / "pulled")
        assert pulled.returncode == 0, pulled.stderr
        assert [line for line in pulled.stderr.splitlines() if where in line] == [
            next(line for line in pulled.stderr.splitlines() if "refused" in line)
        ]
        assert "bind" in (tmp_path / "pulled" / tool / "v1" / "contract.yaml").read_text()

    def test_publish_is_not_blocked_by_it(self, client: RegistryClient, tmp_path: Path) -> None:
        """The publisher publishes a new revision beside the forged registration."""
        tool = _published(client, tmp_path)
        drop_rules(client, tool)
        write_version(
            tmp_path / "authored", tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"]
        )
        done = publish_set(ContractSet.load(tmp_path / "authored"), client)
        assert [d.action for d in done] == ["unchanged", "registered", "set"]
        loaded = load_contracts(reader(client, tmp_path / "snap").start())
        assert [c.key for c in loaded if c.spec.tool == tool] == [f"{tool}@v1", f"{tool}@v1.1"]


class TestIgnored:
    """A registration without toolgate metadata is ignored, and said once."""

    def test_raw_registration_logged(
        self, client: RegistryClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A raw JSON Schema in the tool's subject: one warning naming subject and version."""
        tool, source = _published_and_read(client, tmp_path)
        subject = subject_of(tool, 1)
        document = json.loads(client.schema(subject, client.versions(subject)[-1]))
        del document[KEYWORD]  # the same schema bare: what a serde's auto-registration writes
        client.register(subject, json.dumps(document), what="a raw registration")
        number = client.versions(subject)[-1]
        caplog.set_level(logging.INFO, "toolgate.registry")
        source.poll()
        client.register(subject_of(new_tool(), 1), RAW, what="a change to read again")
        source.poll()
        lines = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
        assert lines == [
            f"schema registry subject {subject} version {number}: a registration without "
            f"{KEYWORD} metadata; ignored"
        ]
        assert not _foreign_approval_accepted(source.current, tool)


class TestPartialSet:
    """A registry holding part of a set never replaces a complete snapshot."""

    def test_marker_naming_an_absent_version(self, client: RegistryClient, tmp_path: Path) -> None:
        """The newest marker names a version not registered: the running set and a restart keep
        the complete snapshot and its generation."""
        tool = _published(client, tmp_path)
        source = reader(client, tmp_path / "snap")
        current = source.start()
        generation = source.generation
        target = current.resolve()
        subject = set_subject(KIT_SET)
        newest = json.loads(client.schema(subject, client.versions(subject)[-1]))["x-toolgate-set"]
        versions = {**newest["versions"], f"{tool}/1.1": "0" * 64}
        marker = sign_marker(newest["generation"] + 1, versions, publisher_key())
        client.register(subject, marker_text(marker), what="a marker ahead of its versions")
        assert source.poll() is False
        assert current.resolve() == target
        restarted = reader(client, tmp_path / "snap")
        assert restarted.start().resolve() == target
        assert restarted.from_disk
        assert (source.generation, restarted.generation) == (generation, generation)
        assert [c.key for c in load_contracts(current) if c.spec.tool == tool] == [f"{tool}@v1"]
