"""ops/RUNBOOK.md: a section per alert, three first commands each, commands the CLI accepts."""

from __future__ import annotations

import re
import shlex

import pytest
from toolgate.cli import build_parser

from tests.ops_catalog import RUNBOOK_FILE, alerts, runbook_commands


def _sections() -> dict[str, str]:
    text = RUNBOOK_FILE.read_text(encoding="utf-8")
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _first_commands(body: str) -> list[str]:
    match = re.search(r"First commands:\s*```sh\n(.*?)```", body, re.DOTALL)
    assert match, "no 'First commands:' sh block"
    return [line.strip() for line in match.group(1).splitlines() if line.strip()]


def _refused(commands: list[str]) -> list[str]:
    """The commands the CLI's parser refuses (argparse exits 2 on them)."""
    parser = build_parser()
    refused = []
    for command in commands:
        try:
            parser.parse_args(shlex.split(command)[1:])
        except SystemExit:
            refused.append(command)
    return refused


class TestSections:
    """Every alert has a section with its meaning, first commands and fix."""

    def test_a_section_per_alert(self) -> None:
        """Every alert of the rules file has a runbook section titled with its name."""
        assert {rule["alert"] for rule in alerts()} - set(_sections()) == set()

    @pytest.mark.parametrize("name", [rule["alert"] for rule in alerts()])
    def test_meaning_first_commands_and_fix(self, name: str) -> None:
        """Each alert's section says what it means, gives three first commands and how to fix it."""
        body = _sections()[name]
        assert "**Means:**" in body
        assert "**Fix:**" in body
        assert len(_first_commands(body)) == 3

    def test_runbook_links_resolve(self) -> None:
        """Every #anchor link in the runbook names one of its sections."""
        anchors = {re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-") for title in _sections()}
        links = re.findall(r"\]\(#([^)]+)\)", RUNBOOK_FILE.read_text(encoding="utf-8"))
        assert links
        assert set(links) - anchors == set()


class TestCommands:
    """The runbook's commands are ones the CLI accepts."""

    def test_toolgate_commands_parse(self) -> None:
        """Every toolgate command in the runbook is accepted by the CLI's parser."""
        commands = [c for c in runbook_commands() if c.startswith("toolgate ")]
        assert commands
        assert _refused(commands) == []

    def test_a_misspelt_command_is_reported(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The check names a command with a misspelt option and passes a good one."""
        good, bad = "toolgate top --once", "toolgate quarantine tail --codes X"
        assert _refused([good, bad]) == [bad]
        assert "--codes" in capsys.readouterr().err

    def test_commands_are_found(self) -> None:
        """Commands come from sh blocks and inline code, curl ones included."""
        commands = runbook_commands()
        assert "toolgate top --once" in commands
        assert any(c.startswith("curl ") for c in commands)
        assert "toolgate replay --dry-run --tool job_status --code SCHEMA_VIOLATION" in commands
