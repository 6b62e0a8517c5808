"""`toolgate mcp-proxy` follows its contract source while it serves, on the real broker: with
`--contracts kafka:` in front of mcp-server-time from PyPI, the SDK's client as the host, a new
generation published with `toolgate contracts publish --to topic` decides the next call without
a restart, and `toolgate contracts status` lists the proxy with its set; with `--contracts
registry+URL` (the real schema registry) a set published there is listed and decides too."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import mcp.types as types
import yaml
from mcp import Client as McpClient
from mcp import StdioServerParameters
from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import fetch_listing, import_listing
from toolgate.service._kafka import AiokafkaClients
from toolgate.service._members import read_members

from tests import ROOT, mcp_kit
from tests.integration.proxy_kit import free_port, listening, until
from tests.integration.registry_kit import publish_set, reader_env, registry_client
from tests.integration.test_mcp_proxy import (  # noqa: F401  (time_contracts: a fixture)
    TIME_TOOL,
    request_id_of,
    time_contracts,
)
from tests.integration.worker_kit import KEYRING, Record, read_all

TIME_COMMAND = f"{Path(sys.executable).parent / 'mcp-server-time'} --local-timezone UTC"


def toolgate(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One toolgate command with the test's configuration file and nothing else of the environment."""
    return subprocess.run(
        [sys.executable, "-m", "toolgate", *args, "--config", str(config_file)],
        env=minimal_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def minimal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def config_file(cfg: Config, path: Path) -> Path:
    """The TOML a host would name with --config: the test's broker, group, topics and keyring."""
    topics = "\n".join(
        f'{role} = "{name}"'
        for role, name in zip(cfg.topics.__struct_fields__, cfg.topics.names(), strict=True)
    )
    path.write_text(
        f'bootstrap = "{cfg.bootstrap}"\ngroup_id = "{cfg.group_id}"\nkeyring = "{KEYRING}"\n'
        f"contracts_watch_seconds = 0.5\nmembers_refresh_seconds = 1\n[topics]\n{topics}\n"
    )
    return path


def revised(contracts: Path, root: Path) -> Path:
    """``contracts`` plus the compatible revision v1.1 of get_current_time (the same files)."""
    shutil.copytree(contracts, root)
    folder = root / TIME_TOOL / "v1.1"
    shutil.copytree(root / TIME_TOOL / "v1", folder)
    spec = yaml.safe_load((folder / "contract.yaml").read_text())
    spec["minor"] = 1
    (folder / "contract.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return root


def start_proxy(cfg_file: Path, port: int, stderr: Path) -> subprocess.Popen[bytes]:
    """``toolgate mcp-proxy --contracts kafka:`` (deciding in process) in front of mcp-server-time,
    over streamable HTTP on ``port``, as a host would start it: --config alone."""
    command = [
        sys.executable, "-m", "toolgate", "mcp-proxy", "--config", str(cfg_file), "--contracts", "kafka:",
        "--server", "time", "--upstream-command", TIME_COMMAND, "--listen", f"http://127.0.0.1:{port}/mcp",
    ]  # fmt: skip
    with stderr.open("wb") as err:
        return subprocess.Popen(command, env=minimal_env(), cwd=ROOT, stdin=subprocess.DEVNULL, stderr=err)


def decided(cfg: Config, records: list[Record], rid: str) -> tuple[str, str, bytes]:
    """The call's audit decision: the contract version that decided it, the set on the agent
    envelope, and the generation its request record names."""
    (audit,) = [json.loads(r.value or b"") for r in records if r.topic == cfg.topics.audit and r.key == rid]
    (agent,) = [r for r in records if r.topic == cfg.topics.agent and r.key == rid]
    (request,) = [r for r in records if r.topic == cfg.topics.requests and r.key == rid]
    return (
        audit["contract"],
        agent.headers["tg-contract-set"].decode(),
        request.headers["tg-contract-generation"],
    )


async def written(cfg: Config) -> list[Record]:
    out: list[Record] = []
    for topic in (cfg.topics.audit, cfg.topics.agent, cfg.topics.requests):
        out += await read_all(cfg, topic)
    return out


class TestFollowingTheTopic:
    """A proxy started with --contracts kafka: keeps serving while a new generation is
    published, and the next call is decided by it."""

    async def test_a_new_generation_decides_the_next_call(
        self,
        config: Config,
        time_contracts: Path,  # noqa: F811
        tmp_path: Path,
    ) -> None:
        """Generation 1 serves get_current_time v1; `contracts publish --to topic` of generation
        2 (adding v1.1) while the host stays connected; once the proxy's member record names
        generation 2, the next call is decided by v1.1, its envelope stamped g2-..., its request
        record tg-contract-generation 2; `contracts status` lists the proxy with that set."""
        cfg_file = config_file(config, tmp_path / "toolgate.toml")
        publish = ("contracts", "publish", "--to", "topic", "--publisher-key", "sample-publisher")
        one = toolgate(cfg_file, *publish, "--contracts", str(time_contracts))
        assert one.returncode == 0, one.stderr
        port = free_port()
        stderr = tmp_path / "stderr.txt"
        proxy = start_proxy(cfg_file, port, stderr)
        try:
            await listening(port, proxy)
            async with McpClient(f"http://127.0.0.1:{port}/mcp") as host:
                first = await host.call_tool("get_current_time", {"timezone": "UTC"})
                two_folder = revised(time_contracts, tmp_path / "two")
                two = await asyncio.to_thread(toolgate, cfg_file, *publish, "--contracts", str(two_folder))
                assert two.returncode == 0, two.stderr
                status: list[str] = []

                async def says_generation_2() -> bool:
                    done = await asyncio.to_thread(toolgate, cfg_file, "contracts", "status")
                    status[:] = done.stdout.splitlines()
                    return any("mcp-proxy:time@" in line and "generation 2 " in line for line in status)

                await until(says_generation_2, 60, "contracts status lists the proxy at generation 2")
                second = await host.call_tool("get_current_time", {"timezone": "Europe/Paris"})
                assert proxy.poll() is None  # the same process, the same host session
        finally:
            proxy.terminate()
            await asyncio.to_thread(proxy.wait, 30)
        for result in (first, second):
            assert isinstance(result, types.CallToolResult)
            assert not result.is_error, result.content
        records = await written(config)
        v1, set1, gen1 = decided(config, records, request_id_of(first))
        v2, set2, gen2 = decided(config, records, request_id_of(second))
        assert (v1, set1[:3], gen1) == (f"{TIME_TOOL}@v1", "g1-", b"1")
        assert (v2, set2[:3], gen2) == (f"{TIME_TOOL}@v1.1", "g2-", b"2")
        assert any(set2 in line and "mcp-proxy:time@" in line for line in status), status
        lines = stderr.read_text()
        assert f"contract set {set2} decides from now on" in lines


class TestFollowingTheRegistry:
    """A proxy started with --contracts registry+URL follows the registry's snapshots: a set
    published while it serves is listed and decides the next call."""

    async def test_a_new_generation_decides_the_next_call(self, config: Config, tmp_path: Path) -> None:
        """mcp_kit's deploy_status under a server name of this test's own (its own registry
        subjects) as generation N, then N+1 adding job-runs.list: once the proxy's member record
        names N+1 the host's listing holds both tools, and the next call is stamped with N+1."""
        server = f"srv{uuid.uuid4().hex[:10]}"
        tools = await fetch_listing(mcp_kit.server())

        def reviewed(root: Path, only: list[str]) -> ContractSet:
            import_listing(root, server, tools, only=only, out=lambda _line: None)
            mcp_kit.pin(root, tools, server_name=server)
            mcp_kit.review(root)
            return ContractSet.load(root)

        client = registry_client()
        publish_set(reviewed(tmp_path / "one", ["deploy_status"]), client)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
        env.update(
            TOOLGATE_BOOTSTRAP=config.bootstrap,
            TOOLGATE_GROUP_ID=config.group_id,
            PYTHONPATH=str(ROOT),
            TOOLGATE_REGISTRY_SNAPSHOT_DIR=str(tmp_path / "snapshots"),
            TOOLGATE_REGISTRY_POLL_SECONDS="0.5",
            TOOLGATE_CONTRACTS_WATCH_SECONDS="0.5",
            TOOLGATE_MEMBERS_REFRESH_SECONDS="1",
            **reader_env(),
            **config.topics.env(),
        )
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "toolgate", "mcp-proxy", "--server", server, "--contracts", f"registry+{client.url}",
                  "--upstream-command", f"{sys.executable} -m tests.mcp_kit"],
            env=env,
            cwd=str(ROOT),
        )  # fmt: skip
        async with McpClient(params) as host:
            before = await host.list_tools()
            first = await host.call_tool("deploy_status", {"case": "ok"})
            _v1, set1, _gen1 = decided(config, await written(config), request_id_of(first))
            publish_set(reviewed(tmp_path / "two", ["deploy_status", "job-runs.list"]), client)
            after = int(set1[1 : set1.index("-")]) + 1

            async def proxy_moved() -> bool:
                members = await read_members(config, AiokafkaClients(config), wait_seconds=10)
                return any(
                    m.member.startswith(f"mcp-proxy:{server}@") and m.generation == after for m in members
                )

            await until(proxy_moved, 60, f"the proxy's member record names generation {after}")
            listed = await host.list_tools()
            second = await host.call_tool("deploy_status", {"case": "ok"})
        assert [t.name for t in before.tools] == ["deploy_status"]
        assert sorted(t.name for t in listed.tools) == ["deploy_status", "job-runs.list"]
        assert first.structured_content == mcp_kit.GOOD
        assert second.structured_content == mcp_kit.GOOD
        _v2, set2, gen2 = decided(config, await written(config), request_id_of(second))
        assert (set2.split("-")[0], gen2) == (f"g{after}", str(after).encode())
