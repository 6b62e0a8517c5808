"""``toolgate mcp-proxy --contracts registry+URL``: the proxy serves the tools of the registry's contracts.

The contract is the one tests/integration/test_mcp_proxy.py reviews (``deploy_status`` as
``toolgate contracts import-mcp`` writes it, made active), published to the real registry; the
proxy, started by the MCP SDK's stdio client as a host starts it, loads it from there.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from toolgate._config import Config
from toolgate.gate._contracts import ContractSet

from tests import mcp_kit
from tests.integration.proxy_kit import host_env, ok_and_banner, proxy_server
from tests.integration.registry_kit import publish_set, reader_env, registry_client
from tests.integration.test_mcp_proxy import TOOL


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
        env = host_env(
            cfg.bootstrap,
            cfg.topics,
            TOOLGATE_GROUP_ID=cfg.group_id,  # the running worker's group: the proxy checks it has members
            TOOLGATE_REGISTRY_SNAPSHOT_DIR=str(tmp_path / "snapshots"),
            **reader_env(),
        )
        params = proxy_server(f"registry+{client.url}", env, "--timeout", "20")
        tools, result, banner = await ok_and_banner(cfg, params)
        assert tools == ["deploy_status"]
        assert result.structured_content == mcp_kit.GOOD
        assert banner.is_error
        assert (tmp_path / "snapshots" / "current" / TOOL / "v1" / "contract.yaml").is_file()
