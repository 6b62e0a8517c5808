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
(:data:`toolgate.mcp._answers.CODES`), never a hang. ``--max-concurrent`` calls run at once; up to
``--max-queued`` more wait for a slot, and beyond that a call is answered ``PROXY_BUSY``
at once (backpressure the host sees, rather than an unbounded queue).

Over the contracts topic or a registry the contract set follows the group's while the proxy
runs (:mod:`toolgate.mcp._follow`): :meth:`Proxy.use_contracts` swaps each newer set in and
serves, withdraws and lists the tools again, as a changed definition does.

This module is the :class:`Proxy` itself, its call path read top to bottom in
:meth:`Proxy.call`. Beside it, by what changes together: the checks of a call
(:mod:`toolgate.mcp._calls`), the upstream's requests and result bytes
(:mod:`toolgate.mcp._upstream`), its listing and the tool the host is shown
(:mod:`toolgate.mcp._listing`), the decision in process (:mod:`toolgate.mcp._decide`), what
the host is answered (:mod:`toolgate.mcp._answers`), the progress relay
(:mod:`toolgate.mcp._progress`), the counters (:mod:`toolgate.mcp._stats`), the command
line (:mod:`toolgate.mcp._options`), the stdio upstream's environment and signals
(:mod:`toolgate.mcp._upstream_process`) and serving the host (:mod:`toolgate.mcp._serve`).
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from toolgate._errors import BrokerError, ConfigError
from toolgate._version import __version__
from toolgate.client import (
    Answer,
    AnswerTimeout,
    Client,
    ClientClosed,
    Request,
    Signer,
)
from toolgate.gate._contracts import Contract, ContractSet, qualified_name
from toolgate.gate._mcp import definition_digest
from toolgate.gate._signing import Keyring
from toolgate.mcp._answers import CODES, error_result, host_result, nothing_passed
from toolgate.mcp._calls import (
    argument_errors_bounded,
    bind_errors,
    call_arguments_bind,
    record_lines,
    trace_context,
)
from toolgate.mcp._decide import Decider, decision_writes, retries
from toolgate.mcp._follow import ContractFollower, Following
from toolgate.mcp._listing import ListingError, changed_members, listed_tool, read_listing, task_required
from toolgate.mcp._options import ProxyOptions
from toolgate.mcp._progress import HOST_PROGRESS, host_progress
from toolgate.mcp._stats import ProxyStats
from toolgate.mcp._upstream import bounded, call_tool

_log = logging.getLogger("toolgate.mcp_proxy")
WORKER_CHECK_SECONDS = 10.0


