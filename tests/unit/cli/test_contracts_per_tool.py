"""``toolgate contracts lint TOOL...`` and ``contracts test TOOL...``: one tool's versions, its exit
status alone, and lint's last line counting the drafts' findings apart from those that decide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from toolgate import cli
from toolgate.mcp._import import import_listing

from tests import ROOT

LISTING = ROOT / "tests" / "mcp_listings" / "memory.json"


def activate_plainly(folder: Path) -> None:
    """A hand review: status active, every projected pointer named under free_text."""
    path = folder / "contract.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["status"] = "active"
    spec["free_text"] = [{"pointer": p, "reason": "read by the agent as data"} for p in spec["projection"]]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """server-memory's nine tools imported as drafts into ``demo``."""
    tools = json.loads(LISTING.read_text())["tools"]
    import_listing(tmp_path / "demo", "memory", tools, out=lambda _line: None)
    return tmp_path / "demo"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


class TestPerTool:
    """Lint and test take tools: only their versions are read into the verdict and the exit."""

    def test_lint_one_tool_lists_its_findings_only(
        self, demo: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every finding printed is of the tool named, and the count is its versions'."""
        code, out, _ = _run(["contracts", "lint", "--contracts", str(demo), "memory.read_graph"], capsys)
        lines = out.splitlines()
        assert code == 1
        assert all("memory.read_graph" in line for line in lines[:-1])
        assert lines[-1].startswith("1 contract versions: ")

    def test_lint_exit_is_the_named_tools_alone(self, demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A reviewed tool lints clean (exit 0) while the other eight drafts are left."""
        activate_plainly(demo / "memory.read_graph" / "v1")
        code, out, _ = _run(["contracts", "lint", "--contracts", str(demo), "memory.read_graph"], capsys)
        assert (code, out.splitlines()[-1]) == (0, "1 contract versions: 0 findings")
        code, _, _ = _run(["contracts", "lint", "--contracts", str(demo)], capsys)
        assert code == 1

    def test_unknown_tool_is_named(self, demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A tool the folder does not hold: exit 2, naming it and the tools there are."""
        code, _, err = _run(["contracts", "lint", "--contracts", str(demo), "memory.nope"], capsys)
        assert code == 2
        assert "'memory.nope': no such tool" in err
        assert "memory.read_graph" in err

    def test_test_one_tool_runs_its_fixtures_only(
        self, demo: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Only the named tool's fixtures run; the summary counts its one version."""
        code, out, _ = _run(
            ["contracts", "test", "-v", "--contracts", str(demo), "memory.search_nodes"], capsys
        )
        lines = out.splitlines()
        assert code == 0
        assert lines[-1].startswith("1 contract versions: ")
        assert all("search_nodes" in line for line in lines[:-1])


class TestLintSummary:
    """Lint's last line separates the drafts' findings from those of reviewed versions."""

    def test_drafts_counted_apart(self, demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """With one version active and its projection left free, its findings are not the drafts'."""
        folder = demo / "memory.read_graph" / "v1"
        path = folder / "contract.yaml"
        path.write_text(path.read_text().replace("\nstatus: draft\n", "\nstatus: active\n"))
        code, out, _ = _run(["contracts", "lint", "--contracts", str(demo)], capsys)
        last = out.splitlines()[-1]
        deciding = sum(
            1 for line in out.splitlines() if line.startswith(str(folder)) and "free-text-in-data" in line
        )
        total = len(out.splitlines()) - 1
        assert code == 1
        assert deciding == 6
        assert last == (
            f"9 contract versions: {total} findings: {total - deciding} in 8 draft versions (deciding "
            f"nothing until reviewed: toolgate contracts review), {deciding} in the 1 reviewed versions"
        )
