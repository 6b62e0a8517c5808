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

``tools/call`` checks the arguments against the reviewed input schema first: an invalid call
never reaches the upstream, and the host reads why in lines written from the schema alone
(``argument /timezone: required``). Then it:

1. issues the request record (:mod:`toolgate.client`; ``bind`` = the call's scalar
   arguments, so a contract's ``bind`` rule compares the result with what was asked);
2. calls the upstream tool and publishes its ``CallToolResult`` as it came on the wire to
   intake (the raw JSON-RPC result, before the SDK's own validation, so ``resultType``, an
   array ``structuredContent`` or an unknown block are the gate's to judge; signed when the
   contract requires it; the host's ``_meta.traceparent`` is the intake record's
   ``traceparent``); a result over the contract's ``max_bytes`` is cut to one byte more
   before it is published, so the gate decides it ``PAYLOAD_TOO_LARGE`` and the record
   stays within what the broker takes;
3. awaits the decided envelope and answers the host with a ``CallToolResult`` built from
   the envelope alone: a success is ``structuredContent`` = the projected data and its JSON
   as the text block (plus the gate's bounded ``untrusted_text``, if the contract passes
   any, ``_meta["io.toolgate/truncated"]`` set when the gate cut it; a text-only
   contract's success is that text alone); a valid upstream failure or a rejection is
   ``isError`` with the code the gate decided and the retryable flag. Not one byte of
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
import math
import os
import shlex
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
from toolgate.client import Answer, AnswerTimeout, Client, ClientClosed, Signer, call_tool_result_bytes
from toolgate.gate._contracts import MCP_SERVER_NAME, Contract, ContractSet, qualified_name
from toolgate.gate._mcp import CUT_MARKER, definition_digest
from toolgate.gate._signing import Keyring
from toolgate.mcp._advertise import advertised_output_schema, argument_errors
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
}
DEFAULT_MAX_CONCURRENT = 64
DEFAULT_MAX_QUEUED = 1024
# The largest intake record the proxy publishes: under the Kafka producer's default
# max.request.size (1 MiB) with room for the headers. A result over its contract's
# max_bytes is cut to max_bytes + 1 bytes, within this, so the gate decides it.
MAX_RECORD_BYTES = 1_000_000
MAX_LISTED_TOOLS = 10_000
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
        content.append(types.TextContent(text=text))
        if CUT_MARKER.search(text):
            meta[TRUNCATED_META] = True  # the gate cut it: the text's last line says where
    return types.CallToolResult(content=content, structured_content=data, _meta=meta)


def changed_members(contract: Contract, live: Mapping[str, Any]) -> list[str]:
    """The members of the live definition that differ from the pinned one (by name only),
    or the live members the contract does not pin when those are what changed."""
    definition = contract.spec.mcp.definition if contract.spec.mcp else None
    if definition is None:
        return []
    annotations = msgspec.to_builtins(definition.annotations) if definition.annotations else None
    pinned = {
        "title": definition.title,
        "description": definition.description,
        "inputSchema": contract.input_schema,
        "annotations": annotations,
    }
    differ = [name for name, value in pinned.items() if live.get(name) != value]
    if differ:
        return differ
    others = sorted({name if name in _TOOL_MEMBERS else "another member" for name in live} - set(pinned))
    return [name for name in others if name not in ("name", "_meta")] or ["the definition"]


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
        input_schema=contract.input_schema or {"type": "object"},
        output_schema=advertised_output_schema(contract),
        annotations=annotations,
    )


