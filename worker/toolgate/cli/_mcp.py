"""``toolgate mcp-proxy``: the command's wiring; the proxy is :mod:`toolgate.mcp._proxy`."""

from __future__ import annotations

import argparse
import asyncio

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
    asyncio.run(serve(args, config, keyring))
    return EXIT_OK


def _mcp_proxy_arguments(p: argparse.ArgumentParser) -> None:
    from toolgate.mcp._proxy import add_arguments

    add_arguments(p)


COMMANDS: tuple[Command, ...] = (
    Command(
        ("mcp-proxy",),
        "an MCP server in front of an MCP server: hosts read only validated results",
        "Serve an MCP host (stdio, or streamable HTTP on the loopback) in front of an\n"
        "upstream MCP server. tools/list lists the upstream tools that have an active\n"
        "contract <server>.<tool>, with the contract's projected, closed output schema.\n"
        "tools/call issues a request record, calls the upstream, publishes its\n"
        "CallToolResult to intake and answers with what toolgate decided: the projected\n"
        "data, or isError with a fixed code and retryable flag (INVALID_RESPONSE for a\n"
        "rejected result). An upstream error, a timeout or a broker outage is isError\n"
        "with a fixed code (UPSTREAM_ERROR, UPSTREAM_TIMEOUT, GATE_TIMEOUT,\n"
        "BROKER_UNAVAILABLE, PROXY_BUSY, UNKNOWN_TOOL). Needs a running worker\n"
        "(toolgate run) and pip install 'toolgate[mcp]'.",
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
