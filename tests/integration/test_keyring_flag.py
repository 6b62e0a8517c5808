"""``--keyring`` wins over ``TOOLGATE_KEYRING``: ``contracts publish`` and ``contracts pull``
run as their ``--help`` examples are written, whatever keyring the environment names.

Each example runs word for word (taken from the command table that ``--help`` prints) in a
folder laid out as the examples expect: ``contracts/`` holding one fresh tool and the sample
``fixtures-keyring.toml``. ``TOOLGATE_KEYRING`` names a keyring without the publisher key,
so an example that read the environment instead of its flag would fail. The registry's set
is this process's own (``TOOLGATE_REGISTRY_SET_NAME``), the contracts topic a private one.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from toolgate.cli import COMMANDS

from tests.integration.conftest import LOCAL_BOOTSTRAP, TopicFactory
from tests.integration.registry_kit import KEYRING, KIT_SET, new_tool, registry_client, write_version

LOCAL_REGISTRY_URL = "http://127.0.0.1:18081/apis/ccompat/v7"


def _examples(*words: str) -> tuple[str, ...]:
    """The examples ``toolgate <words> --help`` prints."""
    return next(c.examples for c in COMMANDS if c.words == words)


def _folder(tmp_path: Path) -> tuple[Path, str]:
    """A working folder as the examples expect it, with a keyring elsewhere that lacks the
    publisher key (the environment's); and the fresh tool in its contracts."""
    tool = new_tool()
    write_version(tmp_path / "contracts", tool, "v1")
    shutil.copy(KEYRING, tmp_path / "contracts" / "fixtures-keyring.toml")
    lacking = tmp_path / "adapters-only.toml"
    text = KEYRING.read_text(encoding="utf-8")
    lacking.write_text(text[: text.index("[publishers.")], encoding="utf-8")
    return tmp_path, tool


def _run(example: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(example)
    assert argv[0] == "toolgate"
    return subprocess.run(
        [sys.executable, "-m", "toolgate", *argv[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "TOOLGATE_KEYRING": str(cwd / "adapters-only.toml"), **env},
    )


class TestRegistryExamples:
    """publish and pull --registry --keyring FILE, as --help shows them, with another keyring set
    in TOOLGATE_KEYRING: the flag's keyring signs and verifies."""

    def test_publish_then_pull_as_written(self, tmp_path: Path) -> None:
        """The publish example registers the tool, the pull example writes it back."""
        client = registry_client()
        if client.url.rstrip("/") != LOCAL_REGISTRY_URL:
            pytest.skip("the examples name the local registry")
        cwd, tool = _folder(tmp_path)
        env = {"TOOLGATE_REGISTRY_SET_NAME": KIT_SET}
        publish = next(e for e in _examples("contracts", "publish") if "--registry" in e)
        done = _run(publish, cwd, **env)
        assert done.returncode == 0, done.stderr
        assert f"{tool}@v1: registered under {tool}-v1-value" in done.stdout
        (pull,) = _examples("contracts", "pull")
        done = _run(pull, cwd, **env)
        assert done.returncode == 0, done.stderr
        assert f"{tool}@v1: written" in done.stdout
        assert (cwd / "pulled" / tool / "v1" / "contract.yaml").is_file()

    def test_the_environment_alone_still_serves(self, tmp_path: Path) -> None:
        """Without --keyring, TOOLGATE_KEYRING is the keyring: one lacking the key is named."""
        registry_client()
        cwd, _tool = _folder(tmp_path)
        publish = next(e for e in _examples("contracts", "publish") if "--registry" in e)
        without = publish.replace("--keyring contracts/fixtures-keyring.toml ", "")
        done = _run(without, cwd, TOOLGATE_REGISTRY_SET_NAME=KIT_SET)
        assert done.returncode == 2
        assert "adapters-only.toml has no [publishers.sample-publisher]" in done.stderr


class TestTopicExample:
    """publish --to topic --keyring FILE, as --help shows it, writes the set to the contracts topic."""

    async def test_publish_to_topic_as_written(
        self, bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
    ) -> None:
        """The example writes the tool's version, then the set marker, signed by the flag's key."""
        if bootstrap != LOCAL_BOOTSTRAP:
            pytest.skip("the example names the local broker")
        topic = await topic_factory("contracts")
        cwd, tool = _folder(tmp_path)
        example = next(e for e in _examples("contracts", "publish") if "--to topic" in e)
        done = _run(example, cwd, TOOLGATE_TOPIC_CONTRACTS=topic)
        assert done.returncode == 0, done.stderr
        assert f"{tool}/1: written to {topic}" in done.stdout
        assert "1 contract versions: 1 written, 0 unchanged" in done.stdout
