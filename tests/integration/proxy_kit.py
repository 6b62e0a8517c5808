"""`toolgate mcp-proxy` as MCP hosts run it, for the integration tests on the real broker.

The proxy runs as a process of its own (``python -m toolgate mcp-proxy``, this checkout's package
on ``PYTHONPATH``) in an environment with none of the caller's ``TOOLGATE_*`` variables, in front
of ``deployer``: tests/mcp_kit.py's MCP server unless a test names another upstream. A worker
decides in this process (:func:`running_worker`); waits are on conditions, each with a bound.
Used by test_mcp_proxy.py, test_registry_proxy.py, test_mcp_proxy_chaos.py and test_mcp_hosts.py.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import mcp.types as types
from mcp import Client as McpClient
from mcp import StdioServerParameters
from toolgate._config import Config, Topics

from tests import ROOT
from tests.integration.broker_kit import free_port
from tests.integration.test_worker import make_worker

SERVER = "deployer"  # the proxy's name for the upstream (mcp_kit.SERVER)
UPSTREAM = f"{sys.executable} -m tests.mcp_kit"  # mcp_kit's server over stdio

__all__ = ["free_port"]  # the broker kit's, for the proxy's --listen port


def host_env(bootstrap: str, topics: Topics | None = None, **more: str) -> dict[str, str]:
    """The proxy's environment: the caller's without ``TOOLGATE_*``, then the broker, this
    checkout on ``PYTHONPATH``, the topics' variables and ``more``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(TOOLGATE_BOOTSTRAP=bootstrap, PYTHONPATH=str(ROOT))
    env.update(topics.env() if topics is not None else {})
    env.update(more)
    return env


def proxy_args(contracts: str | Path | None, *more: str, upstream: str = UPSTREAM) -> list[str]:
    """``-m toolgate mcp-proxy`` in front of ``upstream`` with ``--contracts`` (none: from the
    environment or ``--config`` in ``more``) and ``more``."""
    where = ["--contracts", str(contracts)] if contracts is not None else []
    return ["-m", "toolgate", "mcp-proxy", "--server", SERVER, *where, "--upstream-command", upstream, *more]


def proxy_command(contracts: str | Path | None, *more: str, upstream: str = UPSTREAM) -> list[str]:
    """:func:`proxy_args` run by this interpreter."""
    return [sys.executable, *proxy_args(contracts, *more, upstream=upstream)]


def proxy_server(contracts: str | Path, env: dict[str, str], *more: str) -> StdioServerParameters:
    """The proxy as an MCP host starts it over stdio."""
    return StdioServerParameters(
        command=sys.executable, args=proxy_args(contracts, *more), env=env, cwd=str(ROOT)
    )


async def until(condition: Callable[[], Awaitable[bool]], seconds: float, what: str) -> None:
    """Wait, bounded, until ``condition()`` is true."""
    async with asyncio.timeout(seconds):
        while not await condition():  # noqa: ASYNC110 - a broker or a process: no event to wait on
            await asyncio.sleep(0.1)
    assert await condition(), what


async def listening(
    port: int,
    process: asyncio.subprocess.Process | subprocess.Popen[bytes],
    said: Callable[[], str] = lambda: "toolgate mcp-proxy exited",
    seconds: float = 60,
) -> None:
    """Wait, bounded, until ``process`` accepts connections on 127.0.0.1:``port``; when it
    exits first, fail with ``said()`` (e.g. its stderr)."""

    async def up() -> bool:
        code = process.poll() if isinstance(process, subprocess.Popen) else process.returncode
        assert code is None, said()
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        return True

    await until(up, seconds, f"something listens on 127.0.0.1:{port}")


async def ok_and_banner(
    cfg: Config, server: StdioServerParameters | str
) -> tuple[list[str], types.CallToolResult, types.CallToolResult]:
    """With a worker deciding on ``cfg``, a host connected to the proxy ``server`` (stdio
    parameters or an HTTP URL): the tools it lists, its answer to a good ``deploy_status``
    call and to one whose upstream answers a maintenance banner."""
    async with running_worker(cfg), McpClient(server) as host:
        listed = await host.list_tools()
        ok = await host.call_tool("deploy_status", {"case": "ok", "environment": "staging"})
        banner = await host.call_tool("deploy_status", {"case": "banner"})
    return [t.name for t in listed.tools], ok, banner


@asynccontextmanager
async def running_worker(cfg: Config) -> AsyncIterator[None]:
    """A worker in this process on ``cfg``, ready (its partitions assigned) until the block ends."""
    worker = make_worker(cfg)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(60):
            while not worker.ready():
                await asyncio.wait({task}, timeout=0.05)
                assert not task.done(), "the worker stopped"
        yield
    finally:
        worker.request_stop()
        await task
