"""Semantic rules: what a schema cannot say, checked against the request and the clock.

Every rule is a callable ``rule(evidence) -> None`` that raises
:class:`~worker._errors.RejectedInput` (stage ``semantic``) to reject. Rules with
settings are small classes built once per contract from its ``contract.yaml``;
the gate runs them in DESIGN.md's order: bindings, freshness, identifier
ownership, adapter signature, one accepted result per request attempt.

Rules that read ``/data`` apply to success envelopes only: a validated failure
envelope has no data to bind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from worker._contracts import MISSING, Bind, Contract, Freshness, OwnedId, parse_pointer, resolve
from worker._errors import RejectedInput
from worker._records import RequestRecord
from worker._signing import Keyring, decode_signature, signed_message

Ledger: TypeAlias = Callable[[str, int], bool]
"""``ledger(request_id, attempt)`` is True when a result was already accepted for it."""


class Evidence:
    """Everything a rule may look at for one result."""

    __slots__ = ("attempt", "envelope", "headers", "ledger", "now", "raw", "request", "request_id")

    def __init__(self, *, envelope: Any, request: RequestRecord, request_id: str, attempt: int,
                 now: datetime, raw: bytes, headers: Mapping[str, str],
                 ledger: Ledger | None) -> None:
        self.envelope = envelope
        self.request = request
        self.request_id = request_id
        self.attempt = attempt
        self.now = now
        self.raw = raw
        self.headers = headers
        self.ledger = ledger

    @property
    def is_success(self) -> bool:
        """The envelope carries data (not a failure)."""
        return bool(self.envelope.get("outcome") == "success")


SemanticRule: TypeAlias = Callable[[Evidence], None]


def _reject(code: str, message: str, pointer: str = "") -> RejectedInput:
    return RejectedInput("semantic", code, message, instance_path=pointer)


class BindRule:
    """The result's value at ``pointer`` equals the request's ``bind[request_key]``."""

    __slots__ = ("key", "pointer", "tokens")

    def __init__(self, spec: Bind) -> None:
        self.pointer = spec.pointer
        self.tokens = parse_pointer(spec.pointer)
        self.key = spec.request_key

    def __call__(self, evidence: Evidence) -> None:
        if not evidence.is_success:
            return
        expected = evidence.request.bind.get(self.key, MISSING)
        if expected is MISSING:
            raise _reject("BINDING_MISMATCH", f"the request binds no {self.key!r}", self.pointer)
        actual = resolve(evidence.envelope, self.tokens)
        # type() equality first: True must not bind to 1, nor 1 to "1".
        if type(actual) is not type(expected) or actual != expected:
            raise _reject("BINDING_MISMATCH",
                          f"value does not match the request's {self.key!r}", self.pointer)


def parse_timestamp(value: Any) -> datetime | None:
    """An RFC 3339 date-time with an offset, or None."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


class FreshnessRule:
    """The timestamp at ``pointer`` is neither older than ``max_age`` nor too far ahead."""

    __slots__ = ("max_age", "max_future", "pointer", "tokens")

    def __init__(self, spec: Freshness) -> None:
        self.pointer = spec.pointer
        self.tokens = parse_pointer(spec.pointer)
        self.max_age = timedelta(seconds=spec.max_age_seconds)
        self.max_future = timedelta(seconds=spec.max_future_skew_seconds)

    def __call__(self, evidence: Evidence) -> None:
        if not evidence.is_success:
            return
        stamp = parse_timestamp(resolve(evidence.envelope, self.tokens))
        if stamp is None:
            raise _reject("STALE_RESULT", "timestamp missing or not RFC 3339", self.pointer)
        if stamp > evidence.now + self.max_future:
            raise _reject("FUTURE_TIMESTAMP",
                          f"timestamp is more than {self.max_future.total_seconds():g}s ahead",
                          self.pointer)
        if evidence.now - stamp > self.max_age:
            raise _reject("STALE_RESULT",
                          f"timestamp is older than {self.max_age.total_seconds():g}s", self.pointer)


class OwnedIdRule:
    """The identifier at ``pointer`` belongs to what the request named."""

    __slots__ = ("key", "match", "pointer", "tokens")

    def __init__(self, spec: OwnedId) -> None:
        self.pointer = spec.pointer
        self.tokens = parse_pointer(spec.pointer)
        self.key = spec.request_key
        self.match = spec.match

    def __call__(self, evidence: Evidence) -> None:
        if not evidence.is_success:
            return
        owned = evidence.request.bind.get(self.key, MISSING)
        actual = resolve(evidence.envelope, self.tokens)
        if not isinstance(actual, str):
            raise _reject("BINDING_MISMATCH", "identifier missing", self.pointer)
        if self.match == "member":
            ok = isinstance(owned, list) and actual in owned
        else:
            ok = isinstance(owned, str) and bool(owned) and actual.startswith(owned)
        if not ok:
            raise _reject("BINDING_MISMATCH",
                          f"identifier does not belong to the request's {self.key!r}", self.pointer)


class SignatureRule:
    """``tg-signature`` is the named key's signature, and the key is ``tg-adapter``'s."""

    __slots__ = ("algorithm", "key_id", "keyring")

    def __init__(self, key_id: str, algorithm: str, keyring: Keyring) -> None:
        self.key_id = key_id
        self.algorithm = algorithm
        self.keyring = keyring

    def __call__(self, evidence: Evidence) -> None:
        key = self.keyring.get(self.key_id)
        if key is None or key.algorithm != self.algorithm:
            raise _reject("BAD_SIGNATURE", f"key {self.key_id!r} is not configured")
        if evidence.headers.get("tg-adapter") != key.adapter:
            raise _reject("BAD_SIGNATURE", "tg-adapter is not the key's adapter")
        header = evidence.headers.get("tg-signature")
        if not header:
            raise _reject("BAD_SIGNATURE", "tg-signature is missing")
        try:
            signature = decode_signature(header.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise _reject("BAD_SIGNATURE", "tg-signature is not base64") from None
        if not key.verify(signed_message(evidence.request_id, evidence.raw), signature):
            raise _reject("BAD_SIGNATURE", "signature does not verify")


def duplicate_rule(evidence: Evidence) -> None:
    """One accepted result per request attempt."""
    if evidence.ledger is not None and evidence.ledger(evidence.request_id, evidence.attempt):
        raise _reject("DUPLICATE_RESULT",
                      f"a result was already accepted for attempt {evidence.attempt}")


def build_rules(contract: Contract, keyring: Keyring) -> tuple[SemanticRule, ...]:
    """The contract's semantic rules, in DESIGN.md's order."""
    rules: list[SemanticRule] = []
    rules += [BindRule(r) for r in contract.rules if isinstance(r, Bind)]
    rules += [FreshnessRule(r) for r in contract.rules if isinstance(r, Freshness)]
    rules += [OwnedIdRule(r) for r in contract.rules if isinstance(r, OwnedId)]
    if contract.spec.signature is not None:
        rules.append(SignatureRule(contract.spec.signature.key_id,
                                   contract.spec.signature.algorithm, keyring))
    rules.append(duplicate_rule)
    return tuple(rules)
