"""``toolgate mcp-proxy --print-host-config``: the host's ``mcpServers`` entry for this proxy, with
absolute paths and the settings in force, which starts the same proxy the command line describes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from toolgate import cli
from toolgate._config import load_config
from toolgate.mcp._host_config import host_entry

UPSTREAM = f"{sys.executable} -m tests.mcp_kit"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No TOOLGATE_* setting of the caller's."""
    for name in list(os.environ):
        if name.startswith("TOOLGATE_"):
            monkeypatch.delenv(name)
    return monkeypatch


def _entry(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object], str]:
    code = cli.main(["mcp-proxy", "--server", "memory", *argv, "--print-host-config"])
    out, err = capsys.readouterr()
    return code, (json.loads(out)["mcpServers"]["memory"] if code == 0 else {}), err


class TestHostEntry:
    """The entry names this installation's toolgate, absolute paths and the settings in force."""

    def test_paths_absolute_and_prefix_in_env(
        self, clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Relative contracts, keyring and upstream program become absolute; the topic prefix and the
        upstream's named variable (with its value here) are in env; no topic name is spelled out."""
        clean_env.chdir(tmp_path)
        (tmp_path / "demo").mkdir()
        (tmp_path / "keys.toml").write_text("")
        (tmp_path / "bin").mkdir()
        server = tmp_path / "bin" / "server"
        server.write_text("#!/bin/sh\n")
        clean_env.setenv("TOOLGATE_TOPIC_PREFIX", "alice")
        clean_env.setenv("MEMORY_FILE_PATH", "/data/graph.jsonl")
        code, entry, err = _entry(
            capsys,
            "--contracts",
            "demo",
            "--keyring",
            "keys.toml",
            "--upstream-command",
            "bin/server --flag",
            "--upstream-env",
            "MEMORY_FILE_PATH",
            "--decide",
            "worker",
        )
        assert code == 0, err
        assert entry["command"] == str(Path(sys.executable).parent / "toolgate")
        assert entry["args"] == [
            "mcp-proxy",
            "--server",
            "memory",
            "--contracts",
            str(tmp_path / "demo"),
            "--upstream-command",
            f"{server} --flag",
            "--upstream-env",
            "MEMORY_FILE_PATH",
            "--keyring",
            str(tmp_path / "keys.toml"),
            "--decide",
            "worker",
        ]
        assert entry["env"] == {
            "TOOLGATE_BOOTSTRAP": "127.0.0.1:19092",
            "TOOLGATE_TOPIC_PREFIX": "alice",
            "MEMORY_FILE_PATH": "/data/graph.jsonl",
        }

    def test_named_topics_and_secret_files(
        self, clean_env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Topics and a group named on their own are written; a password file by its absolute path."""
        clean_env.chdir(tmp_path)
        (tmp_path / "pw").write_text("hunter2\n")
        (tmp_path / "pw").chmod(0o600)
        clean_env.setenv("TOOLGATE_TOPIC_INTAKE", "mine.in")
        clean_env.setenv("TOOLGATE_GROUP_ID", "mine")
        clean_env.setenv("TOOLGATE_SECURITY_SASL_PASSWORD_FILE", "pw")
        code, entry, err = _entry(capsys, "--upstream-command", UPSTREAM)
        assert code == 0, err
        env = entry["env"]
        assert isinstance(env, dict)
        assert env["TOOLGATE_TOPIC_INTAKE"] == "mine.in"
        assert env["TOOLGATE_GROUP_ID"] == "mine"
        assert env["TOOLGATE_SECURITY_SASL_PASSWORD_FILE"] == str(tmp_path / "pw")
        assert "hunter2" not in json.dumps(entry)

    def test_password_value_refused(
        self, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A SASL password given as a value is never printed: exit 2, naming the file variable."""
        clean_env.setenv("TOOLGATE_SECURITY_SASL_PASSWORD", "hunter2")
        code, _, err = _entry(capsys, "--upstream-command", UPSTREAM)
        assert code == 2
        assert "TOOLGATE_SECURITY_SASL_PASSWORD_FILE" in err
        assert "hunter2" not in err

    def test_listen_url_refused(
        self, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A proxy listening on a URL is not started by the host: exit 2."""
        code, _, err = _entry(capsys, "--upstream-command", UPSTREAM, "--listen", "http://127.0.0.1:8100/mcp")
        assert code == 2
        assert "--listen http://127.0.0.1:8100/mcp" in err

    def test_missing_program_named(
        self, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An upstream program neither on PATH nor a file: exit 2, naming it."""
        code, _, err = _entry(capsys, "--upstream-command", "no-such-server-here --x")
        assert code == 2
        assert "'no-such-server-here' not found" in err


class TestUpstreamVariables:
    """The upstream's named variables carry their values from the environment given."""

    def test_values_from_the_environment_given(self) -> None:
        """A name set there is written with its value; one not set is passed by name only."""
        args = cli.build_parser().parse_args(
            ["mcp-proxy", "--server", "memory", "--upstream-command", UPSTREAM, "--upstream-env", "A"]
        )
        entry = host_entry(args, load_config(environ={}), ["A", "B"], environ={"A": "1"})
        served = entry["mcpServers"]["memory"]
        assert served["env"] == {"TOOLGATE_BOOTSTRAP": "127.0.0.1:19092", "A": "1"}
        assert served["args"][-4:] == ["--upstream-env", "A", "--upstream-env", "B"]
