"""toolgate.registry's client: sources, credentials from files, one-line errors.

The authentication tests talk to a small HTTP server of the standard library that demands a
credential: the local Apicurio Registry authenticates through an OpenID Connect server, which
is not part of this repository (the integration tests run without authentication).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from toolgate._config import load_config
from toolgate._errors import ConfigError
from toolgate.registry import RegistryClient, RegistryError, parse_source
from toolgate.registry._connect import client_of


class _Demanding(http.server.BaseHTTPRequestHandler):
    """Answers GET /subjects with ["a-v1-value"] to the expected Authorization header (any, when
    none is expected), else 401; any other path with a page that is not JSON."""

    expected: ClassVar[str] = ""
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        header = self.headers.get("Authorization")
        type(self).seen.append(header)
        if self.expected and header != self.expected:
            body = json.dumps({"error_code": 40101, "message": "Unauthorized:\n bad credentials"}).encode()
            self.send_response(401)
        elif self.path == "/subjects":
            body = b'["a-v1-value"]'
            self.send_response(200)
        else:
            body = b"<html>not json</html>"
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Demanding)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _secret(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


class TestSource:
    """--contracts registry+http(s)://... names a registry, and nothing else does."""

    def test_the_url_behind_the_prefix(self) -> None:
        """The prefix goes, a trailing slash too."""
        assert (
            parse_source("registry+https://r.example/apis/ccompat/v7/") == "https://r.example/apis/ccompat/v7"
        )

    @pytest.mark.parametrize(
        ("source", "fragment"),
        [
            ("registry+ftp://r", r"expected registry\+http"),
            ("registry+http://", r"expected registry\+http"),
            ("https://r", r"starts with registry\+"),
            ("registry+https://u:p@r", "in a file"),
        ],
    )
    def test_bad_sources(self, source: str, fragment: str) -> None:
        """Each bad value is one error naming it."""
        with pytest.raises(ConfigError, match=fragment):
            parse_source(source)


class TestCredentials:
    """Basic or bearer credentials come from files and are sent with every request."""

    def test_basic(self, server: str, tmp_path: Path) -> None:
        """user:password from the file, base64 in the header."""
        _Demanding.expected = "Basic dXNlcjpwYXNz"
        client = RegistryClient(server, basic_auth_file=_secret(tmp_path, "basic", "user:pass\n"))
        assert client.subjects() == ["a-v1-value"]

    def test_bearer(self, server: str, tmp_path: Path) -> None:
        """The token from the file."""
        _Demanding.expected = "Bearer tok-123"
        client = RegistryClient(server, bearer_token_file=_secret(tmp_path, "token", "tok-123\n"))
        assert client.subjects() == ["a-v1-value"]

    def test_refused_is_one_line_naming_the_registry(self, server: str) -> None:
        """Without credentials: a refusal (not an outage), the registry's message on one line."""
        _Demanding.expected = "Bearer x"
        with pytest.raises(RegistryError) as caught:
            RegistryClient(server).versions("a-v1-value")
        assert caught.value.refused
        assert caught.value.status == 401
        text = str(caught.value)
        assert text.startswith(f"schema registry {server}, subject a-v1-value: HTTP 401")
        assert "Unauthorized: bad credentials" in text
        assert "\n" not in text

    def test_an_answer_that_is_not_json(self, server: str) -> None:
        """A page instead of JSON is named as such."""
        _Demanding.expected = ""
        _Demanding.seen.clear()
        with pytest.raises(RegistryError, match="is not JSON"):
            RegistryClient(server).request("GET", "/config")
        assert _Demanding.seen == [None]

    @pytest.mark.parametrize(
        ("kwargs", "fragment"),
        [
            ({"basic_auth_file": "basic", "bearer_token_file": "token"}, "set one, not both"),
            ({"basic_auth_file": "missing"}, r"BASIC_AUTH_FILE=.*missing: cannot read"),
            ({"basic_auth_file": "nocolon"}, "expected user:password"),
            ({"bearer_token_file": "empty"}, r"BEARER_TOKEN_FILE=.*expected one non-empty line"),
            ({"timeout": 0.0}, "expected 0 < seconds <= 300"),
        ],
    )
    def test_bad_settings(self, tmp_path: Path, kwargs: dict[str, object], fragment: str) -> None:
        """Each mistake is one error naming the setting."""
        _secret(tmp_path, "basic", "u:p")
        _secret(tmp_path, "token", "t")
        _secret(tmp_path, "nocolon", "up")
        _secret(tmp_path, "empty", "")
        args = {k: str(tmp_path / str(v)) if k.endswith("_file") else v for k, v in kwargs.items()}
        with pytest.raises(ConfigError, match=fragment):
            RegistryClient("http://127.0.0.1:9", **args)  # type: ignore[arg-type]

    def test_a_ca_file_that_does_not_load(self, tmp_path: Path) -> None:
        """https with a CA file that is no certificate: the setting named."""
        bad = _secret(tmp_path, "ca.pem", "not a certificate")
        with pytest.raises(ConfigError, match=r"TOOLGATE_REGISTRY_CA_FILE=.*cannot load"):
            RegistryClient("https://127.0.0.1:9", ca_file=bad)


