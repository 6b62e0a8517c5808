"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, pinned with Node 22 in
ops/mcp/package.json) against server-everything over streamable HTTP, once bare and once through
``toolgate mcp-proxy --listen http://... --upstream-url ...`` deciding in process on the real broker,
every tool imported with ``toolgate contracts import-mcp`` and set active.

docs/mcp.md ("The reference servers", **Conformance.**) is the one place that says what the runs give:
the figures, the scenarios that pass through the proxy, and the scenarios the bare server passes that
the proxy refuses by design, one line each. This test reads them from there and compares them with
the runs, so a scenario the proxy stops passing fails it, and so does a page that says otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from toolgate._config import Config

from tests import ROOT, mcp_kit, node_kit
from tests.conformance_doc import documented
from tests.integration.proxy_kit import free_port, until

SERVER = "everything"
EVERYTHING = node_kit.NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
TOOLGATE = Path(sys.executable).parent / "toolgate"
SUITE_BOUND_S = 240.0  # one run of every scenario (about 3 s bare; a hung scenario ends here)
COMMAND_BOUND_S = 120.0  # the import, a process's exit
RESULTS_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@dataclass(frozen=True)
class Run:
    """One run of the suite: per scenario, its checks' statuses as ``checks.json`` holds them."""

    statuses: dict[str, list[str]]

    def passed(self) -> set[str]:
        """The scenarios with a successful check and no failed one (the suite's own summary)."""
        return {
            name
            for name, got in self.statuses.items()
            if "SUCCESS" in got and "FAILURE" not in got and "WARNING" not in got
        }

    def checks(self, status: str) -> int:
        """How many checks of every scenario have ``status``."""
        return sum(got.count(status) for got in self.statuses.values())

    def figures(self) -> tuple[int, int, int]:
        """(checks passed, checks failed, scenarios passed), as docs/mcp.md's table lists them."""
        return self.checks("SUCCESS"), self.checks("FAILURE"), len(self.passed())


def read_results(out: Path) -> Run:
    """Every scenario's checks in the suite's ``--output-dir``: ``server-<scenario>-<time>/checks.json``."""
    statuses: dict[str, list[str]] = {}
    for checks in sorted(out.glob("*/checks.json")):
        match = RESULTS_DIR.match(checks.parent.name)
        assert match, f"{checks.parent}: not a server scenario's results folder"
        scenario = match.group("scenario")
        assert scenario not in statuses, f"{scenario}: two results in {out}"
        statuses[scenario] = [check["status"] for check in json.loads(checks.read_text())]
    return Run(statuses)


def tail(log: Path) -> str:
    """The end of a process's output, for a failure's message."""
    return log.read_text(errors="replace")[-4000:] if log.is_file() else f"(no {log})"