@dataclass
class _Served:
    contract: Contract
    tool: Any  # mcp.types.Tool, as advertised to the host
    signer: Signer | None


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
        reimport: str | None = None,
    ) -> None:
        self.server_name = server
        # The import-mcp command that imports the upstream's tools again (--tool NAME added).
        self.reimport = reimport or shlex.join(["toolgate", "contracts", "import-mcp", "--server", server])
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
        """Every page of the upstream's ``tools/list`` (:func:`toolgate.mcp._listing.read_listing`).

        Raises:
            ListingError: the listing is an error, not a listing, or over a bound (named).
        """
        return await read_listing(self.upstream.session)

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
                    "calls answer TOOL_CHANGED until it is imported and reviewed again: %s",
                    qualified,
                    ", ".join(members),
                    self.reimport_command(name),
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
                    f"definitions were pinned): import it again ({self.reimport_command(name)}) and "
                    "review it"
                )
            elif code == "TOOL_CHANGED":
                lines.append(
                    f"{qualified}: withdrawn: the live definition differs from the reviewed one in "
                    f"{', '.join(self.withdrawn.get(name, []))}: import it again "
                    f"({self.reimport_command(name)}) and review it"
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

    def reimport_command(self, name: str) -> str:
        """The import-mcp command that imports the MCP tool ``name`` again."""
        return f"{self.reimport} --tool {shlex.quote(name)}"

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

    # --- calls: check the arguments, call, decide, write, answer ----------------------

    async def call(self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any] | None) -> Any:
        """One ``tools/call``: never raises, never hangs past its timeouts.

        Read top to bottom: the tool served (caught up with the group first, when followed),
        the arguments checked and the request record built (:meth:`_checked`), a slot taken
        (or ``PROXY_BUSY``) and the checks run again as the call leaves the queue; then the
        upstream called, its result decided, the records written and the host answered, in
        this process (:meth:`_decide_here`) or by a worker (:meth:`_call`)."""
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
            waited = self._slots.locked()  # a free slot is taken without yielding: nothing changes
            self._queued += 1
            try:
                await self._slots.acquire()
            finally:
                self._queued -= 1
            try:
                if waited:
                    # Checked again as it leaves the queue: the definition may have been
                    # withdrawn (or reviewed anew) while it waited for a slot, and the request
                    # record is built anew (its expiry counts from now).
                    current = self.served.get(name)
                    if current is None:
                        return self._fixed(self.refused.get(name, "TOOL_CHANGED"))
                    served = current
                    checked = self._checked(served, arguments, meta)
                    if not isinstance(checked, tuple):
                        return checked
                if self.decider is not None:
                    # The decider and the served tool come from one set: both are swapped together.
                    return await self._decide_here(self.decider, served, name, arguments, checked)
                return await self._call(served, name, arguments, *checked)
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

    async def _decide_here(
        self,
        decider: Decider,
        served: _Served,
        name: str,
        arguments: dict[str, Any] | None,
        checked: tuple[Request, dict[str, str]],
    ) -> Any:
        """One ``tools/call`` decided in process (``--decide proxy``): call the upstream,
        decide its result, write the request record (marked ``answered`` when accepted) with
        the decision's records in one round of sends, await every acknowledgement, then
        answer the host from the verdict's envelope (or with the proxy's own fixed code). No
        one reads the request record before the decision exists (the proxy decides), so it
        goes with it: one acknowledged round trip per call instead of two. A retryable
        failure moves to the next attempt, as on the workers' path, its record written with
        that attempt's decision. ``checked``: the request record built and checked before
        the upstream was called, and the call's checked trace context."""
        request, trace = checked
        spec = served.contract.spec
        while True:
            raw = await self._upstream_call(name, arguments, trace)
            if isinstance(raw, str):  # nothing to decide: no record
                return self._fixed(raw, request.request_id)
            body = bounded(raw, spec.limits.max_bytes, spec.tool)
            if body is None:  # over what a record carries: nothing to decide, no record
                return self._fixed("PAYLOAD_TOO_LARGE", request.request_id)
            decided = decider.decide(request, body, **self._result_fields(served, trace))
            answer = decided.answer
            if decided.verdict.accepted:
                # The attempt has its accepted answer: the request record says so, and a worker
                # then takes any further result for it as a DUPLICATE_RESULT (no envelope).
                request = replace(request, answered=True)
            writes = decision_writes(self.client.config.topics.requests, request, decided, decider.generation)
            try:
                await self.client.publish_records(writes)
            except (BrokerError, ClientClosed) as exc:
                _log.warning("writing the decision of %s: %s", request.request_id, exc)
                return self._fixed("BROKER_UNAVAILABLE", request.request_id)
            self.stats.count(answer.code or answer.outcome)
            if retries(answer, request):
                request = replace(request, attempt=request.attempt + 1, answered=False)
                continue
            return self._answered(answer, structured=served.tool.output_schema is not None)

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
            body = bounded(raw, spec.limits.max_bytes, spec.tool)
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

    async def _upstream_call(
        self, name: str, arguments: dict[str, Any] | None, trace: dict[str, str]
    ) -> tuple[dict[str, Any], bytes | None] | str:
        """The upstream's result as it came on the wire (parsed, and its bytes), or the
        fixed code of a failure (:func:`toolgate.mcp._upstream.call_tool`)."""
        options = self.options
        return await call_tool(
            self.upstream.session,
            name,
            arguments,
            trace,
            options.upstream_timeout_s,
            options.progress_ceiling_s,
        )

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

    def _fixed(self, code: str, request_id: str | None = None) -> Any:
        self.stats.count(code)
        return error_result(code, CODES[code], request_id)

    def mcp_server(self) -> Any:
        """The low-level MCP server answering the host (``serverInfo.version``: toolgate's)."""
        import mcp.types as types
        from mcp.server import Server

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            await self.refresh()  # each listing compares the live definitions again
            return types.ListToolsResult(tools=self.tools())

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            meta = dict(params.meta) if params.meta else None
            token = HOST_PROGRESS.set(host_progress(ctx))
            try:
                result: types.CallToolResult = await self.call(params.name, params.arguments, meta)
            finally:
                HOST_PROGRESS.reset(token)
            return result

        return Server(
            f"toolgate-{self.server_name}",
            version=__version__,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )
