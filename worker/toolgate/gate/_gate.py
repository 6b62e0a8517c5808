"""The gate: (raw bytes, headers, request record, clock) to a verdict. Pure: no Kafka.

Stages run in this order (docs/design.md, Stages and codes; the hazards each stage answers
are in its Hazards section), one :class:`Gate` method each (named as the stage, see
:data:`toolgate._codes.Stage`), and the first failure decides:

1. ``limits``    byte size of the value (before parsing), header count and sizes;
2. ``parse``     strict JSON (:mod:`toolgate.gate._parse`) or a text contract's one pattern;
3. ``contract``  ``tg-tool`` names a tool with a deciding (active) version
                 (:meth:`Gate.select_contract`);
4. ``schema``    the contract's Draft 2020-12 schema, formats asserted;
5. ``correlate`` Kafka key, ``tg-request-id`` and ``request_id`` agree and name a
                 known, unexpired request for the same tool;
6. ``semantic``  the contract's rules (:mod:`toolgate.gate._rules`);
7. ``project``   a new closed object (:mod:`toolgate.gate._project`).

The limits of stages 1-2 come from the contract that ``tg-tool`` names; when it
names none, :data:`DEFAULT_LIMITS` apply and the message fails at stage 3. An
exception escaping a stage becomes ``INTERNAL_ERROR`` at that stage: any bytes
at all give a verdict, and never an accepted one by accident.

Text contracts (``tg-content-type: text/plain``) carry no envelope: the gate
builds ``{tool, request_id, outcome: "success", data: <named groups>}`` from the
headers and the extraction, and validates that like any other envelope.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

import jsonschema_rs
import msgspec

from toolgate._codes import STAGES, Stage
from toolgate._errors import RejectedInput
from toolgate._version import __version__
from toolgate.gate._contracts import (
    JSON_CONTENT_TYPE,
    MASK,
    STRUCTURED_VALUE,
    TEXT_CONTENT_TYPE,
    Contract,
    ContractSet,
    Limits,
    serves,
)
from toolgate.gate._depth import depth_bound
from toolgate.gate._first_error import Branches, branches_for, reference_error
from toolgate.gate._mcp import read_result
from toolgate.gate._parse import check_parsed, extract_text, parse_json
from toolgate.gate._project import Projector, failure
from toolgate.gate._records import (
    CONTRACT_GENERATION_HEADER,
    Diagnostics,
    Message,
    Origin,
    RequestRecord,
    Verdict,
    request_key,
)
from toolgate.gate._rules import Evidence, Ledger, SemanticRule, build_rules
from toolgate.gate._signing import Keyring
from toolgate.gate._trace_context import TraceContext

DEFAULT_LIMITS = Limits(max_bytes=64 * 1024, max_depth=32)
MAX_HEADERS = 64
MAX_HEADER_BYTES = 1024
MAX_KEY_BYTES = 256
INVALID_RESPONSE = "INVALID_RESPONSE"
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_UNSELECTED: Any = object()
MASKED_NAME = "<name>"  # stands for a member name the schema does not declare
_DETAIL_LIMIT = 300
_CONTENT_TYPES = (JSON_CONTENT_TYPE, TEXT_CONTENT_TYPE)
_encode = msgspec.json.encode
_sha256 = hashlib.sha256
# (name, value) -> (lower-case name, text) of tg-* header pairs that passed every check;
# see _read_headers.
_checked_headers: dict[tuple[str, bytes], tuple[str, str]] = {}
_CHECKED_HEADERS_MAX = 1024


class GroupHint(NamedTuple):
    """What the other live members of the group decide with, as the gate needs it."""

    generation: int  # the newest generation a live member decides with
    tools: frozenset[str]  # the tools served by live members whose set differs from this one's
    differs: bool  # some live member decides with another set than this one


class Gate:
    """Evaluates intake messages against a contract set. Build once, call often.

    :meth:`evaluate` runs one method per stage, named as the stages are; each
    raises :class:`~toolgate._errors.RejectedInput` to reject, and
    :func:`rejection` is the one place a rejected verdict is built.

    Args:
        contracts: the loaded contract set.
        keyring: keys for contracts that require an adapter signature.
    """

    # Set by the Kafka service: the intake partition Kafka's default partitioner (murmur2)
    # gives a key, so that a result found elsewhere is named misrouted. None: not said.
    home_partition: Callable[[bytes], int] | None = None
    # Set by the Kafka service from the group's view: what the other live members decide
    # with (docs/design.md, One contract set for the group). A tool or version this set
    # lacks but the group may have is CONTRACTS_BEHIND (retryable), never a final UNKNOWN_*.
    group: GroupHint | None = None

    def __init__(self, contracts: ContractSet, keyring: Keyring | None = None) -> None:
        self.contracts = contracts
        self.keyring = keyring or Keyring()
        self._tools = frozenset(contracts.tools)
        self._projectors: dict[str, Projector] = {}
        self._rules: dict[str, tuple[SemanticRule, ...]] = {}
        # Keyed by the Contract object itself (identity), not by its key.
        self._prepared: dict[Contract, _PreparedContract] = {}
        for contract in contracts:
            self._projectors[contract.key] = Projector(contract)
            self._rules[contract.key] = build_rules(contract, self.keyring)
            self._prepared[contract] = _PreparedContract(contract)
        self._selected: dict[tuple[str, str | None], _PreparedContract | None] = {}

    def evaluate(
        self,
        message: Message,
        request: RequestRecord | None,
        now: datetime,
        ledger: Ledger | None = None,
        *,
        contract: Contract | None = None,
        key: str | None = None,
    ) -> Verdict:
        """Decide one message. Never raises for anything the message contains.

        Args:
            message: the intake record.
            request: the request record its key names, if the store has one.
            now: the injected clock (timezone-aware).
            ledger: tells whether a result was already accepted for a request attempt.
            contract: evaluate against this version instead of the selected one (shadow).
            key: :func:`~toolgate.gate._records.request_key` of the message's key, when the
                caller has computed it already (to look the request up).
        """
        raw = message.value if message.value is not None else b""
        evaluation = _Evaluation(message, raw, _sha256(raw).hexdigest(), key, headers={})
        try:
            prepared = self.limits(evaluation, contract)
            envelope = self.parse(evaluation, prepared)
            deciding = self.select_contract(evaluation, prepared)
            self.schema(evaluation, deciding, envelope)
            attempt = self.correlate(evaluation, deciding, envelope, request, now)
            assert request is not None  # correlate rejects a missing request
            if request.answered and attempt == request.attempt:
                ledger = answered_ledger(request, ledger)
            self.semantic(evaluation, deciding, envelope, request, attempt, now, ledger)
            return self.project(evaluation, deciding, envelope, request, attempt)
        except Exception as exc:  # the gate must never crash on input
            return evaluation.rejected(exc, request)

    # ------------------------------------------------------------------ the stages

    def limits(self, evaluation: _Evaluation, contract: Contract | None) -> _PreparedContract | None:
        """``limits``: header count and sizes, then the value's byte size against the limits
        of the version ``tg-tool`` and ``tg-adapter-version`` select (the defaults if none).

        Returns the selected version, prepared (None: none; it may be retired).
        """
        evaluation.stage = "limits"
        headers = evaluation.headers
        evaluation.header_problem = _read_headers(evaluation.message, headers)
        # The key counts once the headers passed their limits (a key over its limit is one).
        given = evaluation.given_key
        evaluation.key = (request_key(evaluation.message.key) if given is None else given) or None
        tool = headers.get("tg-tool")
        if tool is not None and tool in self._tools:
            evaluation.tool = tool  # a known tool name: safe to echo to the agent
        prepared: _PreparedContract | None
        if contract is not None:
            # A version passed in (a shadow) must serve this tg-adapter-version, as a
            # selected one does: otherwise none does (UNKNOWN_CONTRACT_VERSION). One this
            # gate was not built with is prepared for this message only (and no rules or
            # projector: INTERNAL_ERROR later).
            served = serves(contract, headers.get("tg-adapter-version"))
            prepared = (self._prepared.get(contract) or _PreparedContract(contract)) if served else None
        elif tool is None:
            prepared = None
        else:
            selection = (tool, headers.get("tg-adapter-version"))
            prepared = self._selected.get(selection, _UNSELECTED)
            if prepared is _UNSELECTED:
                prepared = self._select(selection)
        max_bytes = DEFAULT_LIMITS.max_bytes if prepared is None else prepared.max_bytes
        size = len(evaluation.raw)
        if size > max_bytes:
            raise RejectedInput(
                "limits", "PAYLOAD_TOO_LARGE", f"{size} bytes exceeds the limit of {max_bytes}"
            )
        return prepared

    def _select(self, selection: tuple[str, str | None]) -> _PreparedContract | None:
        """The prepared version that decides for (tool, adapter version), remembered
        (boundedly: adapter versions are attacker-chosen)."""
        selected = self.contracts.select(*selection)
        prepared = None if selected is None else self._prepared.get(selected) or _PreparedContract(selected)
        if len(self._selected) >= 4096:
            self._selected.clear()
        self._selected[selection] = prepared
        return prepared

    def parse(self, evaluation: _Evaluation, prepared: _PreparedContract | None) -> Any:
        """``parse``: the content type, then strict JSON or the text contract's one pattern."""
        evaluation.stage = "parse"
        headers = evaluation.headers
        deciding = prepared if prepared is not None and not prepared.retired else None
        content_type = headers.get("tg-content-type", JSON_CONTENT_TYPE)
        if content_type not in _CONTENT_TYPES or (
            deciding is not None and content_type != deciding.content_type
        ):
            raise RejectedInput(
                "parse", "UNSUPPORTED_CONTENT_TYPE", "tg-content-type is not the contract's content type"
            )
        if content_type == JSON_CONTENT_TYPE:
            if evaluation.message.value is None:
                raise RejectedInput("parse", "MALFORMED_JSON", "the value is null")
            max_depth = deciding.limits.max_depth if deciding else DEFAULT_LIMITS.max_depth
            # The schema refuses every value the checks after jiter would (too deep, an
            # infinite number): they run only once it has (Gate.schema), where the
            # contract stage cannot reject first.
            evaluation.checks_deferred = (
                deciding is not None
                and deciding.checks_implied
                and evaluation.tool is not None
                and not evaluation.header_problem
            )
            value = parse_json(evaluation.raw, max_depth, checked=not evaluation.checks_deferred)
            if deciding is None or deciding.mcp is None:
                return value
            mcp = deciding.mcp  # an MCP CallToolResult: read into the envelope (gate/_mcp.py)
            result = read_result(
                value,
                tool=headers.get("tg-tool"),
                request_id=headers.get("tg-request-id"),
                error_code=mcp.error_code,
                error_retryable=mcp.error_retryable,
                text_max_length=mcp.text_max_length,
                max_depth=max_depth,
                error_patterns=deciding.error_patterns,
                wrap_value=mcp.structured_content == STRUCTURED_VALUE,
            )
            evaluation.text, evaluation.trace = result.text, result.trace
            return result.envelope
        if deciding is not None and deciding.text_regex is not None:
            return {
                "tool": headers.get("tg-tool"),
                "request_id": headers.get("tg-request-id"),
                "outcome": "success",
                "data": extract_text(evaluation.raw, deciding.text_regex),
            }
        return None  # text for no text contract: the contract stage rejects it

    def select_contract(
        self, evaluation: _Evaluation, prepared: _PreparedContract | None
    ) -> _PreparedContract:
        """``contract``: the headers are sound and name a tool with a deciding version."""
        evaluation.stage = "contract"
        if evaluation.header_problem:
            raise RejectedInput("contract", "HEADER_MISMATCH", evaluation.header_problem)
        seen = evaluation.headers.get(CONTRACT_GENERATION_HEADER)
        if seen is not None:
            self._not_behind(seen)
        if evaluation.tool is None:
            self._unknown(evaluation.headers.get("tg-tool"), version=False)
            raise RejectedInput("contract", "UNKNOWN_TOOL", "tg-tool names no contract")
        if prepared is None or prepared.retired:
            self._unknown(evaluation.tool, version=True)
            raise RejectedInput(
                "contract",
                "UNKNOWN_CONTRACT_VERSION",
                "no active contract version for tg-adapter-version",
            )
        evaluation.contract = prepared.key
        return prepared

    def _not_behind(self, seen: str) -> None:
        """``tg-contract-generation``: the issuer saw this generation; a set older than it
        does not decide (CONTRACTS_BEHIND, retryable)."""
        if not (seen.isascii() and seen.isdigit() and len(seen) <= 18):
            raise RejectedInput(
                "contract", "HEADER_MISMATCH", f"{CONTRACT_GENERATION_HEADER} is not a number"
            )
        if int(seen) > self.contracts.generation:
            raise RejectedInput(
                "contract",
                "CONTRACTS_BEHIND",
                f"the issuer saw contract set generation {int(seen)}; this worker decides with "
                f"{self.contracts.label}",
            )

    def _unknown(self, tool: str | None, *, version: bool) -> None:
        """An unknown tool or version the group's view says another member may have: the
        set is behind (CONTRACTS_BEHIND, retryable) rather than the result wrong."""
        group = self.group
        if group is None or tool is None:
            return
        newer = group.generation > self.contracts.generation
        if newer or tool in group.tools or (version and group.differs):
            what = "version of " if version else ""
            raise RejectedInput(
                "contract",
                "CONTRACTS_BEHIND",
                f"no {what}this tool in {self.contracts.label}; the group decides with generation "
                f"{group.generation}" + (" and serves it" if tool in group.tools else ""),
            )

    def schema(self, evaluation: _Evaluation, prepared: _PreparedContract, envelope: Any) -> None:
        """``schema``: the contract's Draft 2020-12 schema."""
        evaluation.stage = "schema"
        if not prepared.validator.is_valid(envelope):
            if evaluation.checks_deferred:  # the parse's verdict first, as without the deferral
                evaluation.stage, evaluation.contract = "parse", None
                check_parsed(evaluation.raw, envelope, prepared.limits.max_depth)
                evaluation.stage, evaluation.contract = "schema", prepared.key
            raise _schema_rejection(prepared, envelope)
        if not _is_envelope(envelope):
            raise RejectedInput(
                "schema",
                "SCHEMA_VIOLATION",
                "the contract's schema accepted a value that is not a result envelope "
                "(request_id, outcome success with an optional data object, or failure with "
                "an error code and retryable flag)",
            )

    def correlate(
        self,
        evaluation: _Evaluation,
        prepared: _PreparedContract,
        envelope: Any,
        request: RequestRecord | None,
        now: datetime,
    ) -> int:
        """``correlate``: key, ``tg-request-id`` and ``request_id`` agree and name a known,
        unexpired request for this tool. Returns the attempt the result answers."""
        evaluation.stage = "correlate"
        claimed = envelope["request_id"]
        if claimed != evaluation.headers.get("tg-request-id") or claimed != evaluation.key:
            raise RejectedInput(
                "correlate", "HEADER_MISMATCH", "Kafka key, tg-request-id and request_id disagree"
            )
        evaluation.request_id = claimed
        if request is None or request.request_id != claimed:
            raise RejectedInput("correlate", "UNKNOWN_REQUEST", self._unknown_request(evaluation.message))
        if request.tool != prepared.tool:
            raise RejectedInput("correlate", "TOOL_MISMATCH", "the request was issued for another tool")
        if now >= request.expires_at:
            raise RejectedInput("correlate", "REQUEST_EXPIRED", "the request has expired")
        header = evaluation.headers.get("tg-attempt")
        attempt = request.attempt if header is None else _attempt(header, request)
        evaluation.attempt = attempt
        return attempt

    def _unknown_request(self, message: Message) -> str:
        """The detail of ``UNKNOWN_REQUEST``: names a result in another intake partition than
        the one its key belongs in (a producer with another partitioner than murmur2)."""
        home = self.home_partition
        origin = message.origin
        if home is None or message.key is None or not isinstance(origin, Origin):
            return "no outstanding request"
        partition = origin.partition
        expected = home(message.key)
        if expected == partition:
            return "no outstanding request"
        return (
            f"no outstanding request: misrouted, in intake partition {partition} while murmur2 puts "
            f"this key (and its request) in {expected}; the producer's partitioner is not murmur2 "
            "(librdkafka clients: partitioner=murmur2_random)"
        )

    def semantic(
        self,
        evaluation: _Evaluation,
        prepared: _PreparedContract,
        envelope: Any,
        request: RequestRecord,
        attempt: int,
        now: datetime,
        ledger: Ledger | None,
    ) -> None:
        """``semantic``: the contract's rules (bindings, freshness, ownership, signature, duplicates)."""
        evaluation.stage = "semantic"
        evidence = Evidence(
            envelope=envelope,
            request=request,
            request_id=request.request_id,
            attempt=attempt,
            now=now,
            raw=evaluation.raw,
            headers=evaluation.headers,
            ledger=ledger,
        )
        for rule in self._rules[prepared.key]:
            rule(evidence)

    def project(
        self,
        evaluation: _Evaluation,
        prepared: _PreparedContract,
        envelope: Any,
        request: RequestRecord,
        attempt: int,
    ) -> Verdict:
        """``project``: a new closed object for the agent, and the accepted verdict."""
        evaluation.stage = "project"
        projector = self._projectors[prepared.key]
        request_id = request.request_id
        code: str | None
        if envelope["outcome"] == "success":
            out = projector.success(envelope, request_id, evaluation.text)
            projector.contract.screen.apply(out)  # secrets and personal data (gate/_sensitive.py)
            code = None
        else:
            code = envelope["error"]["code"]
            retryable = (
                bool(envelope["error"]["retryable"])
                and code in prepared.retryable_codes
                and request.attempt < request.max_attempts
            )
            out = failure(prepared.tool, request_id, code, retryable)
            projector.check(out)
        agent = _encode(out)
        # The same bytes have the same digest: a result that is already its own projection
        # (the declared fields, in order) is hashed once.
        projected = evaluation.digest if agent == evaluation.raw else _sha256(agent).hexdigest()
        headers = evaluation.headers
        return Verdict(
            accepted=True,
            outcome=out["outcome"],
            tool=prepared.tool,
            request_id=request_id,
            contract=prepared.key,
            stage=None,
            code=code,
            attempt=attempt,
            agent=agent,
            raw_sha256=evaluation.digest,
            projected_sha256=projected,
            adapter=headers.get("tg-adapter"),
            adapter_version=headers.get("tg-adapter-version"),
            source=headers.get("tg-source"),
            trace=evaluation.trace,
        )


