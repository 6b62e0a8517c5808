"""Contract fixtures: every accept and reject example run through the real gate.

The fixture format is documented in ``contracts/README.md``. A fixture file that
cannot be read is itself a failure naming the file and the key at fault, and so is
a contract version with no fixture at all.

A ``retired`` version keeps its fixtures: they record what it accepted and rejected
while it decided. They are run against that version as it was (as if it still
decided), so they stay true and never have to be deleted; that the live selection
refuses a retired version (``UNKNOWN_CONTRACT_VERSION``) is the gate's own test.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from toolgate._codes import STAGES, is_code, is_stage
from toolgate._errors import ContractError
from toolgate.gate._contracts import (
    MISSING,
    STRUCTURED_VALUE,
    WRAPPED_MEMBER,
    Bind,
    Contract,
    ContractSet,
    OwnedId,
    parse_pointer,
    resolve,
)
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message, RequestRecord, Verdict
from toolgate.gate._sensitive import CLASSES
from toolgate.gate._signing import Keyring, signed_message_for

FIXTURES_KEYRING = "fixtures-keyring.toml"
_KEYS = {
    "description",
    "value",
    "raw",
    "raw_base64",
    "headers",
    "key",
    "request",
    "now",
    "sign",
    "already_accepted",
    "expect",
    "bind_from_rules",
}


@dataclass(frozen=True)
class Case:
    """One fixture, ready to evaluate."""

    path: Path
    contract: Contract
    kind: str  # "accept" or "reject"
    description: str
    message: Message
    request: RequestRecord | None
    now: datetime
    already_accepted: bool
    expect: dict[str, Any]

    @property
    def name(self) -> str:
        """``tool@vN/kind/file`` for reports and test ids."""
        return f"{self.contract.key}/{self.kind}/{self.path.stem}"


@dataclass(frozen=True)
class Outcome:
    """A fixture's verdict and whether it met the expectation."""

    case: Case
    verdict: Verdict
    problem: str  # empty when the fixture passed

    @property
    def ok(self) -> bool:
        """True when the verdict met the fixture's expectation."""
        return not self.problem


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise ContractError(str(path), "", f"cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise ContractError(str(path), "", f"not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ContractError(str(path), "", "a fixture must be a JSON object")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ContractError(str(path), f"$.{unknown[0]}", "unknown fixture key")
    return data


def load_cases(contract: Contract, keyring: Keyring) -> list[Case]:
    """Every fixture of one contract version.

    Raises:
        ContractError: a fixture that cannot be read, naming the file and key.
    """
    folder = contract.folder / "fixtures"
    defaults_file = folder / "defaults.json"
    defaults = _read_json(defaults_file) if defaults_file.exists() else {}
    cases = []
    for kind in ("accept", "reject"):
        for path in sorted((folder / kind).glob("*.json")):
            cases.append(_case(path, kind, contract, defaults, keyring))
    return cases


def _case(path: Path, kind: str, contract: Contract, defaults: dict[str, Any], keyring: Keyring) -> Case:
    data = _read_json(path)
    merged = {**defaults, **data}
    headers: dict[str, Any] = {
        "tg-tool": contract.spec.tool,
        **defaults.get("headers", {}),
        **data.get("headers", {}),
    }
    where = str(path)
    present = [k for k in ("value", "raw", "raw_base64") if k in data]
    if len(present) != 1:
        raise ContractError(where, "$", "give exactly one of value, raw, raw_base64")
    if "value" in data:
        raw = msgspec.json.encode(data["value"])
    elif "raw" in data:
        raw = str(data["raw"]).encode("utf-8")
    else:
        raw = base64.b64decode(data["raw_base64"])
    request = None
    if merged.get("request") is not None:
        try:
            request = msgspec.convert(merged["request"], RequestRecord, strict=False)
        except msgspec.ValidationError as exc:
            raise ContractError(where, "$.request", str(exc)) from exc
    if request is not None and merged.get("bind_from_rules") is True and "value" in data:
        request = _bind_from_rules(contract, request, data["value"])
    elif "bind_from_rules" in merged and not isinstance(merged["bind_from_rules"], bool):
        raise ContractError(where, "$.bind_from_rules", "true or false")
    sign = merged.get("sign")
    if sign:
        spec = contract.spec.signature
        key = keyring.get(spec.key_id) if spec else None
        if key is None:
            key_id = spec.key_id if spec else "?"
            raise ContractError(
                where,
                "$.sign",
                f"no signature key {key_id!r} for this contract in the keyring "
                "(--keyring FILE or TOOLGATE_KEYRING names the keyring that holds it)",
            )
        # The attempt the gate binds: tg-attempt when given, else the request's current one.
        attempt = request.attempt if request is not None else 1
        if str(headers.get("tg-attempt", "")).isdigit():
            attempt = int(headers["tg-attempt"])
        scheme = "v2"
        if isinstance(sign, dict):  # {"attempt": n, "scheme": "v1"}: sign something else on purpose
            attempt = int(sign.get("attempt", attempt))
            scheme = str(sign.get("scheme", scheme))
            if scheme not in ("v1", "v2"):
                raise ContractError(where, "$.sign.scheme", "v1 or v2")
        signed = signed_message_for(scheme, str(headers.get("tg-request-id", "")), attempt, raw)
        headers["tg-signature"] = base64.b64encode(key.sign(signed)).decode("ascii")
    try:
        now = datetime.fromisoformat(str(merged["now"]))
    except (KeyError, ValueError) as exc:
        raise ContractError(where, "$.now", "needs an RFC 3339 `now`") from exc
    expect = merged.get("expect", {})
    if kind == "reject" and not {"stage", "code"} <= set(expect):
        raise ContractError(where, "$.expect", "reject fixtures name the stage and code")
    if "stage" in expect and not is_stage(expect["stage"]):
        raise ContractError(where, "$.expect.stage", f"not a stage: one of {', '.join(STAGES)}")
    if kind == "reject" and not is_code(expect["code"]):
        raise ContractError(where, "$.expect.code", "not a rejection code")
    if "redacted" in expect:
        _check_redacted(expect["redacted"], kind, where)
    key = merged.get("key", headers.get("tg-request-id"))
    message = Message(
        key=None if key is None else str(key).encode("utf-8"),
        value=raw,
        headers=[(name, str(value).encode("utf-8")) for name, value in headers.items() if value is not None],
        origin=str(path),
    )
    return Case(
        path=path,
        contract=contract,
        kind=kind,
        description=str(merged.get("description", "")),
        message=message,
        request=request,
        now=now,
        already_accepted=bool(merged.get("already_accepted")),
        expect=expect,
    )


def _bind_from_rules(contract: Contract, request: RequestRecord, value: Any) -> RequestRecord:
    """The request record a ``bind_from_rules`` fixture stands for: each ``bind`` and
    ``owned_id`` rule's request key, when the fixture's request does not give it, set from
    the result's value at the rule's pointer (a list of it for ``owned_id`` ``member``).

    So a generated accept fixture keeps passing when a person adds a rule: the request
    asked for what the result holds. A key the request gives is left as given, and a
    pointer the value does not reach is left unbound (the rule then rejects, as it should).
    """
    if contract.spec.mcp is not None:
        envelope = {"data": value.get("structuredContent")} if isinstance(value, dict) else {}
        if contract.spec.mcp.structured_content == STRUCTURED_VALUE and envelope:
            envelope = {"data": {WRAPPED_MEMBER: envelope["data"]}}
    else:
        envelope = value
    bind = dict(request.bind)
    for rule in contract.spec.rules:
        if not isinstance(rule, Bind | OwnedId) or rule.request_key in bind:
            continue
        try:
            found = resolve(envelope, parse_pointer(rule.pointer))
        except ValueError:
            continue
        if isinstance(rule, OwnedId) and rule.match == "member":
            if isinstance(found, str):
                bind[rule.request_key] = [found]
        elif isinstance(found, str | int | bool) and found is not MISSING:
            bind[rule.request_key] = found
    return msgspec.structs.replace(request, bind=bind)


def run_case(gate: Gate, case: Case, *, contract: Contract | None = None) -> Outcome:
    """Evaluate one fixture against the real gate (``contract``: this version, not the selected one)."""
    ledger = (lambda _rid, _attempt: True) if case.already_accepted else None
    # Active versions are chosen from the headers as in production, so fixtures also
    # exercise version selection; shadow and retired ones are evaluated directly.
    forced = contract or (case.contract if case.contract.spec.status != "active" else None)
    verdict = gate.evaluate(case.message, case.request, case.now, ledger, contract=forced)
    problem = ""
    if case.kind == "accept":
        if verdict.accepted and verdict.contract != case.contract.key:
            problem = f"accepted by {verdict.contract}, not by {case.contract.key}"
            problem += _superseded(gate, case, verdict.contract)
        elif not verdict.accepted:
            problem = f"expected accept, got {verdict.stage}/{verdict.code}"
        else:
            agent = json.loads(verdict.agent)
            for field in ("outcome", "code", "retryable"):
                want = case.expect.get(field)
                got = agent["outcome"] if field == "outcome" else agent.get("error", {}).get(field)
                if field in case.expect and got != want:
                    problem = f"expected {field}={want!r}, got {got!r}"
            problem = problem or _redactions(agent, case.expect.get("redacted", {}))
    else:
        want = (case.expect["stage"], case.expect["code"])
        if verdict.accepted:
            problem = f"expected {want[0]}/{want[1]}, but it was accepted"
        elif (verdict.stage, verdict.code) != want:
            problem = f"expected {want[0]}/{want[1]}, got {verdict.stage}/{verdict.code}"
    return Outcome(case, verdict, problem)


def _check_redacted(redacted: Any, kind: str, where: str) -> None:
    """``expect.redacted``: {agent envelope pointer: [class, ...]}, accept fixtures only."""
    if kind != "accept":
        raise ContractError(where, "$.expect.redacted", "only accept fixtures expect a redaction")
    if not isinstance(redacted, dict) or not all(
        isinstance(p, str) and p.startswith("/") and isinstance(c, list) and c and set(c) <= set(CLASSES)
        for p, c in redacted.items()
    ):
        raise ContractError(
            where,
            "$.expect.redacted",
            "a pointer into the agent envelope (/data/..., /untrusted_text/...) -> a list of classes: "
            + ", ".join(CLASSES),
        )


def _redactions(agent: Any, redacted: dict[str, list[str]]) -> str:
    """What the agent envelope lacks of the redactions a fixture expects ("" when none)."""
    for pointer, classes in redacted.items():
        found = resolve(agent, parse_pointer(pointer))
        text = found if isinstance(found, str) else ""
        missing = [c for c in classes if f"[redacted:{c}]" not in text]
        if missing:
            return f"expected {pointer} to hold [redacted:{missing[0]}], got {text[:120]!r}"
    return ""


def _superseded(gate: Gate, case: Case, decider: str | None) -> str:
    """What to do when a newer version of the fixture's tool now decides its adapter versions.

    A new version whose ``adapter_versions`` overlap an older active one's takes their traffic
    over (the highest matching version decides), so the older version's accept fixtures land on
    it: the older version is done deciding and should say so, or the newer one is not ready to.
    """
    newer = next((c for c in gate.contracts if c.key == decider), None)
    mine = case.contract.spec
    if (
        newer is None
        or newer.spec.tool != mine.tool
        or (newer.spec.version, newer.spec.minor)
        <= (
            mine.version,
            mine.minor,
        )
    ):
        return ""
    adapter = next(
        (v.decode("utf-8", "replace") for k, v in case.message.headers if k == "tg-adapter-version"), ""
    )
    return (
        f": {newer.key} now decides the adapter versions {case.contract.key} serves"
        f" (tg-adapter-version {adapter!r}); if {case.contract.key} is done deciding, set"
        f" `status: retired` in {case.contract.path} (its fixtures then run as it decided) or narrow"
        f" its adapter_versions; if {newer.key} is not ready to decide, set `status: shadow` in"
        f" {newer.path} until it is promoted"
    )


def fixtures_keyring(root: str | Path) -> Keyring:
    """The sample keyring beside the contracts, or an empty one."""
    path = Path(root) / FIXTURES_KEYRING
    return Keyring.load(path, environ={}) if path.exists() else Keyring()


def without_fixtures(contracts: ContractSet) -> list[Contract]:
    """Contract versions with no accept and no reject fixture (``contracts test`` fails them)."""
    folders = ("accept", "reject")
    return [c for c in contracts if not any(any((c.folder / "fixtures" / k).glob("*.json")) for k in folders)]


def as_deciding(contract: Contract) -> Contract:
    """A retired version as it was while it decided (``active``), for its fixtures."""
    spec = msgspec.structs.replace(contract.spec, status="active")
    return Contract(spec, contract.folder, contract.schema)


def iter_outcomes(contracts: ContractSet, keyring: Keyring) -> Iterator[Outcome]:
    """Run every fixture of every contract version (retired ones as they were: see above)."""
    gate = Gate(contracts, keyring)
    retired = [c for c in contracts if c.spec.status == "retired"]
    # Each retired version beside the others, as if it still decided.
    past = {
        c.key: Gate(ContractSet([as_deciding(c) if o is c else o for o in contracts]), keyring)
        for c in retired
    }
    for contract in contracts:
        for case in load_cases(contract, keyring):
            if contract.key in past:
                then = past[contract.key]
                revived = next(c for c in then.contracts if c.key == contract.key)
                outcome = run_case(then, case, contract=revived)
                yield Outcome(case, outcome.verdict, outcome.problem)
            else:
                yield run_case(gate, case)
