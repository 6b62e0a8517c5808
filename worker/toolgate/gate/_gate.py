"""The gate: (raw bytes, headers, request record, clock) to a verdict. Pure: no Kafka.

Stages run in DESIGN.md's order and the first failure decides:

1. ``limits``    byte size of the value (before parsing), header count and sizes;
2. ``parse``     strict JSON (:mod:`toolgate.gate._parse`) or a text contract's one pattern;
3. ``contract``  ``tg-tool`` names a tool with a deciding (active) version;
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
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jsonschema_rs
import msgspec

from toolgate._errors import RejectedInput
from toolgate._version import __version__
from toolgate.gate._contracts import (
    JSON_CONTENT_TYPE,
    MASK,
    TEXT_CONTENT_TYPE,
    Contract,
    ContractSet,
    Limits,
)
from toolgate.gate._parse import extract_text, parse_json
from toolgate.gate._project import Projector, failure
from toolgate.gate._records import Diagnostics, Message, RequestRecord, Verdict
from toolgate.gate._rules import Evidence, Ledger, SemanticRule, build_rules
from toolgate.gate._signing import Keyring

DEFAULT_LIMITS = Limits(max_bytes=64 * 1024, max_depth=32)
MAX_HEADERS = 64
MAX_HEADER_BYTES = 1024
MAX_KEY_BYTES = 256
INVALID_RESPONSE = "INVALID_RESPONSE"
STAGES = ("limits", "parse", "contract", "schema", "correlate", "semantic", "project")

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_DETAIL_LIMIT = 300
_CONTENT_TYPES = (JSON_CONTENT_TYPE, TEXT_CONTENT_TYPE)
_encode = msgspec.json.encode
_sha256 = hashlib.sha256
# (name, value) -> text of tg-* header pairs that passed every check; see _read_headers.
_checked_headers: dict[tuple[str, bytes], str] = {}
_CHECKED_HEADERS_MAX = 1024


class Gate:
    """Evaluates intake messages against a contract set. Build once, call often.

    Args:
        contracts: the loaded contract set.
        keyring: keys for contracts that require an adapter signature.
    """

    def __init__(self, contracts: ContractSet, keyring: Keyring | None = None) -> None:
        self.contracts = contracts
        self.keyring = keyring or Keyring()
        self._tools = frozenset(contracts.tools)
        self._projectors: dict[str, Projector] = {}
        self._rules: dict[str, tuple[SemanticRule, ...]] = {}
        # Keyed by the Contract object itself (identity), not by its key.
        self._plans: dict[Contract, _Plan] = {}
        for contract in contracts:
            self._projectors[contract.key] = Projector(contract)
            self._rules[contract.key] = build_rules(contract, self.keyring)
            self._plans[contract] = _Plan(contract)

    def evaluate(
        self,
        message: Message,
        request: RequestRecord | None,
        now: datetime,
        ledger: Ledger | None = None,
        *,
        contract: Contract | None = None,
    ) -> Verdict:
        """Decide one message. Never raises for anything the message contains.

        Args:
            message: the intake record.
            request: the request record its key names, if the store has one.
            now: the injected clock (timezone-aware).
            ledger: tells whether a result was already accepted for a request attempt.
            contract: evaluate against this version instead of the selected one (shadow).
        """
        raw = message.value if message.value is not None else b""
        digest = _sha256(raw).hexdigest()
        # What is known so far, for the verdict of a rejection. Plain locals rather
        # than a state object: nothing is allocated for it on the accept path.
        headers: dict[str, str] = {}
        key: str | None = None
        known_tool: str | None = None  # only once it names a known contract
        contract_key: str | None = None
        request_id: str | None = None
        attempt: int | None = None
        stage = "limits"
        try:
            header_problem, key = _read_headers(message, headers)
            tool = headers.get("tg-tool")
            adapter_version = headers.get("tg-adapter-version")
            if tool is not None and tool in self._tools:
                known_tool = tool  # a known tool name: safe to echo to the agent
            if contract is None and tool is not None:
                contract = self.contracts.select(tool, adapter_version)
            # A contract passed in that this gate was not built with gets a plan for
            # this message only (and no rules or projector: INTERNAL_ERROR later).
            plan = None if contract is None else self._plans.get(contract) or _Plan(contract)
            deciding = plan if plan is not None and not plan.retired else None
            limits = deciding.limits if deciding is not None else DEFAULT_LIMITS
            if len(raw) > limits.max_bytes:
                raise RejectedInput(
                    "limits", "PAYLOAD_TOO_LARGE", f"{len(raw)} bytes exceeds the limit of {limits.max_bytes}"
                )

            stage = "parse"
            content_type = headers.get("tg-content-type", JSON_CONTENT_TYPE)
            if content_type not in _CONTENT_TYPES or (
                deciding is not None and content_type != deciding.content_type
            ):
                raise RejectedInput(
                    "parse", "UNSUPPORTED_CONTENT_TYPE", "tg-content-type is not the contract's content type"
                )
            envelope: Any = None
            if content_type == JSON_CONTENT_TYPE:
                if message.value is None:
                    raise RejectedInput("parse", "MALFORMED_JSON", "the value is null")
                envelope = parse_json(raw, limits.max_depth)
            elif deciding is not None and deciding.text_regex is not None:
                envelope = {
                    "tool": tool,
                    "request_id": headers.get("tg-request-id"),
                    "outcome": "success",
                    "data": extract_text(raw, deciding.text_regex),
                }

            stage = "contract"
            if header_problem:
                raise RejectedInput("contract", "HEADER_MISMATCH", header_problem)
            if tool is None or known_tool is None:
                raise RejectedInput("contract", "UNKNOWN_TOOL", "tg-tool names no contract")
            if deciding is None:
                raise RejectedInput(
                    "contract",
                    "UNKNOWN_CONTRACT_VERSION",
                    "no active contract version for tg-adapter-version",
                )
            contract_key = deciding.key

            stage = "schema"
            if not deciding.validator.is_valid(envelope):
                raise _schema_rejection(deciding.validator, envelope)

            stage = "correlate"
            claimed = envelope["request_id"]
            if claimed != headers.get("tg-request-id") or claimed != key:
                raise RejectedInput(
                    "correlate", "HEADER_MISMATCH", "Kafka key, tg-request-id and request_id disagree"
                )
            request_id = claimed
            if request is None or request.request_id != request_id:
                raise RejectedInput("correlate", "UNKNOWN_REQUEST", "no outstanding request")
            if request.tool != deciding.tool:
                raise RejectedInput("correlate", "TOOL_MISMATCH", "the request was issued for another tool")
            if now >= request.expires_at:
                raise RejectedInput("correlate", "REQUEST_EXPIRED", "the request has expired")
            attempt_header = headers.get("tg-attempt")
            attempt = request.attempt if attempt_header is None else _attempt(attempt_header, request)

            stage = "semantic"
            evidence = Evidence(
                envelope=envelope,
                request=request,
                request_id=request_id,
                attempt=attempt,
                now=now,
                raw=raw,
                headers=headers,
                ledger=ledger,
            )
            for rule in self._rules[deciding.key]:
                rule(evidence)

            stage = "project"
            projector = self._projectors[deciding.key]
            if envelope["outcome"] == "success":
                out = projector.success(envelope, request_id)
                code = None
            else:
                code = envelope["error"]["code"]
                retryable = (
                    bool(envelope["error"]["retryable"])
                    and code in deciding.retryable_codes
                    and request.attempt < request.max_attempts
                )
                out = failure(deciding.tool, request_id, code, retryable)
                projector.check(out)
            agent = _encode(out)
            return Verdict(
                accepted=True,
                outcome=out["outcome"],
                tool=deciding.tool,
                request_id=request_id,
                contract=deciding.key,
                stage=None,
                code=code,
                attempt=attempt,
                agent=agent,
                raw_sha256=digest,
                projected_sha256=_sha256(agent).hexdigest(),
                adapter=headers.get("tg-adapter"),
                adapter_version=adapter_version,
                source=headers.get("tg-source"),
            )
        except Exception as exc:  # the gate must never crash on input
            rejection = (
                exc
                if isinstance(exc, RejectedInput)
                else RejectedInput(stage, "INTERNAL_ERROR", f"{type(exc).__name__} during the {stage} stage")
            )
            # The agent hears back only about a request the platform issued: the key
            # must name the request record the store returned. Operators (audit) get
            # whatever identifier the message claimed, if it is a plain one.
            issued = key if request is not None and key == request.request_id else None
            return _reject(
                rejection, known_tool, request_id or key, issued, contract_key, attempt, headers, digest
            )


class _Plan:
    """What the gate reads from one contract's spec on every message, gathered once."""

    __slots__ = (
        "content_type",
        "key",
        "limits",
        "retired",
        "retryable_codes",
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
        self.content_type = spec.content_type
        self.text_regex = contract.text_regex
        self.validator = contract.validator
        self.retryable_codes = contract.retryable_codes


def _reject(
    rejection: RejectedInput,
    tool: str | None,
    request_id: str | None,
    agent_request_id: str | None,
    contract: str | None,
    attempt: int | None,
    headers: dict[str, str],
    digest: str,
) -> Verdict:
    agent = _encode(failure(tool, agent_request_id, INVALID_RESPONSE, False))
    return Verdict(
        accepted=False,
        outcome="failure",
        tool=tool,
        request_id=request_id,
        contract=contract,
        stage=rejection.stage,
        code=rejection.code,
        attempt=attempt,
        agent=agent,
        raw_sha256=digest,
        diagnostics=Diagnostics(
            stage=rejection.stage,
            code=rejection.code,
            message=_bounded(rejection.detail),
            instance_path=rejection.instance_path,
            schema_path=rejection.schema_path,
            keyword=rejection.keyword,
        ),
        adapter=headers.get("tg-adapter"),
        adapter_version=headers.get("tg-adapter-version"),
        source=headers.get("tg-source"),
    )


def _read_headers(message: Message, headers: dict[str, str]) -> tuple[str, str | None]:
    """Bound and decode the ``tg-*`` headers into ``headers``.

    Returns the last non-fatal problem (deferred to ``contract``; empty when none)
    and the Kafka key when it is a safe identifier.
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
            text = checked.get((name, value))
        except TypeError:  # an unhashable value (not bytes): the checks below decide
            text = None
        if text is None:
            if value is None:
                value = b""
            if len(value) > MAX_HEADER_BYTES or len(name) > MAX_HEADER_BYTES:
                raise RejectedInput(
                    "limits", "PAYLOAD_TOO_LARGE", f"a header exceeds {MAX_HEADER_BYTES} bytes"
                )
            if not name.startswith("tg-"):
                continue
            if name in headers:
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
                checked[name, value] = text
        elif name in headers:
            problem = "a tg-* header appears more than once"
            continue
        headers[name] = text
    if key is None:
        return problem, None
    try:
        text = key.decode("ascii")
    except UnicodeDecodeError:
        return problem, None
    return problem, text if _SAFE_ID.fullmatch(text) else None


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


def _schema_rejection(validator: Any, envelope: Any) -> RejectedInput:
    """The most useful violation, masked: the branch of a ``oneOf`` the envelope meant."""
    # validate() stops at the first error; iter_errors() would build every error first,
    # which for a large invalid array costs time per element, not per message.
    error: Any = None
    try:
        validator.validate(envelope)
    except ValueError as first:  # jsonschema_rs.ValidationError is a ValueError
        error = first
    while error is not None:
        branches = getattr(error.kind, "context", None)
        if not branches:
            break
        best = min(branches, key=lambda errs: (_misses_outcome(errs), len(errs)))
        if not best:
            break
        error = best[0]
    if error is None:  # is_valid and iter_errors disagree: never accept on that
        return RejectedInput("schema", "SCHEMA_VIOLATION", "schema violation")
    keyword = str(error.schema_path[-1]) if error.schema_path else ""
    message = error.message
    if keyword in ("additionalProperties", "unevaluatedProperties", "propertyNames"):
        message = "unexpected property (name masked)"
    return RejectedInput(
        "schema",
        "SCHEMA_VIOLATION",
        message,
        instance_path=_json_pointer(error.instance_path),
        schema_path=_json_pointer(error.schema_path),
        keyword=keyword,
    )


def _misses_outcome(errors: Sequence[jsonschema_rs.ValidationError]) -> bool:
    return any(list(e.instance_path) == ["outcome"] for e in errors)


def _json_pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + str(p)[:64].replace("~", "~0").replace("/", "~1") for p in path)


def _bounded(text: str) -> str:
    text = text.replace(MASK, "<value>")
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 1] + "…"


__all__ = ["DEFAULT_LIMITS", "STAGES", "Gate", "__version__"]
