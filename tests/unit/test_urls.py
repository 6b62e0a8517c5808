"""URLs given as options or settings: one error naming the option, never the credentials."""

from __future__ import annotations

from pathlib import Path

import pytest
from toolgate._errors import ConfigError
from toolgate._urls import redact_url, split_url


class TestRedact:
    """Credentials before the host are never printed."""

    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("http://u:pw@h:1/p", "http://***@h:1/p"),
            ("https://token@h/p?q=1", "https://***@h/p?q=1"),
            ("http://h/p@x", "http://h/p@x"),
            ("not a url", "not a url"),
        ],
    )
    def test_redacted(self, url: str, shown: str) -> None:
        """Only the authority's user part is replaced."""
        assert redact_url(url) == shown


class TestSplit:
    """A URL that does not parse is one ConfigError naming the setting."""

    @pytest.mark.parametrize(
        ("url", "reason"),
        [
            ("http://[::1/x", "Invalid IPv6 URL"),
            ("http://h:99999/", "Port out of range"),
            ("http://h:x/", "Port"),
        ],
    )
    def test_bad(self, url: str, reason: str) -> None:
        """The option, the URL and Python's reason, on one line."""
        with pytest.raises(ConfigError, match=rf"^--url '{url.replace('[', '.')}': not a URL \({reason}"):
            split_url(url, "--url")

    def test_good(self) -> None:
        """A good URL's parts come back."""
        parts = split_url("http://127.0.0.1:8000/mcp", "--url")
        assert (parts.hostname, parts.port, parts.path) == ("127.0.0.1", 8000, "/mcp")


class TestThroughTheCli:
    """Every command's URL options end in one line, exit 2, without an unexpected error."""

    @pytest.mark.parametrize(
        ("argv", "expected"),
        [
            (
                ["mcp-proxy", "--server", "s", "--upstream-url", "http://u:s3cret@[::1/mcp"],
                "toolgate: --upstream-url 'http://***@[::1/mcp': not a URL (Invalid IPv6 URL)",
            ),
            (
                ["contracts", "import-mcp", "--server", "s", "--url", "http://u:s3cret@127.0.0.1:99999/mcp"],
                "toolgate: --url 'http://***@127.0.0.1:99999/mcp': not a URL (Port out of range",
            ),
        ],
    )
    def test_one_line(
        self,
        argv: list[str],
        expected: str,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
    ) -> None:
        """Exit 2, one line naming the option, the password never shown."""
        from toolgate.cli import main

        monkeypatch.chdir(tmp_path)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(expected)
        assert "s3cret" not in err
