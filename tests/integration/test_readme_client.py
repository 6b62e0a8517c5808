"""The README's toolgate.client example runs against a live worker and prints what the README shows."""

from __future__ import annotations

import pytest

from tests import ROOT
from tests.integration.live import LiveWorker
from tests.readme import README, example

SECTION = "## Adapter and platform quick start"


class TestReadmeClientExample:
    """The platform integration of the README is code that works, in under 20 lines."""

    def test_prints_what_the_readme_shows(
        self, bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With a worker on private topics (TOOLGATE_* naming them), the block prints its output block."""
        code, expected = example(SECTION)
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
