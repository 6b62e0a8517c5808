"""Project habits that are code: the coverage floors, `make test`'s one measured run, pre-commit."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import coverage
import pytest
import yaml

from tests.ops_catalog import ROOT

PACKAGE = ROOT / "worker" / "toolgate"


def _floors() -> ModuleType:
    spec = importlib.util.spec_from_file_location("coverage_floors", ROOT / "ops" / "coverage_floors.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["coverage_floors"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


floors = _floors()


class TestCoverageFloors:
    """ops/coverage_floors.py: a row per layer, the floors the project holds, exit 1 below one."""

    def test_floors_are_the_projects(self) -> None:
        """Gate 95%, service 80%, total 85%."""
        assert floors.FLOORS == {"gate": 95.0, "service": 80.0, "total": 85.0}

    @pytest.mark.parametrize(
        ("relative", "layer"),
        [
            ("gate/_gate.py", "gate"),
            ("service/_service.py", "service"),
            ("tools/_replay.py", "tools"),
            ("cli.py", "cli+shared"),
            ("_config.py", "cli+shared"),
            ("__init__.py", "cli+shared"),
        ],
    )
    def test_layer_of(self, relative: str, layer: str) -> None:
        """Each source file belongs to the layer its folder names."""
        assert floors.layer_of(PACKAGE / relative) == layer

    def test_below_a_floor_is_reported(self) -> None:
        """A layer under its floor is marked and listed; one above is not."""
        rows = {
            "gate": floors.Row(100, 4),
            "service": floors.Row(100, 21),
            "tools": floors.Row(10, 9),
            "total": floors.Row(210, 30),
        }
        lines, failed = floors.table(rows)
        assert failed == ["service"]
        assert "BELOW FLOOR" in next(line for line in lines if line.startswith("service"))
        assert "BELOW FLOOR" not in next(line for line in lines if line.startswith("gate"))

    def test_measures_a_data_file(self, tmp_path: Path) -> None:
        """From real coverage data: files never imported count as missed, rows add up to the total."""
        data_file = tmp_path / ".coverage"
        data = coverage.CoverageData(basename=str(data_file))
        errors = PACKAGE / "_errors.py"
        data.add_lines({str(errors): range(1, len(errors.read_text(encoding="utf-8").splitlines()) + 1)})
        data.write()
        rows = floors.measure(data_file)
        assert rows["service"].statements > 0
        assert rows["service"].missed == rows["service"].statements  # never run: all missed
        assert rows["cli+shared"].missed < rows["cli+shared"].statements  # _errors.py ran
        assert rows["total"].statements == sum(rows[name].statements for name in floors.LAYERS)
        assert floors.main(["--data-file", str(data_file)]) == 1
        assert floors.main(["--data-file", str(data_file), "--report-only"]) == 0

    def test_no_data(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Without a data file the script says so and exits 2."""
        assert floors.main(["--data-file", str(tmp_path / "none")]) == 2
        assert "no coverage data" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
class TestMakeTest:
    """`make test` runs the suite once, measured, then holds the floors."""

    def test_one_measured_run_then_the_floors(self) -> None:
        """The recipe has a single pytest command, with --cov, followed by the floors script."""
        recipe = subprocess.run(
            ["make", "-n", "-W", "pyproject.toml", "test"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.splitlines()
        runs = [i for i, line in enumerate(recipe) if "bin/pytest" in line]
        assert len(runs) == 1
        assert "--cov" in recipe[runs[0]]
        floors_line = next(line for line in recipe[runs[0] + 1 :] if "ops/coverage_floors.py" in line)
        assert "--report-only" not in floors_line  # the whole suite: the floors hold or make fails

    def test_a_narrowed_run_reports_only(self) -> None:
        """With PYTEST_ARGS narrowing the run, the table is printed without failing on the floors."""
        recipe = subprocess.run(
            ["make", "-n", "-W", "pyproject.toml", "test", "PYTEST_ARGS=tests/unit/test_logs.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert "ops/coverage_floors.py --report-only" in recipe

    def test_lint_checks_tests_and_ops_too(self) -> None:
        """mypy's configured files cover the package, the tests and the ops scripts."""
        import tomllib

        mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
        assert set(mypy["files"]) == {"worker/toolgate", "tests", "ops"}


class TestPreCommit:
    """The pre-commit hooks run the same tools as make lint, from the project's venv."""

    def test_hooks(self) -> None:
        """ruff check, ruff format and mypy, each a local hook of .venv/bin."""
        config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
        hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
        assert set(hooks) == {"ruff-check", "ruff-format", "mypy"}
        for hook in hooks.values():
            assert hook["entry"].startswith(".venv/bin/")
            assert hook["language"] == "system"
        assert hooks["mypy"]["pass_filenames"] is False

    @pytest.mark.skipif(not (ROOT / ".venv/bin/pre-commit").exists(), reason="pre-commit is not installed")
    def test_config_is_valid(self) -> None:
        """pre-commit itself accepts the file."""
        done = subprocess.run(
            [str(ROOT / ".venv/bin/pre-commit"), "validate-config", ".pre-commit-config.yaml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
