"""The gate: (raw bytes, headers, request record, clock) to a verdict. Pure: no Kafka.

Stages run in DESIGN.md's order and the first failure decides:

1. ``limits``    byte size of the value (before parsing), header count and sizes;
2. ``parse``     strict JSON (:mod:`worker._parse`) or a text contract's one pattern;
3. ``contract``  ``tg-tool`` names a tool with a deciding (active) version;
4. ``schema``    the contract's Draft 2020-12 schema, formats asserted;
5. ``correlate`` Kafka key, ``tg-request-id`` and ``request_id`` agree and name a
                 known, unexpired request for the same tool;
6. ``semantic``  the contract's rules (:mod:`worker._rules`);
7. ``project``   a new closed object (:mod:`worker._project`).

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

from worker._contracts import (
    JSON_CONTENT_TYPE,
    MASK,
    TEXT_CONTENT_TYPE,
    Contract,
    ContractSet,
    Limits,
)
from worker._errors import RejectedInput
from worker._parse import extract_text, parse_json
from worker._project import Projector, failure
from worker._records import Diagnostics, Message, RequestRecord, Verdict
from worker._rules import Evidence, Ledger, SemanticRule, build_rules
from worker._signing import Keyring
from worker._version import __version__

DEFAULT_LIMITS = Limits(max_bytes=64 * 1024, max_depth=32)
MAX_HEADERS = 64
MAX_HEADER_BYTES = 1024
MAX_KEY_BYTES = 256
INVALID_RESPONSE = "INVALID_RESPONSE"
STAGES = ("limits", "parse", "contract", "schema", "correlate", "semantic", "project")

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_DETAIL_LIMIT = 300
_encode = msgspec.json.encode


class Gate:
    """Evaluates intake messages against a contract set. Build once, call often.

    Args:
        contracts: the loaded contract set.
        keyring: keys for contracts that require an adapter signature.
    """

    def __init__(self, contracts: ContractSet, keyring: Keyring | None = None) -> None:
        self.contracts = contracts
        self.keyring = keyring or Keyring()
        self._projectors: dict[str, Projector] = {}
        self._rules: dict[str, tuple[SemanticRule, ...]] = {}
        for contract in contracts:
            self._projectors[contract.key] = Projector(contract)
            self._rules[contract.key] = build_rules(contract, self.keyring)

    def evaluate(self, message: Message, request: RequestRecord | None, now: datetime,
                 ledger: Ledger | None = None, *, contract: Contract | None = None) -> Verdict:
        """Decide one message. Never raises for anything the message contains.

        Args:
            message: the intake record.
            request: the request record its key names, if the store has one.
            now: the injected clock (timezone-aware).
            ledger: tells whether a result was already accepted for a request attempt.
            contract: evaluate against this version instead of the selected one (shadow).
        """
        raw = message.value if message.value is not None else b""
        digest = hashlib.sha256(raw).hexdigest()
        state = _State()
        stage = "limits"
        try:
            headers = _read_headers(message, state)
            tool = headers.get("tg-tool")
            if tool is not None and self.contracts.versions(tool):
                state.tool = tool  # a known tool name: safe to echo to the agent
            if contract is None and tool is not None:
                contract = self.contracts.select(tool, headers.get("tg-adapter-version"))
            deciding = contract if contract is not None and contract.spec.status != "retired" \
                else None
            limits = deciding.spec.limits if deciding else DEFAULT_LIMITS
            if len(raw) > limits.max_bytes:
                raise RejectedInput("limits", "PAYLOAD_TOO_LARGE",
                                    f"{len(raw)} bytes exceeds the limit of {limits.max_bytes}")

            stage = "parse"
            content_type = headers.get("tg-content-type", JSON_CONTENT_TYPE)
            if content_type not in (JSON_CONTENT_TYPE, TEXT_CONTENT_TYPE) or (
                    deciding is not None and content_type != deciding.spec.content_type):
                raise RejectedInput("parse", "UNSUPPORTED_CONTENT_TYPE",
                                    "tg-content-type is not the contract's content type")
            envelope: Any = None
            if content_type == JSON_CONTENT_TYPE:
                if message.value is None:
                    raise RejectedInput("parse", "MALFORMED_JSON", "the value is null")
                envelope = parse_json(raw, limits.max_depth)
            elif deciding is not None and deciding.text_regex is not None:
                envelope = {"tool": tool, "request_id": headers.get("tg-request-id"),
                            "outcome": "success", "data": extract_text(raw, deciding.text_regex)}

            stage = "contract"
            if state.header_problem:
                raise RejectedInput("contract", "HEADER_MISMATCH", state.header_problem)
            if tool is None or state.tool is None:
                raise RejectedInput("contract", "UNKNOWN_TOOL", "tg-tool names no contract")
            if deciding is None:
                raise RejectedInput("contract", "UNKNOWN_CONTRACT_VERSION",
                                    "no active contract version for tg-adapter-version")
            state.contract = deciding.key

            stage = "schema"
            if not deciding.validator.is_valid(envelope):
                raise _schema_rejection(deciding, envelope)

            stage = "correlate"
            request_id = envelope["request_id"]
            if request_id != headers.get("tg-request-id") or request_id != state.key:
                raise RejectedInput("correlate", "HEADER_MISMATCH",
                                    "Kafka key, tg-request-id and request_id disagree")
            state.request_id = request_id
            if request is None or request.request_id != request_id:
                raise RejectedInput("correlate", "UNKNOWN_REQUEST", "no outstanding request")
            if request.tool != deciding.spec.tool:
                raise RejectedInput("correlate", "TOOL_MISMATCH",
                                    "the request was issued for another tool")
            if now >= request.expires_at:
                raise RejectedInput("correlate", "REQUEST_EXPIRED", "the request has expired")
            attempt = _attempt(headers, request)
            state.attempt = attempt

            stage = "semantic"
            evidence = Evidence(envelope=envelope, request=request, request_id=request_id,
                                attempt=attempt, now=now, raw=raw, headers=headers,
                                ledger=ledger)
            for rule in self._rules[deciding.key]:
                rule(evidence)

            stage = "project"
            projector = self._projectors[deciding.key]
            if envelope["outcome"] == "success":
                out = projector.success(envelope, request_id)
                code = None
            else:
                code = envelope["error"]["code"]
                retryable = (bool(envelope["error"]["retryable"])
                             and code in deciding.retryable_codes
                             and request.attempt < request.max_attempts)
                out = failure(deciding.spec.tool, request_id, code, retryable)
                projector.check(out)
            agent = _encode(out)
            return Verdict(
                accepted=True, outcome=out["outcome"], tool=deciding.spec.tool,
                request_id=request_id, contract=deciding.key, stage=None, code=code,
                attempt=attempt, agent=agent, raw_sha256=digest,
                projected_sha256=hashlib.sha256(agent).hexdigest(),
                adapter=headers.get("tg-adapter"),
                adapter_version=headers.get("tg-adapter-version"),
                source=headers.get("tg-source"))
        except RejectedInput as rejection:
            return self._reject(rejection, state, digest, message)
        except Exception as exc:  # the gate must never crash on input
            internal = RejectedInput(stage, "INTERNAL_ERROR",
                                     f"{type(exc).__name__} during the {stage} stage")
            return self._reject(internal, state, digest, message)

    def _reject(self, rejection: RejectedInput, state: _State, digest: str,
                message: Message) -> Verdict:
        request_id = state.request_id or state.key
        agent = _encode(failure(state.tool, request_id, INVALID_RESPONSE, False))
        headers = state.headers
        return Verdict(
            accepted=False, outcome="failure", tool=state.tool, request_id=request_id,
            contract=state.contract, stage=rejection.stage, code=rejection.code,
            attempt=state.attempt, agent=agent, raw_sha256=digest,
            diagnostics=Diagnostics(
                stage=rejection.stage, code=rejection.code,
                message=_bounded(rejection.detail), instance_path=rejection.instance_path,
                schema_path=rejection.schema_path, keyword=rejection.keyword),
            adapter=headers.get("tg-adapter"), adapter_version=headers.get("tg-adapter-version"),
            source=headers.get("tg-source"))


class _State:
    """What is known so far about a message, for the verdict of a rejection."""

    __slots__ = ("attempt", "contract", "header_problem", "headers", "key", "request_id",
                 "tool")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.header_problem = ""
        self.key: str | None = None
        self.tool: str | None = None  # only once it names a known contract
        self.contract: str | None = None
        self.request_id: str | None = None
        self.attempt: int | None = None


def _read_headers(message: Message, state: _State) -> dict[str, str]:
    """Bound and decode the ``tg-*`` headers; defer non-fatal problems to ``contract``."""
    if len(message.headers) > MAX_HEADERS:
        raise RejectedInput("limits", "PAYLOAD_TOO_LARGE", f"more than {MAX_HEADERS} headers")
    key = message.key
    if key is not None and len(key) > MAX_KEY_BYTES:
        raise RejectedInput("limits", "PAYLOAD_TOO_LARGE", f"key exceeds {MAX_KEY_BYTES} bytes")
    headers = state.headers
    for name, value in message.headers:
        if value is None:
            value = b""
        if len(value) > MAX_HEADER_BYTES or len(name) > MAX_HEADER_BYTES:
            raise RejectedInput("limits", "PAYLOAD_TOO_LARGE",
                                f"a header exceeds {MAX_HEADER_BYTES} bytes")
        if not name.startswith("tg-"):
            continue
        if name in headers:
            state.header_problem = "a tg-* header appears more than once"
            continue
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            state.header_problem = "a tg-* header is not UTF-8"
            continue
        # isprintable() is False for every control character (and for line breaks).
        if not text.isprintable():
            state.header_problem = "a tg-* header holds control characters"
            continue
        headers[name] = text
    if key is not None:
        try:
            text = key.decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if _SAFE_ID.match(text):
            state.key = text
    return headers


def _attempt(headers: dict[str, str], request: RequestRecord) -> int:
    """The attempt this result answers: ``tg-attempt`` or the request's current one."""
    text = headers.get("tg-attempt")
    if text is None:
        return request.attempt
    if not text.isdigit() or len(text) > 4:
        raise RejectedInput("correlate", "HEADER_MISMATCH", "tg-attempt is not a small integer")
    attempt = int(text)
    if attempt != request.attempt:
        raise RejectedInput("semantic", "STALE_RESULT",
                            "the result answers another attempt than the request's current one")
    return attempt


def _schema_rejection(contract: Contract, envelope: Any) -> RejectedInput:
    """The most useful violation, masked: the branch of a ``oneOf`` the envelope meant."""
    error = next(iter(contract.validator.iter_errors(envelope)), None)
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
    return RejectedInput("schema", "SCHEMA_VIOLATION", message,
                         instance_path=_json_pointer(error.instance_path),
                         schema_path=_json_pointer(error.schema_path), keyword=keyword)


def _misses_outcome(errors: Sequence[jsonschema_rs.ValidationError]) -> bool:
    return any(list(e.instance_path) == ["outcome"] for e in errors)


def _json_pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + str(p)[:64].replace("~", "~0").replace("/", "~1") for p in path)


def _bounded(text: str) -> str:
    text = text.replace(MASK, "<value>")
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 1] + "…"


__all__ = ["DEFAULT_LIMITS", "STAGES", "Gate", "__version__"]
