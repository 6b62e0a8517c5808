"""``toolgate mcp-proxy``: an MCP server in front of an MCP server, answering only with what
toolgate decided.

An MCP host connects to the proxy instead of the upstream server (stdio, or streamable HTTP
on the loopback). ``tools/list`` lists the upstream tools that have an active contract
(``<server>.<tool>``) with a pinned definition (``mcp.definition``), and serves that
definition only: the reviewed title, description, input schema and annotations, and the
projected output schema with the types, ``required`` members and bounds the gate guarantees
(:mod:`toolgate.mcp._advertise`). No text of the upstream's live listing reaches the host.
The live definition's digest is compared with the pinned one at start-up, on the upstream's
``notifications/tools/list_changed`` and on each host listing: a tool whose definition
changed is withdrawn (not listed, called: ``TOOL_CHANGED``) until it is reviewed again, with
one log line naming the tool and the members that differ.

``tools/call`` runs every check that can refuse the call before the upstream is called
(:mod:`toolgate.mcp._calls`): the arguments within the proxy's bounds, then against the
reviewed input schema, then the request record built in full (bound values, its size); the
host reads why in lines written from the schema and the bounds alone (``argument /timezone:
required``), and a call waiting for a slot is checked again as it leaves the queue. Then it:

1. builds the request record (:mod:`toolgate.client`; ``bind`` = the call's scalar
   arguments, so a contract's ``bind`` rule compares the result with what was asked),
   written beside the upstream call (``--decide worker``) or with the decision;
2. calls the upstream tool and takes its ``CallToolResult`` as it came on the wire (the very
   bytes of the JSON-RPC ``result``, :mod:`toolgate.mcp._wire`, before the SDK's own parse
   and validation, so duplicate names, ``1e400``, ``resultType``, an array
   ``structuredContent`` or an unknown block are the gate's to judge; with ``--decide
   worker`` published to intake, signed when the contract requires it, the host's
   ``_meta.traceparent`` the intake record's ``traceparent``); a result over the contract's
   ``max_bytes`` is cut to one byte more before it is decided, so the gate decides it
   ``PAYLOAD_TOO_LARGE``, and one over what a record carries is answered
   ``PAYLOAD_TOO_LARGE`` without being decided;
3. decides it (``--decide proxy``, the default: in this process, with the workers' gate,
   contracts and envelope, the decision's records written and acknowledged first:
   :mod:`toolgate.mcp._decide`), or awaits a worker's envelope (``--decide worker``), and
   answers the host with a ``CallToolResult`` built from the envelope alone: a success is
   ``structuredContent`` = the projected data and its JSON
   as the text block (plus the gate's bounded ``untrusted_text`` for the user, if the
   contract passes any, ``_meta["io.toolgate/truncated"]`` set when the gate cut it; a text-only
   contract's success is that text alone); a valid upstream failure or a rejection is
   ``isError`` with the code the gate decided and the retryable flag. Not one byte of
   upstream text or structure that did not pass the gate.

A failure the envelope calls retryable moves the request to its next attempt and calls
upstream again (the contract's retry policy, within ``--max-attempts``). An upstream
protocol error, an upstream or gate timeout, a broker outage: ``isError`` with a fixed code
(:data:`CODES`), never a hang. ``--max-concurrent`` calls run at once; up to
``--max-queued`` more wait for a slot, and beyond that a call is answered ``PROXY_BUSY``
at once (backpressure the host sees, rather than an unbounded queue).

Over the contracts topic or a registry the contract set follows the group's while the proxy
runs (:mod:`toolgate.mcp._follow`): :meth:`Proxy.use_contracts` swaps each newer set in and
serves, withdraws and lists the tools again, as a changed definition does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import ipaddress
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
import tomllib
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError
from toolgate._urls import redact_url, split_url
from toolgate._version import __version__
from toolgate.authoring._texts import served_schema
from toolgate.client import (
    Answer,
    AnswerTimeout,
    Client,
    ClientClosed,
    Request,
    Signer,
    call_tool_result_bytes,
)
from toolgate.gate._contracts import MCP_SERVER_NAME, Contract, ContractSet, qualified_name
from toolgate.gate._mcp import CUT_MARKER, definition_digest
from toolgate.gate._signing import Keyring
from toolgate.mcp import _wire
from toolgate.mcp._advertise import advertised_input_schema, advertised_output_schema
from toolgate.mcp._calls import (
    argument_errors_bounded,
    bind_errors,
    record_lines,
    trace_context,
)
from toolgate.mcp._decide import Decider, call_in_process, retries
from toolgate.mcp._follow import ContractFollower, Following
from toolgate.registry._snapshot import load_contracts

_log = logging.getLogger("toolgate.mcp_proxy")

# The fixed codes of what the proxy itself answers with (isError), and whether a host may
# call again. None carries upstream text.
CODES: dict[str, bool] = {
    "UNKNOWN_TOOL": False,  # no contract for the tool, or the upstream lists no such tool
    "TOOL_DRAFT": False,  # only a draft contract: not reviewed yet
    "TOOL_DISABLED": False,  # status: disabled, reviewed and deliberately not served
    "TOOL_CHANGED": False,  # the live definition differs from the pinned one: review it again
    "TOOL_NOT_SERVED": False,  # an active contract without a pinned definition: import it again
    "INVALID_ARGUMENTS": False,  # the arguments fail the reviewed input schema (not called)
    "UPSTREAM_ERROR": True,  # the upstream answered tools/call with a protocol error
    "UPSTREAM_TIMEOUT": True,  # the upstream did not answer within --upstream-timeout
    "GATE_TIMEOUT": True,  # no decided envelope within --timeout, or no worker in the group
    "BROKER_UNAVAILABLE": True,  # the request record or result could not be published
    "PROXY_BUSY": True,  # --max-concurrent calls running and --max-queued waiting
    "TASK_REQUIRED": False,  # the tool runs only as a task (execution.taskSupport): not driven
    "NOTHING_PASSED": False,  # a success of which nothing may reach the host (never an empty success)
    "PAYLOAD_TOO_LARGE": False,  # the result is over what one intake record carries (1,000,000 bytes)
    "PROXY_ERROR": True,  # the proxy failed on the call (logged): never a JSON-RPC error
    "CONTRACTS_BEHIND": True,  # the group decides with a newer contract set than the proxy could load
}
DEFAULT_MAX_CONCURRENT = 64
# --decide: in this process (the default) or by the worker fleet.
DECIDE_MODES = ("proxy", "worker")
DEFAULT_MAX_QUEUED = 1024
# The largest intake record the proxy publishes: under the Kafka producer's default
# max.request.size (1 MiB) with room for the headers. A result over its contract's
# max_bytes is cut to max_bytes + 1 bytes, within this, so the gate decides it.
MAX_RECORD_BYTES = 1_000_000
# The bounds of one reading of the upstream's tools/list: a listing over any of them is
# not read (start-up stops; later, every tool is withdrawn until a listing can be read).
MAX_LISTED_TOOLS = 10_000
MAX_LISTING_PAGES = 100
MAX_LISTING_BYTES = 8 * 1024 * 1024
WORKER_CHECK_SECONDS = 10.0
TRUNCATED_META = "io.toolgate/truncated"
REQUEST_ID_META = "io.toolgate/request_id"
# The numeric options: (flag, attribute, lowest, highest), each finite and in range.
OPTION_RANGES: tuple[tuple[str, str, float, float], ...] = (
    ("--ttl", "ttl", 1.0, 7 * 86400.0),
    ("--timeout", "timeout", 0.1, 3600.0),
    ("--upstream-timeout", "upstream_timeout", 0.1, 3600.0),
    ("--max-attempts", "max_attempts", 1, 100),
    ("--max-concurrent", "max_concurrent", 1, 10_000),
    ("--max-queued", "max_queued", 1, 1_000_000),
)
# Members of an MCP Tool a change report may name (others are "another member").
_TOOL_MEMBERS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
    "execution",
)


class ListingError(ConfigError):
    """The upstream's ``tools/list`` could not be read within the proxy's bounds."""


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
    """Calls by how they ended, and the definitions found changed (a counter per tool)."""

    calls: int = 0
    by_code: dict[str, int] = field(default_factory=dict)
    tool_changed: dict[str, int] = field(default_factory=dict)  # <server>.<tool> -> times withdrawn

    def count(self, code: str) -> None:
        """One more call that ended with ``code`` (or ``success``/``failure``)."""
        self.by_code[code] = self.by_code.get(code, 0) + 1


def stats_registry(stats: ProxyStats, server: str) -> Any:
    """A Prometheus registry reading ``stats`` at each scrape: ``toolgate_mcp_proxy_calls_total
    {server, code}`` and ``toolgate_mcp_proxy_tool_changed_total{server, tool}`` (a tool's live
    definition found different from the pinned one)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily
    from prometheus_client.registry import Collector

    class _Stats(Collector):
        def collect(self) -> Any:
            calls = CounterMetricFamily(
                "toolgate_mcp_proxy_calls", "tools/call answers by code", labels=["server", "code"]
            )
            for code, count in sorted(stats.by_code.items()):
                calls.add_metric([server, code], count)
            changed = CounterMetricFamily(
                "toolgate_mcp_proxy_tool_changed",
                "times a tool was withdrawn: its live definition differs from the pinned one",
                labels=["server", "tool"],
            )
            for tool, count in sorted(stats.tool_changed.items()):
                changed.add_metric([server, tool], count)
            yield calls
            yield changed

    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Stats())
    return registry


