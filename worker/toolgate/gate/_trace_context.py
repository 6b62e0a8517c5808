"""W3C Trace Context carried from an intake record to the records its decision writes.

Adapters and agent platforms trace every hop: the ``traceparent`` and ``tracestate``
headers of an intake record (or, for an MCP result that carries none, the same two
members of the result's ``_meta``) are copied to the agent, quarantine and audit
records, so a trace does not stop at the gate. Both are untrusted input and are
validated strictly (https://www.w3.org/TR/trace-context/):

* ``traceparent`` is version ``00`` exactly: ``00-<32 hex>-<16 hex>-<2 hex>``, lower
  case, 55 characters, trace id and parent id not all zeros. Anything else (another
  version, upper case, extra fields, a second ``traceparent`` header) is dropped,
  never copied.
* ``tracestate`` is kept only beside a valid ``traceparent``, and only when it is a
  list of at most 32 ``key=value`` members of the W3C grammar, at most 512 characters.

Pure: no OpenTelemetry import here; :mod:`toolgate.service._otel_spans` builds spans when
tracing is on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_TRACESTATE_MAX = 512
_TRACESTATE_MEMBERS = 32
# key: simple-key or tenant@system; value: printable ASCII but ',' and '=', no trailing space.
_MEMBER = re.compile(
    r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)


class TraceContext(msgspec.Struct, frozen=True, gc=False):
    """A validated W3C trace context."""

    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        """The 32 hex digits of the trace id."""
        return self.traceparent[3:35]

    @property
    def parent_id(self) -> str:
        """The 16 hex digits of the parent (span) id."""
        return self.traceparent[36:52]

    @property
    def sampled(self) -> bool:
        """The sampled flag of ``trace-flags``."""
        return bool(int(self.traceparent[53:55], 16) & 1)

    def headers(self) -> list[tuple[str, bytes]]:
        """The Kafka headers carrying this context."""
        out = [(TRACEPARENT, self.traceparent.encode())]
        if self.tracestate is not None:
            out.append((TRACESTATE, self.tracestate.encode()))
        return out


def valid_traceparent(text: str) -> bool:
    """True when ``text`` is a version-00 ``traceparent`` with non-zero ids."""
    match = _TRACEPARENT.fullmatch(text)
    return match is not None and match[1] != _ZERO_TRACE and match[2] != _ZERO_SPAN


def valid_tracestate(text: str) -> bool:
    """True when ``text`` is a W3C ``tracestate`` list within toolgate's bounds."""
    if not text or len(text) > _TRACESTATE_MAX:
        return False
    members = [m.strip(" \t") for m in text.split(",")]
    members = [m for m in members if m]  # empty list members are allowed and ignored
    if not members or len(members) > _TRACESTATE_MEMBERS:
        return False
    keys = set()
    for member in members:
        if _MEMBER.fullmatch(member) is None:
            return False
        key = member.partition("=")[0]
        if key in keys:
            return False
        keys.add(key)
    return True


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def make_context(traceparent: Any, tracestate: Any) -> TraceContext | None:
    """A context from two raw values (bytes or text), or None when ``traceparent`` is not valid."""
    parent = _text(traceparent)
    if parent is None or not valid_traceparent(parent):
        return None
    state = _text(tracestate)
    return TraceContext(parent, state if state is not None and valid_tracestate(state) else None)


def from_headers(headers: Iterable[tuple[str, bytes | None]]) -> TraceContext | None:
    """The context of an intake record's headers; None when absent, repeated or malformed."""
    # One pass, counting: runs for every decision.
    parent: bytes | None = None
    state: bytes | None = None
    parents = states = 0
    for name, value in headers:
        if name == TRACEPARENT:
            parents += 1
            parent = value
        elif name == TRACESTATE:
            states += 1
            state = value
    if parents != 1:
        return None  # a second traceparent: which one is the parent is anyone's guess
    return make_context(parent, state if states == 1 else None)


def from_meta(meta: Any) -> TraceContext | None:
    """The context of an MCP ``_meta`` object (``traceparent``/``tracestate`` members)."""
    if not isinstance(meta, Mapping):
        return None
    return make_context(meta.get(TRACEPARENT), meta.get(TRACESTATE))


__all__ = [
    "TRACEPARENT",
    "TRACESTATE",
    "TraceContext",
    "from_headers",
    "from_meta",
    "make_context",
    "valid_traceparent",
    "valid_tracestate",
]