class _Evaluation(msgspec.Struct, gc=False):
    """One message's evaluation so far: the stage it reached and what may be reported
    about the message if that stage rejects it. A msgspec struct: one is built per
    message, and that costs half a slotted class's ``__init__``."""

    message: Message
    raw: bytes
    digest: str
    given_key: str | None
    stage: Stage = "limits"
    headers: dict[str, str] = {}
    header_problem: str = ""
    key: str | None = None  # the Kafka key, once read, when it is a plain identifier
    tool: str | None = None  # only once it names a known contract
    contract: str | None = None  # the deciding version's key
    request_id: str | None = None
    attempt: int | None = None
    text: str | None = None  # an MCP result's text blocks, for untrusted_text
    trace: TraceContext | None = None  # an MCP result's _meta trace context
    checks_deferred: bool = False  # the parse left its checks to the schema (checks_implied)

    def rejected(self, exc: Exception, request: RequestRecord | None) -> Verdict:
        """The rejected verdict for ``exc`` raised at the stage reached."""
        rejected = (
            exc
            if isinstance(exc, RejectedInput)
            else RejectedInput(
                self.stage, "INTERNAL_ERROR", f"{type(exc).__name__} during the {self.stage} stage"
            )
        )
        key = self.key
        # The agent hears back only about a request the platform issued: the key
        # must name the request record the store returned. Operators (audit) get
        # whatever identifier the message claimed, if it is a plain one.
        issued = key if request is not None and key == request.request_id else None
        verdict = rejection(
            rejected,
            digest=self.digest,
            tool=self.tool,
            request_id=self.request_id or key,
            agent_request_id=issued,
            contract=self.contract,
            attempt=self.attempt,
            headers=self.headers,
        )
        return verdict if self.trace is None else msgspec.structs.replace(verdict, trace=self.trace)


