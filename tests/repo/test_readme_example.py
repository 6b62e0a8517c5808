"""The README's in-process API example runs and prints what the README says it prints."""

from __future__ import annotations

import pytest

from tests import ROOT
from tests.readme import README, example

SECTION = "## The gate in-process"


class TestReadmeExample:
    """The example is code that works, not a sketch."""

    def test_prints_what_the_readme_shows(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Run from the repository root, the example prints the README's output block."""
        code, expected = example(SECTION)
        monkeypatch.chdir(ROOT)
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
        assert capsys.readouterr().out == expected

    def test_shows_an_accept_and_a_rejection(self) -> None:
        """The output shows an accepted result and the injected field rejected at the schema stage."""
        _, expected = example(SECTION)
        lines = expected.splitlines()
        assert lines[0].startswith("success")
        assert "rejected schema SCHEMA_VIOLATION" in expected
        assert "admin_override" not in expected
