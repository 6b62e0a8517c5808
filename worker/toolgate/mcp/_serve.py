"""``toolgate mcp-proxy`` serving: connect upstream and to Kafka, load the tools, then serve
the host over stdio or streamable HTTP until it disconnects or the process is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.client import Client
from toolgate.gate._contracts import MCP_SERVER_NAME, ContractSet, qualified_name
from toolgate.gate._signing import Keyring
from toolgate.mcp import _sdk_logs, _wire
from toolgate.mcp._decide import Decider
from toolgate.mcp._follow import Following
from toolgate.mcp._listing import ListingError
from toolgate.mcp._options import (
    Listen,
    ProxyOptions,
    options_from,
    parse_listen,
    reimport_command,
    settings_lines,
    upstream_target,
)
from toolgate.mcp._proxy import Proxy
from toolgate.mcp._stats import stats_registry
from toolgate.mcp._stdio import host_stdio
from toolgate.mcp._upstream_process import SigtermEndsUpstream, upstream_env_names, with_upstream_env
from toolgate.registry._snapshot import load_contracts


def _say(line: str) -> None:
    print(f"toolgate mcp-proxy: {line}", file=sys.stderr, flush=True)


async def serve(
    args: argparse.Namespace,
    config: Config,
    keyring: Keyring | None,
    *,
    admin_factory: Callable[[], Any] | None = None,
    say: Callable[[str], None] = _say,
    contracts: ContractSet | None = None,
    serving: Callable[[], Awaitable[frozenset[str] | None]] | None = None,
    following: Following | None = None,
) -> None:
    """Connect upstream and to Kafka, then serve the host until it disconnects (stdio) or
    the process is stopped (HTTP). ``admin_factory`` builds a Kafka admin client (in the
    event loop) that counts the worker group's members at start-up and every
    :data:`WORKER_CHECK_SECONDS`. ``contracts``: the set to serve when the caller read it
    (the contracts topic, ``--contracts kafka:``); else the folder or registry snapshot's.
    ``following``: the source followed while serving (:mod:`toolgate.mcp._follow`)."""

    _wire.install()
    _sdk_logs.quiet()  # the SDK quotes an upstream's malformed values in its log records
    listen = parse_listen(args.listen, allow_remote=args.allow_remote)
    options = options_from(args)
    for line in settings_lines(args, config):
        say(line)
    # From here to the end, SIGTERM ends the upstream first: the host that sends it (closing
    # stdin 2 s before, as the TypeScript SDK does) may be in the middle of our shutdown. Over
    # HTTP, uvicorn's own SIGTERM handling stops serving gracefully, and the upstream with it.
    sigterm = SigtermEndsUpstream()
    if not listen.stdio:
        await _serve_with_upstream(
            args, config, keyring, admin_factory, say, listen, options, sigterm, contracts, serving, following
        )
        return
    with sigterm:
        await _serve_with_upstream(
            args, config, keyring, admin_factory, say, listen, options, sigterm, contracts, serving, following
        )


async def _serve_with_upstream(
    args: argparse.Namespace,
    config: Config,
    keyring: Keyring | None,
    admin_factory: Callable[[], Any] | None,
    say: Callable[[str], None],
    listen: Listen,
    options: ProxyOptions,
    sigterm: SigtermEndsUpstream,
    contracts: ContractSet | None,
    serving: Callable[[], Awaitable[frozenset[str] | None]] | None,
    following: Following | None = None,
) -> None:
    """:func:`serve` once its options are read."""
    from mcp import Client as McpClient

    if contracts is None:
        contracts = load_contracts(config.contracts_dir)  # a registry set's with its generation
    refused: ConfigError | None = None
    env_names = upstream_env_names(args, config)
    target = with_upstream_env(upstream_target(args), env_names)
    if env_names:
        unset = [name for name in env_names if name not in os.environ]
        say(
            f"upstream environment: {', '.join(env_names)}"
            + (f" ({', '.join(unset)} not set here: not passed)" if unset else "")
        )
    where = (
        f"--upstream-url {args.upstream_url}"
        if args.upstream_url
        else f"--upstream-command {args.upstream_command!r}"
    )
    proxies: list[Proxy] = []

    async def on_message(message: Any) -> None:
        for proxy in proxies:
            proxy.on_upstream_message(message)

    in_process = getattr(args, "decide", "proxy") == "proxy"
    # Deciding in process, the proxy needs no worker to answer: the group is not watched.
    admin = admin_factory() if admin_factory is not None and not in_process else None

    async def workers() -> int:
        assert admin is not None
        count: int = await admin.group_members(config.group_id)
        return count

    async with Client(config, answers=not in_process) as client, AsyncExitStack() as stack:
        if admin is not None:
            await admin.start()
            stack.push_async_callback(admin.close)
        try:
            upstream = await stack.enter_async_context(McpClient(target, message_handler=on_message))
        except Exception as exc:  # the upstream exited, refused or spoke no MCP: one line
            refused = ConfigError(f"{where}: cannot connect to the upstream MCP server: {_first_cause(exc)}")
        else:
            proxy = Proxy(
                args.server,
                upstream,
                client,
                contracts,
                keyring=keyring,
                options=options,
                workers=workers if admin is not None else None,
                serving=serving if not in_process else None,
                decider=Decider(args.server, contracts, keyring, config.topics) if in_process else None,
                following=following,
                reimport=reimport_command(args, config.contracts_dir),
            )
            proxies.append(proxy)
            try:
                names = await proxy.load_tools()
                for line in proxy.start_up_lines():
                    say(line)
                if not names:
                    raise ConfigError(no_tools_served(contracts, args.server, config.contracts_dir))
            except ListingError as exc:
                refused = ConfigError(f"{where}: {exc}")
            except ConfigError as exc:
                # Raised here, the MCP client's task group would wrap it in an ExceptionGroup:
                # leave the context first, so the command prints its one line.
                refused = exc
            if refused is None:
                count = await proxy.check_workers()
                if count is not None and count > 0:
                    say(f"worker group {config.group_id}: {count} member(s)")
                watcher = asyncio.create_task(proxy.watch_workers())
                follower = asyncio.create_task(proxy.follower.run()) if proxy.follower else None
                if getattr(args, "metrics_port", 0):
                    from prometheus_client import start_http_server

                    start_http_server(
                        args.metrics_port, addr="127.0.0.1", registry=stats_registry(proxy.stats, args.server)
                    )
                    say(f"metrics on http://127.0.0.1:{args.metrics_port}/metrics")
                try:
                    say(f"serving {', '.join(qualified_name(args.server, n) for n in names)}")
                    sigterm.serving = asyncio.current_task()
                    await _serve_host(proxy, listen, names)
                except asyncio.CancelledError:
                    if not sigterm.came:
                        raise
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()  # stopped by SIGTERM: leave as on a closed stdin
                finally:
                    sigterm.serving = None
                    watcher.cancel()
                    if follower is not None:
                        follower.cancel()
                        await asyncio.wait([follower])  # before the group's view writes its tombstone
    if refused is not None:
        raise refused


def _first_cause(exc: BaseException) -> str:
    """``Type: first line`` of the innermost first exception of a group, at most 300 characters."""
    cause: BaseException = exc
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    text = str(cause).splitlines()[0] if str(cause) else "no detail"
    return f"{type(cause).__name__}: {text}"[:300]


def no_tools_served(contracts: ContractSet, server: str, contracts_dir: str) -> str:
    """Why the proxy has nothing to serve, and what to do about it."""
    folder = Path(contracts_dir).resolve()
    mine = [c for c in contracts.contracts if c.spec.mcp is not None and c.spec.mcp.server == server]
    if not mine:
        servers = sorted({c.spec.mcp.server for c in contracts.contracts if c.spec.mcp is not None})
        there = (
            f"the servers there are: {', '.join(servers)}" if servers else "it holds no MCP contract at all"
        )
        if not MCP_SERVER_NAME.fullmatch(server):
            hint = f"a server name matches {MCP_SERVER_NAME.pattern}"
        else:
            hint = f"toolgate contracts import-mcp --server {server} ... writes its contracts"
        return f"{folder}: no contract of MCP server {server!r} ({there}; {hint})"
    drafts = sorted(c.spec.tool for c in mine if c.spec.status == "draft")
    active = [c for c in mine if c.spec.status == "active"]
    if not active and drafts:
        return (
            f"{folder}: no active MCP contract for server {server!r}, only drafts "
            f"({', '.join(drafts)}): review each, settle `toolgate contracts lint` and set "
            "status: active in its contract.yaml"
        )
    if not active:
        return f"{folder}: no active MCP contract for server {server!r}"
    return (
        f"{folder}: none of the active contracts of server {server!r} can be served "
        "(the lines above say why for each)"
    )


async def _serve_host(proxy: Proxy, listen: Listen, names: list[str]) -> None:
    server = proxy.mcp_server()
    if listen.stdio:
        async with host_stdio() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=listen.path, host=listen.host)
    http = uvicorn.Server(
        uvicorn.Config(app, host=listen.host, port=listen.port, log_level="warning", lifespan="on")
    )
    await http.serve()
