"""``toolgate mcp-proxy``: an MCP server in front of an MCP server, answering only with what
toolgate decided.

An MCP host connects to the proxy instead of the upstream server (stdio, or streamable HTTP
on the loopback). ``tools/list`` lists the upstream tools that have an active contract
(``<server>.<tool>``), each advertising the contract's projected, closed output schema (what
the agent will receive) and the contract's reviewed description, not the upstream's.
``tools/call``:

1. issues the request record (:mod:`toolgate.client`; ``bind`` = the call's scalar
   arguments, so a contract's ``bind`` rule compares the result with what was asked);
2. calls the upstream tool and publishes its ``CallToolResult`` as it came to intake
   (signed when the contract requires it; the host's ``_meta.traceparent`` is the intake
   record's ``traceparent``);
3. awaits the decided envelope and answers the host with a ``CallToolResult`` built from
   the envelope alone: a success is ``structuredContent`` = the projected data and its JSON
   as the text block (plus the gate's bounded ``untrusted_text``, if the contract passes
   any; a text-only contract's success is that text alone); a valid upstream failure or
   a rejection is ``isError`` with the fixed code and retryable flag. Not one byte of
   upstream text or structure that did not pass the gate.

A failure the envelope calls retryable moves the request to its next attempt and calls
upstream again (the contract's retry policy, within ``--max-attempts``). An upstream
protocol error, an upstream or gate timeout, a broker outage: ``isError`` with a fixed code
(:data:`CODES`), never a hang. ``--max-concurrent`` calls run at once; up to
``--max-queued`` more wait for a slot, and beyond that a call is answered ``PROXY_BUSY``
at once (backpressure the host sees, rather than an unbounded queue).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import shlex
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError
from toolgate._version import __version__
from toolgate.client import Answer, AnswerTimeout, Client, ClientClosed, Signer
from toolgate.gate._contracts import MCP_SERVER_NAME, Contract, ContractSet, qualified_name
from toolgate.gate._project import output_schema
from toolgate.gate._signing import Keyring

_log = logging.getLogger("toolgate.mcp_proxy")

# The fixed codes of what the proxy itself answers with (isError), and whether a host may
# call again. None carries upstream text.
CODES: dict[str, bool] = {
    "UNKNOWN_TOOL": False,  # no active contract for the tool: not served
    "UPSTREAM_ERROR": True,  # the upstream answered tools/call with a protocol error
    "UPSTREAM_TIMEOUT": True,  # the upstream did not answer within --upstream-timeout
    "GATE_TIMEOUT": True,  # no decided envelope within --timeout (no worker running?)
    "BROKER_UNAVAILABLE": True,  # the request record or result could not be published
    "PROXY_BUSY": True,  # --max-concurrent calls running and --max-queued waiting
}
DEFAULT_MAX_CONCURRENT = 64
DEFAULT_MAX_QUEUED = 1024


@dataclass(frozen=True)
class ProxyOptions:
    """How the proxy issues requests and waits (seconds)."""

    adapter: str = "mcp-proxy"  # tg-adapter of unsigned results
    adapter_version: str = __version__
    ttl_s: float = 60.0  # the request records' expiry
    wait_s: float = 30.0  # per attempt, for the decided envelope
    upstream_timeout_s: float = 30.0
    max_attempts: int = 1
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    max_queued: int = DEFAULT_MAX_QUEUED


@dataclass
class _Served:
    contract: Contract
    tool: Any  # mcp.types.Tool, as advertised to the host
    signer: Signer | None


@dataclass
class ProxyStats:
    """Calls by how they ended."""

    calls: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


def error_result(code: str, retryable: bool, request_id: str | None = None) -> Any:
    """An ``isError`` result carrying only a fixed code and the retryable flag."""
    import mcp.types as types

    body = {"error": {"code": code, "retryable": retryable}}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body, separators=(",", ":")))],
        is_error=True,
        _meta={"io.toolgate/request_id": request_id} if request_id else None,
    )


def host_result(answer: Answer, *, structured: bool = True) -> Any:
    """The host's ``CallToolResult``, built from the decided envelope alone.

    ``structured`` is False for a text-only contract (no projected ``data``): its envelope's
    ``data`` is the empty object, which the host gets neither as ``structuredContent`` (the
    tool is listed without an output schema) nor as a text block; only the gate's bounded
    ``untrusted_text`` reaches it.
    """
    import mcp.types as types

    meta = {"io.toolgate/request_id": answer.request_id}
    if answer.outcome != "success":
        return error_result(answer.code or "INVALID_RESPONSE", answer.retryable, answer.request_id)
    data = answer.data if structured else None
    content: list[Any] = []
    if data is not None:
        content.append(types.TextContent(text=json.dumps(data, separators=(",", ":"), ensure_ascii=False)))
    for text in (answer.untrusted_text or {}).values():
        content.append(types.TextContent(text=text))
    return types.CallToolResult(content=content, structured_content=data, _meta=meta)


def advertised_schema(contract: Contract) -> dict[str, Any] | None:
    """The closed schema of the projected ``data`` the agent receives (None: no data)."""
    if not contract.data_projection:
        return None
    success = output_schema(contract)["oneOf"][0]
    data: dict[str, Any] = success["properties"]["data"]
    return data


def call_arguments_bind(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The call's arguments a request record can bind: strings, integers, booleans, lists of strings."""
    bind: dict[str, Any] = {}
    for name, value in (arguments or {}).items():
        if isinstance(value, str | int | bool) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            bind[name] = value
    return bind