async def raw_request(session: Any, request: Any) -> dict[str, Any]:
    """One request's result exactly as the upstream sent it: the JSON-RPC ``result`` object,
    without the SDK's own result validation and per-version member filtering (which would
    drop ``resultType``, or refuse an array ``structuredContent`` before the gate sees it).

    It stamps the request as the SDK's ``send_request`` does (protocol version, headers),
    then sends it through the session's dispatcher.

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
    headers = opts.setdefault("headers", {})
    key = getattr(type(request), "name_param", None)
    if key is not None and MCP_NAME_HEADER not in headers:
        name = (data.get("params") or {}).get(key)
        if isinstance(name, str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
    raw = await dispatcher.send_raw_request(data["method"], data.get("params"), opts)
    if not isinstance(raw, dict):
        raise TypeError("the result is not a JSON object")
    return raw


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
    ) -> None:
        self.server_name = server
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

    # --- the listing ----------------------------------------------------------------

    async def fetch_listing(self) -> list[dict[str, Any]]:
        """Every page of the upstream's ``tools/list``, each tool as it came on the wire."""
        import mcp.types as types

        listed: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(1000):  # bounded: a server that pages forever is not followed forever
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            page = await raw_request(self.upstream.session, types.ListToolsRequest(params=params))
            tools = page.get("tools")
            if not isinstance(tools, list):
                raise ValueError("tools/list answered without a tools array")
            listed.extend(t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
            if len(listed) > MAX_LISTED_TOOLS:
                raise ValueError(f"tools/list lists more than {MAX_LISTED_TOOLS} tools")
            next_cursor = page.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                break
            cursor = next_cursor
        return listed

    async def load_tools(self) -> list[str]:
        """Read the upstream's ``tools/list`` (every page) and serve the tools whose active
        contract pins the very definition listed. Returns the names served.

        Raises:
            ConfigError: a served contract needs a signature key the keyring lacks, or the
                upstream did not list its tools within ``--upstream-timeout``.
        """
        try:
            listing = await asyncio.wait_for(self.fetch_listing(), self.options.upstream_timeout_s)
        except TimeoutError:
            raise ConfigError(
                f"the upstream did not answer tools/list within {self.options.upstream_timeout_s:g} s "
                "(--upstream-timeout)"
            ) from None
        self.evaluate(listing)
        return sorted(self.served)

    async def refresh(self) -> None:
        """Compare the live listing with the pinned definitions again; a listing that fails
        keeps the last state (and says why, once per failure)."""
        try:
            listing = await asyncio.wait_for(self.fetch_listing(), self.options.upstream_timeout_s)
        except Exception as exc:  # the upstream's text stays here: the type is enough
            _log.warning(
                "upstream tools/list failed (%s): the tools served are unchanged", type(exc).__name__
            )
            return
        try:
            self.evaluate(listing)
        except ConfigError as exc:  # a tool served again whose signature key is missing
            _log.warning("%s: the tools served are unchanged", exc)

    def refresh_soon(self) -> None:
        """Schedule :meth:`refresh` (the upstream said its tool list changed)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.get_running_loop().create_task(self.refresh())

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
        return lines

    def tools(self) -> list[Any]:
        """What ``tools/list`` answers: the pinned definitions of the tools served."""
        return [served.tool for served in self.served.values()]

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
        served = self.served.get(name)
        if served is None:
            return self._fixed(self.refused.get(name, "UNKNOWN_TOOL"))
        lines = argument_errors(served.contract, arguments if isinstance(arguments, dict) else {})
        if lines:
            self.stats.by_code["INVALID_ARGUMENTS"] = self.stats.by_code.get("INVALID_ARGUMENTS", 0) + 1
            return error_result("INVALID_ARGUMENTS", False, lines=lines)
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
                    self._bounded(raw, spec.limits.max_bytes, spec.tool),
                    tool=spec.tool,
                    adapter_version=options.adapter_version,
                    adapter=None if served.signer else options.adapter,
                    signer=served.signer,
                    source=f"mcp:{self.server_name}",
                    traceparent=traceparent if isinstance(traceparent, str) else None,
                    tracestate=tracestate if isinstance(tracestate, str) else None,
                    contract_generation=self.contracts.generation or None,
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

    @staticmethod
    def _bounded(raw: dict[str, Any], max_bytes: int, tool: str) -> bytes:
        """The result's bytes, cut to ``max_bytes + 1`` (within :data:`MAX_RECORD_BYTES`)
        when longer: the gate then decides it ``PAYLOAD_TOO_LARGE`` from its size alone."""
        body = call_tool_result_bytes(raw)
        limit = min(max_bytes + 1, MAX_RECORD_BYTES)
        if len(body) > limit:
            _log.warning(
                "a result of %s is %d bytes: published cut to %d for the gate", tool, len(body), limit
            )
            return body[:limit]
        return body

    async def _upstream_call(
        self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None
    ) -> dict[str, Any] | str:
        """The upstream's result as it came on the wire, or the fixed code of a failure."""
        import mcp.types as types

        params: dict[str, Any] = {"name": name, "arguments": arguments}
        trace = {k: v for k, v in (meta or {}).items() if k in ("traceparent", "tracestate")}
        if trace:
            params["_meta"] = trace
        request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
        try:
            async with asyncio.timeout(self.options.upstream_timeout_s):
                return await raw_request(self.upstream.session, request)
        except TimeoutError:
            return "UPSTREAM_TIMEOUT"
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

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            meta = dict(params.meta) if params.meta else None
            result: types.CallToolResult = await self.call(params.name, params.arguments, meta)
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
) -> None:
    """Connect upstream and to Kafka, then serve the host until it disconnects (stdio) or
    the process is stopped (HTTP). ``admin_factory`` builds a Kafka admin client (in the
    event loop) that counts the worker group's members at start-up and every
    :data:`WORKER_CHECK_SECONDS`. ``contracts``: the set to serve when the caller read it
    (the contracts topic, ``--contracts kafka:``); else the folder or registry snapshot's."""
    from mcp import Client as McpClient

    listen = parse_listen(args.listen, allow_remote=args.allow_remote)
    options = options_from(args)
    for line in settings_lines(args, config):
        say(line)
    if contracts is None:
        contracts = load_contracts(config.contracts_dir)  # a registry set's with its generation
    refused: ConfigError | None = None
    target = upstream_target(args)
    where = (
        f"--upstream-url {args.upstream_url}"
        if args.upstream_url
        else f"--upstream-command {args.upstream_command!r}"
    )
    proxies: list[Proxy] = []

    async def on_message(message: Any) -> None:
        for proxy in proxies:
            proxy.on_upstream_message(message)

    admin = admin_factory() if admin_factory is not None else None

    async def workers() -> int:
        assert admin is not None
        count: int = await admin.group_members(config.group_id)
        return count

    async with Client(config) as client, AsyncExitStack() as stack:
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
                serving=serving,
            )
            proxies.append(proxy)
            try:
                names = await proxy.load_tools()
                for line in proxy.start_up_lines():
                    say(line)
                if not names:
                    raise ConfigError(no_tools_served(contracts, args.server, config.contracts_dir))
            except ConfigError as exc:
                # Raised here, the MCP client's task group would wrap it in an ExceptionGroup:
                # leave the context first, so the command prints its one line.
                refused = exc
            if refused is None:
                count = await proxy.check_workers()
                if count is not None and count > 0:
                    say(f"worker group {config.group_id}: {count} member(s)")
                watcher = asyncio.create_task(proxy.watch_workers())
                if getattr(args, "metrics_port", 0):
                    from prometheus_client import start_http_server

                    start_http_server(
                        args.metrics_port, addr="127.0.0.1", registry=stats_registry(proxy.stats, args.server)
                    )
                    say(f"metrics on http://127.0.0.1:{args.metrics_port}/metrics")
                try:
                    say(f"serving {', '.join(qualified_name(args.server, n) for n in names)}")
                    await _serve_host(proxy, listen, names)
                finally:
                    watcher.cancel()
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
