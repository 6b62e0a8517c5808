"""``toolgate mcp-proxy``: the command's wiring; the proxy is :mod:`toolgate.mcp._proxy`, its
options :mod:`toolgate.mcp._options`, its serving :mod:`toolgate.mcp._serve`."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
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
    from toolgate.mcp._options import options_from, parse_listen, upstream_target
    from toolgate.mcp._upstream_process import upstream_env_names

    options_from(args)  # every option checked before anything connects
    parse_listen(args.listen, allow_remote=args.allow_remote)
    upstream_target(args)
    names = upstream_env_names(args, config)
    if args.print_host_config:
        import json

        from toolgate.mcp._host_config import host_entry

        print(json.dumps(host_entry(args, config, names), indent=2, ensure_ascii=False))
        return EXIT_OK
    keyring_file = keyring_path(args, config)
    keyring = Keyring.load(keyring_file) if keyring_file else None
    check_broker(config)
    from toolgate.service._kafka import AiokafkaClients

    def admin() -> Any:
        return AiokafkaClients(config).admin(timeout_ms=10_000)

    async def serving() -> frozenset[str] | None:
        """The tools the group's live workers decide (the members topic; a proxy deciding in
        process is a member too, but decides nothing of intake); None without it."""
        from datetime import UTC, datetime

        from toolgate.service._members import read_members

        try:
            records = await read_members(config, AiokafkaClients(config), wait_seconds=10)
        except ConfigError:
            return None  # no members topic: an older cluster
        return workers_tools(records, config.group_id, datetime.now(UTC))

    asyncio.run(_serve_following(args, config, keyring, admin, serving))
    return EXIT_OK


def workers_tools(records: list[Any], group: str, now: Any) -> frozenset[str] | None:
    """The tools the live workers of ``group`` decide, by the members topic's ``records``; an MCP
    proxy deciding in process (member ``mcp-proxy:...``) is a member too but decides nothing
    from intake, so its tools do not count. None: no live worker."""
    from toolgate.mcp._decide import ORIGIN_PREFIX
    from toolgate.service._members import live_members

    workers = [m for m in live_members(records, group, now) if not m.member.startswith(ORIGIN_PREFIX)]
    return frozenset(t for m in workers for t in m.tools) if workers else None


async def _serve_following(
    args: argparse.Namespace, config: Config, keyring: Any, admin: Any, serving: Any
) -> None:
    """The proxy over its contract source: the contracts topic (``--contracts kafka:``, read to
    its end first) or a registry's snapshots are followed while it serves, through the workers'
    catch-up (:class:`~toolgate.service._contract_source.CatchUp`); deciding in process, the
    proxy is a member of the group's view. A folder is the set read at start-up."""
    from pathlib import Path

    from toolgate.gate._contracts import ContractSet
    from toolgate.mcp._follow import Following
    from toolgate.mcp._serve import serve
    from toolgate.registry._connect import attached, publishers_keyring
    from toolgate.registry._snapshot import load_contracts
    from toolgate.service._contract_source import (
        CatchUp,
        ContractSource,
        RegistryContractSource,
        TopicContractSource,
        is_topic_source,
        topic_of,
    )
    from toolgate.service._kafka import AiokafkaClients

    source: ContractSource | None = None
    contracts: ContractSet | None = None
    load: Callable[[], ContractSet] = lambda: load_contracts(config.contracts_dir)  # noqa: E731
    registry = attached()
    if is_topic_source(config.contracts_dir):
        keyring = publishers_keyring(config, f"--contracts {config.contracts_dir}")
        topic = topic_of(config.contracts_dir, config.topics.contracts)
        topic_source = TopicContractSource(topic, AiokafkaClients(config), keyring)
        source, load = topic_source, topic_source.load
        await topic_source.start(config.contracts_catch_up_seconds * 6)
        contracts = load()
    elif registry is not None:
        source = RegistryContractSource(
            registry.poll, [Path(config.contracts_dir)], registry.published_generation
        )
    view = None
    try:
        following = None
        if source is not None:
            followed = source
            if getattr(args, "decide", "proxy") == "proxy":
                view = await _group_view(args, config, followed.published_generation)
            following = Following(
                seam=lambda reload, current: CatchUp(followed, reload, current),
                load=load,
                changed=followed.changed,
                every_s=config.contracts_watch_seconds,
                bound_s=config.contracts_catch_up_seconds,
                group=view,
                refresh_s=config.members_refresh_seconds,
            )
        await serve(
            args,
            config,
            keyring,
            admin_factory=admin,
            contracts=contracts,
            serving=serving,
            following=following,
        )
    finally:
        if view is not None:
            await view.stop()
        if source is not None:
            await source.stop()


async def _group_view(
    args: argparse.Namespace, config: Config, published: Callable[[], int | None] = lambda: None
) -> Any:
    """This proxy's place among the group's members (None: no members topic), under the member
    id ``mcp-proxy:<server>@<host-pid-nonce or TOOLGATE_GROUP_INSTANCE_ID>``; members count
    only with a generation its source verified (``published``)."""
    from datetime import UTC, datetime

    from toolgate.mcp._decide import ORIGIN_PREFIX
    from toolgate.service._kafka import AiokafkaClients
    from toolgate.service._members import GroupView, member_id

    me = f"{ORIGIN_PREFIX}{args.server}@{member_id(config)}"
    return await GroupView.open(
        config, AiokafkaClients(config), me, lambda: datetime.now(UTC), published=published
    )


def _mcp_proxy_arguments(p: argparse.ArgumentParser) -> None:
    from toolgate.mcp._options import add_arguments

    add_arguments(p)
    p.add_argument(
        "--print-host-config",
        action="store_true",
        help="print the host's mcpServers entry that starts this proxy (Claude Desktop, Cursor, VS Code "
        "under servers), with absolute paths and the settings in force, and exit",
    )


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
        "issues a request record, calls the upstream and decides its CallToolResult as it\n"
        "came with the workers' gate and contracts (--decide proxy, the default: the\n"
        "envelope, quarantine and audit records are written, acks=all, before the answer;\n"
        "--decide worker publishes it to intake and awaits a worker's envelope). The host\n"
        "gets what toolgate decided: the projected data, or isError with a code and\n"
        "retryable flag (INVALID_RESPONSE for a rejected result).\n"
        "Other fixed codes: UNKNOWN_TOOL, TOOL_DRAFT, TOOL_DISABLED, TOOL_NOT_SERVED,\n"
        "UPSTREAM_ERROR, UPSTREAM_TIMEOUT, GATE_TIMEOUT, BROKER_UNAVAILABLE, PROXY_BUSY,\n"
        "PAYLOAD_TOO_LARGE, PROXY_ERROR, CONTRACTS_BEHIND. A tools/list over 100 pages, 10000\n"
        "tools or 8 MiB stops the start-up (exit 2) and, later, withdraws every tool until one\n"
        "can be read. With --contracts kafka: or registry+URL the proxy follows the set there\n"
        "while it runs (every TOOLGATE_CONTRACTS_WATCH_SECONDS, and before a call of a tool it\n"
        "does not serve) and, deciding in process, is listed by toolgate contracts status.\n"
        "Prints the broker, contracts folder and topics it uses on stderr at start-up.\n"
        "Needs pip install 'toolgate[mcp]' (and, with --decide worker, a running worker).\n"
        "--print-host-config prints the mcpServers entry a host starts it from (absolute\n"
        "paths, the TOOLGATE_* settings in force, the --upstream-env values) and exits.",
        (
            'toolgate mcp-proxy --server deployer --upstream-command "python -m deployer_mcp"',
            "toolgate mcp-proxy --server deployer --upstream-url http://127.0.0.1:8000/mcp "
            "--listen http://127.0.0.1:8100/mcp",
            "toolgate mcp-proxy --contracts demo --server memory --upstream-command "
            "ops/mcp/node_modules/.bin/mcp-server-memory --print-host-config",
        ),
        _mcp_proxy,
        ("contracts", "keyring", "bootstrap"),
        _mcp_proxy_arguments,
    ),
)
