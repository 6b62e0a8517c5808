"""The alerting and recording rules, checked and unit-tested by Prometheus's own promtool.

promtool comes from Debian's prometheus package (``make tools``). Without it these tests
skip, except in CI (``TOOLGATE_REQUIRE_KAFKA=1``), where a missing promtool fails them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests import ROOT
from tests.ops_catalog import RULE_TESTS_DIR, RULES_FILE, RUNBOOK_FILE, alerts

_spec = importlib.util.spec_from_file_location(
    "render_rules", ROOT / "ops" / "prometheus" / "render_rules.py"
)
assert _spec is not None
assert _spec.loader is not None
render_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_rules)


@pytest.fixture(scope="module")
def promtool() -> str:
    """The promtool executable."""
    found = shutil.which("promtool")
    if found is None:
        reason = "promtool is not on PATH (make tools installs Debian's prometheus package)"
        if os.environ.get("TOOLGATE_REQUIRE_KAFKA") == "1":
            pytest.fail(f"TOOLGATE_REQUIRE_KAFKA=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return found


def _test_files() -> list[Path]:
    return sorted(RULE_TESTS_DIR.glob("*.yml"))


def _alert_cases() -> list[dict[str, Any]]:
    cases = []
    for path in _test_files():
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for test in data["tests"]:
            cases += test.get("alert_rule_test", [])
    return cases


def _promtool(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=120
    )


class TestPromtool:
    """promtool accepts the rules and every unit test of them passes."""

    def test_check_rules(self, promtool: str) -> None:
        """`promtool check rules` accepts the rules file."""
        result = _promtool(promtool, "check", "rules", str(RULES_FILE))
        assert result.returncode == 0, result.stdout + result.stderr

    def test_rule_unit_tests_pass(self, promtool: str) -> None:
        """`promtool test rules` passes every test file in ops/prometheus/tests."""
        assert _test_files()
        result = _promtool(promtool, "test", "rules", *map(str, _test_files()))
        assert result.returncode == 0, result.stdout + result.stderr

    @pytest.mark.parametrize("name", [rule["alert"] for rule in alerts()])
    def test_unit_tests_catch_an_alert_that_never_fires(
        self, promtool: str, tmp_path: Path, name: str
    ) -> None:
        """The unit tests fail when an alert's expression is replaced by one that never fires."""
        rules = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
        for group in rules["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") == name:
                    rule["expr"] = "vector(1) > 2"
        (tmp_path / "rules").mkdir()
        (tmp_path / "rules" / RULES_FILE.name).write_text(yaml.safe_dump(rules), encoding="utf-8")
        shutil.copytree(RULE_TESTS_DIR, tmp_path / "tests")
        files = [str(tmp_path / "tests" / path.name) for path in _test_files()]
        result = _promtool(promtool, "test", "rules", *files)
        assert result.returncode != 0
        assert name in result.stdout + result.stderr


class TestRuleTestCoverage:
    """Every alert is tested firing and quiet, and its runbook section exists."""

    def test_every_alert_has_a_firing_case(self) -> None:
        """Each alert has an alert_rule_test expecting it to fire."""
        firing = {case["alertname"] for case in _alert_cases() if case.get("exp_alerts")}
        assert {rule["alert"] for rule in alerts()} - firing == set()

    def test_every_alert_has_a_quiet_case(self) -> None:
        """Each alert has an alert_rule_test expecting it not to fire."""
        quiet = {case["alertname"] for case in _alert_cases() if case.get("exp_alerts") == []}
        assert {rule["alert"] for rule in alerts()} - quiet == set()

    def test_tests_name_only_existing_alerts(self) -> None:
        """No alert_rule_test names an alert the rules file does not define."""
        names = {rule["alert"] for rule in alerts()}
        assert {case["alertname"] for case in _alert_cases()} - names == set()

    def test_runbook_urls_point_at_runbook_sections(self) -> None:
        """Every runbook_url is <base>/ops/RUNBOOK.md#<alert name in lower case>, absolute, and a
        heading of the runbook."""
        headings = re.findall(r"^## (\S+)\s*$", RUNBOOK_FILE.read_text(encoding="utf-8"), re.MULTILINE)
        anchors = {heading.lower() for heading in headings}
        for rule in alerts():
            url = rule["annotations"]["runbook_url"]
            assert url == f"{render_rules.DEFAULT_BASE}/ops/RUNBOOK.md#{rule['alert'].lower()}"
            assert urlsplit(url).scheme == "https"
            assert urlsplit(url).netloc
            assert url.split("#")[1] in anchors, url


