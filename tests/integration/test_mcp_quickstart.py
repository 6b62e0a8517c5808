"""docs/mcp.md's quick start, run as written: from the published ``mcp-server-time`` (PyPI) to a
validated result read by an MCP host (the MCP SDK's own client), on the real broker.

The commands are read from the page, as tests/readme.py reads the README's: the first
(``make install`` and the venv's activation) is what runs these tests, so it is checked, not
run, and the venv's ``bin`` leads ``PATH`` as activation makes it; every other command runs as
written, in a folder of its own, on topics and a consumer group of its own (the
``TOOLGATE_*`` settings the page says to give on a shared broker). The review is the one edit
the page asks for: ``status: draft`` to ``status: active`` in the file it names. The broker
line runs in the clone (``ops/kafka/kafka.sh`` is there); the others in a temporary folder, so
the ``demo`` contracts folder they make is the test's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from toolgate._config import LOCAL_BOOTSTRAP, Config, Topics

from tests import ROOT
from tests.integration.worker_kit import drop_topics

PAGE = ROOT / "docs" / "mcp.md"
VENV_BIN = Path(sys.executable).parent


def quick_start() -> tuple[list[str], str, list[str]]:
    """(the commands before the review, the review's file, the commands after it), from the page."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("**Review.**", 1)[0]
    fenced = re.findall(r"^```(\w*)\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    blocks = [body for language, body in fenced if not language]  # the commands: no language
    assert len(blocks) >= 2, "the quick start has a block before the review and one after it"
    before, after = ([_command(line) for line in block.splitlines() if line.strip()] for block in blocks[:2])
    review = re.search(r"in `([^`]+/contract\.yaml)`\s+change `status: draft` to `status: active`", section)
    assert review, "the quick start names the file the review edits"
    return before, review.group(1), after


def _command(line: str) -> str:
    """A documented line without its comment."""
    return line.split("  #", 1)[0].strip()


@pytest.fixture
def private(bootstrap: str) -> Iterator[tuple[Config, dict[str, str]]]:
    """A configuration of topics and a group no other test uses, and the environment that names
    it to every command (topics dropped afterwards)."""
    tag = uuid.uuid4().hex[:10]
    config = Config(bootstrap=bootstrap, group_id=f"tg-qs-{tag}", topics=Topics.under(f"tg-qs-{tag}"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(
        {
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",  # what activation does
            "VIRTUAL_ENV": str(VENV_BIN.parent),
            "TOOLGATE_BOOTSTRAP": bootstrap,
            "TOOLGATE_GROUP_ID": config.group_id,
            "TOOLGATE_METRICS_PORT": "0",
            **config.topics.env(),
        }
    )
    yield config, env
    asyncio.run(drop_topics(config))


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def _await_line(log: Path, needle: str, worker: subprocess.Popen[bytes], seconds: float) -> None:
    """Poll the worker's log (every 0.1 s, bounded) until ``needle`` appears."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if needle in log.read_text(errors="replace"):
            return
        assert worker.poll() is None, f"the worker exited: {log.read_text(errors='replace')[-2000:]}"
        time.sleep(0.1)
    raise AssertionError(f"no {needle!r} in the worker's log within {seconds:g}s")


class TestQuickStart:
    """The page's commands, as written, bring an MCP host a result the worker validated."""

    def test_the_documented_commands_give_the_host_a_validated_result(
        self, private: tuple[Config, dict[str, str]], tmp_path: Path
    ) -> None:
        """Five commands and the review: lint exits 0 after the documented edit, and the host (the
        commands, the page's mcpServers entry, the page's SDK host) gets the structured result the
        gate decided."""
        config, env = private
        before, review_file, after = quick_start()
        assert len(before) + len(after) <= 5
        assert before[0] == "make install && . .venv/bin/activate"  # what runs this test
        broker_line = before[1]
        if config.bootstrap != LOCAL_BOOTSTRAP:  # kafka.sh serves the local address only
            broker_line = broker_line.split("&&", 1)[1]
        topics = _run(broker_line, ROOT, env)  # the clone: ops/kafka/kafka.sh is there
        assert topics.returncode == 0, topics.stdout + topics.stderr
        imported = _run(before[2], tmp_path, env)
        assert imported.returncode == 1, imported.stdout + imported.stderr  # a draft to review
        assert "unreviewed-text" in imported.stdout

        contract = tmp_path / review_file
        text = contract.read_text()
        assert "\nstatus: draft\n" in text
        contract.write_text(text.replace("\nstatus: draft\n", "\n" + page_block("yaml")))
        lint = _run("toolgate contracts lint --contracts demo", tmp_path, env)
        assert lint.returncode == 0, lint.stdout + lint.stderr  # the documented edit settles it
        assert "0 findings" in lint.stdout

        run_line, proxy_line = after
        assert run_line.endswith("&")
        log = tmp_path / "worker.log"
        with log.open("ab") as handle:
            worker = subprocess.Popen(
                shlex.split(run_line.rstrip("&")),
                cwd=tmp_path,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        try:
            _await_line(log, "state restored", worker, 90)
            result, listed = anyio.run(_host, proxy_line, tmp_path, env)
            entry, _ = anyio.run(_host_entry, tmp_path, env)
            (tmp_path / "host.py").write_text(page_block("python"))
            snippet = _run(f"{VENV_BIN / 'python'} host.py", tmp_path, env)
        finally:
            worker.terminate()
            worker.wait(60)
        assert listed == ["get_current_time"]
        assert result["isError"] is False, result
        data = result["structuredContent"]
        assert data["timezone"] == "Europe/Paris"
        assert isinstance(data["is_dst"], bool)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", data["datetime"])
        assert entry["structuredContent"]["timezone"] == "Europe/Paris"  # the mcpServers entry
        assert snippet.returncode == 0, snippet.stderr[-2000:]
        assert "'timezone': 'Europe/Paris'" in snippet.stdout  # the SDK host of the page


def page_block(language: str) -> str:
    """The quick start's first block fenced as ``language``."""
    section = PAGE.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("**Review.**", 1)[0]
    found = re.search(rf"^```{language}\n(.*?)^```$", section, re.DOTALL | re.MULTILINE)
    assert found, f"the quick start has a {language} block"
    return found.group(1)


async def _host_entry(cwd: Path, env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The page's ``mcpServers`` entry, its paths this clone's, started as a host starts it."""
    entry = json.loads(page_block("json"))["mcpServers"]["time"]
    clone = str(VENV_BIN.parent.parent)

    def here(text: str) -> str:
        text = text.replace("/path/to/toolgate/.venv/bin", str(VENV_BIN))
        return text.replace("/path/to/toolgate/demo", str(cwd / "demo")).replace("/path/to/toolgate", clone)

    # The entry's env, then the private topics and group this test runs on (what the page says to add).
    server_env = {**entry["env"], **{k: v for k, v in env.items() if k.startswith("TOOLGATE_")}}
    server = StdioServerParameters(
        command=here(entry["command"]), args=[here(a) for a in entry["args"]], env=server_env
    )
    return await _call_time(server)


async def _host(line: str, cwd: Path, env: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """An MCP host (the SDK's client) that starts the documented server command and calls the tool."""
    argv = shlex.split(line)
    return await _call_time(StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(cwd)))


async def _call_time(server: StdioServerParameters) -> tuple[dict[str, Any], list[str]]:
    """Start ``server`` as a host does, list its tools and call get_current_time for Paris."""
    with anyio.fail_after(120):
        async with McpClient(server) as host:
            listed = [tool.name for tool in (await host.list_tools()).tools]
            result = await host.call_tool("get_current_time", {"timezone": "Europe/Paris"})
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json")
    return dumped, listed
