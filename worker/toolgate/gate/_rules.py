"""Semantic rules: what a schema cannot say, checked against the request and the clock.

Every rule is a callable ``rule(evidence) -> None`` that raises
:class:`~toolgate._errors.RejectedInput` (stage ``semantic``) to reject. Rules with
settings are small classes built once per contract from its ``contract.yaml``;
the gate runs them in this order: bindings, freshness, identifier
ownership, adapter signature, ``cel`` rules (:mod:`toolgate.gate._cel`), one accepted
result per request attempt.

Rules that read ``/data`` apply to success envelopes only: a validated failure
envelope has no data to bind.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeAlias

import msgspec

from toolgate._codes import Code
from toolgate._errors import RejectedInput
from toolgate.gate._cel import CelRule, RuleSet
from toolgate.gate._contracts import (
    MISSING,
    Bind,
    Contract,
    Freshness,
    OwnedId,
    SignatureScheme,
    parse_pointer,
    resolve,
)
from toolgate.gate._records import RequestRecord
from toolgate.gate._signing import Keyring, decode_signature, signed_message_for

Ledger: TypeAlias = Callable[[str, int], bool]
"""``ledger(request_id, attempt)`` is True when a result was already accepted for it."""


class Evidence(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything a rule may look at for one result.

    A msgspec struct because one is built for every result that reaches the semantic
    stage, and that costs a fraction of a Python class taking keyword arguments. It
    lives for one evaluation and nothing it holds refers back to it, so it can stay
    out of the garbage collector (gc=False).
    """

    envelope: Any
    request: RequestRecord
    request_id: str
    attempt: int
    now: datetime
    raw: bytes
    headers: Mapping[str, str]
    ledger: Ledger | None

    @property
    def is_success(self) -> bool:
        """The envelope carries data (not a failure)."""
        return bool(self.envelope.get("outcome") == "success")


SemanticRule: TypeAlias = Callable[[Evidence], None]


def _reject(code: Code, message: str, pointer: str = "") -> RejectedInput:
    return RejectedInput("semantic", code, message, instance_path=pointer)


class BindRule:
    """The result's value at ``pointer`` equals the request's ``bind[request_key]``."""

    __slots__ = ("key", "pointer", "tokens")

    def __init__(self, spec: Bind) -> None:
        self.pointer = spec.pointer
        self.tokens = parse_pointer(spec.pointer)
        self.key = spec.request_key

    def __call__(self, evidence: Evidence) -> None:
        envelope = evidence.envelope
        if envelope.get("outcome") != "success":  # evidence.is_success, inlined: runs per result
            return
        expected = evidence.request.bind.get(self.key, MISSING)
        if expected is MISSING:
            raise _reject("BINDING_MISMATCH", f"the request binds no {self.key!r}", self.pointer)
        actual = resolve(envelope, self.tokens)
        # type() equality first: True must not bind to 1, nor 1 to "1".
        if type(actual) is not type(expected) or actual != expected:
            raise _reject(
                "BINDING_MISMATCH", f"value does not match the request's {self.key!r}", self.pointer
            )


# RFC 3339 section 5.6 date-time, exactly: 'T'/'t' separator, 'Z'/'z' or a +hh:mm offset,
# seconds 00-60 (a leap second). datetime.fromisoformat alone is both wider (it takes
# ISO 8601 week dates and basic formats) and narrower (no lowercase, no leap second).
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)  # \d is [0-9] only: "٢" is a digit to Python's default \d


