"""The upstream's JSON-RPC results as the bytes that came, for ``toolgate mcp-proxy``.

The MCP SDK parses each message it reads into Python values: duplicate member names keep
the last, ``1e400`` becomes ``inf``. What the proxy publishes to intake must be what the
upstream sent, so the gate decides on those very bytes as ``toolgate check`` would. The
proxy therefore sends its own requests with request ids of its own (:func:`new_request_id`)
and, beside the SDK's parse, keeps the exact bytes of the ``result`` member of the one
response carrying each such id (:func:`capture`; msgspec's ``Raw`` slices them from the
message without reading them as values).

The hook sits where the SDK's client transports (stdio, streamable HTTP) read a message:
the JSON-RPC message parser those modules look up (:func:`install`). The SDK offers no
public seam for it; when the members are not where this SDK version keeps them, nothing is
installed and the proxy falls back to the parsed result (said once in the log). The hook is
bounded: bytes are kept only for ids the proxy is waiting on (at most one message each),
and a message over :data:`MAX_MESSAGE_BYTES` is never parsed into values at all: the
waiting request fails with :data:`OVERSIZED` instead.
"""

from __future__ import annotations

import itertools
import logging
import secrets
from typing import Any

import msgspec

_log = logging.getLogger("toolgate.mcp_proxy")

# The largest upstream message the proxy reads into values: above every contract's
# max_bytes ceiling (8 MiB) with room for the JSON-RPC frame, and far below what a host
# can make the proxy hold (a listing of this size is refused by its own bound first).
MAX_MESSAGE_BYTES = 9 * 1024 * 1024
# The JSON-RPC error code the hook answers a waiting request with when the upstream's
# response was over MAX_MESSAGE_BYTES (in the implementation-defined server range).
OVERSIZED = -32090
_PREFIX = "toolgate-"
_counter = itertools.count(1)
_session = secrets.token_hex(6)
# request id -> None (waiting) or the bytes of its result; only ids of new_request_id.
_waiting: dict[str, bytes | None] = {}
_installed: list[str] = []


class _Frame(msgspec.Struct):
    """The members of a JSON-RPC message the hook reads: the id, and the result's bytes."""

    id: Any = None
    result: msgspec.Raw = msgspec.Raw(b"")


def new_request_id() -> str:
    """A request id of the proxy's own, whose response's bytes :func:`capture` keeps."""
    rid = f"{_PREFIX}{_session}-{next(_counter)}"
    _waiting[rid] = None
    return rid


def take(request_id: str) -> bytes | None:
    """The result bytes captured for ``request_id`` (None: none came through the hook, e.g.
    an in-process upstream); forgets the id."""
    return _waiting.pop(request_id, None)


def forget(request_id: str) -> None:
    """Stop waiting for ``request_id`` (its request failed or was cancelled)."""
    _waiting.pop(request_id, None)


def _frame(data: str | bytes) -> _Frame | None:
    try:
        return msgspec.json.decode(data, type=_Frame)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # the SDK's own parse says what is wrong with it


def capture(data: str | bytes) -> Any:
    """Before the SDK parses ``data``: None to let it, or the message to use instead (a
    JSON-RPC error for a waiting request whose response is over :data:`MAX_MESSAGE_BYTES`).
    Keeps the result bytes of a response to a waiting request (the first one only)."""
    if not _waiting:
        return None
    # Every message is read for its id while a request waits: an id spelled with escapes
    # ("toolgate\u002d...") is the same id to the SDK, so no substring test may skip it.
    frame = _frame(data)
    if frame is None or not isinstance(frame.id, str) or frame.id not in _waiting:
        return None
    if len(data) > MAX_MESSAGE_BYTES:
        import mcp.types as types

        message = f"the response is {len(data)} bytes, over the proxy's {MAX_MESSAGE_BYTES}"
        return types.JSONRPCError(
            jsonrpc="2.0", id=frame.id, error=types.ErrorData(code=OVERSIZED, message=message)
        )
    raw = bytes(frame.result)
    if raw and _waiting[frame.id] is None:
        _waiting[frame.id] = raw
    return None


class _CapturingAdapter:
    """The SDK's JSON-RPC message parser with :func:`capture` in front of it."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter

    def validate_json(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, str | bytes):
            instead = capture(data)
            if instead is not None:
                return instead
        return self.adapter.validate_json(data, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.adapter, name)


def install() -> bool:
    """Put :func:`capture` in front of the SDK client transports' message parser (once).
    Returns whether the hook is in place for both stdio and streamable HTTP."""
    if _installed:
        return "incomplete" not in _installed
    import mcp.client.stdio as stdio
    import mcp.client.streamable_http as http
    import mcp.types as types

    original = getattr(types, "jsonrpc_message_adapter", None)
    if original is not None and hasattr(original, "validate_json"):
        adapter = _CapturingAdapter(original)
        if isinstance(getattr(http, "jsonrpc_message_adapter", None), type(original)):
            setattr(http, "jsonrpc_message_adapter", adapter)  # noqa: B010 (not exported)
            _installed.append("streamable-http")
        parse = getattr(stdio, "_parse_line", None)
        session_message = getattr(stdio, "SessionMessage", None)
        if callable(parse) and session_message is not None:

            def _parse_line(line: str) -> Any:
                try:
                    message = adapter.validate_json(line, by_name=False)
                except ValueError as exc:
                    return exc
                return session_message(message)

            setattr(stdio, "_parse_line", _parse_line)  # noqa: B010 (a private member)
            _installed.append("stdio")
    if len(_installed) < 2:
        _log.warning(
            "this MCP SDK keeps its message parser elsewhere: results are published as the SDK "
            "parsed them (duplicate member names and overflowing numbers are not seen by the gate)"
        )
        _installed.append("incomplete")
    return "incomplete" not in _installed


__all__ = ["MAX_MESSAGE_BYTES", "OVERSIZED", "capture", "forget", "install", "new_request_id", "take"]
