"""ops/kafka/kafka.sh and ops/registry/registry.sh, sharing ops/lib/service.sh, on real processes.

Each runs an instance of its own on free ports and data folders (never the shared broker on 19092
or registry on 18081), and a second "checkout" (another data folder, the same ports) beside it:
start, status, ensure, with and stop act on their own instance, and use or leave alone the other's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import ROOT
from tests.integration.broker_kit import free_port


@dataclass
class Service:
    """One script, an instance's environment, and the address it serves."""

    script: Path
    name: str
    env: dict[str, str]
    address: str

    def run(self, *args: str, data: Path) -> subprocess.CompletedProcess[str]:
        env = {
            k: v for k, v in os.environ.items() if k not in ("TOOLGATE_BOOTSTRAP", "TOOLGATE_REGISTRY_URL")
        }
        env.update(self.env)
        env["TOOLGATE_KAFKA_DATA" if self.name == "kafka.sh" else "TOOLGATE_APICURIO_DATA"] = str(data)
        return subprocess.run(
            ["bash", str(self.script), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def _kafka() -> Service:
    if not (ROOT / "ops" / "kafka" / ".jars" / ".complete").is_file() or shutil.which("java") is None:
        pytest.skip("needs the broker jars (make jars) and java")
    port = free_port()
    env = {"TOOLGATE_KAFKA_PORT": str(port), "TOOLGATE_KAFKA_CONTROLLER_PORT": str(free_port())}
    return Service(ROOT / "ops" / "kafka" / "kafka.sh", "kafka.sh", env, f"127.0.0.1:{port}")


def _registry() -> Service:
    if (
        not (ROOT / "ops" / "registry" / ".build" / "app" / ".complete").is_file()
        or shutil.which("java") is None
    ):
        pytest.skip("needs the registry build (make registry) and java")
    port = free_port()
    env = {"TOOLGATE_APICURIO_PORT": str(port)}
    return Service(ROOT / "ops" / "registry" / "registry.sh", "registry.sh", env, f"http://127.0.0.1:{port}")


class TestSharedProcessHandling:
    """Both scripts start, find, use and stop instances the same way, each touching only its own."""

    @pytest.mark.parametrize("make", [_kafka, _registry], ids=["kafka.sh", "registry.sh"])
    def test_start_ensure_status_with_stop(self, make: Callable[[], Service], tmp_path: Path) -> None:
        """This checkout's instance is started and stopped; another checkout's is used, never stopped."""
        service = make()
        ours, other = tmp_path / "ours", tmp_path / "other"
        try:
            none = service.run("status", data=ours)
            assert (none.returncode, none.stderr.strip()) == (3, f"{service.name}: not running")
            started = service.run("start", data=ours)
            assert started.returncode == 0, started.stderr
            status = service.run("status", data=ours)
            assert status.returncode == 0, status.stderr
            assert f"serving {service.address}" in status.stderr
            again = service.run("ensure", data=ours)
            assert again.returncode == 0
            assert "already running (pid" in again.stderr

            refused = service.run("start", data=other)
            assert refused.returncode == 1
            assert f"already serves {service.address}: `{service.name} ensure` uses it" in refused.stderr
            used = service.run("ensure", data=other)
            assert used.returncode == 0
            assert f"already serves {service.address} (not started here): using it" in used.stderr
            theirs = service.run("status", data=other)
            assert theirs.returncode == 3
            assert "another checkout serves" in theirs.stderr
            within = service.run("with", "bash", "-c", "exit 7", data=other)
            assert within.returncode == 7  # the command's own exit code
            kept = service.run("stop", data=other)
            assert kept.returncode == 0
            assert "left running" in kept.stderr
            assert service.run("status", data=ours).returncode == 0

            stopped = service.run("stop", data=ours)
            assert stopped.returncode == 0
            assert "stopped (pid" in stopped.stderr
            assert service.run("status", data=ours).returncode == 3

            once = service.run("with", "bash", "-c", "echo inside", data=ours)
            assert once.returncode == 0, once.stderr
            assert once.stdout == "inside\n"
            assert service.run("status", data=ours).returncode == 3  # started for the command, then stopped
        finally:
            service.run("stop", data=ours)