def error_result(
    code: str, retryable: bool, request_id: str | None = None, *, lines: list[str] | None = None
) -> Any:
    """An ``isError`` result carrying only a fixed code and the retryable flag (and, for
    ``INVALID_ARGUMENTS``, a second text block of lines the proxy wrote from the schema)."""
    import mcp.types as types

    body = {"error": {"code": code, "retryable": retryable}}
    content: list[Any] = [types.TextContent(text=json.dumps(body, separators=(",", ":")))]
    if lines:
        content.append(types.TextContent(text="\n".join(lines)))
    return types.CallToolResult(
        content=content,
        is_error=True,
        _meta={REQUEST_ID_META: request_id} if request_id else None,
    )


def host_result(answer: Answer, *, structured: bool = True) -> Any:
    """The host's ``CallToolResult``, built from the decided envelope alone.

    ``structured`` is False for a text-only contract (no projected ``data``): its envelope's
    ``data`` is the empty object, which the host gets neither as ``structuredContent`` (the
    tool is listed without an output schema) nor as a text block; only the gate's bounded
    ``untrusted_text`` reaches it.
    """
    import mcp.types as types

    meta: dict[str, Any] = {REQUEST_ID_META: answer.request_id}
    if answer.outcome != "success":
        return error_result(answer.code or "INVALID_RESPONSE", answer.retryable, answer.request_id)
    data = answer.data if structured else None
    content: list[Any] = []
    if data is not None:
        content.append(types.TextContent(text=json.dumps(data, separators=(",", ":"), ensure_ascii=False)))
    for text in (answer.untrusted_text or {}).values():
        # The upstream's text, for the person, not the model (MCP content annotations).
        content.append(types.TextContent(text=text, annotations=types.Annotations(audience=["user"])))
        if CUT_MARKER.search(text):
            # Only toolgate's cut ends so: the gate rewrites an upstream imitation of it.
            meta[TRUNCATED_META] = True
    return types.CallToolResult(content=content, structured_content=data, _meta=meta)


def task_required(tool: Mapping[str, Any]) -> bool:
    """Whether a listed tool runs only as a task (``execution.taskSupport: "required"``): its
    ``tools/call`` answers a task, never a result, and the proxy does not drive tasks."""
    execution = tool.get("execution")
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def nothing_passed(result: Any) -> bool:
    """Whether a host result is a success carrying nothing: no content, no structured data."""
    return not result.is_error and not result.content and not result.structured_content