class _PreparedContract:
    """One contract version prepared for the gate: what it reads from the version's spec
    on every message, gathered once."""

    __slots__ = (
        "_branches",
        "checks_implied",
        "content_type",
        "declared_names",
        "error_patterns",
        "key",
        "limits",
        "located",
        "max_bytes",
        "mcp",
        "retired",
        "retryable_codes",
        "schema",
        "text_regex",
        "tool",
        "validator",
    )

    def __init__(self, contract: Contract) -> None:
        spec = contract.spec
        self.key = contract.key
        self.tool = spec.tool
        self.retired = spec.status == "retired"
        self.limits = spec.limits
        # A retired version decides nothing: the default limits apply to its messages.
        self.max_bytes = DEFAULT_LIMITS.max_bytes if self.retired else spec.limits.max_bytes
        self.content_type = spec.content_type
        self.text_regex = contract.text_regex
        self.mcp = spec.mcp
        self.error_patterns = contract.error_patterns
        self.validator = contract.validator
        self.schema = contract.schema
        self.retryable_codes = contract.retryable_codes
        self.declared_names = contract.declared_names
        self._branches: Branches | bool | None = False  # False: not built yet
        # (instance path, schema path) of a Located error -> its report's fields
        self.located: dict[
            tuple[tuple[str | int, ...], tuple[str | int, ...]], tuple[str, str, str, str]
        ] = {}
        # Every value the schema accepts is within the depth limit and holds no infinite
        # number (gate/_depth.py): the parse's checks after jiter need not run on a value
        # the schema is about to accept.
        bound = None if self.mcp is not None else depth_bound(contract.schema)
        self.checks_implied = bound is not None and bound <= spec.limits.max_depth

    def branches(self) -> Branches | None:
        """The per-branch validators for a rejection's first error (built on the first
        rejection; None where the schema's shape or the validator does not allow them)."""
        if self._branches is False:
            compiled = isinstance(self.validator, jsonschema_rs.Validator)
            self._branches = branches_for(self.schema) if compiled else None
        assert self._branches is not True
        return self._branches


