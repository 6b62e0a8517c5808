"""docs/mcp.md's quick start, run as written: from ``@modelcontextprotocol/server-memory`` (npm, in
ops/mcp/node_modules) to a validated ``read_graph`` read by a host on the TypeScript SDK and by one
on the Python MCP SDK, on the real broker.

The commands are read from the page, as tests/readme.py reads the README's: the first (``make
install mcp-node`` and the venv's activation) is what runs these tests, so it is checked, not run,
and the venv's ``bin`` leads ``PATH`` as activation makes it; every other command runs as written.
The broker line runs in the clone (``ops/kafka/kafka.sh`` is there); the others in a folder of the
test's own holding ``ops/mcp/node_modules`` (a link to the clone's), so the ``demo`` contracts, the
graph file and the host files are the test's. The one setting the page names for a shared broker,
``TOOLGATE_TOPIC_PREFIX``, gives the test topics and a group of its own. No file is edited by
hand: the review is ``contracts review``'s flags on the page.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from toolgate._config import LOCAL_BOOTSTRAP, Config, Topics

from tests import ROOT, node_kit
from tests.integration.worker_kit import drop_topics

PAGE = ROOT / "docs" / "mcp.md"
VENV_BIN = Path(sys.executable).parent
GRAPH = {
    "entities": [{"name": "toolgate", "entityType": "project", "observations": ["gates tool results"]}],
    "relations": [],
}


def section() -> str:
    """The quick start, up to the review steps."""
    return PAGE.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("**Review.**", 1)[0]


def quick_start() -> list[str]:
    """The commands of the quick start's block, each a line as the page writes it."""
    fenced = re.findall(r"^```(\w*)\n(.*?)^```$", section(), re.DOTALL | re.MULTILINE)
    blocks = [body for language, body in fenced if not language]  # the commands: no language
    assert blocks, "the quick start has a block of commands"
    return [line for line in blocks[0].splitlines() if line.strip()]


def _command(line: str) -> tuple[str, str]:
    """A documented line without its comment, and the comment."""
    command, _, comment = line.partition("  #")
    return command.strip(), comment.strip()


def page_block(language: str) -> str:
    """The quick start's first block fenced as ``language``."""
    found = re.search(rf"^```{language}\n(.*?)^```$", section(), re.DOTALL | re.MULTILINE)
    assert found, f"the quick start has a {language} block"
    return found.group(1)


@pytest.fixture
def private(bootstrap: str) -> Iterator[tuple[Config, dict[str, str]]]:
    """A topic prefix no other test uses, and the environment that names it to every command
    (its topics dropped afterwards)."""
    prefix = f"tg-qs-{uuid.uuid4().hex[:10]}"
    config = Config(bootstrap=bootstrap, group_id=prefix, topics=Topics.under(prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(
        {
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",  # what activation does
            "VIRTUAL_ENV": str(VENV_BIN.parent),
            "TOOLGATE_BOOTSTRAP": bootstrap,
            "TOOLGATE_TOPIC_PREFIX": prefix,
            "TOOLGATE_METRICS_PORT": "0",
        }
    )
    yield config, env
    asyncio.run(drop_topics(config))


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


class TestQuickStart:
    """The page's commands, as written, bring both hosts a graph the gate decided."""

    def test_the_documented_commands_give_both_hosts_a_validated_graph(
        self, private: tuple[Config, dict[str, str]], tmp_path: Path
    ) -> None:
        """At most five commands after make install: import exits 1 (drafts), the review by flags
        activates both tools (lint then clean for them), the printed entry has absolute paths and
        the prefix, and the TypeScript and Python hosts each print the graph they wrote."""
        node_kit.node()  # the pinned packages are there (make mcp-node)
        config, env = private
        lines = quick_start()
        assert _command(lines[0])[0] == "make install mcp-node && . .venv/bin/activate"  # runs this test
        commands = [_command(line) for line in lines[1:]]
        assert len(commands) <= 5
        (broker, _), (imported_line, _), (review_line, _), (print_line, _), (host_line, alternative) = (
            commands
        )
        (tmp_path / "ops" / "mcp").mkdir(parents=True)
        (tmp_path / "ops" / "mcp" / "node_modules").symlink_to(node_kit.NODE_MODULES)
        if config.bootstrap != LOCAL_BOOTSTRAP:  # kafka.sh serves the local address only
            broker = broker.split("&&", 1)[1]
        topics = _run(broker, ROOT, env)  # the clone: ops/kafka/kafka.sh is there
        assert topics.returncode == 0, topics.stdout + topics.stderr
        assert f"{config.topics.intake}" in topics.stdout

        imported = _run(imported_line, tmp_path, env)
        assert imported.returncode == 1, imported.stdout + imported.stderr  # drafts to review
        assert "unreviewed-text" in imported.stdout
        reviewed = _run(review_line, tmp_path, env)
        assert reviewed.returncode == 0, reviewed.stdout + reviewed.stderr
        for tool in ("memory.create_entities", "memory.read_graph"):
            assert f"{tool}: " in reviewed.stdout
            assert re.search(
                rf"^{re.escape(tool)}: \d+ items decided, 0 not: activated", reviewed.stdout, re.M
            )
        lint = _run(
            "toolgate contracts lint --contracts demo memory.create_entities memory.read_graph", tmp_path, env
        )
        assert lint.returncode == 0, lint.stdout
        assert lint.stdout.splitlines()[-1] == "2 contract versions: 0 findings"

        printed = _run(print_line, tmp_path, env)
        assert printed.returncode == 0, printed.stderr
        entry = json.loads((tmp_path / "memory.json").read_text())["mcpServers"]["memory"]
        assert Path(entry["command"]).is_absolute()
        assert str(tmp_path / "demo") in entry["args"]
        assert entry["env"]["TOOLGATE_TOPIC_PREFIX"] == env["TOOLGATE_TOPIC_PREFIX"]
        assert entry["env"]["MEMORY_FILE_PATH"] == str(tmp_path / "memory.jsonl")
        assert not any(
            name.startswith("TOOLGATE_TOPIC_") and name != "TOOLGATE_TOPIC_PREFIX" for name in entry["env"]
        )

        (tmp_path / "ops" / "mcp" / "host.mjs").write_text(page_block("js"))
        (tmp_path / "host.py").write_text(page_block("python"))
        alternative_line = alternative.removeprefix("or:").strip()
        assert alternative_line == "python host.py memory.json"
        for line in (host_line, alternative_line):
            host = _run(line, tmp_path, env)
            assert host.returncode == 0, f"{line}: {host.stderr[-3000:]}"
            assert json.loads(host.stdout.strip().splitlines()[-1]) == GRAPH, host.stdout
        assert (tmp_path / "memory.jsonl").is_file()  # the graph file is the test's
        printed_graph = re.search(r"Each prints the graph .*?, `(\{.*?\})`\.", section(), re.DOTALL)
        assert printed_graph, "the page shows what the hosts print"
        assert json.loads(printed_graph.group(1).replace("\n", " ")) == GRAPH
