"""``make tools``: installs Debian's prometheus package only when promtool is missing.

Runs the real Makefile target with a PATH of stand-ins (``id``, ``apt-get``, ``service``,
``promtool``) that record how they were called, so nothing is installed for real.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests import ROOT

MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")

APT_GET = """\
echo "$DEBIAN_FRONTEND $*" >> "$CALLS"
case "$1" in
  update) : > "$SHIM_DIR/.updated" ;;
  install)
    [ -e "$SHIM_DIR/.updated" ] || [ -n "$APT_WORKS_FIRST_TIME" ] || exit 100
    [ -n "$APT_BREAKS" ] && exit 100
    for tool in promtool prometheus kcat; do
      case " $* " in *" kcat "*) [ "$tool" = kcat ] || continue ;; *) [ "$tool" = kcat ] && continue ;; esac
      printf '#!/bin/bash\\n' > "$SHIM_DIR/$tool"; /bin/chmod +x "$SHIM_DIR/$tool"
    done ;;
esac
"""


def _shim(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    path.chmod(0o755)


def make_tools(
    tmp_path: Path, *, uid: int, installed: bool, kcat: bool = True, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``make tools`` with stand-ins; return the result and the recorded calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    _shim(bin_dir, "id", f"echo {uid}\n")
    _shim(bin_dir, "apt-get", APT_GET)
    _shim(bin_dir, "service", 'echo "service $*" >> "$CALLS"\n')
    if installed:
        _shim(bin_dir, "promtool", "")
        _shim(bin_dir, "prometheus", "")
    if kcat:
        _shim(bin_dir, "kcat", "")
    assert MAKE is not None
    result = subprocess.run(
        [MAKE, "--no-print-directory", "-s", "-C", str(ROOT), "tools"],
        env={"PATH": str(bin_dir), "SHIM_DIR": str(bin_dir), "CALLS": str(calls), **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    lines = calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []
    return result, lines


INSTALL = "noninteractive install -y --no-install-recommends prometheus"


class TestMakeTools:
    """make tools installs promtool only when missing, and only as root."""

    def test_nothing_to_do_when_installed(self, tmp_path: Path) -> None:
        """With promtool and prometheus on PATH, apt-get is never called."""
        result, calls = make_tools(tmp_path, uid=0, installed=True)
        assert (result.returncode, calls) == (0, [])

    def test_installs_noninteractively_as_root(self, tmp_path: Path) -> None:
        """As root with promtool missing, it installs the package without questions."""
        result, calls = make_tools(tmp_path, uid=0, installed=False, APT_WORKS_FIRST_TIME="1")
        assert result.returncode == 0, result.stderr
        assert calls[0] == INSTALL

    def test_updates_the_lists_when_the_install_fails(self, tmp_path: Path) -> None:
        """A failed install runs apt-get update, then installs again."""
        result, calls = make_tools(tmp_path, uid=0, installed=False)
        assert result.returncode == 0, result.stderr
        assert calls[:3] == [INSTALL, "noninteractive update", INSTALL]

    def test_stops_the_packaged_server(self, tmp_path: Path) -> None:
        """After installing, the server the package may have started is stopped."""
        _, calls = make_tools(tmp_path, uid=0, installed=False, APT_WORKS_FIRST_TIME="1")
        assert calls[-1] == "service prometheus stop"

    def test_fails_when_the_install_keeps_failing(self, tmp_path: Path) -> None:
        """An install that fails after the update fails the target."""
        result, calls = make_tools(tmp_path, uid=0, installed=False, APT_BREAKS="1")
        assert result.returncode != 0
        assert calls == [INSTALL, "noninteractive update", INSTALL]

    def test_not_root_fails_with_a_clear_message(self, tmp_path: Path) -> None:
        """Without root it installs nothing, says what to run, and fails."""
        result, calls = make_tools(tmp_path, uid=1000, installed=False)
        assert result.returncode != 0
        assert calls == []
        assert "needs root" in result.stderr
        assert "apt-get install -y prometheus" in result.stderr


KCAT = "noninteractive install -y --no-install-recommends kcat"


class TestMakeToolsKcat:
    """make tools installs Debian's kcat (for the MCP integration test) only when missing."""

    def test_installs_kcat_when_missing(self, tmp_path: Path) -> None:
        result, calls = make_tools(tmp_path, uid=0, installed=True, kcat=False, APT_WORKS_FIRST_TIME="1")
        assert result.returncode == 0, result.stderr
        assert calls == [KCAT]

    def test_updates_the_lists_when_the_kcat_install_fails(self, tmp_path: Path) -> None:
        result, calls = make_tools(tmp_path, uid=0, installed=True, kcat=False)
        assert result.returncode == 0, result.stderr
        assert calls == [KCAT, "noninteractive update", KCAT]

    def test_kcat_not_root_fails_with_a_clear_message(self, tmp_path: Path) -> None:
        result, calls = make_tools(tmp_path, uid=1000, installed=True, kcat=False)
        assert result.returncode != 0
        assert calls == []
        assert "apt-get install -y kcat" in result.stderr
