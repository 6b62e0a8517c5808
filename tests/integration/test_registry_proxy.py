"""``toolgate mcp-proxy --contracts registry+URL``: the proxy serves the tools of the registry's contracts.

The contract is the one tests/integration/test_mcp_proxy.py reviews (``deploy_status`` as
``toolgate contracts import-mcp`` writes it, made active), published to the real registry; the
proxy, started by the MCP SDK's stdio client as a host starts it, loads it from there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import msgspec
import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from toolgate._config import Config
from toolgate.gate._contracts import ContractSet

from tests import ROOT, mcp_kit
from tests.integration.registry_kit import publish_set, reader_env, registry_client
from tests.integration.test_mcp_proxy import TOOL, running_worker


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The imported deploy_status contract, pinned to its definition (``input.schema.json``
    beside it), active and bound to the asked environment."""
    return mcp_kit.reviewed_deploy_status(tmp_path_factory.mktemp("registry-proxy-contracts"))


class TestProxyFromRegistry:
    """The proxy lists and answers with the contracts it loaded from the registry."""

    async def test_stdio_host_reads_a_validated_result(
        self, config: Config, reviewed: Path, tmp_path: Path
    ) -> None:
        """Published, then served: the one active tool listed, a good result passed, a banner refused."""
        client = registry_client()
        publish_set(ContractSet.load(reviewed), client)
        cfg = msgspec.structs.replace(config, contracts_dir=str(reviewed))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
        env.update(
            TOOLGATE_BOOTSTRAP=cfg.bootstrap,
            TOOLGATE_GROUP_ID=cfg.group_id,  # the running worker's group: the proxy checks it has members
            PYTHONPATH=str(ROOT),
            TOOLGATE_REGISTRY_SNAPSHOT_DIR=str(tmp_path / "snapshots"),
            **reader_env(),
            **cfg.topics.env(),
        )
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "toolgate",
                "mcp-proxy",
                "--server",
                "deployer",
                "--contracts",
                f"registry+{client.url}",
                "--upstream-command",
                f"{sys.executable} -m tests.mcp_kit",
                "--timeout",
                "20",
            ],
            env=env,
            cwd=str(ROOT),
        )
        async with running_worker(cfg), McpClient(params) as host:
            listed = await host.list_tools()
            result = await host.call_tool("deploy_status", {"case": "ok", "environment": "staging"})
            banner = await host.call_tool("deploy_status", {"case": "banner"})
        assert [t.name for t in listed.tools] == ["deploy_status"]
        assert result.structured_content == mcp_kit.GOOD
        assert banner.is_error
        assert (tmp_path / "snapshots" / "current" / TOOL / "v1" / "contract.yaml").is_file()
