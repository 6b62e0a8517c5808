"""Every command ops/RUNBOOK.md gives, run against a live worker on private topics.

The runbook's commands assume the worker's configuration in the environment and its
metrics on 127.0.0.1:9464: here the environment names the private topics and the live
worker's port, and ``127.0.0.1:9464`` in a command becomes the live worker's address.
The schema registry commands (``contracts publish``, ``pull`` and the diff of what was
pulled) run with ``TOOLGATE_REGISTRY_URL`` naming the test registry
(tests/integration/registry_kit.py), which holds the live worker's contracts, as the
registry of a worker started with ``--contracts registry+URL`` does.
"""

from __future__ import annotations

import subprocess
import urllib.request

import pytest
from toolgate.gate._contracts import ContractSet
from toolgate.operations._top import parse

from tests.integration.live import LiveWorker
from tests.integration.registry_kit import publish_set, reader_env, registry_client
from tests.integration.worker_kit import CONTRACTS
from tests.ops_catalog import runbook_commands

COMMANDS = runbook_commands()
PULLED = "/tmp/registry-now"  # where the runbook pulls the registry's versions to


def _needs_registry(command: str) -> bool:
    """A command that talks to the schema registry or reads what was pulled from it."""
    return command.startswith(("toolgate contracts publish", "toolgate contracts pull")) or PULLED in command


@pytest.fixture(scope="module")
def registry_url() -> str:
    """The test registry (skipped without one, failed when TOOLGATE_REQUIRE_REGISTRY=1), holding
    the contracts the live worker decides with."""
    client = registry_client()
    publish_set(ContractSet.load(CONTRACTS), client)
    return client.url


def _run(live: LiveWorker, command: str, registry: str | None = None) -> subprocess.CompletedProcess[str]:
    assert live.worker is not None
    concrete = command.replace("127.0.0.1:9464", f"127.0.0.1:{live.worker.metrics_port}")
    env = {} if registry is None else {"TOOLGATE_REGISTRY_URL": registry, **reader_env()}
    return live.run("bash", "-c", concrete, env=env)


def _replayed(live: LiveWorker) -> float:
    body = urllib.request.urlopen(live.metrics_url, timeout=5).read().decode()
    return sum(value for labels, value in parse(body, 0.0).series("toolgate_replayed_results_total"))


class TestRunbookCommands:
    """Every runbook command works against a live worker."""

    @pytest.mark.parametrize("command", COMMANDS)
    def test_command_succeeds(self, live: LiveWorker, command: str, request: pytest.FixtureRequest) -> None:
        """The runbook command exits 0 against a worker that has decided sample traffic (and,
        for the registry's commands, a registry that holds its contracts); ``contracts diff``
        exits 1 where it finds a breaking change, as its --help says, with the change named."""
        registry = request.getfixturevalue("registry_url") if _needs_registry(command) else None
        result = _run(live, command, registry)
        said = f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        if command.startswith("toolgate contracts diff") and result.returncode == 1:
            assert "BREAKING" in result.stdout, said
            assert "Traceback" not in result.stderr, said
            return
        assert result.returncode == 0, said

    def test_commands_print_what_they_promise(self, live: LiveWorker) -> None:
        """healthz says ok, readyz says ready, quarantine tail prints the diagnostics headers."""
        assert _run(live, "curl -s http://127.0.0.1:9464/healthz").stdout == "ok\n"
        ready = _run(live, "curl -s http://127.0.0.1:9464/readyz").stdout
        assert ready.splitlines()[0] == "ready"
        assert ready.splitlines()[1].startswith("contracts g0-")
        tail = _run(live, "toolgate quarantine tail --code BAD_SIGNATURE -n 20").stdout
        assert tail.count('"tg-error-code": "BAD_SIGNATURE"') == len(tail.splitlines()) > 0

    def test_replay_apply_reaches_the_worker(self, live: LiveWorker) -> None:
        """After the runbook's replay --apply the live worker counts replayed results."""
        assert any(c.startswith("toolgate replay --apply") for c in COMMANDS)
        live.wait_until(lambda: _replayed(live) > 0, 30, "counting replayed results")
        assert _replayed(live) > 0