class TestFromConfiguration:
    """TOOLGATE_REGISTRY_* settings reach the client."""

    def test_settings(self, server: str, tmp_path: Path) -> None:
        """Token file and timeout from the environment."""
        _Demanding.expected = "Bearer from-env"
        config = load_config(
            environ={
                "TOOLGATE_REGISTRY_BEARER_TOKEN_FILE": _secret(tmp_path, "t", "from-env"),
                "TOOLGATE_REGISTRY_TIMEOUT_SECONDS": "2.5",
            }
        )
        client = client_of(server, config)
        assert client.timeout == 2.5
        assert client.subjects() == ["a-v1-value"]

    def test_local_script_knobs_are_not_settings(self) -> None:
        """registry.sh's TOOLGATE_APICURIO_* and the tests' TOOLGATE_REQUIRE_REGISTRY are ignored."""
        config = load_config(environ={"TOOLGATE_APICURIO_PORT": "1", "TOOLGATE_REQUIRE_REGISTRY": "1"})
        assert config.registry.url is None


class TestBadInputThroughTheCli:
    """Every registry URL or number setting that cannot be used is one line naming it; no secret echoed."""

    KEYRING = str(Path(__file__).parents[3] / "contracts" / "fixtures-keyring.toml")

    @pytest.mark.parametrize(
        ("argv", "env", "expected"),
        [
            (
                ["contracts", "lint", "--contracts", "registry+http://[::1/apis/ccompat/v7"],
                {},
                "toolgate: --contracts 'registry+http://[::1/apis/ccompat/v7': not a URL (Invalid IPv6 URL)",
            ),
            (
                ["contracts", "lint", "--contracts", "registry+http://r.example:99999/x"],
                {},
                "--contracts 'registry+http://r.example:99999/x': not a URL",
            ),
            (
                ["contracts", "lint", "--contracts", "registry+https://alice:s3cret-pw@r.example/x"],
                {},
                "--contracts 'registry+https://***@r.example/x': put credentials in a file",
            ),
            (
                ["contracts", "pull", "--registry", "ftp://r.example", "out"],
                {"TOOLGATE_KEYRING": KEYRING},
                "--registry 'ftp://r.example': expected http://HOST[:PORT][/PATH] or https://...",
            ),
            (
                ["contracts", "pull", "--registry", "http://[::1/x", "out"],
                {"TOOLGATE_KEYRING": KEYRING},
                "--registry 'http://[::1/x': not a URL (Invalid IPv6 URL)",
            ),
            (
                ["contracts", "pull", "out"],
                {"TOOLGATE_KEYRING": KEYRING, "TOOLGATE_REGISTRY_URL": "http://bob:s3cret-pw@r.example/x"},
                "TOOLGATE_REGISTRY_URL 'http://***@r.example/x': put credentials in a file",
            ),
            (
                ["contracts", "pull", "--registry", "http://127.0.0.1:9/x", "out"],
                {"TOOLGATE_KEYRING": KEYRING, "TOOLGATE_REGISTRY_TIMEOUT_SECONDS": "301"},
                "TOOLGATE_REGISTRY_TIMEOUT_SECONDS=301.0 (registry.timeout_seconds): expected 0 < seconds",
            ),
            (
                ["contracts", "pull", "--registry", "http://127.0.0.1:9/x", "out"],
                {"TOOLGATE_KEYRING": KEYRING, "TOOLGATE_REGISTRY_TIMEOUT_SECONDS": "soon"},
                "TOOLGATE_REGISTRY_TIMEOUT_SECONDS='soon' (registry.timeout_seconds): Expected `float`",
            ),
            (
                ["contracts", "lint"],
                {"TOOLGATE_PARTITIONS_AUDIT": "many"},
                "toolgate: TOOLGATE_PARTITIONS_AUDIT='many' (partitions.audit): Expected `int`, got `str`",
            ),
            (
                ["contracts", "lint", "--contracts", "registry+http://127.0.0.1:9/x"],
                {"TOOLGATE_KEYRING": KEYRING, "TOOLGATE_REGISTRY_POLL_SECONDS": "nan"},
                "TOOLGATE_REGISTRY_POLL_SECONDS=nan (registry.poll_seconds): expected 0 < seconds <= 3600",
            ),
            (
                ["contracts", "lint", "--contracts", "registry+http://127.0.0.1:9/x"],
                {"TOOLGATE_KEYRING": KEYRING, "TOOLGATE_REGISTRY_SET_NAME": "a b"},
                "TOOLGATE_REGISTRY_SET_NAME='a b': expected letters, digits",
            ),
            (
                ["contracts", "lint", "--contracts", "registry+http://127.0.0.1:9/x"],
                {},
                "--contracts registry+http://127.0.0.1:9/x: set TOOLGATE_KEYRING (or --keyring)",
            ),
        ],
    )
    def test_one_line_naming_the_setting(
        self,
        argv: list[str],
        env: dict[str, str],
        expected: str,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
    ) -> None:
        """Exit 2 with one stderr line naming the option or variable, never the password."""
        from toolgate.cli import main

        monkeypatch.chdir(tmp_path)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert expected in err
        assert "s3cret" not in err
        assert "unexpected error" not in err
