"""``toolgate run --contracts registry+URL``: a real worker deciding with the registry's contracts.

A worker process on private topics loads the versions from the real registry, decides traffic with
them, picks up a version registered while it runs (no restart) and, started while the registry is
unreachable, runs on the last complete snapshot on disk and says so in its log and its metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from toolgate._config import Config
from toolgate.authoring._publish import Published
from toolgate.gate._contracts import ContractSet
from toolgate.registry import RegistryClient

from tests.integration.registry_kit import drop_rules, new_tool, reader_env, registry_client, write_version
from tests.integration.registry_kit import publish_set as publish_contracts
from tests.integration.worker_kit import (
    CONTRACTS,
    drop_topics,
    private_config,
    publish,
    samples,
    start_worker,
    wait_for_count,
)

DEAD_SOURCE = "registry+http://127.0.0.1:9/apis/ccompat/v7"  # the discard port: nothing answers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def client() -> RegistryClient:
    return registry_client()


@pytest.fixture
def config(bootstrap: str) -> Iterator[Config]:
    config = asyncio.run(private_config(bootstrap, partitions=1))
    try:
        yield config
    finally:
        asyncio.run(drop_topics(config))


class _Worker:
    """A ``toolgate run`` process with its metrics port; stopped with SIGTERM."""

    def __init__(self, config: Config, source: str, snapshots: Path, log: Path) -> None:
        self.port = _free_port()
        self.log = log
        self.proc = start_worker(
            config,
            "--contracts",
            source,
            log=log,
            env={
                "TOOLGATE_METRICS_PORT": str(self.port),
                "TOOLGATE_REGISTRY_SNAPSHOT_DIR": str(snapshots),
                "TOOLGATE_REGISTRY_POLL_SECONDS": "1",
                **reader_env(),
            },
        )

    def metrics(self) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            return ""

    def wait_for(self, check: Callable[[str], bool], what: str, seconds: float = 90) -> str:
        """The metrics text once ``check`` holds for it (the worker is polled until then)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the worker exited: {self.log.read_text()[-3000:]}"
            text = self.metrics()
            if check(text):
                return text
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.5)  # returns at once if it exits, checked above
        raise AssertionError(f"no {what} within {seconds}s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _info(tool: str, version: str) -> Callable[[str], bool]:
    return lambda text: (
        re.search(rf'toolgate_contract_info\{{[^}}]*tool="{tool}",version="{version}"', text) is not None
    )


def _generation(done: list[Published]) -> int:
    """The generation of the set marker a publish wrote."""
    return int(next(item.key for item in done if item.action == "set").removeprefix("generation "))


def _gauge(text: str, name: str) -> float | None:
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(match[1]) if match else None


class TestWorkerFromRegistry:
    """The worker decides with the registry's versions and follows new ones without a restart."""

    def test_decides_and_picks_up_a_new_version(
        self, client: RegistryClient, config: Config, tmp_path: Path
    ) -> None:
        """Bundled traffic is decided; a version registered meanwhile is loaded by the running worker."""
        tool = new_tool()
        shutil.copytree(CONTRACTS, tmp_path / "a")  # the set: the bundled contracts and one tool more
        write_version(tmp_path / "a", tool, "v1")
        first = _generation(publish_contracts(ContractSet.load(tmp_path / "a"), client))
        worker = _Worker(config, f"registry+{client.url}", tmp_path / "snapshots", tmp_path / "worker.log")
        try:
            text = worker.wait_for(_info(tool, "1"), f"{tool} v1 loaded")
            assert _gauge(text, "toolgate_contracts_from_snapshot") == 0
            assert _gauge(text, "toolgate_contract_set_generation") == first  # the set marker's
            items = samples(12)
            asyncio.run(publish(config, items))
            decided = asyncio.run(wait_for_count(config, config.topics.audit, len(items), 90))
            assert decided >= len(items)
            write_version(
                tmp_path / "a", tool, "v1.1", decisions=["approved", "rejected", "pending", "withdrawn"]
            )
            second = _generation(publish_contracts(ContractSet.load(tmp_path / "a"), client))
            text = worker.wait_for(_info(tool, "1.1"), f"{tool} v1.1 loaded without a restart")
            assert (second, _gauge(text, "toolgate_contract_set_generation")) == (first + 1, second)
        finally:
            worker.stop()
        assert worker.proc.returncode == 0, worker.log.read_text()[-3000:]
        assert "contracts reloaded" in worker.log.read_text()

    def test_a_foreign_change_is_refused(
        self, client: RegistryClient, config: Config, tmp_path: Path
    ) -> None:
        """A version re-registered with its rule dropped: one log line naming subject and version,
        and the worker keeps the signed version (its digest in toolgate_contract_info)."""
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish_contracts(ContractSet.load(tmp_path / "a"), client)
        signed = ContractSet.load(tmp_path / "a").contracts[0].digest
        worker = _Worker(config, f"registry+{client.url}", tmp_path / "snapshots", tmp_path / "worker.log")
        try:
            worker.wait_for(_info(tool, "1"), f"{tool} v1 loaded")
            where = drop_rules(client, tool)
            deadline = time.monotonic() + 60
            while where not in worker.log.read_text() and time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.proc.wait(timeout=0.5)  # returns at once if it exits
            text = worker.metrics()
        finally:
            worker.stop()
        lines = [line for line in worker.log.read_text().splitlines() if where in line]
        assert len(lines) == 1, lines
        assert f"schema registry subject {where}: refused" in lines[0]
        assert "bad signature" in lines[0]
        info = [
            line for line in text.splitlines() if line.startswith("toolgate_contract_info{") and tool in line
        ]
        assert len(info) == 1
        assert f'digest="{signed}"' in info[0]

    def test_registry_down_at_start_up(self, client: RegistryClient, config: Config, tmp_path: Path) -> None:
        """The last complete snapshot on disk: one log line, toolgate_contracts_from_snapshot 1."""
        tool = new_tool()
        write_version(tmp_path / "a", tool, "v1")
        publish_contracts(ContractSet.load(tmp_path / "a"), client)
        snapshots = tmp_path / "snapshots"
        first = _Worker(config, f"registry+{client.url}", snapshots, tmp_path / "first.log")
        try:
            first.wait_for(_info(tool, "1"), f"{tool} v1 loaded")
        finally:
            first.stop()
        down = _Worker(config, DEAD_SOURCE, snapshots, tmp_path / "down.log")
        try:
            text = down.wait_for(
                lambda t: _gauge(t, "toolgate_contracts_from_snapshot") == 1,
                "toolgate_contracts_from_snapshot 1",
            )
            assert _info(tool, "1")(text)
        finally:
            down.stop()
        lines = [
            line
            for line in down.log.read_text().splitlines()
            if "schema registry unreachable or empty" in line
        ]
        assert len(lines) == 1
        assert "last complete snapshot" in lines[0]

    def test_registry_down_without_a_snapshot(self, config: Config, tmp_path: Path) -> None:
        """Nothing to start from: exit 2 with one line naming the registry and the folder."""
        worker = _Worker(config, DEAD_SOURCE, tmp_path / "none", tmp_path / "worker.log")
        assert worker.proc.wait(timeout=60) == 2
        text = worker.log.read_text()
        assert "127.0.0.1:9/apis/ccompat/v7: unreachable" in text
        assert f"no snapshot of it in {tmp_path / 'none'}" in text
