"""The four reference MCP servers (server-everything, -filesystem, -memory 2026.8.31 from npm,
mcp-server-git from PyPI, pinned in ops/mcp/package.json and pyproject.toml) behind the proxy on the
real broker, the real worker deciding, called by the Python SDK's client and by the TypeScript SDK's
client (tests/node/host.mjs): every tool imported, every valid call answered with the tool's data
or a refusal docs/mcp.md names for that tool, never an empty success."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from mcp import Client as McpClient
from toolgate._config import Config
from toolgate.client import Client
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import fetch_listing, import_listing, stdio_server
from toolgate.mcp._options import ProxyOptions
from toolgate.mcp._proxy import Proxy
from toolgate.mcp._upstream_process import upstream_groups, with_upstream_env

from tests import mcp_kit, node_kit
from tests.integration.proxy_kit import running_worker
from tests.integration.worker_kit import worker_env

PACKAGES = node_kit.NODE_MODULES / "@modelcontextprotocol"
BIN = Path(sys.executable).parent
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def command(server: str, work: Path) -> list[str]:
    """How each reference server is started, over stdio, on the test's folder."""
    node = node_kit.node()
    return {
        "everything": [node, str(PACKAGES / "server-everything" / "dist" / "index.js"), "stdio"],
        "filesystem": [node, str(PACKAGES / "server-filesystem" / "dist" / "index.js"), str(work)],
        "memory": [node, str(PACKAGES / "server-memory" / "dist" / "index.js")],
        "git": [str(BIN / "mcp-server-git"), "--repository", str(work)],
    }[server]


