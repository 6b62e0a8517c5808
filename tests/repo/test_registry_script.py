"""ops/registry/registry.sh: refuses bad knobs in one line and reports an instance that is not there."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests import ROOT

SCRIPT = ROOT / "ops" / "registry" / "registry.sh"


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestKnobs:
    """A bad value stops the script before anything starts, naming the variable."""

    @pytest.mark.parametrize(
        ("env", "named"),
        [
            ({"TOOLGATE_APICURIO_PORT": "http"}, "TOOLGATE_APICURIO_PORT (http)"),
            ({"TOOLGATE_APICURIO_PORT": "70000"}, "TOOLGATE_APICURIO_PORT (70000)"),
            ({"TOOLGATE_APICURIO_TLS_PORT": "18081"}, "TOOLGATE_APICURIO_TLS_PORT (18081)"),
            ({"TOOLGATE_APICURIO_START_TIMEOUT": "soon"}, "TOOLGATE_APICURIO_START_TIMEOUT"),
        ],
    )
    def test_bad_knob(self, env: dict[str, str], named: str, tmp_path: Path) -> None:
        """Exit 1 and one error line naming the knob."""
        done = _run("status", env={"TOOLGATE_APICURIO_DATA": str(tmp_path), **env})
        assert done.returncode == 1
        errors = [line for line in done.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1
        assert named in errors[0]


class TestStatus:
    """status tells a running instance from none."""

    def test_nothing_running(self, tmp_path: Path) -> None:
        """An instance that was never started: exit 3, "not running"."""
        done = _run(
            "status",
            env={"TOOLGATE_APICURIO_PORT": str(_free_port()), "TOOLGATE_APICURIO_DATA": str(tmp_path)},
        )
        assert done.returncode == 3
        assert "not running" in done.stderr

    def test_usage(self) -> None:
        """An unknown command prints the usage (its commands) and exits 2."""
        done = _run("nonsense", env={})
        assert done.returncode == 2
        assert "registry.sh with CMD" in done.stderr
