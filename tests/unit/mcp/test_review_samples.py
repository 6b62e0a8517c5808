"""``toolgate contracts review --sample``: the reviewed tool called for real on its MCP server (the
test server of tests/mcp_kit.py over stdio), its values shown beside the projected fields."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from toolgate import cli
from toolgate.mcp._import import import_listing
from toolgate.mcp._samples import MAX_CALLS

from tests import ROOT, mcp_kit

SERVER = f"{sys.executable} -m tests.mcp_kit"


@pytest.fixture
def drafts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """deploy_status imported as a draft; the working directory the clone (tests.mcp_kit runs there)."""
    import_listing(
        tmp_path / "c", "deployer", mcp_kit.listing_json(), only=["deploy_status"], out=lambda _: None
    )
    monkeypatch.chdir(ROOT)
    return tmp_path / "c"


def _review(drafts: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["contracts", "review", "--contracts", str(drafts), "--no-input", *argv])
    out, err = capsys.readouterr()
    return code, out, err


class TestSampleCalls:
    """A named call is made on the server; its values are shown; a bad call is one line, exit 2."""

    def test_values_of_a_real_call_shown(self, drafts: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """deploy_status called with case ok: its environment, revision and state beside their fields."""
        _, out, err = _review(
            drafts, capsys, "--sample", 'deployer.deploy_status={"case": "ok"}', "--command", SERVER
        )
        assert "/data/environment: " in out, err
        for value in ("staging", "a83f19c", "healthy"):
            assert f'samples "{value}"' in out

    @pytest.mark.parametrize(
        ("argv", "said"),
        [
            (["--sample", "deployer.deploy_status"], "write TOOL=ARGUMENTS"),
            (["--sample", "deployer.other={}", "--command", SERVER], "is not a draft reviewed here"),
            (["--sample", "deployer.deploy_status=[1]", "--command", SERVER], "a JSON object"),
            (["--sample", "deployer.deploy_status={"], "not JSON"),
            (["--sample", "deployer.deploy_status={}"], "--command CMD or --url URL"),
            (["--sample", "deployer.deploy_status={}", "--url", "http://10.0.0.1/mcp"], "loopback only"),
            (["--sample", "deployer.deploy_status={}", "--command", "no-such-server-x"], "--sample: "),
            (["--sample=deployer.deploy_status={}"] * (MAX_CALLS + 1) + ["--command", SERVER], "at most 20"),
        ],
    )
    def test_bad_calls_named(
        self, drafts: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
    ) -> None:
        """Each mistake: exit 2, one line naming it, nothing written."""
        before = (drafts / "deployer.deploy_status" / "v1" / "contract.yaml").read_text()
        code, _, err = _review(drafts, capsys, *argv)
        assert code == 2
        assert said in err
        assert len(err.splitlines()) == 1
        assert (drafts / "deployer.deploy_status" / "v1" / "contract.yaml").read_text() == before