def rejection(
    rejected: RejectedInput,
    *,
    digest: str,
    tool: str | None = None,
    request_id: str | None = None,
    agent_request_id: str | None = None,
    contract: str | None = None,
    attempt: int | None = None,
    headers: Mapping[str, str] = _NO_HEADERS,
) -> Verdict:
    """The one builder of a rejected verdict: ``INVALID_RESPONSE`` for the agent, the
    stage, code and masked diagnostics for operators.

    Args:
        rejected: the stage's rejection.
        digest: SHA-256 of the raw value.
        tool: a known contract's tool name (echoed to the agent), else None.
        request_id: the identifier the message claimed (for operators).
        agent_request_id: the request id the agent may hear: only one the platform issued.
        contract: the deciding version's key, once evaluation.
        attempt: the attempt the result answers, once evaluation.
        headers: the checked ``tg-*`` headers.
    """
    if rejected.code == "CONTRACTS_BEHIND":  # the set is behind, not the result wrong: retry
        agent = _encode(failure(tool, agent_request_id, "CONTRACTS_BEHIND", True))
    else:
        agent = _encode(failure(tool, agent_request_id, INVALID_RESPONSE, False))
    return Verdict(
        accepted=False,
        outcome="failure",
        tool=tool,
        request_id=request_id,
        contract=contract,
        stage=rejected.stage,
        code=rejected.code,
        attempt=attempt,
        agent=agent,
        raw_sha256=digest,
        diagnostics=Diagnostics(
            stage=rejected.stage,
            code=rejected.code,
            message=_bounded(rejected.detail),
            instance_path=rejected.instance_path,
            schema_path=rejected.schema_path,
            keyword=rejected.keyword,
        ),
        adapter=headers.get("tg-adapter"),
        adapter_version=headers.get("tg-adapter-version"),
        source=headers.get("tg-source"),
    )


