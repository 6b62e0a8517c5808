"""Contracts through a real schema registry: publish, load, pull, new versions, outages."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from toolgate._errors import ConfigError
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import import_listing
from toolgate.registry import RegistryClient, RegistryError, subject_of
from toolgate.service._startup import ContractWatch

from tests import ROOT, mcp_kit
from tests.integration.registry_kit import (
    PrivateRegistry,
    new_tool,
    private_registry,
    pull_set,
    reader,
    reader_env,
    registered,
    registry_client,
    write_version,
)
from tests.integration.registry_kit import publish_set as publish

PRIVATE_PORT = 28081
PRIVATE_TLS_PORT = 28443
DEAD_URL = "http://127.0.0.1:9/apis/ccompat/v7"  # the discard port: nothing answers


@pytest.fixture(scope="module")
def client() -> RegistryClient:
    return registry_client()


def _keys(contracts: ContractSet, tool: str) -> dict[str, tuple[str, str]]:
    return {c.key: (c.spec.status, c.digest) for c in contracts if c.spec.tool == tool}


class TestPublish:
    """Each version is registered once under <tool>-v<major>-value, BACKWARD, its metadata beside it."""

    def test_versions_go_to_their_major_subject(self, client: RegistryClient, tmp_path: Path) -> None:
        """v1 and v1.1 share a subject, v2 starts its own; a second publish registers nothing."""
        tool = new_tool()
        write_version(tmp_path, tool, "v1")
        write_version(tmp_path, tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"])
        write_version(tmp_path, tool, "v2", decisions=["approved", "rejected"])
        contracts = ContractSet.load(tmp_path)
        done = publish(contracts, client)
        assert done[-1].action == "set"
        assert [(d.key, d.subject, d.action) for d in done[:-1]] == [
            (f"{tool}@v1", subject_of(tool, 1), "registered"),
            (f"{tool}@v1.1", subject_of(tool, 1), "registered"),
            (f"{tool}@v2", subject_of(tool, 2), "registered"),
        ]
        assert client.compatibility(subject_of(tool, 1)) == "BACKWARD"
        meta = registered(client, subject_of(tool, 1))
        local = {c.spec.minor: c for c in contracts if c.spec.version == 1}
        assert [(m["minor"], m["digest"], m["contract"]["status"]) for m in meta] == [
            (0, local[0].digest, "active"),
            (1, local[1].digest, "active"),
        ]
        assert all(len(m["fixtures"]) == 16 and m["dialect"].endswith("2020-12/schema") for m in meta)
        again = publish(contracts, client)
        assert {d.action for d in again} == {"unchanged"}
        assert len(client.versions(subject_of(tool, 1))) == 2

    def test_a_status_change_is_registered(self, client: RegistryClient, tmp_path: Path) -> None:
        """Retiring v1 once v1.1 decides re-registers v1.1 with the new statuses; pull shows it."""
        tool = new_tool()
        write_version(tmp_path, tool, "v1")
        write_version(tmp_path, tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"])
        publish(ContractSet.load(tmp_path), client)
        contract = tmp_path / tool / "v1" / "contract.yaml"
        contract.write_text(contract.read_text().replace("status: active", "status: retired"))
        done = publish(ContractSet.load(tmp_path), client)
        changed = [(d.key, d.action) for d in done if d.action not in ("unchanged", "set")]
        assert changed == [(f"{tool}@v1", "statuses")]
        pulled = tmp_path / "pulled"
        pull_set(client, pulled)
        statuses = {c.key: c.spec.status for c in ContractSet.load(pulled) if c.spec.tool == tool}
        assert statuses == {f"{tool}@v1": "retired", f"{tool}@v1.1": "active"}

    def test_earlier_statuses_registered_again(self, client: RegistryClient, tmp_path: Path) -> None:
        """Retired, then active again: the newest registration wins, though its statuses were seen."""
        tool = new_tool()
        write_version(tmp_path, tool, "v1")
        write_version(tmp_path, tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"])
        publish(ContractSet.load(tmp_path), client)
        contract = tmp_path / tool / "v1" / "contract.yaml"
        for status in ("retired", "active"):
            contract.write_text(re.sub(r"status: \w+", f"status: {status}", contract.read_text()))
            publish(ContractSet.load(tmp_path), client)
        assert [m["statuses"]["0"] for m in registered(client, subject_of(tool, 1))] == [
            "active",
            "active",
            "retired",
            "active",
        ]
        pull_set(client, tmp_path / "pulled")
        pulled = ContractSet.load(tmp_path / "pulled")
        assert {c.key: c.spec.status for c in pulled if c.spec.tool == tool}[f"{tool}@v1"] == "active"

    def test_a_registered_version_never_changes(self, client: RegistryClient, tmp_path: Path) -> None:
        """Publishing another schema under a registered version is refused, naming it."""
        tool = new_tool()
        write_version(tmp_path, tool, "v1")
        publish(ContractSet.load(tmp_path), client)
        schema = tmp_path / tool / "v1" / "schema.json"
        schema.write_text(schema.read_text().replace('"pending"', '"pending", "withdrawn"'))
        with pytest.raises(ConfigError, match=rf"{tool}@v1 .*never changes"):
            publish(ContractSet.load(tmp_path), client)
        assert len(client.versions(subject_of(tool, 1))) == 1


class TestImportedMcpContracts:
    """An imported MCP tool's contract (its schema embeds the outputSchema and the closure, each a
    resource with a ``$id``) takes revisions and status changes in the registry, and readers get
    the schema as it was written, not the rendition the registry checks."""

    def test_a_revision_and_a_status_change(self, client: RegistryClient, tmp_path: Path) -> None:
        """v1, then v1.1 beside it, then v1 retired: each registered; pull gives the same schemas."""
        server = new_tool().replace("_", "")
        tools = json.loads((ROOT / "tests" / "mcp_listings" / "memory.json").read_text())["tools"]
        import_listing(tmp_path, server, [t for t in tools if t["name"] == "read_graph"], out=lambda _l: None)
        mcp_kit.review(tmp_path)
        tool = f"{server}.read_graph"
        publish(ContractSet.load(tmp_path), client)
        revision = tmp_path / tool / "v1.1"
        shutil.copytree(tmp_path / tool / "v1", revision)
        contract = revision / "contract.yaml"
        contract.write_text(contract.read_text().replace("\nversion: 1\n", "\nversion: 1\nminor: 1\n"))
        done = publish(ContractSet.load(tmp_path), client)
        assert [(d.key, d.action) for d in done if d.action != "set"] == [
            (f"{tool}@v1", "unchanged"),
            (f"{tool}@v1.1", "registered"),
        ]
        first = tmp_path / tool / "v1" / "contract.yaml"
        first.write_text(first.read_text().replace("status: active", "status: retired"))
        done = publish(ContractSet.load(tmp_path), client)
        assert [(d.key, d.action) for d in done if d.action not in ("unchanged", "set")] == [
            (f"{tool}@v1", "statuses")
        ]
        pull_set(client, tmp_path / "pulled")
        pulled = {c.key: c for c in ContractSet.load(tmp_path / "pulled") if c.spec.tool == tool}
        local = {c.key: c for c in ContractSet.load(tmp_path) if c.spec.tool == tool}
        assert {k: (c.spec.status, c.digest) for k, c in pulled.items()} == {
            k: (c.spec.status, c.digest) for k, c in local.items()
        }
        assert pulled[f"{tool}@v1.1"].schema == local[f"{tool}@v1.1"].schema


class TestBreakingChange:
    """A breaking revision without a new major is refused by toolgate and by the registry."""

    def _breaking(self, client: RegistryClient, root: Path) -> str:
        tool = new_tool()
        write_version(root, tool, "v1")
        publish(ContractSet.load(root), client)
        write_version(root, tool, "v1.1", decisions=["approved", "rejected"])  # "pending" removed
        return tool

    def test_toolgate_refuses_before_the_registry_is_asked(
        self, client: RegistryClient, tmp_path: Path
    ) -> None:
        """publish runs the history check first: nothing is registered."""
        tool = self._breaking(client, tmp_path)
        with pytest.raises(
            ConfigError, match=rf"{tool}@v1.1: breaking change from {tool}@v1 .*enum-narrowed"
        ):
            publish(ContractSet.load(tmp_path), client)
        assert len(client.versions(subject_of(tool, 1))) == 1

    def test_the_registry_refuses_it_too(self, client: RegistryClient, tmp_path: Path) -> None:
        """Without toolgate's check the registry answers 409, in one line naming subject and version."""
        tool = self._breaking(client, tmp_path)
        with pytest.raises(RegistryError) as caught:
            publish(ContractSet.load(tmp_path), client, check_history=False)
        message = str(caught.value)
        assert caught.value.status == 409
        assert f"{tool}@v1.1" in message
        assert subject_of(tool, 1) in message
        assert "\n" not in message
        assert len(client.versions(subject_of(tool, 1))) == 1

    def test_the_cli_says_it_in_one_line(self, client: RegistryClient, tmp_path: Path) -> None:
        """toolgate contracts publish exits 2 with one line naming the version."""
        tool = self._breaking(client, tmp_path)
        done = subprocess.run(
            [
                sys.executable,
                *("-m", "toolgate", "contracts", "publish", "--contracts", str(tmp_path)),
                *("--publisher-key", "sample-publisher"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "TOOLGATE_REGISTRY_URL": client.url, **reader_env()},
        )
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1
        assert f"{tool}@v1.1: breaking change" in done.stderr


class TestLoad:
    """The worker's source: a complete snapshot, a new version picked up without a restart."""

    def test_new_version_is_picked_up(self, client: RegistryClient, tmp_path: Path) -> None:
        """A version registered after start-up reaches the contracts folder the worker's watch reloads."""
        tool = new_tool()
        authored = tmp_path / "authored"
        write_version(authored, tool, "v1")
        publish(ContractSet.load(authored), client)
        source = reader(client, tmp_path / "snapshots")
        current = source.start()
        first = _keys(ContractSet.load(current), tool)
        assert first == _keys(ContractSet.load(authored), tool)
        clock = [0.0]
        watch = ContractWatch([current], 1.0, clock=lambda: clock[0])
        assert source.poll() is False  # nothing new
        write_version(authored, tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"])
        publish(ContractSet.load(authored), client)
        assert source.poll() is True
        clock[0] = 2.0
        assert watch.changed()
        assert _keys(ContractSet.load(current), tool) == _keys(ContractSet.load(authored), tool)
        assert len(_keys(ContractSet.load(current), tool)) == 2

    def test_a_breaking_version_never_reaches_the_worker(
        self, client: RegistryClient, tmp_path: Path
    ) -> None:
        """The registry refused it, so the loaded set is the one published before."""
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish(ContractSet.load(tmp_path / "a"), client)
        write_version(tmp_path / "a", tool, "v1.1", decisions=["approved"])
        with pytest.raises(ConfigError):
            publish(ContractSet.load(tmp_path / "a"), client, check_history=False)
        source = reader(client, tmp_path / "snapshots")
        assert list(_keys(ContractSet.load(source.start()), tool)) == [f"{tool}@v1"]

    def test_pull_writes_what_was_published(self, client: RegistryClient, tmp_path: Path) -> None:
        """Pulled versions have the digests of the published ones and diff to no change."""
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish(ContractSet.load(tmp_path / "a"), client)
        written = pull_set(client, tmp_path / "pulled")
        assert f"{tool}@v1" in written
        assert _keys(ContractSet.load(tmp_path / "pulled"), tool) == _keys(
            ContractSet.load(tmp_path / "a"), tool
        )
        diff = subprocess.run(
            [
                sys.executable,
                "-m",
                "toolgate",
                "contracts",
                "diff",
                str(tmp_path / "a" / tool / "v1"),
                str(tmp_path / "pulled" / tool / "v1"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert diff.returncode == 0, diff.stdout + diff.stderr
        assert diff.stdout.startswith("0 changes"), diff.stdout


class TestOutage:
    """A registry down at start-up: the last complete snapshot; down later: the loaded set stays."""

    def test_down_at_start_up_uses_the_snapshot(
        self, client: RegistryClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """One warning line and the state flag; the set is the one written before."""
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish(ContractSet.load(tmp_path / "a"), client)
        root = tmp_path / "snapshots"
        before = _keys(ContractSet.load(reader(client, root).start()), tool)
        states: list[bool] = []
        down = reader(RegistryClient(DEAD_URL, timeout=2), root, on_state=states.append)
        with caplog.at_level(logging.WARNING, logger="toolgate.registry"):
            current = down.start()
        assert _keys(ContractSet.load(current), tool) == before
        assert down.from_disk
        assert states == [True]
        lines = [r.getMessage() for r in caplog.records if r.name == "toolgate.registry"]
        assert len(lines) == 1
        assert "last complete snapshot" in lines[0]
        assert "\n" not in lines[0]

    def test_down_at_start_up_without_a_snapshot_fails(self, tmp_path: Path) -> None:
        """Nothing to start from: one error naming the registry and the snapshot folder."""
        source = reader(RegistryClient(DEAD_URL, timeout=2), tmp_path / "none")
        with pytest.raises(
            ConfigError, match=rf"{DEAD_URL}: unreachable.*no snapshot of it in {tmp_path / 'none'}"
        ):
            source.start()


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRegistry]:
    registry_client()  # the same requirement as the shared registry (and its build)
    yield from private_registry(PRIVATE_PORT, PRIVATE_TLS_PORT, tmp_path_factory.mktemp("private-registry"))


class TestTls:
    """An https registry: trusted through TOOLGATE_REGISTRY_CA_FILE, refused in one line otherwise."""

    def test_publish_and_load_over_https(self, private: PrivateRegistry, tmp_path: Path) -> None:
        """With the registry's CA: publish, then a snapshot of the same versions."""
        client = RegistryClient(private.https_url, ca_file=str(private.tls / "ca.pem"))
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish(ContractSet.load(tmp_path / "a"), client)
        current = reader(client, tmp_path / "snapshots").start()
        assert _keys(ContractSet.load(current), tool) == _keys(ContractSet.load(tmp_path / "a"), tool)

    @pytest.mark.parametrize("ca", ["other-ca.pem", None])
    def test_an_untrusted_certificate(self, private: PrivateRegistry, ca: str | None) -> None:
        """Another CA, or the system's: one line naming the registry and the certificate check."""
        client = RegistryClient(private.https_url, ca_file=str(private.tls / ca) if ca else None)
        with pytest.raises(RegistryError) as caught:
            client.subjects()
        text = str(caught.value)
        assert text.startswith(f"schema registry {private.https_url}: unreachable")
        assert "CERTIFICATE_VERIFY_FAILED" in text
        assert "\n" not in text


class TestOutageWhileRunning:
    """A registry of the test's own, stopped and started again under a running source."""

    def test_the_loaded_set_stays_and_recovers(
        self, private: PrivateRegistry, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Down: polls keep the snapshot, logged once; back (empty, in memory): still kept;
        republished above the loaded generation: a new version is picked up again."""
        client = RegistryClient(private.url, timeout=3)
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish(ContractSet.load(tmp_path / "a"), client)
        source = reader(client, tmp_path / "snapshots")
        current = source.start()
        loaded = _keys(ContractSet.load(current), tool)
        target = current.resolve()
        private.stop()
        with caplog.at_level(logging.INFO, logger="toolgate.registry"):
            assert source.poll() is False
            assert source.poll() is False
        assert current.resolve() == target
        assert _keys(ContractSet.load(current), tool) == loaded
        assert [r.levelname for r in caplog.records if r.name == "toolgate.registry"] == ["ERROR"]
        private.start()  # in memory: it comes back empty
        assert source.poll() is False
        assert _keys(ContractSet.load(current), tool) == loaded
        restarted = reader(client, tmp_path / "snapshots")
        assert _keys(ContractSet.load(restarted.start()), tool) == loaded  # empty: the snapshot on disk
        assert restarted.from_disk
        write_version(
            tmp_path / "a", tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"]
        )
        # The registry lost its markers: publish above the generation the readers hold, as the
        # runbook says (they never go back to an older one).
        publish(ContractSet.load(tmp_path / "a"), client, generation=source.generation + 1)
        assert source.poll() is True
        assert set(_keys(ContractSet.load(current), tool)) == {f"{tool}@v1", f"{tool}@v1.1"}