class Proxy:
    """The MCP server the host talks to; ``upstream`` is a connected :class:`mcp.Client`."""

    def __init__(
        self,
        server: str,
        upstream: Any,
        client: Client,
        contracts: ContractSet,
        *,
        keyring: Keyring | None = None,
        options: ProxyOptions | None = None,
    ) -> None:
        self.server_name = server
        self.upstream = upstream
        self.client = client
        self.contracts = contracts
        self.keyring = keyring
        self.options = options or ProxyOptions()
        self.served: dict[str, _Served] = {}
        self.stats = ProxyStats()
        self._slots = asyncio.Semaphore(self.options.max_concurrent)
        self._queued = 0

    async def load_tools(self) -> list[str]:
        """Read the upstream's ``tools/list`` (every page) and keep the tools with an active
        MCP contract. Returns the names served.

        Raises:
            ConfigError: a served contract needs a signature key the keyring lacks.
        """
        import mcp.types as types

        listed: list[Any] = []
        cursor: str | None = None
        for _ in range(1000):  # bounded: a server that pages forever is not followed forever
            page = await self.upstream.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.served = {}
        for tool in listed:
            qualified = qualified_name(self.server_name, tool.name)
            contract = self.contracts.select(qualified, self.options.adapter_version)
            if contract is None or contract.spec.status != "active" or contract.spec.mcp is None:
                continue
            signer = None
            if contract.spec.signature is not None:
                key_id = contract.spec.signature.key_id
                key = self.keyring.get(key_id) if self.keyring is not None else None
                if key is None:
                    raise ConfigError(
                        f"{contract.path}: signature key {key_id!r} is not in the keyring "
                        "(--keyring or TOOLGATE_KEYRING names the file holding it)"
                    )
                signer = Signer(key)
            advertised = types.Tool(
                name=tool.name,
                title=tool.title,
                description=_reviewed_description(contract),
                input_schema=tool.input_schema,
                output_schema=advertised_schema(contract),
            )
            self.served[tool.name] = _Served(contract, advertised, signer)
        return sorted(self.served)

    def tools(self) -> list[Any]:
        """What ``tools/list`` answers."""
        return [served.tool for served in self.served.values()]

    async def call(self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None) -> Any:
        """One ``tools/call``: never raises, never hangs past its timeouts."""
        self.stats.calls += 1
        served = self.served.get(name)
        if served is None:
            return self._fixed("UNKNOWN_TOOL")
        if self._queued >= self.options.max_queued:
            return self._fixed("PROXY_BUSY")
        self._queued += 1
        try:
            await self._slots.acquire()
        finally:
            self._queued -= 1
        try:
            return await self._call(served, name, arguments, meta)
        finally:
            self._slots.release()

    def _fixed(self, code: str, request_id: str | None = None) -> Any:
        self.stats.by_code[code] = self.stats.by_code.get(code, 0) + 1
        return error_result(code, CODES[code], request_id)

    async def _call(
        self, served: _Served, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> Any:
        options = self.options
        spec = served.contract.spec
        traceparent = (meta or {}).get("traceparent")
        tracestate = (meta or {}).get("tracestate")
        # The request record is written while the upstream works: its acknowledgement is
        # awaited before the result is published, so the record still comes first.
        issuing = asyncio.ensure_future(
            self.client.issue(
                spec.tool,
                bind=call_arguments_bind(arguments),
                ttl=options.ttl_s,
                max_attempts=options.max_attempts,
                wait_s=options.wait_s,
            )
        )
        first = asyncio.ensure_future(self._upstream_call(name, arguments, meta))
        try:
            request = await issuing
        except (BrokerError, ClientClosed) as exc:
            first.cancel()
            _log.warning("issuing the request record for %s: %s", spec.tool, exc)
            return self._fixed("BROKER_UNAVAILABLE")
        except BaseException:
            first.cancel()
            raise
        upstream_call: asyncio.Future[dict[str, Any] | str] | None = first
        while True:
            if upstream_call is not None:
                raw = await upstream_call
                upstream_call = None
            else:
                raw = await self._upstream_call(name, arguments, meta)
            if isinstance(raw, str):
                return self._fixed(raw, request.request_id)
            try:
                await self.client.publish_result(
                    request.request_id,
                    request.attempt,
                    raw,
                    tool=spec.tool,
                    adapter_version=options.adapter_version,
                    adapter=None if served.signer else options.adapter,
                    signer=served.signer,
                    source=f"mcp:{self.server_name}",
                    traceparent=traceparent if isinstance(traceparent, str) else None,
                    tracestate=tracestate if isinstance(tracestate, str) else None,
                )
                answer = await self.client.answer(request)
            except AnswerTimeout:
                return self._fixed("GATE_TIMEOUT", request.request_id)
            except (BrokerError, ClientClosed) as exc:
                _log.warning("publishing the result of %s: %s", request.request_id, exc)
                return self._fixed("BROKER_UNAVAILABLE", request.request_id)
            code = answer.code or answer.outcome
            self.stats.by_code[code] = self.stats.by_code.get(code, 0) + 1
            if answer.outcome == "failure" and answer.retryable and request.attempt < request.max_attempts:
                try:
                    request = await self.client.next_attempt(request, wait_s=options.wait_s)
                except (BrokerError, ClientClosed):
                    return self._fixed("BROKER_UNAVAILABLE", request.request_id)
                continue
            return host_result(answer, structured=served.tool.output_schema is not None)

    async def _upstream_call(
        self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> dict[str, Any] | str:
        """The upstream's result as it came on the wire, or the fixed code of a failure."""
        import mcp.types as types
        from pydantic import TypeAdapter

        params: dict[str, Any] = {"name": name, "arguments": arguments}
        trace = {k: v for k, v in (meta or {}).items() if k in ("traceparent", "tracestate")}
        if trace:
            params["_meta"] = trace
        request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
        try:
            async with asyncio.timeout(self.options.upstream_timeout_s):
                raw: dict[str, Any] = await self.upstream.session.send_request(
                    request, TypeAdapter(dict[str, Any])
                )
        except TimeoutError:
            return "UPSTREAM_TIMEOUT"
        except Exception as exc:  # a protocol error or a broken upstream: its text stays here
            _log.warning("upstream tools/call %s failed: %s", name, type(exc).__name__)
            return "UPSTREAM_ERROR"
        return raw

    def mcp_server(self) -> Any:
        """The low-level MCP server answering the host."""
        import mcp.types as types
        from mcp.server import Server

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.tools())

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            meta = dict(params.meta) if params.meta else None
            result: types.CallToolResult = await self.call(params.name, params.arguments, meta)
            return result

        return Server(f"toolgate-{self.server_name}", on_list_tools=list_tools, on_call_tool=call_tool)


# --- the command ---------------------------------------------------------------------


def _loopback(url: str, flag: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{flag} {url}: give an http:// URL")
    if parts.hostname == "localhost":
        return
    try:
        loop = ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        loop = False
    if not loop:
        raise ConfigError(
            f"{flag} {url}: not on the loopback (127.0.0.0/8, ::1, localhost); "
            "--allow-remote serves or connects beyond it"
        )


@dataclass(frozen=True)
class Listen:
    """Where the host connects: stdio, or streamable HTTP at host:port/path."""

    stdio: bool
    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/mcp"


def parse_listen(text: str, *, allow_remote: bool) -> Listen:
    """``stdio`` or ``http://HOST:PORT/PATH``.

    Raises:
        ConfigError: naming ``--listen``.
    """
    if text == "stdio":
        return Listen(stdio=True)
    if not allow_remote:
        _loopback(text, "--listen")
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ConfigError(f"--listen {text}: give stdio or http://HOST:PORT/PATH")
    return Listen(stdio=False, host=parts.hostname, port=parts.port, path=parts.path or "/mcp")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``toolgate mcp-proxy``."""
    p.add_argument(
        "--server", required=True, metavar="NAME", help="the MCP server's name in contracts (<NAME>.<tool>)"
    )
    upstream = p.add_mutually_exclusive_group(required=True)
    upstream.add_argument("--upstream-command", metavar="CMD", help="start the upstream server (stdio)")
    upstream.add_argument("--upstream-url", metavar="URL", help="the upstream's streamable HTTP URL")
    p.add_argument(
        "--listen",
        default="stdio",
        metavar="stdio|URL",
        help="where the host connects: stdio (default) or http://127.0.0.1:PORT/mcp",
    )
    p.add_argument(
        "--allow-remote", action="store_true", help="allow --listen/--upstream-url beyond the loopback"
    )
    p.add_argument(
        "--adapter", default="mcp-proxy", help="tg-adapter of unsigned results (default mcp-proxy)"
    )
    p.add_argument("--adapter-version", default=__version__, help="tg-adapter-version (default: toolgate's)")
    p.add_argument("--ttl", type=float, default=60.0, metavar="S", help="request expiry (default 60)")
    p.add_argument(
        "--timeout", type=float, default=30.0, metavar="S", help="wait per attempt for the decision (30)"
    )
    p.add_argument(
        "--upstream-timeout", type=float, default=30.0, metavar="S", help="upstream tools/call (30)"
    )
    p.add_argument("--max-attempts", type=int, default=1, metavar="N", help="attempts per call (default 1)")
    p.add_argument(
        "--max-concurrent", type=int, default=DEFAULT_MAX_CONCURRENT, metavar="N", help="calls in flight (64)"
    )
    p.add_argument(
        "--max-queued",
        type=int,
        default=DEFAULT_MAX_QUEUED,
        metavar="N",
        help="calls waiting beyond those (1024)",
    )


def options_from(args: argparse.Namespace) -> ProxyOptions:
    """ProxyOptions from the command line.

    Raises:
        ConfigError: a value out of range, naming its option.
    """
    for flag, value in (
        ("--ttl", args.ttl),
        ("--timeout", args.timeout),
        ("--upstream-timeout", args.upstream_timeout),
        ("--max-attempts", args.max_attempts),
        ("--max-concurrent", args.max_concurrent),
        ("--max-queued", args.max_queued),
    ):
        if value <= 0:
            raise ConfigError(f"{flag}: must be positive (got {value:g})")
    return ProxyOptions(
        adapter=args.adapter,
        adapter_version=args.adapter_version,
        ttl_s=args.ttl,
        wait_s=args.timeout,
        upstream_timeout_s=args.upstream_timeout,
        max_attempts=args.max_attempts,
        max_concurrent=args.max_concurrent,
        max_queued=args.max_queued,
    )


def upstream_target(args: argparse.Namespace) -> Any:
    """What :class:`mcp.Client` connects to."""
    if args.upstream_url:
        if not args.allow_remote:
            _loopback(args.upstream_url, "--upstream-url")
        return args.upstream_url
    from mcp import StdioServerParameters

    command = shlex.split(args.upstream_command)
    if not command:
        raise ConfigError("--upstream-command: empty")
    return StdioServerParameters(command=command[0], args=command[1:])


async def serve(args: argparse.Namespace, config: Config, keyring: Keyring | None) -> None:
    """Connect upstream and to Kafka, then serve the host until it disconnects (stdio) or
    the process is stopped (HTTP)."""
    from mcp import Client as McpClient

    listen = parse_listen(args.listen, allow_remote=args.allow_remote)
    options = options_from(args)
    contracts = ContractSet.load(config.contracts_dir)
    refused: ConfigError | None = None
    target = upstream_target(args)
    where = (
        f"--upstream-url {args.upstream_url}"
        if args.upstream_url
        else f"--upstream-command {args.upstream_command!r}"
    )
    async with Client(config) as client, AsyncExitStack() as stack:
        try:
            upstream = await stack.enter_async_context(McpClient(target))
        except Exception as exc:  # the upstream exited, refused or spoke no MCP: one line
            refused = ConfigError(f"{where}: cannot connect to the upstream MCP server: {_first_cause(exc)}")
        else:
            proxy = Proxy(args.server, upstream, client, contracts, keyring=keyring, options=options)
            try:
                names = await proxy.load_tools()
                if not names:
                    raise ConfigError(no_tools_served(contracts, args.server, config.contracts_dir))
            except ConfigError as exc:
                # Raised here, the MCP client's task group would wrap it in an ExceptionGroup:
                # leave the context first, so the command prints its one line.
                refused = exc
            if refused is None:
                await _serve_host(proxy, listen, names)
    if refused is not None:
        raise refused


def _reviewed_description(contract: Contract) -> str | None:
    """The pinned definition's description (import writes the upstream's there, reviewed when
    the contract is active), else the contract's own line."""
    definition = contract.spec.mcp.definition if contract.spec.mcp is not None else None
    if definition is not None:
        return definition.description
    return contract.spec.description or None


def _first_cause(exc: BaseException) -> str:
    """``Type: first line`` of the innermost first exception of a group, at most 300 characters."""
    cause: BaseException = exc
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    text = str(cause).splitlines()[0] if str(cause) else "no detail"
    return f"{type(cause).__name__}: {text}"[:300]


def no_tools_served(contracts: ContractSet, server: str, contracts_dir: str) -> str:
    """Why the proxy has nothing to serve, and what to do about it."""
    drafts = sorted(
        c.spec.tool
        for c in contracts.contracts
        if c.spec.mcp is not None and c.spec.mcp.server == server and c.spec.status == "draft"
    )
    if drafts:
        return (
            f"{contracts_dir}: no active MCP contract for server {server!r}, only drafts "
            f"({', '.join(drafts)}): review each, settle `toolgate contracts lint` and set "
            "status: active in its contract.yaml"
        )
    servers = sorted({c.spec.mcp.server for c in contracts.contracts if c.spec.mcp is not None})
    there = (
        f"the MCP servers with contracts there: {', '.join(servers)}"
        if servers
        else "no MCP contract there at all"
    )
    if MCP_SERVER_NAME.fullmatch(server) is None:
        return (
            f"--server {ascii(server)[:80]}: not an MCP server name ({MCP_SERVER_NAME.pattern}); "
            f"{there} ({contracts_dir})"
        )
    return (
        f"{contracts_dir}: no active MCP contract for any tool of server {server!r}; {there} "
        f"(toolgate contracts import-mcp --server {server} ... writes them)"
    )


async def _serve_host(proxy: Proxy, listen: Listen, names: list[str]) -> None:
    _log.info("serving %s", ", ".join(names))
    server = proxy.mcp_server()
    if listen.stdio:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(streamable_http_path=listen.path, host=listen.host)
    http = uvicorn.Server(
        uvicorn.Config(app, host=listen.host, port=listen.port, log_level="warning", lifespan="on")
    )
    await http.serve()