def calls(server: str, work: Path) -> list[tuple[str, dict[str, Any]]]:
    """One valid call of every tool of ``server``, in an order that makes each meaningful."""
    w = str(work)
    if server == "everything":
        gz = base64.b64encode(__import__("gzip").compress(b"hello")).decode()
        return [
            ("echo", {"message": "hello"}),
            ("get-annotated-message", {"messageType": "success", "includeImage": False}),
            ("get-env", {}),
            ("get-resource-links", {"count": 2}),
            ("get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
            ("get-structured-content", {"location": "Chicago"}),
            ("get-sum", {"a": 1, "b": 2}),
            ("get-tiny-image", {}),
            ("gzip-file-as-resource", {"name": "a.txt.gz", "data": f"data:application/gzip;base64,{gz}"}),
            ("toggle-simulated-logging", {}),
            ("toggle-subscriber-updates", {}),
            ("trigger-long-running-operation", {"duration": 1, "steps": 2}),
            ("simulate-research-query", {"topic": "gates"}),
        ]
    if server == "filesystem":
        return [
            ("write_file", {"path": f"{w}/a.txt", "content": "alpha\nbeta\n"}),
            ("write_file", {"path": f"{w}/data.json", "content": '{"approve": true}\n'}),
            ("create_directory", {"path": f"{w}/sub"}),
            ("read_file", {"path": f"{w}/a.txt"}),
            ("read_text_file", {"path": f"{w}/data.json"}),
            ("read_media_file", {"path": f"{w}/dot.png"}),
            ("read_multiple_files", {"paths": [f"{w}/a.txt", f"{w}/data.json"]}),
            ("edit_file", {"path": f"{w}/a.txt", "edits": [{"oldText": "beta", "newText": "gamma"}]}),
            ("list_directory", {"path": w}),
            ("list_directory_with_sizes", {"path": w}),
            ("directory_tree", {"path": w}),
            ("move_file", {"source": f"{w}/a.txt", "destination": f"{w}/sub/a.txt"}),
            ("search_files", {"path": w, "pattern": "*.txt"}),
            ("get_file_info", {"path": f"{w}/sub/a.txt"}),
            ("list_allowed_directories", {}),
        ]
    if server == "memory":
        entity = {"name": "toolgate", "entityType": "project", "observations": ["gates results"]}
        other = {"name": "kafka", "entityType": "broker", "observations": ["carries records"]}
        relation = {"from": "toolgate", "to": "kafka", "relationType": "reads"}
        return [
            ("create_entities", {"entities": [entity, other]}),
            ("create_relations", {"relations": [relation]}),
            ("add_observations", {"observations": [{"entityName": "toolgate", "contents": ["is tested"]}]}),
            ("read_graph", {}),
            ("search_nodes", {"query": "toolgate"}),
            ("open_nodes", {"names": ["toolgate"]}),
            (
                "delete_observations",
                {"deletions": [{"entityName": "toolgate", "observations": ["is tested"]}]},
            ),
            ("delete_relations", {"relations": [relation]}),
            ("delete_entities", {"entityNames": ["kafka"]}),
        ]
    return [
        ("git_status", {"repo_path": w}),
        ("git_diff_unstaged", {"repo_path": w}),
        ("git_add", {"repo_path": w, "files": ["a.txt"]}),
        ("git_diff_staged", {"repo_path": w}),
        ("git_commit", {"repo_path": w, "message": "second"}),
        ("git_diff", {"repo_path": w, "target": "HEAD~1"}),
        ("git_log", {"repo_path": w, "max_count": 2}),
        ("git_create_branch", {"repo_path": w, "branch_name": "feature"}),
        ("git_checkout", {"repo_path": w, "branch_name": "feature"}),
        ("git_show", {"repo_path": w, "revision": "HEAD"}),
        ("git_branch", {"repo_path": w, "branch_type": "local"}),
        ("git_reset", {"repo_path": w}),
    ]


# What docs/mcp.md ("The reference servers") says each tool answers through the proxy when it is not
# its data: the tools whose every success would pass nothing (NOTHING_PASSED) and the task-required
# one the proxy neither lists nor drives (TASK_REQUIRED).
REFUSED: dict[str, dict[str, str]] = {
    "everything": {"gzip-file-as-resource": "NOTHING_PASSED", "simulate-research-query": "TASK_REQUIRED"},
    "filesystem": {},
    "memory": {},
    "git": {},
}
SERVERS = tuple(REFUSED)
TASK_ONLY = ("simulate-research-query",)


def workdir(root: Path, server: str) -> Path:
    """The folder a server works in: files for filesystem, a repository of one commit for git."""
    work = root / f"{server}-work"
    work.mkdir()
    (work / "dot.png").write_bytes(PNG)
    if server == "git":
        (work / "a.txt").write_text("one\n")
        git = ["git", "-C", str(work), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
        subprocess.run([*git[:3], "init", "-q", "-b", "main"], check=True)
        subprocess.run([*git, "add", "a.txt"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
        (work / "a.txt").write_text("one\ntwo\n")
    return work.resolve()


def reviewed(root: Path, server: str, cmd: list[str]) -> tuple[Path, list[dict[str, Any]]]:
    """Every tool of the live server imported into ``root`` (none refused), set active and its
    text let through to the user, as a reviewer does (import passes no text)."""
    tools = anyio.run(fetch_listing, stdio_server(cmd))
    lines: list[str] = []
    import_listing(root, server, tools, out=lines.append)
    assert [line for line in lines if line.startswith("refused")] == []
    mcp_kit.review(root)
    mcp_kit.pass_text(root)
    return root, tools


async def set_up(
    server: str, config: Config, tmp_path: Path
) -> tuple[Path, list[str], Path, list[dict[str, Any]], Config]:
    """The server's folder, its command, its reviewed contracts, its listing, and the
    configuration naming those contracts."""
    work = workdir(tmp_path, server)
    cmd = command(server, work)
    root, tools = await anyio.to_thread.run_sync(reviewed, tmp_path / "contracts", server, cmd)
    return work, cmd, root, tools, msgspec.structs.replace(config, contracts_dir=str(root))


def answer_of(result: dict[str, Any]) -> str:
    """``data`` when the result carries the tool's data, else the proxy's code."""
    if result.get("isError"):
        return str(json.loads(result["content"][0]["text"])["error"]["code"])
    assert result.get("content") or result.get("structuredContent"), "an empty success"
    return "data"


class TestReferenceServers:
    """Each reference server behind the proxy answers every valid call of every tool with its data
    or the refusal docs/mcp.md names for the tool, to the Python SDK's client and to the TypeScript
    SDK's (which validates with Ajv): no empty success, no Ajv error."""

    @pytest.mark.parametrize("server", SERVERS)
    async def test_python_sdk_host(self, server: str, config: Config, tmp_path: Path) -> None:
        """The MCP SDK's client, through the in-process proxy, gets data or the documented refusal."""
        work, cmd, root, tools, cfg = await set_up(server, config, tmp_path)
        got: dict[str, str] = {}
        structured: dict[str, Any] = {}
        env = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
        target = with_upstream_env(stdio_server(cmd), ["MEMORY_FILE_PATH"], env)
        options = ProxyOptions(wait_s=30, upstream_timeout_s=30)
        async with running_worker(cfg), Client(cfg) as client, McpClient(target) as up:
            proxy = Proxy(server, up, client, ContractSet.load(root), options=options)
            assert await proxy.load_tools() == sorted(t["name"] for t in tools)
            assert {t.name for t in proxy.tools()} == {t["name"] for t in tools} - set(TASK_ONLY)
            async with McpClient(proxy.mcp_server()) as host:
                for name, arguments in calls(server, work):
                    result = await host.call_tool(name, arguments)
                    got[name] = answer_of(result.model_dump(by_alias=True, mode="json", exclude_none=True))
                    structured[name] = result.structured_content
        expected = {name: REFUSED[server].get(name, "data") for name, _ in calls(server, work)}
        assert got == expected
        if server == "memory":  # lists of records arrive whole, record by record
            graph = structured["read_graph"]
            assert [e["name"] for e in graph["entities"]] == ["toolgate", "kafka"]
            assert graph["relations"] == [{"from": "toolgate", "to": "kafka", "relationType": "reads"}]
            assert structured["open_nodes"]["entities"][0]["observations"] == ["gates results", "is tested"]
        if server == "filesystem":
            (image,) = structured["read_media_file"]["content"]
            assert (image["type"], image["mimeType"], image["data"]) == (
                "image",
                "image/png",
                base64.b64encode(PNG).decode(),
            )
        assert set(got) == {t["name"] for t in tools}

    @pytest.mark.parametrize("server", SERVERS)
    async def test_typescript_sdk_host(self, server: str, config: Config, tmp_path: Path) -> None:
        """The TypeScript SDK's client, starting toolgate mcp-proxy as its server, gets the same."""
        work, cmd, root, tools, cfg = await set_up(server, config, tmp_path)
        plan = {
            "command": str(BIN / "toolgate"),
            "args": ["mcp-proxy", "--server", server, "--upstream-command", shlex.join(cmd)],
            "env": {**worker_env(cfg), "TOOLGATE_CONTRACTS_DIR": str(root)},
            "calls": [{"name": n, "arguments": a} for n, a in calls(server, work)],
        }
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        async with running_worker(cfg):
            lines = await host_lines(tmp_path / "plan.json")
        listed = next(line["tools"] for line in lines if "tools" in line)
        assert sorted(t["name"] for t in listed) == sorted(
            t["name"] for t in tools if t["name"] not in TASK_ONLY
        )
        got = {
            line["call"]: line.get("error") or answer_of(line["result"]) for line in lines if "call" in line
        }
        assert got == {name: REFUSED[server].get(name, "data") for name, _ in calls(server, work)}


class TestProgress:
    """An upstream's progress reaches the host (its numbers, the message bounded and marked) and
    keeps the call alive past --upstream-timeout while it arrives."""

    async def test_a_long_operation_reporting_progress_is_not_cut(
        self, config: Config, tmp_path: Path
    ) -> None:
        """trigger-long-running-operation of 3 s, --upstream-timeout 1 s: data, and the progress."""
        cmd = command("everything", tmp_path)
        root, _ = await anyio.to_thread.run_sync(reviewed, tmp_path / "contracts", "everything", cmd)
        cfg = msgspec.structs.replace(config, contracts_dir=str(root))
        seen: list[tuple[float, float | None, str | None]] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        options = ProxyOptions(wait_s=30, upstream_timeout_s=1.0)
        arguments = {"duration": 3, "steps": 6}
        async with running_worker(cfg), Client(cfg) as client, McpClient(stdio_server(cmd)) as up:
            proxy = Proxy("everything", up, client, ContractSet.load(root), options=options)
            await proxy.load_tools()
            async with McpClient(proxy.mcp_server()) as host:
                result = await host.call_tool(
                    "trigger-long-running-operation", arguments, progress_callback=progress
                )
                unrelayed = await host.call_tool(
                    "trigger-long-running-operation", {"duration": 3, "steps": 1}
                )
        assert answer_of(result.model_dump(by_alias=True, mode="json", exclude_none=True)) == "data"
        assert [done for done, _, _ in seen] == [1, 2, 3, 4, 5, 6]
        assert {total for _, total, _ in seen} == {6}
        assert all(m is None or m.startswith("[upstream progress, unreviewed] ") for _, _, m in seen)
        # One step of 3 s reports nothing before it ends: the 1 s bound holds.
        assert (
            answer_of(unrelayed.model_dump(by_alias=True, mode="json", exclude_none=True))
            == "UPSTREAM_TIMEOUT"
        )


async def host_lines(plan: Path, *, stdin: bytes | None = None, seen: Any = None) -> list[dict[str, Any]]:
    """Run tests/node/host.mjs on ``plan``: its output lines, decoded."""
    host = await asyncio.create_subprocess_exec(
        node_kit.node(),
        str(node_kit.NODE_DIR / "host.mjs"),
        str(plan),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert host.stdout is not None
    assert host.stdin is not None
    lines: list[dict[str, Any]] = []
    async with asyncio.timeout(240):
        while raw := await host.stdout.readline():
            line = json.loads(raw)
            lines.append(line)
            if seen is not None and "call" in line:
                await seen(lines)
                host.stdin.write(stdin or b"\n")
                await host.stdin.drain()
        assert await host.wait() == 0
    return lines


class TestHostShutdown:
    """A host that shuts down as the TypeScript SDK does (stdin closed, SIGTERM 2 s later) leaves no
    upstream running, and the upstream got the named variables of the host's environment."""

    async def test_the_upstream_ends_with_the_host(self, config: Config, tmp_path: Path) -> None:
        """server-memory writes where MEMORY_FILE_PATH says, and it has ended once the host closed."""
        cmd = command("memory", tmp_path)
        root, _ = await anyio.to_thread.run_sync(reviewed, tmp_path / "contracts", "memory", cmd)
        # An upstream slower to stop than the host's 2 s: after the server, its wrapper lingers.
        cmd = ["sh", "-c", f"{shlex.join(cmd)}; exec sleep 120"]
        cfg = msgspec.structs.replace(config, contracts_dir=str(root))
        memory_file = tmp_path / "graph.jsonl"
        plan = {
            "command": str(BIN / "toolgate"),
            "args": [
                *("mcp-proxy", "--server", "memory", "--upstream-command", shlex.join(cmd)),
                *("--upstream-env", "MEMORY_FILE_PATH"),
            ],
            "env": {
                **worker_env(cfg),
                "TOOLGATE_CONTRACTS_DIR": str(root),
                "MEMORY_FILE_PATH": str(memory_file),
            },
            "calls": [{"name": "create_entities", "arguments": dict(calls("memory", tmp_path)[0][1])}],
            "hold": True,
        }
        (tmp_path / "plan.json").write_text(json.dumps(plan))
        upstream: list[int] = []

        async def while_held(lines: list[dict[str, Any]]) -> None:
            upstream.extend(upstream_groups(lines[0]["pid"]))

        async with running_worker(cfg):
            lines = await host_lines(tmp_path / "plan.json", seen=while_held)
        assert len(upstream) == 1  # the proxy started one upstream, in a session of its own
        assert lines[-1] == {"closed": True}
        assert "toolgate" in memory_file.read_text()  # the host's MEMORY_FILE_PATH reached it
        async with asyncio.timeout(10):  # the proxy ended it before exiting: it has exited, or does now
            await exited(upstream[0])


async def exited(pid: int) -> None:
    """Return once process ``pid`` has exited (a pidfd becomes readable then: no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, done.set)
    try:
        await done.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)