async def start(
    command: list[str], log: Path, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    """``command`` started in a process group of its own, its output into ``log``."""
    with log.open("wb") as handle:
        return await asyncio.create_subprocess_exec(
            *command, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


async def ended(process: asyncio.subprocess.Process, seconds: float) -> bool:
    """Whether ``process`` ended within ``seconds``; if not, its process group is killed."""
    try:
        async with asyncio.timeout(seconds):
            await process.wait()
    except TimeoutError:
        os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        return False
    return True


async def run_suite(url: str, out: Path) -> Run:
    """The suite's server scenarios (its default, active suite) against ``url``, bounded."""
    log = out.with_name(f"{out.name}-suite.log")
    command = [str(node_kit.node22()), str(node_kit.CONFORMANCE), "server", "--url", url, "-o", str(out)]
    suite = await start(command, log)
    finished = await ended(suite, SUITE_BOUND_S)
    run = await asyncio.to_thread(read_results, out)
    said = await asyncio.to_thread(tail, log)
    assert finished, f"the suite against {url} ran over {SUITE_BOUND_S:g}s; done: {sorted(run.statuses)}"
    # Exit 1 is the suite saying some scenario failed; anything else is the suite itself failing.
    assert suite.returncode in (0, 1), said
    assert run.statuses, f"no results in {out}: {said}"
    return run


@asynccontextmanager
async def serving(command: list[str], port: int, log: Path, env: dict[str, str]) -> AsyncIterator[None]:
    """``command`` running until the block ends, once it accepts connections on ``port``."""
    process = await start(command, log, env)

    async def accepting() -> bool:
        assert process.returncode is None, f"{command[1]} exited: {await asyncio.to_thread(tail, log)}"
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    try:
        await until(accepting, COMMAND_BOUND_S, f"{command[1]} listens on {port}")
        yield
    finally:
        if process.returncode is None:
            process.terminate()
        await ended(process, COMMAND_BOUND_S)


async def import_everything(url: str, root: Path, env: dict[str, str]) -> None:
    """Every tool the upstream at ``url`` lists imported under ``root`` (none refused) by
    ``toolgate contracts import-mcp``, then reviewed: set active, its text let through."""
    command = [str(TOOLGATE), "contracts", "import-mcp", "--url", url, "--server", SERVER]
    log = root.with_name(f"{root.name}-import.log")
    importing = await start([*command, "--contracts", str(root)], log, env)
    assert await ended(importing, COMMAND_BOUND_S), f"the import ran over {COMMAND_BOUND_S:g}s"
    said = await asyncio.to_thread(tail, log)
    # Exit 1: drafts are left to review, as after every import.
    assert importing.returncode == 1, said
    assert ", 0 tools refused," in said, said
    mcp_kit.review(root)
    mcp_kit.pass_text(root)


def proxy_env(cfg: Config) -> dict[str, str]:
    """The environment of a command on the test's private topics."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(TOOLGATE_BOOTSTRAP=cfg.bootstrap, TOOLGATE_GROUP_ID=cfg.group_id, **cfg.topics.env())
    return env


def figures(label: str, run: Run) -> str:
    """One run's figures on one line."""
    passed, failed, scenarios = run.figures()
    run_of = len(run.statuses)
    return f"{label}: {passed} checks passed, {failed} failed; {scenarios} of {run_of} scenarios passed"


class TestConformance:
    """The suite's server scenarios that pass on server-everything pass through the proxy too, except
    those docs/mcp.md lists as refused by design; the figures are the ones the page gives."""

    async def test_bare_and_through_the_proxy(self, config: Config, tmp_path: Path) -> None:
        """Bare, then through the proxy serving every imported tool: the scenarios lost are exactly
        the documented refusals, the documented passes pass, and both runs' figures are the page's."""
        docs = documented()
        node = str(node_kit.node22())
        upstream_port, proxy_port = free_port(), free_port()
        while proxy_port == upstream_port:
            proxy_port = free_port()
        upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
        proxy_url = f"http://127.0.0.1:{proxy_port}/mcp"
        env = proxy_env(config)
        everything = [node, str(EVERYTHING), "streamableHttp"]
        async with serving(
            everything, upstream_port, tmp_path / "everything.log", {**os.environ, "PORT": str(upstream_port)}
        ):
            bare = await run_suite(upstream_url, tmp_path / "bare")
            await import_everything(upstream_url, tmp_path / "contracts", env)
            proxy_command = [
                str(TOOLGATE), "mcp-proxy", "--server", SERVER, "--contracts", str(tmp_path / "contracts"),
                "--upstream-url", upstream_url, "--listen", proxy_url,
            ]  # fmt: skip
            async with serving(proxy_command, proxy_port, tmp_path / "proxy.log", env):
                proxied = await run_suite(proxy_url, tmp_path / "proxy")
        imported = {path.name for path in (tmp_path / "contracts").iterdir() if path.is_dir()}
        said = (tmp_path / "proxy.log").read_text(errors="replace").splitlines()
        serving_line = next((line for line in said if line.startswith("toolgate mcp-proxy: serving ")), "")
        assert set(serving_line.removeprefix("toolgate mcp-proxy: serving ").split(", ")) == imported, said
        print(f"\nconformance {figures('server-everything itself', bare)}")
        print(f"conformance {figures('through the proxy', proxied)}")
        print(f"conformance lost through the proxy: {sorted(bare.passed() - proxied.passed())}")
        print(f"conformance gained through the proxy: {sorted(proxied.passed() - bare.passed())}")

        assert set(proxied.statuses) == set(bare.statuses)
        assert len(bare.statuses) == docs.scenarios
        lost = bare.passed() - proxied.passed()
        assert lost - docs.refused == set(), "passing bare, failing through the proxy, not refused by design"
        assert docs.refused - lost == set(), "documented as refused by design, yet not lost through the proxy"
        assert docs.proxy_passes - proxied.passed() == set(), "documented as passing through the proxy"
        assert (bare.figures(), proxied.figures()) == (docs.bare, docs.proxy), "the figures in docs/mcp.md"