def _read_headers(message: Message, headers: dict[str, str]) -> str:
    """Bound and decode the ``tg-*`` headers into ``headers``.

    Returns the last non-fatal problem (deferred to ``contract``; empty when none).
    """
    pairs = message.headers
    if len(pairs) > MAX_HEADERS:
        raise RejectedInput("limits", "PAYLOAD_TOO_LARGE", f"more than {MAX_HEADERS} headers")
    key = message.key
    if key is not None and len(key) > MAX_KEY_BYTES:
        raise RejectedInput("limits", "PAYLOAD_TOO_LARGE", f"key exceeds {MAX_KEY_BYTES} bytes")
    problem = ""
    checked = _checked_headers
    for name, value in pairs:
        # Most header values repeat from message to message (tool, adapter, version,
        # source): a pair checked before skips the checks below.
        try:
            cached = checked.get((name, value))
        except TypeError:  # an unhashable value (not bytes): the checks below decide
            cached = None
        if cached is None:
            if value is None:
                value = b""
            if len(value) > MAX_HEADER_BYTES or len(name) > MAX_HEADER_BYTES:
                raise RejectedInput(
                    "limits", "PAYLOAD_TOO_LARGE", f"a header exceeds {MAX_HEADER_BYTES} bytes"
                )
            # Header names are matched without regard to case: TG-Tool is tg-tool, so
            # a case variant beside the canonical name is a duplicate, never ignored.
            if name[:3].lower() != "tg-":
                continue
            if not name.isascii():
                problem = "a tg-* header name is not ASCII"
                continue
            canonical = name.lower()
            if canonical in headers:
                problem = "a tg-* header appears more than once"
                continue
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                problem = "a tg-* header is not UTF-8"
                continue
            # isprintable() is False for every control character (and for line breaks).
            if not text.isprintable():
                problem = "a tg-* header holds control characters"
                continue
            if type(value) is bytes:
                if len(checked) >= _CHECKED_HEADERS_MAX:  # attacker-chosen values: stay bounded
                    checked.clear()
                checked[name, value] = (canonical, text)
        else:
            canonical, text = cached
            if canonical in headers:
                problem = "a tg-* header appears more than once"
                continue
        headers[canonical] = text
    return problem


