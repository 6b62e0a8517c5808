"""Project habits that are code: the coverage floors, `make test`'s one measured run, pre-commit hooks."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import coverage
import pytest
import yaml

from tests import ROOT

PACKAGE = ROOT / "worker" / "toolgate"


def _floors() -> ModuleType:
    spec = importlib.util.spec_from_file_location("coverage_floors", ROOT / "ops" / "coverage_floors.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["coverage_floors"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _make_n(*args: str) -> str:
    """What ``make -n ARGS`` would run here, without the variables of a make this test runs under
    (``make unit PYTEST_ARGS=...`` passes them down in MAKEFLAGS)."""
    outer = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTEST_ARGS"}
    env = {name: value for name, value in os.environ.items() if name not in outer}
    return subprocess.run(
        ["make", "-n", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout


floors = _floors()


class TestCoverageFloors:
    """ops/coverage_floors.py: a row per layer, the floors the project holds, exit 1 below one."""

    def test_every_floor_holds_a_measured_layer(self) -> None:
        """Each floor names a measured layer or the total: a misspelt one would never fail anything."""
        assert floors.FLOORS
        assert set(floors.FLOORS) <= {*floors.LAYERS, "total"}

    @pytest.mark.parametrize("layer", sorted(floors.FLOORS))
    def test_at_the_floor_passes_and_below_fails(self, layer: str) -> None:
        """A layer covered exactly to its floor passes; one statement more missed fails."""
        statements = 1000
        at_floor = floors.Row(statements, round(statements * (100 - floors.FLOORS[layer]) / 100))
        assert floors.table({layer: at_floor})[1] == []
        below = floors.Row(statements, at_floor.missed + 1)
        assert floors.table({layer: below})[1] == [layer]

    @pytest.mark.parametrize(
        ("relative", "layer"),
        [
            ("gate/_gate.py", "gate"),
            ("service/_service.py", "service"),
            ("operations/_replay.py", "operations"),
            ("authoring/_lint.py", "authoring"),
            ("mcp/_proxy.py", "mcp"),
            ("cli/_run.py", "cli+shared"),
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
            "operations": floors.Row(10, 9),
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
        recipe = _make_n("-W", "pyproject.toml", "test").splitlines()
        runs = [i for i, line in enumerate(recipe) if "bin/pytest" in line]
        assert len(runs) == 1
        assert "--cov" in recipe[runs[0]]
        floors_line = next(line for line in recipe[runs[0] + 1 :] if "ops/coverage_floors.py" in line)
        assert "--report-only" not in floors_line  # the whole suite: the floors hold or make fails

    def test_a_narrowed_run_reports_only(self) -> None:
        """With PYTEST_ARGS narrowing the run, the table is printed without failing on the floors."""
        recipe = _make_n("-W", "pyproject.toml", "test", "PYTEST_ARGS=tests/unit/test_logs.py")
        assert "ops/coverage_floors.py --report-only" in recipe

    def test_one_python_version_is_named(self) -> None:
        """Every Python version pyproject.toml (comments too), the README and the image's base name is
        requires-python's."""
        import re
        import tomllib

        text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        required = tomllib.loads(text)["project"]["requires-python"].removeprefix(">=")
        text += (ROOT / "README.md").read_text(encoding="utf-8")
        named = set(re.findall(r"Python (3\.\d+)", text))
        assert named == {required}
        images = set(re.findall(r"python:(3\.\d+)", (ROOT / "Dockerfile").read_text(encoding="utf-8")))
        assert images == {required}


def _hooks() -> list[dict[str, Any]]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def _stages(hook: dict[str, Any]) -> list[str]:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    return list(hook.get("stages", config.get("default_stages", ["pre-commit"])))


def _commit_msg_hook(message: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the commit-msg hook's entry on a message file, as pre-commit does."""
    (hook,) = [h for h in _hooks() if "commit-msg" in _stages(h)]
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    entry = shlex.split(hook["entry"])
    return subprocess.run(
        [str(ROOT / entry[0]), *entry[1:], str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestPreCommit:
    """The pre-commit hooks run the same tools as make lint, from the project's venv."""

    def test_every_hook_runs_a_tool_of_the_venv(self) -> None:
        """Each hook's program is installed in .venv/bin (a hook naming a missing tool fails every commit)."""
        for hook in _hooks():
            program = shlex.split(hook["entry"])[0]
            assert program.startswith(".venv/bin/"), hook["id"]
            assert hook["language"] == "system", hook["id"]
            assert (ROOT / program).exists(), f"{hook['id']}: {program} is not installed"

    @pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
    def test_code_hooks_are_make_lint(self) -> None:
        """Before a commit the hooks run the tools make lint runs (ruff check and format, mypy), no fewer."""
        recipe = _make_n(
            "-o", ".venv/.installed-stamp", "lint"
        ).splitlines()  # the recipe alone, not the install

        def tool(command: str) -> tuple[str, ...]:
            words = shlex.split(command)
            name = Path(words[0]).name
            return (name, words[1]) if name == "ruff" else (name,)

        lint = {tool(line) for line in recipe if "bin/" in line.split(" ", 1)[0]}
        hooks = {tool(hook["entry"]) for hook in _hooks() if "pre-commit" in _stages(hook)}
        assert lint
        assert hooks == lint
        (mypy,) = [h for h in _hooks() if tool(h["entry"]) == ("mypy",)]
        assert mypy["pass_filenames"] is False  # the whole configured tree, as make lint checks it

    @pytest.mark.parametrize(
        "message",
        [
            "README: one screenful per question\n",
            "Replay counts records\n\nThe progress line counted offsets, transaction markers included.\n",
            "x" * 72 + "\n\n" + "a body line may be as long as it needs to be " * 5 + "\n",
            "Subject\n# Please enter the commit message for your changes.\n# " + "x" * 100 + "\n",
            "Subject\n\nbody\n# ------------------------ >8 ------------------------\n" + "diff " * 40 + "\n",
        ],
        ids=["subject only", "subject and body", "72 characters", "git's comments", "below the scissors"],
    )
    def test_commit_msg_accepts(self, message: str, tmp_path: Path) -> None:
        """A subject of at most 72 characters, alone or followed by a blank line and a body, passes."""
        done = _commit_msg_hook(message, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""

    @pytest.mark.parametrize(
        ("message", "said"),
        [
            ("x" * 73 + "\n", "the subject is 73 characters, at most 72"),
            ("Subject\nbody right below it\n", "the second line must be blank"),
            ("# only comments\n\n", "the message is empty"),
        ],
        ids=["73 characters", "no blank line", "empty"],
    )
    def test_commit_msg_refuses(self, message: str, said: str, tmp_path: Path) -> None:
        """A long subject, a body glued to the subject or an empty message fails, naming the problem."""
        done = _commit_msg_hook(message, tmp_path)
        assert done.returncode == 1
        assert said in done.stderr
        assert "COMMIT_EDITMSG" in done.stderr

    def test_commit_msg_without_a_file(self, tmp_path: Path) -> None:
        """A message file that cannot be read is exit 2, naming it."""
        done = subprocess.run(
            [sys.executable, str(ROOT / "ops" / "commit_msg.py"), str(tmp_path / "missing")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert "missing" in done.stderr

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