def changed_members(contract: Contract, live: Mapping[str, Any]) -> list[str]:
    """The members of the live definition that differ from the pinned one (by name only),
    each compared as the upstream sent it with what import pinned of it as it came (the
    upstream part of a closed schema, not the closed schema); or the live members the
    contract does not pin when those are what changed."""
    definition = contract.spec.mcp.definition if contract.spec.mcp else None
    if definition is None:
        return []
    annotations = msgspec.to_builtins(definition.annotations) if definition.annotations else None
    pinned = {"title": definition.title, "description": definition.description, "annotations": annotations}
    differ = [name for name, value in pinned.items() if live.get(name) != value]
    pinned_input = _upstream_part(contract.input_schema)
    if pinned_input is None and isinstance(contract.input_schema, dict):
        pinned_input = {k: v for k, v in contract.input_schema.items() if k not in ("$schema", "$id")}
    if not _same_schema(pinned_input, live.get("inputSchema")):
        differ.append("inputSchema")
    if not _same_schema(_upstream_part(contract.schema), live.get("outputSchema")):
        differ.append("outputSchema")
    if differ:
        return sorted(differ, key=_TOOL_MEMBERS.index)
    others = sorted({name if name in _TOOL_MEMBERS else "another member" for name in live} - set(pinned))
    others = [name for name in others if name not in ("name", "_meta", "inputSchema", "outputSchema")]
    return others or ["the definition"]


def _upstream_part(schema: Any) -> dict[str, Any] | None:
    """The upstream's own schema inside a schema import closed (``$id`` urn:toolgate:upstream:...),
    or a hand-written input schema itself; None when there is none (no outputSchema)."""
    from toolgate.authoring._close import UPSTREAM_ID

    stack, budget = [schema], 100_000
    while stack and budget:
        budget -= 1
        node = stack.pop()
        if isinstance(node, dict):
            if str(node.get("$id", "")).startswith(UPSTREAM_ID):
                return {k: v for k, v in node.items() if k != "$id"}
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _same_schema(pinned: dict[str, Any] | None, live: Any) -> bool:
    """Whether a live schema is the one import pinned (as it came, but its dialect and id,
    and the ``additionalProperties: false`` import adds to a schema that takes nothing)."""
    if pinned is None or not isinstance(live, dict):
        return pinned is None and live is None
    bare = {k: v for k, v in live.items() if k not in ("$schema", "$id")}
    return pinned == bare or pinned == {**bare, "additionalProperties": False}


def listed_tool(contract: Contract) -> Any:
    """The ``Tool`` the host is shown: the contract's pinned definition and nothing else."""
    import mcp.types as types

    mcp = contract.spec.mcp
    assert mcp is not None
    assert mcp.definition is not None
    definition = mcp.definition
    annotations = (
        types.ToolAnnotations.model_validate(msgspec.to_builtins(definition.annotations))
        if definition.annotations is not None
        else None
    )
    return types.Tool(
        name=mcp.tool,
        title=definition.title,
        description=definition.description,
        # Flat and closed (Ajv compiles it, hosts type arguments from its properties), with only
        # JSON Schema keywords: what lint listed is what the host is served.
        input_schema=served_schema(advertised_input_schema(contract)),
        output_schema=advertised_output_schema(contract),
        annotations=annotations,
    )


ProgressRelay = Callable[[float, float | None, str | None], Awaitable[None]]
# The relay of the host's call being served (None: the host asked for no progress). A context
# variable, so the upstream call made for it (a task of its own) finds it.
_HOST_PROGRESS: contextvars.ContextVar[ProgressRelay | None] = contextvars.ContextVar(
    "toolgate_host_progress", default=None
)
PROGRESS_MESSAGE_MAX = 200
PROGRESS_MARK = "[upstream progress, unreviewed] "
PROGRESS_CEILING_S = 3600.0  # progress extends a call's upstream wait to at most this in all


def progress_message(message: str | None) -> str | None:
    """An upstream's progress message as the host reads it: one line of printable characters,
    at most :data:`PROGRESS_MESSAGE_MAX` of them, marked as the upstream's unreviewed text."""
    if not message:
        return None
    line = "".join(c if c.isprintable() else " " for c in message[: PROGRESS_MESSAGE_MAX * 2])
    line = " ".join(line.split())[:PROGRESS_MESSAGE_MAX]
    return PROGRESS_MARK + line if line else None


def host_progress(ctx: Any) -> ProgressRelay | None:
    """The relay of an upstream's progress to the host's call ``ctx`` serves (its request-scoped
    session: the host's own ``progressToken``, nothing when the host asked for no progress): the
    numbers as they came, the message bounded and marked (:func:`progress_message`)."""
    report = getattr(getattr(ctx, "session", None), "report_progress", None)
    if report is None:
        return None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        if math.isfinite(progress) and (total is None or math.isfinite(total)):
            await report(progress, total, progress_message(message))

    return relay


def _extending(deadline: Any, step_s: float, relay: ProgressRelay | None) -> ProgressRelay:
    """``relay`` (if any), and each progress moves ``deadline`` (an ``asyncio.timeout``) to ``step_s``
    from now, never past :data:`PROGRESS_CEILING_S` after the call began: a long operation
    that reports progress is not cut at ``--upstream-timeout``."""
    loop = asyncio.get_running_loop()
    ceiling = loop.time() + max(PROGRESS_CEILING_S, step_s)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        deadline.reschedule(min(loop.time() + step_s, ceiling))
        if relay is None:
            return
        try:
            await relay(progress, total, message)
        except Exception as exc:  # the host went away: the call goes on
            _log.debug("relaying progress failed: %s", type(exc).__name__)

    return on_progress


async def raw_request(
    session: Any, request: Any, *, on_progress: ProgressRelay | None = None
) -> dict[str, Any]:
    """One request's result as the SDK read it (:func:`raw_exchange`, without the bytes)."""
    result, _ = await raw_exchange(session, request, on_progress=on_progress)
    return result