def _attempt(text: str, request: RequestRecord) -> int:
    """The attempt ``tg-attempt`` names, which must be the request's current one."""
    # isdigit() alone also takes "²" and "１": only ASCII digits are an attempt number.
    if not (text.isascii() and text.isdigit()) or len(text) > 4:
        raise RejectedInput("correlate", "HEADER_MISMATCH", "tg-attempt is not a small integer")
    attempt = int(text)
    if attempt != request.attempt:
        raise RejectedInput(
            "semantic", "STALE_RESULT", "the result answers another attempt than the request's current one"
        )
    return attempt


def attempt_ahead(message: Message, request: RequestRecord | None) -> bool:
    """Whether ``message``'s ``tg-attempt`` names a later attempt than ``request``, the record
    this worker holds: the requests topic may already hold the request's newer record (a
    retry's result that came before the reader read its request), so the verdict is not final."""
    if request is None:
        return False
    for name, value in message.headers:
        if name.lower() == "tg-attempt":
            text = (value or b"").decode("ascii", "replace")
            return text.isdigit() and len(text) <= 4 and int(text) > request.attempt
    return False


def _is_envelope(envelope: Any) -> bool:
    """Whether a value the schema accepted has the members the later stages read: a
    schema that does not require them rejects here, never with an INTERNAL_ERROR."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("request_id"), str):
        return False
    outcome = envelope.get("outcome")
    if outcome == "success":
        return isinstance(envelope.get("data", {}), dict)
    error = envelope.get("error")
    return (
        outcome == "failure"
        and isinstance(error, dict)
        and isinstance(error.get("code"), str)
        and _ERROR_CODE.fullmatch(error["code"]) is not None
        and isinstance(error.get("retryable"), bool)
    )


_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")  # what an agent envelope's error code may be


# Keywords whose message names a member the sender chose: reported as UNEXPECTED_MEMBER.
_MASKED_KEYWORDS = frozenset({"additionalProperties", "unevaluatedProperties", "propertyNames"})
UNEXPECTED_MEMBER = "unexpected property (name masked)"
_LOCATED_MAX = 256  # Located errors' reports kept per contract version (a schema has few)


def _schema_rejection(prepared: _PreparedContract, envelope: Any) -> RejectedInput:
    """The most useful violation, masked: the branch of a ``oneOf`` the envelope meant
    (:mod:`toolgate.gate._first_error`)."""
    branches = prepared.branches()
    found = None if branches is None else branches.first_error(envelope)
    if found is None:
        found = reference_error(prepared.validator, envelope)
    if found is None:  # is_valid and validate disagree: never accept on that
        return RejectedInput("schema", "SCHEMA_VIOLATION", "schema violation")
    error, schema_path = found
    located = error.message is None  # not built: the keyword's message is masked (Located)
    if located:
        # A Located error's paths are the schema's own (declared member names, its
        # keywords): few per contract, so their pointers are made once each.
        where = (tuple(error.instance_path), tuple(schema_path))
        fields = prepared.located.get(where)
        if fields is not None:
            return _schema_violation(*fields)
    keyword = str(schema_path[-1]) if schema_path else ""
    message = error.message
    if keyword in _MASKED_KEYWORDS:
        message = UNEXPECTED_MEMBER
    elif message is None:
        raise AssertionError(f"no message for a {keyword!r} error")
    else:
        message += _closure_bound(prepared, keyword, message)
    fields = (
        message,
        _instance_pointer(error.instance_path, prepared.declared_names),
        _json_pointer(schema_path),
        keyword,
    )
    if located and len(prepared.located) < _LOCATED_MAX:
        prepared.located[where] = fields
    return _schema_violation(*fields)


def _schema_violation(message: str, instance_path: str, schema_path: str, keyword: str) -> RejectedInput:
    return RejectedInput(
        "schema",
        "SCHEMA_VIOLATION",
        message,
        instance_path=instance_path,
        schema_path=schema_path,
        keyword=keyword,
    )


CLOSURE_BOUNDS_KEY = "x-toolgate-bounds"  # where an imported closure names its bounds
_BOUND_OF = {
    "maxLength": ("max_string", "longer than {} characters"),
    "maxItems": ("max_items", "more than {} items"),
}


def _closure_bound(prepared: _PreparedContract, keyword: str, message: str) -> str:
    """For a string or array over the bound an imported contract's closure enforces, which
    bound it crossed and the command that sets it (else ``""``): an operator reading the
    quarantine sees what to change."""
    if keyword not in _BOUND_OF:
        return ""
    defs = prepared.schema.get("$defs") if isinstance(prepared.schema, dict) else None
    data = defs.get("structuredContent") if isinstance(defs, dict) else None
    parts = data.get("allOf") if isinstance(data, dict) else None
    bounds = next(
        (p[CLOSURE_BOUNDS_KEY] for p in parts or () if isinstance(p, dict) and CLOSURE_BOUNDS_KEY in p), None
    )
    name, said = _BOUND_OF[keyword]
    value = bounds.get(name) if isinstance(bounds, dict) else None
    own = bounds.get("at") if isinstance(bounds, dict) else None
    if isinstance(own, dict) and any(
        isinstance(at, dict) and message.endswith(said.format(at.get(keyword))) for at in own.values()
    ):
        return (
            f": a field's own bound (at, in {CLOSURE_BOUNDS_KEY} of {prepared.key}'s schema.json), set in "
            "a draft's review up to limits.max_bytes: toolgate contracts review --bound /data/<the field>=N"
        )
    if not isinstance(value, int) or not message.endswith(said.format(value)):
        return ""
    flag = "--" + name.replace("_", "-")
    return (
        f": the closure's {name} bound ({CLOSURE_BOUNDS_KEY} of {prepared.key}'s schema.json); set it as the "
        f"tool needs, up to limits.max_bytes: toolgate contracts rebound <its version folder> {flag} N"
    )


def _instance_pointer(path: Sequence[str | int], declared: frozenset[str]) -> str:
    """The instance path, each member name the schema does not declare masked: a name
    matched by patternProperties or refused as additional is chosen by the sender."""
    return _json_pointer([p if type(p) is int or p in declared else MASKED_NAME for p in path])


def _json_pointer(path: Sequence[str | int]) -> str:
    if not path:
        return ""
    # The common case at once: no token is cut, and none holds "~" or "/" (the joined
    # text is short, has no "~", and no "/" but the separators).
    joined = "/".join([p if type(p) is str else str(p) for p in path])
    if len(joined) <= 64 and "~" not in joined and joined.count("/") == len(path) - 1:
        return "/" + joined
    return "".join("/" + str(p)[:64].replace("~", "~0").replace("/", "~1") for p in path)


def _bounded(text: str) -> str:
    text = text.replace(MASK, "<value>")
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 1] + "…"


__all__ = ["DEFAULT_LIMITS", "STAGES", "Gate", "__version__", "rejection"]


def answered_ledger(request: RequestRecord, ledger: Ledger | None) -> Ledger:
    """``ledger`` plus the request's current attempt, which its record says already has its
    accepted answer (``answered``: decided outside the workers)."""
    current = (request.request_id, request.attempt)

    def seen(request_id: str, attempt: int) -> bool:
        return (request_id, attempt) == current or (ledger is not None and ledger(request_id, attempt))

    return seen