def parse_timestamp(value: Any) -> datetime | None:
    """An RFC 3339 date-time as an aware datetime, or None (a leap second counts as :59.999999)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    match = _RFC3339.fullmatch(value)
    if match is None:
        return None
    # The common shapes (an upper-case 'T', 'Z' or a numeric offset, no or a 3- or 6-digit
    # fraction, no leap second) through the C parser; it reads them as the fields below
    # do (a unit test compares the two), and anything it refuses is read from the fields.
    fraction = match.group(7)
    if (
        value[10] == "T"
        and value[17:19] != "60"
        and value[-1] != "z"
        and (fraction is None or len(fraction) in (3, 6))
    ):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return _from_fields(match)


def _from_fields(match: re.Match[str]) -> datetime | None:
    """The aware datetime of an RFC 3339 match, field by field (see :func:`parse_timestamp`)."""
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    if second == "60":
        second, micro = "59", 999_999
    try:
        zone = (
            UTC
            if offset in "Zz"
            else timezone(
                (1 if offset[0] == "+" else -1) * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
            )
        )
        return datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tzinfo=zone
        )
    except ValueError:  # month 13, hour 25, an offset of 24 hours or more, ...
        return None


class FreshnessRule:
    """The timestamp at ``pointer`` is neither older than ``max_age`` nor too far ahead."""

    __slots__ = ("issued_skew", "max_age", "max_future", "pointer", "tokens")

    def __init__(self, spec: Freshness) -> None:
        self.pointer = spec.pointer
        self.tokens = parse_pointer(spec.pointer)
        self.max_age = timedelta(seconds=spec.max_age_seconds)
        self.max_future = timedelta(seconds=spec.max_future_skew_seconds)
        self.issued_skew = timedelta(seconds=spec.issued_skew_seconds)

    def __call__(self, evidence: Evidence) -> None:
        if not evidence.is_success:
            return
        stamp = parse_timestamp(resolve(evidence.envelope, self.tokens))
        if stamp is None:
            raise _reject("STALE_RESULT", "timestamp missing or not RFC 3339", self.pointer)
        if stamp > evidence.now + self.max_future:
            raise _reject(
                "FUTURE_TIMESTAMP",
                f"timestamp is more than {self.max_future.total_seconds():g}s ahead",
                self.pointer,
            )
        if evidence.now - stamp > self.max_age:
            raise _reject(
                "STALE_RESULT", f"timestamp is older than {self.max_age.total_seconds():g}s", self.pointer
            )
        if stamp < evidence.request.issued_at - self.issued_skew:
            raise _reject(
                "STALE_RESULT",
                f"timestamp is more than {self.issued_skew.total_seconds():g}s before the request was issued",
                self.pointer,
            )


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
            raise _reject(
                "BINDING_MISMATCH", f"identifier does not belong to the request's {self.key!r}", self.pointer
            )


class SignatureRule:
    """``tg-signature`` is the named key's signature, and the key is ``tg-adapter``'s."""

    __slots__ = ("algorithm", "key_id", "keyring", "schemes")

    def __init__(
        self, key_id: str, algorithm: str, keyring: Keyring, schemes: tuple[SignatureScheme, ...] = ("v2",)
    ) -> None:
        self.key_id = key_id
        self.algorithm = algorithm
        self.keyring = keyring
        self.schemes = schemes

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
        for scheme in self.schemes:
            if key.verify(
                signed_message_for(scheme, evidence.request_id, evidence.attempt, evidence.raw), signature
            ):
                return
        raise _reject("BAD_SIGNATURE", "signature does not verify")


class CelRules:
    """The contract's ``cel`` rules, in their order (:class:`~toolgate.gate._cel.RuleSet`)."""

    __slots__ = ("rules",)

    def __init__(self, rules: tuple[CelRule, ...]) -> None:
        self.rules = RuleSet(rules)

    def __call__(self, evidence: Evidence) -> None:
        envelope = evidence.envelope
        if envelope.get("outcome") != "success":
            return
        self.rules.check(
            envelope.get("data"), evidence.request, evidence.headers.get("tg-adapter-version"), evidence.now
        )


def duplicate_rule(evidence: Evidence) -> None:
    """One accepted result per request attempt."""
    if evidence.ledger is not None and evidence.ledger(evidence.request_id, evidence.attempt):
        raise _reject("DUPLICATE_RESULT", f"a result was already accepted for attempt {evidence.attempt}")


def build_rules(contract: Contract, keyring: Keyring) -> tuple[SemanticRule, ...]:
    """The contract's semantic rules, in the order the module docstring gives."""
    rules: list[SemanticRule] = []
    rules += [BindRule(r) for r in contract.rules if isinstance(r, Bind)]
    rules += [FreshnessRule(r) for r in contract.rules if isinstance(r, Freshness)]
    rules += [OwnedIdRule(r) for r in contract.rules if isinstance(r, OwnedId)]
    signature = contract.spec.signature
    if signature is not None:
        rules.append(SignatureRule(signature.key_id, signature.algorithm, keyring, signature.schemes))
    if contract.cel_rules:
        rules.append(CelRules(contract.cel_rules))
    rules.append(duplicate_rule)
    return tuple(rules)