async def raw_exchange(
    session: Any, request: Any, *, on_progress: ProgressRelay | None = None
) -> tuple[dict[str, Any], bytes | None]:
    """One request's result exactly as the upstream sent it: the JSON-RPC ``result`` object,
    without the SDK's own result validation and per-version member filtering (which would
    drop ``resultType``, or refuse an array ``structuredContent`` before the gate sees it),
    and the very bytes of that ``result`` member (:mod:`toolgate.mcp._wire`; None when
    the upstream is reached without a byte stream, in process).

    It stamps the request as the SDK's ``send_request`` does (protocol version, headers),
    then sends it through the session's dispatcher with a request id of the proxy's own.

    Raises:
        ConfigError: this MCP SDK has no such seam (an incompatible version).
        Exception: the SDK's own errors (an error response, a closed connection).
    """
    from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

    stamp = getattr(session, "_stamp", None)
    dispatcher = getattr(session, "_dispatcher", None)
    if stamp is None or dispatcher is None:
        raise ConfigError("this MCP SDK version has no raw request seam: pip install 'mcp>=2.3,<3'")
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: dict[str, Any] = {}
    stamp(data, opts)
    if on_progress is not None:  # the dispatcher sets the progressToken and routes the notifications
        opts["on_progress"] = on_progress
    headers = opts.setdefault("headers", {})
    key = getattr(type(request), "name_param", None)
    if key is not None and MCP_NAME_HEADER not in headers:
        name = (data.get("params") or {}).get(key)
        if isinstance(name, str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
    opts["request_id"] = request_id = _wire.new_request_id()
    try:
        raw = await dispatcher.send_raw_request(data["method"], data.get("params"), opts)
    finally:
        body = _wire.take(request_id)
    if not isinstance(raw, dict):
        raise TypeError("the result is not a JSON object")
    return raw, body


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
    """The MCP server the host talks to; ``upstream`` is a connected :class:`mcp.Client`.

    ``workers`` counts the members of the worker group (None: not checked): while it says
    none, a call is answered ``GATE_TIMEOUT`` at once rather than after ``--timeout``.
    ``serving`` says which tools the group's live workers decide (the members topic; None:
    not known): a call of a tool none of them serves is answered ``TOOL_NOT_SERVED`` at once.
    ``following``: the contract source followed while the proxy runs (:mod:`toolgate.mcp._follow`;
    None: the set given is the set served until the proxy stops).
    """

    def __init__(
        self,
        server: str,
        upstream: Any,
        client: Client,
        contracts: ContractSet,
        *,
        keyring: Keyring | None = None,
        options: ProxyOptions | None = None,
        workers: Callable[[], Awaitable[int]] | None = None,
        serving: Callable[[], Awaitable[frozenset[str] | None]] | None = None,
        decider: Decider | None = None,
        following: Following | None = None,
    ) -> None:
        self.server_name = server
        self.decider = decider  # None: the workers decide (--decide worker)
        self.upstream = upstream
        self.client = client
        self.contracts = contracts
        self.keyring = keyring
        self.options = options or ProxyOptions()
        self.served: dict[str, _Served] = {}
        self.refused: dict[str, str] = {}  # MCP tool name -> the code a call gets
        self.withdrawn: dict[str, list[str]] = {}  # MCP tool name -> the members that changed
        self.stats = ProxyStats()
        self.workers = workers
        self.no_workers = False
        self.serving = serving
        self.group_tools: frozenset[str] | None = None  # what the live workers serve (None: unknown)
        self._signers: dict[str, Signer | None] = {}
        self._slots = asyncio.Semaphore(self.options.max_concurrent)
        self._queued = 0
        self._refreshing: asyncio.Task[None] | None = None
        self._stale = False
        self.task_required: set[str] = set()  # listed with execution.taskSupport "required"
        self._listing: list[dict[str, Any]] | None = None  # the last live listing evaluated
        self.follower = (
            ContractFollower(following, self.use_contracts, lambda: self.contracts) if following else None
        )

    # --- the listing ----------------------------------------------------------------

    async def fetch_listing(self) -> list[dict[str, Any]]:
        """Every page of the upstream's ``tools/list``, each tool as it came on the wire,
        within :data:`MAX_LISTING_PAGES` pages, :data:`MAX_LISTED_TOOLS` tools and
        :data:`MAX_LISTING_BYTES` bytes.

        Raises:
            ListingError: the listing is an error, not a listing, or over a bound (named).
        """
        import mcp.types as types
        from mcp.shared.exceptions import MCPError

        listed: list[dict[str, Any]] = []
        cursor: str | None = None
        size = 0
        for _ in range(MAX_LISTING_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            try:
                page, body = await raw_exchange(self.upstream.session, types.ListToolsRequest(params=params))
            except MCPError as exc:  # the upstream's text stays here
                if exc.code == _wire.OVERSIZED:
                    raise ListingError(f"tools/list: a page over {MAX_LISTING_BYTES} bytes") from None
                raise ListingError(f"tools/list answered a JSON-RPC error (code {exc.code})") from None
            except TypeError:
                raise ListingError("tools/list answered a result that is not a JSON object") from None
            size += len(body) if body is not None else len(json.dumps(page, ensure_ascii=False))
            if size > MAX_LISTING_BYTES:
                raise ListingError(f"tools/list: the listing is over {MAX_LISTING_BYTES} bytes")
            tools = page.get("tools")
            if not isinstance(tools, list):
                raise ListingError("tools/list answered without a tools array")
            if len(listed) + len(tools) > MAX_LISTED_TOOLS:
                raise ListingError(f"tools/list lists more than {MAX_LISTED_TOOLS} tools")
            listed.extend(t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
            next_cursor = page.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                return listed
            cursor = next_cursor
        raise ListingError(f"tools/list still pages after {MAX_LISTING_PAGES} pages")

    async def load_tools(self) -> list[str]:
        """Read the upstream's ``tools/list`` (every page) and serve the tools whose active
        contract pins the very definition listed. Returns the names served.

        Raises:
            ConfigError: a served contract needs a signature key the keyring lacks.
            ListingError: the upstream's listing could not be read (an error, not a
                listing, over a bound, or not within ``--upstream-timeout``).
        """
        self.evaluate(await self._read_listing())
        return sorted(self.served)

    async def _read_listing(self) -> list[dict[str, Any]]:
        """:meth:`fetch_listing` within ``--upstream-timeout``, any failure a ListingError."""
        try:
            return await asyncio.wait_for(self.fetch_listing(), self.options.upstream_timeout_s)
        except TimeoutError:
            raise ListingError(
                f"the upstream did not answer tools/list within {self.options.upstream_timeout_s:g} s "
                "(--upstream-timeout)"
            ) from None
        except ListingError:
            raise
        except Exception as exc:  # a broken connection: the upstream's text stays here
            raise ListingError(f"tools/list failed ({type(exc).__name__})") from None

    async def refresh(self) -> None:
        """Compare the live listing with the pinned definitions again. Listings asked for
        while one is read share it (a host listing many times reads the upstream once at a
        time); one asked for by ``list_changed`` meanwhile reads again after it. A listing
        that cannot be read withdraws every tool until one can (fail closed)."""
        self._stale = True
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        while self._stale:
            self._stale = False
            try:
                listing = await self._read_listing()
            except ListingError as exc:
                self.withdraw_all(str(exc))
                continue
            try:
                self.evaluate(listing)
            except ConfigError as exc:  # a tool served again whose signature key is missing
                _log.warning("%s: the tools served are unchanged", exc)

    def withdraw_all(self, reason: str) -> None:
        """No listing can be read: every tool is withdrawn (``TOOL_CHANGED``) until one can."""
        names = (
            set(self.served)
            | set(self.withdrawn)
            | {n for n, c in self.refused.items() if c == "TOOL_CHANGED"}
        )
        if self.served:
            _log.warning(
                "upstream %s: every tool withdrawn (%s) until a listing can be read",
                reason,
                ", ".join(qualified_name(self.server_name, n) for n in sorted(self.served)),
            )
        members = [f"the listing ({reason})"]
        self._listing = None  # a new contract set waits for a listing that can be read
        self.served = {}
        self.withdrawn = {name: members for name in names}
        self.refused = {**self.refused, **dict.fromkeys(names, "TOOL_CHANGED")}

    def refresh_soon(self) -> None:
        """Schedule :meth:`refresh` (the upstream said its tool list changed)."""
        self._stale = True
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self._refresh())

    def on_upstream_message(self, message: Any) -> None:
        """The upstream's notifications: ``notifications/tools/list_changed`` refreshes."""
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/tools/list_changed":
            self.refresh_soon()

    def _signer(self, contract: Contract) -> Signer | None:
        if contract.key in self._signers:
            return self._signers[contract.key]
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
        self._signers[contract.key] = signer
        return signer

    def _unserved_code(self, qualified: str, selected: Contract | None) -> str:
        """Why a tool with no served contract is not served: its versions' statuses."""
        statuses = {str(c.spec.status) for c in self.contracts.versions(qualified)}
        if (selected is not None and str(selected.spec.status) == "disabled") or (
            selected is None and "disabled" in statuses
        ):
            return "TOOL_DISABLED"
        if "draft" in statuses:
            return "TOOL_DRAFT"
        return "UNKNOWN_TOOL"

    def evaluate(self, listing: list[dict[str, Any]]) -> None:
        """Serve each listed tool whose active contract pins this very definition; withdraw
        one whose definition changed (one log line and the counter, when it first differs)."""
        live: dict[str, dict[str, Any]] = {}
        twice: set[str] = set()  # listed more than once, differently: which one would be called?
        for tool in listing:
            earlier = live.setdefault(tool["name"], tool)
            if earlier is not tool and definition_digest(earlier) != definition_digest(tool):
                twice.add(tool["name"])
        contracted = {
            c.spec.mcp.tool
            for c in self.contracts
            if c.spec.mcp is not None and c.spec.mcp.server == self.server_name
        }
        served: dict[str, _Served] = {}
        refused: dict[str, str] = {}
        withdrawn: dict[str, list[str]] = {}
        for name in sorted(set(live) | contracted):
            qualified = qualified_name(self.server_name, name)
            contract = self.contracts.select(qualified, self.options.adapter_version)
            if contract is None or contract.spec.mcp is None or contract.spec.status != "active":
                refused[name] = self._unserved_code(qualified, contract)
                continue
            definition = contract.spec.mcp.definition
            if name not in live:
                refused[name] = "UNKNOWN_TOOL"
            elif definition is None:
                refused[name] = "TOOL_NOT_SERVED"
            elif name in twice:
                refused[name] = "TOOL_CHANGED"
                withdrawn[name] = ["a second, different definition of the same name"]
            elif definition_digest(live[name]) != definition.digest:
                refused[name] = "TOOL_CHANGED"
                withdrawn[name] = changed_members(contract, live[name])
            else:
                served[name] = _Served(contract, listed_tool(contract), self._signer(contract))
        for name, members in withdrawn.items():
            if name not in self.withdrawn:
                qualified = qualified_name(self.server_name, name)
                self.stats.tool_changed[qualified] = self.stats.tool_changed.get(qualified, 0) + 1
                _log.warning(
                    "tool %s withdrawn: its live definition differs from the reviewed one in %s; "
                    "calls answer TOOL_CHANGED until it is imported and reviewed again "
                    "(toolgate contracts import-mcp --server %s)",
                    qualified,
                    ", ".join(members),
                    self.server_name,
                )
        for name in set(self.withdrawn) - set(withdrawn):
            if name in served:
                _log.warning("tool %s served again: its live definition is the reviewed one", name)
        self.served, self.refused, self.withdrawn = served, refused, withdrawn
        self.task_required = {name for name, tool in live.items() if task_required(tool)}
        self._listing = listing

    def use_contracts(self, contracts: ContractSet) -> bool:
        """Decide with ``contracts`` from now on (a new set the source followed brought): each
        tool served, withdrawn or refused again against the last live listing, as a changed
        definition is, and calls decided from here on carry its label and generation. A set
        that cannot be served (a signature key the keyring lacks) is refused, logged, and the
        running one kept; False then."""
        previous, signers = self.contracts, self._signers
        if contracts.digest == previous.digest and contracts.generation == previous.generation:
            return False
        before = set(self.served)
        self.contracts, self._signers = contracts, {}
        try:
            if self._listing is not None:
                self.evaluate(self._listing)
        except ConfigError as exc:
            self.contracts, self._signers = previous, signers
            _log.error("contract set %s refused, %s kept: %s", contracts.label, previous.label, exc)
            return False
        if self.decider is not None:
            self.decider = self.decider.using(contracts)
        now = set(self.served)
        _log.warning(
            "contract set %s decides from now on (was %s); serving %s%s",
            contracts.label,
            previous.label,
            ", ".join(qualified_name(self.server_name, n) for n in sorted(now)) or "nothing",
            "".join(
                f"; {what} {', '.join(qualified_name(self.server_name, n) for n in sorted(names))}"
                for what, names in (("added", now - before), ("no longer served", before - now))
                if names
            ),
        )
        return True

    def start_up_lines(self) -> list[str]:
        """What the operator reads at start-up about tools not served, one line each."""
        lines = []
        for name, code in sorted(self.refused.items()):
            qualified = qualified_name(self.server_name, name)
            if code == "TOOL_NOT_SERVED":
                lines.append(
                    f"{qualified}: not served: its contract pins no tool definition (imported before "
                    f"definitions were pinned): import it again (toolgate contracts import-mcp "
                    f"--server {self.server_name} ...) and review it"
                )
            elif code == "TOOL_CHANGED":
                lines.append(
                    f"{qualified}: withdrawn: the live definition differs from the reviewed one in "
                    f"{', '.join(self.withdrawn.get(name, []))}: import it again and review it"
                )
            elif code == "UNKNOWN_TOOL" and any(
                str(c.spec.status) == "active" for c in self.contracts.versions(qualified)
            ):
                lines.append(f"{qualified}: not served: the upstream lists no tool {name!r}")
        for name in sorted(self.task_required & set(self.served)):
            lines.append(
                f"{qualified_name(self.server_name, name)}: not listed: it runs only as a task "
                "(execution.taskSupport required), which the proxy does not drive: calls answer TASK_REQUIRED"
            )
        return lines

    def tools(self) -> list[Any]:
        """What ``tools/list`` answers: the pinned definitions of the tools served."""
        return [served.tool for name, served in self.served.items() if name not in self.task_required]

    # --- the worker group -----------------------------------------------------------

    async def check_workers(self) -> int | None:
        """Count the worker group's members; none sets :attr:`no_workers` (said once)."""
        if self.workers is None:
            return None
        try:
            count = await self.workers()
        except Exception as exc:  # the broker's trouble shows on the calls themselves
            _log.warning("describing the worker group failed: %s", type(exc).__name__)
            return None
        if count == 0 and not self.no_workers:
            _log.warning(
                "the worker group %r has no members: calls answer GATE_TIMEOUT at once "
                "until a worker (toolgate run) joins it",
                self.client.config.group_id,
            )
        elif count > 0 and self.no_workers:
            _log.warning(
                "the worker group %r has %d member(s): calls are served", self.client.config.group_id, count
            )
        self.no_workers = count == 0
        if self.serving is not None:
            try:
                self.group_tools = await self.serving()
            except Exception as exc:  # unknown: calls go to the workers as before
                _log.warning("reading the worker group's contract sets failed: %s", type(exc).__name__)
                self.group_tools = None
        return count

    async def watch_workers(self, every_s: float = WORKER_CHECK_SECONDS) -> None:
        """:meth:`check_workers` every ``every_s`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            await self.check_workers()

    # --- calls ----------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None) -> Any:
        """One ``tools/call``: never raises, never hangs past its timeouts."""
        self.stats.calls += 1
        try:
            served = self.served.get(name)
            if self.follower is not None:
                # A tool this set does not serve, or a group ahead of it: catch up first.
                if not await self.follower.ready(served=served is not None):
                    return self._fixed("CONTRACTS_BEHIND")
                served = self.served.get(name)
            if served is None:
                return self._fixed(self.refused.get(name, "UNKNOWN_TOOL"))
            if name in self.task_required:
                return self._fixed("TASK_REQUIRED")
            checked = self._checked(served, arguments, meta)
            if not isinstance(checked, tuple):
                return checked
            if self.no_workers:
                return self._fixed("GATE_TIMEOUT")
            if self.group_tools is not None and served.contract.spec.tool not in self.group_tools:
                return self._fixed("TOOL_NOT_SERVED")  # no live worker decides it: nothing would answer
            if self._queued >= self.options.max_queued:
                return self._fixed("PROXY_BUSY")
            self._queued += 1
            try:
                await self._slots.acquire()
            finally:
                self._queued -= 1
            try:
                # Checked again as it leaves the queue: the definition may have been
                # withdrawn (or reviewed anew) while it waited for a slot, and the request
                # record is built anew (its expiry counts from now).
                current = self.served.get(name)
                if current is None:
                    return self._fixed(self.refused.get(name, "TOOL_CHANGED"))
                checked = self._checked(current, arguments, meta)
                if not isinstance(checked, tuple):
                    return checked
                if self.decider is not None:
                    # The decider and the served tool come from one set: both are swapped together.
                    got = await call_in_process(self, self.decider, current, name, arguments, *checked)
                    if isinstance(got, Answer):
                        return self._answered(got, structured=current.tool.output_schema is not None)
                    return got
                return await self._call(current, name, arguments, *checked)
            finally:
                self._slots.release()
        except Exception as exc:  # never a JSON-RPC error to the host: a code, its text here
            _log.warning("tools/call %s failed in the proxy: %s", name, type(exc).__name__)
            return self._fixed("PROXY_ERROR")

    def _checked(
        self, served: _Served, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> tuple[Request, dict[str, str]] | Any:
        """Every check that can refuse the call, before the upstream is called: the
        arguments (bounded, then the reviewed input schema) and the request record built in
        full (bound values, size). Returns (the request record, the trace context), or the
        host's ``INVALID_ARGUMENTS`` result."""
        lines = argument_errors_bounded(served.contract, arguments if isinstance(arguments, dict) else {})
        if not lines:
            bind = call_arguments_bind(arguments)
            lines = bind_errors(bind, served.contract.input_schema)
        if not lines:
            try:
                request = self.client.request_record(
                    served.contract.spec.tool,
                    bind=bind,
                    ttl=self.options.ttl_s,
                    max_attempts=self.options.max_attempts,
                )
            except (ValueError, TypeError) as exc:
                lines = record_lines(exc)
            else:
                return request, trace_context(meta)
        self.stats.count("INVALID_ARGUMENTS")
        return error_result("INVALID_ARGUMENTS", False, lines=lines)

    def _fixed(self, code: str, request_id: str | None = None) -> Any:
        self.stats.count(code)
        return error_result(code, CODES[code], request_id)

    async def _call(
        self,
        served: _Served,
        name: str,
        arguments: dict[str, Any] | None,
        request: Request,
        trace: dict[str, str],
    ) -> Any:
        options = self.options
        spec = served.contract.spec
        # The request record, built and checked in full already, is written while the
        # upstream works: its acknowledgement is awaited before the result is published,
        # so the record still comes first.
        issuing = asyncio.ensure_future(self.client.send_request(request, wait_s=options.wait_s))
        first = asyncio.ensure_future(self._upstream_call(name, arguments, trace))
        try:
            await issuing
        except (BrokerError, ClientClosed) as exc:
            first.cancel()
            _log.warning("issuing the request record for %s: %s", spec.tool, exc)
            return self._fixed("BROKER_UNAVAILABLE")
        except BaseException:
            first.cancel()
            raise
        upstream_call: asyncio.Future[tuple[dict[str, Any], bytes | None] | str] | None = first
        while True:
            if upstream_call is not None:
                raw = await upstream_call
                upstream_call = None
            else:
                raw = await self._upstream_call(name, arguments, trace)
            if isinstance(raw, str):
                return self._fixed(raw, request.request_id)
            body = self._bounded(raw, spec.limits.max_bytes, spec.tool)
            if body is None:
                return self._fixed("PAYLOAD_TOO_LARGE", request.request_id)
            try:
                await self.client.publish_result(
                    request.request_id,
                    request.attempt,
                    body,
                    tool=spec.tool,
                    contract_generation=self.contracts.generation or None,
                    **self._result_fields(served, trace),
                )
                answer = await self.client.answer(request)
            except AnswerTimeout:
                return self._fixed("GATE_TIMEOUT", request.request_id)
            except (BrokerError, ClientClosed) as exc:
                _log.warning("publishing the result of %s: %s", request.request_id, exc)
                return self._fixed("BROKER_UNAVAILABLE", request.request_id)
            code = answer.code or answer.outcome
            self.stats.count(code)
            if retries(answer, request):
                try:
                    request = await self.client.next_attempt(request, wait_s=options.wait_s)
                except (BrokerError, ClientClosed):
                    return self._fixed("BROKER_UNAVAILABLE", request.request_id)
                continue
            return self._answered(answer, structured=served.tool.output_schema is not None)

    def _answered(self, answer: Answer, *, structured: bool) -> Any:
        """The host's result (:func:`host_result`), or ``NOTHING_PASSED`` where a success would
        reach the host empty: no projected data and no text (a result of arrays of arrays the
        contract cannot project, or of resource, image or audio blocks only). An agent then
        tells "nothing passed" from "nothing there"."""
        result = host_result(answer, structured=structured)
        if nothing_passed(result):
            self.stats.count("NOTHING_PASSED")
            return error_result("NOTHING_PASSED", CODES["NOTHING_PASSED"], answer.request_id)
        return result

    def _result_fields(self, served: _Served, trace: Mapping[str, str]) -> dict[str, Any]:
        """The intake record's adapter, signature, source and trace fields of a call of
        ``served``: what a result carries whether a worker or this proxy decides it."""
        return {
            "adapter_version": self.options.adapter_version,
            "adapter": None if served.signer else self.options.adapter,
            "signer": served.signer,
            "source": f"mcp:{self.server_name}",
            "traceparent": trace.get("traceparent"),
            "tracestate": trace.get("tracestate"),
        }

    @staticmethod
    def _bounded(raw: tuple[dict[str, Any], bytes | None], max_bytes: int, tool: str) -> bytes | None:
        """The result's bytes as they came (re-encoded only when the upstream was reached
        without a byte stream). Over ``max_bytes``, cut to ``max_bytes + 1`` so the gate
        decides it ``PAYLOAD_TOO_LARGE`` from its size alone; None when that is over what one
        record carries (:data:`MAX_RECORD_BYTES`): the proxy answers ``PAYLOAD_TOO_LARGE``."""
        parsed, exact = raw
        body = exact if exact is not None else call_tool_result_bytes(parsed)
        if len(body) <= max_bytes and len(body) <= MAX_RECORD_BYTES:
            return body
        if max_bytes + 1 <= MAX_RECORD_BYTES:
            _log.warning(
                "a result of %s is %d bytes: published cut to %d for the gate", tool, len(body), max_bytes + 1
            )
            return body[: max_bytes + 1]
        _log.warning(
            "a result of %s is %d bytes, over the %d a record carries: answered PAYLOAD_TOO_LARGE",
            tool,
            len(body),
            MAX_RECORD_BYTES,
        )
        return None

    async def _upstream_call(
        self, name: str, arguments: dict[str, Any] | None, trace: dict[str, str]
    ) -> tuple[dict[str, Any], bytes | None] | str:
        """The upstream's result as it came on the wire (parsed, and its bytes), or the
        fixed code of a failure."""
        import mcp.types as types
        from mcp.shared.exceptions import MCPError

        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if trace:
            params["_meta"] = dict(trace)
        request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
        relay = _HOST_PROGRESS.get()
        try:
            async with asyncio.timeout(self.options.upstream_timeout_s) as deadline:
                on_progress = _extending(deadline, self.options.upstream_timeout_s, relay)
                return await raw_exchange(self.upstream.session, request, on_progress=on_progress)
        except TimeoutError:
            return "UPSTREAM_TIMEOUT"
        except MCPError as exc:
            if exc.code == _wire.OVERSIZED:
                _log.warning("upstream tools/call %s: %s", name, exc.error.message)
                return "PAYLOAD_TOO_LARGE"
            _log.warning("upstream tools/call %s failed: %s", name, type(exc).__name__)
            return "UPSTREAM_ERROR"
        except Exception as exc:  # a protocol error or a broken upstream: its text stays here
            _log.warning("upstream tools/call %s failed: %s", name, type(exc).__name__)
            return "UPSTREAM_ERROR"

    def mcp_server(self) -> Any:
        """The low-level MCP server answering the host (``serverInfo.version``: toolgate's)."""
        import mcp.types as types
        from mcp.server import Server

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            await self.refresh()  # each listing compares the live definitions again
            return types.ListToolsResult(tools=self.tools())

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            meta = dict(params.meta) if params.meta else None
            token = _HOST_PROGRESS.set(host_progress(ctx))
            try:
                result: types.CallToolResult = await self.call(params.name, params.arguments, meta)
            finally:
                _HOST_PROGRESS.reset(token)
            return result

        return Server(
            f"toolgate-{self.server_name}",
            version=__version__,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )


# --- the command ---------------------------------------------------------------------


def _loopback(url: str, flag: str) -> None:
    parts = split_url(url, flag)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{flag} {redact_url(url)}: give an http:// URL")
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
    parts = split_url(text, "--listen")
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
        "--upstream-env",
        action="append",
        metavar="NAME",
        help="pass this variable of the environment to the --upstream-command (repeatable; also "
        "mcp_upstream_env in --config, TOOLGATE_MCP_UPSTREAM_ENV): the upstream gets only these "
        "beside HOME, PATH and the like, never the whole environment",
    )
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
        "--decide",
        choices=DECIDE_MODES,
        default="proxy",
        help="who decides a result: proxy (default: in this process, with the workers' gate and "
        "contracts, records written acks=all before the answer) or worker (published to intake, "
        "the answer awaited from a worker's envelope)",
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
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (default 0: off)",
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
        ConfigError: a value not finite or out of range, naming its option.
    """
    for flag, attribute, lowest, highest in OPTION_RANGES:
        value = getattr(args, attribute)
        if not math.isfinite(value) or not lowest <= value <= highest:
            raise ConfigError(f"{flag}: must be a finite number in {lowest:g}..{highest:g} (got {value})")
    metrics_port = getattr(args, "metrics_port", 0)
    if not 0 <= metrics_port <= 65535:
        raise ConfigError(f"--metrics-port: must be in 0..65535 (got {metrics_port})")
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


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def upstream_env_names(args: argparse.Namespace, config: Config) -> list[str]:
    """The variables passed to a stdio upstream: ``--upstream-env NAME`` (repeatable) and the
    configuration's ``mcp_upstream_env`` (``TOOLGATE_MCP_UPSTREAM_ENV``, comma-separated).

    Raises:
        ConfigError: a name that is not a variable name, or names given with --upstream-url.
    """
    names = list(getattr(args, "upstream_env", None) or [])
    names += [n.strip() for n in config.mcp_upstream_env.split(",") if n.strip()]
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"--upstream-env {name[:80]!r}: not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if names and getattr(args, "upstream_url", None):
        raise ConfigError("--upstream-env: passes variables to an --upstream-command, not an --upstream-url")
    return list(dict.fromkeys(names))


def with_upstream_env(target: Any, names: list[str], environ: Mapping[str, str] | None = None) -> Any:
    """``target`` (a stdio upstream) started with the named variables of this environment
    beside the MCP SDK's default ones (``HOME``, ``PATH``, ...): a named allow-list, never the
    whole environment. A name this environment does not set is not passed."""
    env = os.environ if environ is None else environ
    if not names or isinstance(target, str):
        return target
    passed = {name: env[name] for name in names if name in env}
    return target.model_copy(update={"env": {**(target.env or {}), **passed}})


def _origin(args: argparse.Namespace, setting: str, flag: str, variable: str, key: str) -> str:
    """Where a setting came from: the flag, the environment, the config file or the default."""
    if getattr(args, setting, None):
        return flag
    if os.environ.get(variable):
        return variable
    config_file = getattr(args, "config", None) or os.environ.get("TOOLGATE_CONFIG")
    if config_file:
        try:
            with open(config_file, "rb") as stream:
                named = key in tomllib.load(stream)
        except (OSError, tomllib.TOMLDecodeError):
            named = False
        if named:
            return f"--config {config_file}"
    return "default"


def settings_lines(args: argparse.Namespace, config: Config) -> list[str]:
    """What the proxy uses, for stderr at start-up: an MCP host starts it with a minimal
    environment, so the broker, folder and topics it found are said, with where from."""
    bootstrap_from = _origin(args, "bootstrap", "--bootstrap", "TOOLGATE_BOOTSTRAP", "bootstrap")
    if bootstrap_from == "default":
        bootstrap_from += ": --bootstrap, TOOLGATE_BOOTSTRAP or --config FILE names another"
    contracts_from = _origin(args, "contracts", "--contracts", "TOOLGATE_CONTRACTS_DIR", "contracts_dir")
    topics = config.topics
    return [
        f"broker {config.bootstrap} (from {bootstrap_from})",
        f"contracts {_contracts_text(config.contracts_dir)} (from {contracts_from})",
        f"topics requests={topics.requests} intake={topics.intake} agent={topics.agent}; "
        f"worker group {config.group_id}",
    ]


def _contracts_text(contracts: str) -> str:
    """A folder as its absolute path; a source (``kafka:``, ``registry+URL``) as it is given."""
    if contracts.startswith(("kafka:", "registry+")):
        return contracts
    return str(Path(contracts).resolve())


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
    listen = parse_listen(args.listen, allow_remote=args.allow_remote)
    options = options_from(args)
    for line in settings_lines(args, config):
        say(line)
    # From here to the end, SIGTERM ends the upstream first: the host that sends it (closing
    # stdin 2 s before, as the TypeScript SDK does) may be in the middle of our shutdown. Over
    # HTTP, uvicorn's own SIGTERM handling stops serving gracefully, and the upstream with it.
    sigterm = _SigtermEndsUpstream()
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
    sigterm: _SigtermEndsUpstream,
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


def upstream_groups(pid: int | None = None) -> list[int]:
    """The process groups of the children of ``pid`` (this process) that lead a session of
    their own: the stdio upstream the MCP SDK starts (``start_new_session``), out of reach of
    a signal sent to the proxy alone. Read from ``/proc`` (empty where there is none)."""
    me = os.getpid() if pid is None else pid
    groups: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session
        if len(fields) > 3 and fields[1] == str(me) and fields[3] == stat.parent.name:
            groups.append(int(stat.parent.name))
    return groups


def end_upstreams(sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` to every upstream process group (:func:`upstream_groups`); how many."""
    ended = 0
    for group in upstream_groups():
        try:
            os.killpg(group, sig)
            ended += 1
        except (ProcessLookupError, PermissionError):
            continue
    return ended


class _SigtermEndsUpstream:
    """While entered, SIGTERM (a host shutting down: the TypeScript SDK closes stdin, then
    sends SIGTERM 2 s later) ends the upstream's process group at once, then stops serving
    (cancels :attr:`serving`, if set): the upstream never outlives the proxy, even when the
    signal comes while the proxy waits out the upstream's own grace period."""

    def __init__(self) -> None:
        self.came = False
        self.serving: asyncio.Task[Any] | None = None
        self._installed = False

    def on_term(self) -> None:
        """The signal handler."""
        self.came = True
        _log.warning("SIGTERM: ending the upstream (%d process group(s)) and stopping", end_upstreams())
        if self.serving is not None:
            self.serving.cancel()

    def __enter__(self) -> _SigtermEndsUpstream:
        # No signal handling in a thread or on Windows: the SDK's own shutdown is all there is.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.on_term)
            self._installed = True
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)


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
