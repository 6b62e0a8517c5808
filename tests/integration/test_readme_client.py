"""The README's toolgate.client example runs against a live worker and prints what the README shows."""

from __future__ import annotations

import re

import pytest

from tests.integration.live import LiveWorker
from tests.integration.worker_kit import ROOT

README = ROOT / "README.md"
SECTION = "## Adapter and platform quick start"


def _example() -> tuple[str, str]:
    """The section's Python block and the output block that follows it."""
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```.*?```\n(.*?)```", section, re.DOTALL)
    assert match, "the section needs a ```python block followed by its output block"
    return match.group(1), match.group(2)


class TestReadmeClientExample:
    """The platform integration of the README is code that works, in under 20 lines."""

    def test_prints_what_the_readme_shows(
        self, bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With a worker on private topics (TOOLGATE_* naming them), the block prints its output block."""
        code, expected = _example()
        assert len(code.strip().splitlines()) < 20
        worker = LiveWorker(bootstrap)
        try:
            worker.start()
            env = worker.env()
            for name in [n for n in env if n.startswith("TOOLGATE_")]:
                monkeypatch.setenv(name, env[name])
            monkeypatch.chdir(ROOT)
            exec(compile(code, str(README), "exec"), {"__name__": "readme_client_example"})
        finally:
            worker.stop()
        assert capsys.readouterr().out == expected
        assert expected.startswith("success {'change_id': 'CR-1042'")