class TestRenderedRules:
    """`make rules RUNBOOK_BASE_URL=...` renders the rules and their tests with absolute runbook URLs."""

    BASE = "https://runbooks.acme.test/platform/toolgate"

    def _make_rules(self, out: Path, base: str) -> subprocess.CompletedProcess[str]:
        make = shutil.which("make")
        if make is None:
            pytest.skip("make is not installed")
        return subprocess.run(
            [make, "--no-print-directory", "-s", "-C", str(ROOT), "rules", f"RUNBOOK_BASE_URL={base}",
             f"RULES_OUT={out}"],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip

    def test_every_runbook_url_is_under_the_base(self, tmp_path: Path) -> None:
        """Each alert of the rendered rules links to its runbook section under the configured base."""
        result = self._make_rules(tmp_path, self.BASE + "/")
        assert result.returncode == 0, result.stdout + result.stderr
        rendered = yaml.safe_load((tmp_path / "rules" / RULES_FILE.name).read_text(encoding="utf-8"))
        urls = {
            rule["alert"]: rule["annotations"]["runbook_url"]
            for group in rendered["groups"]
            for rule in group["rules"]
            if "alert" in rule
        }
        assert urls == {
            rule["alert"]: f"{self.BASE}/ops/RUNBOOK.md#{rule['alert'].lower()}" for rule in alerts()
        }

    def test_promtool_tests_pass_on_the_rendered_rules(self, promtool: str, tmp_path: Path) -> None:
        """promtool check and test rules pass on the rendered copy (its tests expect the new URLs)."""
        assert self._make_rules(tmp_path, self.BASE).returncode == 0
        check = _promtool(promtool, "check", "rules", str(tmp_path / "rules" / RULES_FILE.name))
        assert check.returncode == 0, check.stdout + check.stderr
        tests = [str(tmp_path / "tests" / path.name) for path in _test_files()]
        result = _promtool(promtool, "test", "rules", *tests)
        assert result.returncode == 0, result.stdout + result.stderr

    def test_promtool_tests_check_the_urls(self, promtool: str, tmp_path: Path) -> None:
        """The committed tests fail against rules rendered with another base: they check runbook_url."""
        assert self._make_rules(tmp_path, self.BASE).returncode == 0
        # beside the rendered rules/: their ../rules/ is the rendered copy
        shutil.copytree(RULE_TESTS_DIR, tmp_path / "tests-committed")
        files = [str(tmp_path / "tests-committed" / path.name) for path in _test_files()]
        result = _promtool(promtool, "test", "rules", *files)
        assert result.returncode != 0
        assert self.BASE in result.stdout + result.stderr

    @pytest.mark.parametrize("base", ["git.acme.test/toolgate", "ftp://acme.test/x", "https://a.test/x?y=1"])
    def test_a_base_that_is_not_an_absolute_url_is_refused(self, tmp_path: Path, base: str) -> None:
        """A base without http(s) scheme and host, or with a query, is refused with exit 2."""
        done = subprocess.run(
            [sys.executable, str(ROOT / "ops" / "prometheus" / "render_rules.py"), "--base-url", base,
             "--out", str(tmp_path)],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2
        assert f"RUNBOOK_BASE_URL {base!r}: expected an absolute http(s) URL" in done.stderr
        assert not (tmp_path / "rules").exists()

    def test_descriptions_name_the_labels_they_alert_on(self) -> None:
        """An alert grouped by tool, code, partition or version names that label in its description."""
        for rule in alerts():
            expr = str(rule["expr"])
            description = rule["annotations"]["description"]
            for label in ("tool", "code", "partition", "version"):
                by = re.search(rf"\b(by|on)\s*\([^)]*\b{label}\b", expr)
                if by or f"{label}=" in expr.replace(" ", ""):
                    assert f"$labels.{label}" in description, (rule["alert"], label)


def _nested_pytest(tmp_path: Path, require: bool) -> subprocess.CompletedProcess[str]:
    """This module's promtool check, run by a nested pytest with no promtool on PATH."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "TOOLGATE_REQUIRE_KAFKA"}
    env["PATH"] = str(empty)
    if require:
        env["TOOLGATE_REQUIRE_KAFKA"] = "1"
    node = f"{Path(__file__).relative_to(ROOT)}::TestPromtool::test_check_rules"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


class TestWithoutPromtool:
    """A missing promtool skips locally and fails in CI."""

    def test_skips_without_the_ci_flag(self, tmp_path: Path) -> None:
        """Without TOOLGATE_REQUIRE_KAFKA=1 the promtool tests are skipped, naming make tools."""
        result = _nested_pytest(tmp_path, require=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 skipped" in result.stdout

    def test_fails_with_the_ci_flag(self, tmp_path: Path) -> None:
        """With TOOLGATE_REQUIRE_KAFKA=1 a missing promtool fails the tests instead of skipping them."""
        result = _nested_pytest(tmp_path, require=True)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "TOOLGATE_REQUIRE_KAFKA=1 but promtool is not on PATH" in result.stdout
