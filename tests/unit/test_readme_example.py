"""The README's in-process API example runs and prints what the README says it prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SECTION = "## The gate in-process"


def _example() -> tuple[str, str]:
    """The section's Python block and the output block that follows it."""
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```.*?```\n(.*?)```", section, re.DOTALL)
    assert match, "the section needs a ```python block followed by its output block"
    return match.group(1), match.group(2)


class TestReadmeExample:
    """The example is code that works, not a sketch."""

    def test_prints_what_the_readme_shows(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Run from the repository root, the example prints the README's output block."""
        code, expected = _example()
        monkeypatch.chdir(ROOT)
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
        assert capsys.readouterr().out == expected

    def test_shows_an_accept_and_a_rejection(self) -> None:
        """The output shows an accepted result and the injected field rejected at the schema stage."""
        _, expected = _example()
        lines = expected.splitlines()
        assert lines[0].startswith("success")
        assert "rejected schema SCHEMA_VIOLATION" in expected
        assert "admin_override" not in expected
