"""``toolgate mcp-proxy``: the command's wiring; the proxy is :mod:`toolgate.mcp._proxy`."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli._common import (
    EXIT_OK,
    Command,
    check_broker,
    keyring_path,
)


def _mcp_proxy(args: argparse.Namespace, config: Config) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError("mcp-proxy needs the MCP SDK: pip install 'toolgate[mcp]'") from None
    from toolgate.gate._signing import Keyring
    from toolgate.mcp._proxy import options_from, parse_listen, serve, upstream_target

    options_from(args)  # every option checked before anything connects
    parse_listen(args.listen, allow_remote=args.allow_remote)
    upstream_target(args)
    keyring_file = keyring_path(args, config)
    keyring = Keyring.load(keyring_file) if keyring_file else None
    check_broker(config)
    from toolgate.service._kafka import AiokafkaClients

    def admin() -> Any:
        return AiokafkaClients(config).admin(timeout_ms=10_000)

    async def serving() -> frozenset[str] | None:
        """The tools the group's live workers decide (the members topic); None without it."""
        from datetime import UTC, datetime

        from toolgate.service._members import live_members, read_members

        try:
            records = await read_members(config, AiokafkaClients(config), wait_seconds=10)
        except ConfigError:
            return None  # no members topic: an older cluster
        members = live_members(records, config.group_id, datetime.now(UTC))
        return frozenset(t for m in members for t in m.tools) if members else None

    from toolgate.service._contract_source import is_topic_source

    if is_topic_source(config.contracts_dir):
        asyncio.run(_serve_from_topic(args, config, admin, serving))
    else:
        asyncio.run(serve(args, config, keyring, admin_factory=admin, serving=serving))
    return EXIT_OK


async def _serve_from_topic(args: argparse.Namespace, config: Config, admin: Any, serving: Any) -> None:
    """``--contracts kafka:``: the contracts topic read to its end, its newest complete set served."""
    from toolgate.mcp._proxy import serve
    from toolgate.registry._connect import publishers_keyring
    from toolgate.service._contract_source import TopicContractSource, topic_of
    from toolgate.service._kafka import AiokafkaClients

    keyring = publishers_keyring(config, f"--contracts {config.contracts_dir}")
    topic = topic_of(config.contracts_dir, config.topics.contracts)
    source = TopicContractSource(topic, AiokafkaClients(config), keyring)
    await source.start(config.contracts_catch_up_seconds * 6)
    try:
        await serve(args, config, keyring, admin_factory=admin, contracts=source.load(), serving=serving)
    finally:
        await source.stop()


def _mcp_proxy_arguments(p: argparse.ArgumentParser) -> None:
    from toolgate.mcp._proxy import add_arguments

    add_arguments(p)


COMMANDS: tuple[Command, ...] = (
    Command(
        ("mcp-proxy",),
        "an MCP server in front of an MCP server: hosts read only validated results",
        "Serve an MCP host (stdio, or streamable HTTP on the loopback) in front of an\n"
        "upstream MCP server. tools/list lists only the pinned definitions of the tools\n"
        "with an active contract <server>.<tool> (title, description, input schema,\n"
        "annotations as reviewed, the projected output schema); a tool whose live\n"
        "definition changed is withdrawn (TOOL_CHANGED) until reviewed again. tools/call\n"
        "checks the arguments against the reviewed input schema (INVALID_ARGUMENTS),\n"
        "issues a request record, calls the upstream, publishes its CallToolResult as it\n"
        "came to intake and answers with what toolgate decided: the projected data, or\n"
        "isError with a code and retryable flag (INVALID_RESPONSE for a rejected result).\n"
        "Other fixed codes: UNKNOWN_TOOL, TOOL_DRAFT, TOOL_DISABLED, TOOL_NOT_SERVED,\n"
        "UPSTREAM_ERROR, UPSTREAM_TIMEOUT, GATE_TIMEOUT, BROKER_UNAVAILABLE, PROXY_BUSY.\n"
        "Prints the broker, contracts folder and topics it uses on stderr at start-up.\n"
        "Needs a running worker (toolgate run) and pip install 'toolgate[mcp]'.",
        (
            'toolgate mcp-proxy --server deployer --upstream-command "python -m deployer_mcp"',
            "toolgate mcp-proxy --server deployer --upstream-url http://127.0.0.1:8000/mcp "
            "--listen http://127.0.0.1:8100/mcp",
        ),
        _mcp_proxy,
        ("contracts", "keyring", "bootstrap"),
        _mcp_proxy_arguments,
    ),
)
