"""``toolgate mcp-proxy``'s requests to the upstream: each result exactly as the upstream sent
it (the JSON-RPC ``result`` object and its very bytes, before the SDK's own parse and
validation: :func:`raw_exchange`), a ``tools/call`` within ``--upstream-timeout`` with
the host's progress relayed (:func:`call_tool`), and the result's bytes bounded for the
record that carries them (:func:`bounded`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from toolgate._errors import ConfigError
from toolgate.client import call_tool_result_bytes
from toolgate.mcp import _wire
from toolgate.mcp._progress import HOST_PROGRESS, PROGRESS_CEILING_S, ProgressRelay, extending

_log = logging.getLogger("toolgate.mcp_proxy")


# The largest intake record the proxy publishes: under the Kafka producer's default
# max.request.size (1 MiB) with room for the headers. A result over its contract's
# max_bytes is cut to max_bytes + 1 bytes, within this, so the gate decides it.
MAX_RECORD_BYTES = 1_000_000


async def raw_request(
    session: Any, request: Any, *, on_progress: ProgressRelay | None = None
) -> dict[str, Any]:
    """One request's result as the SDK read it (:func:`raw_exchange`, without the bytes)."""
    result, _ = await raw_exchange(session, request, on_progress=on_progress)
    return result


async def raw_exchange(
    session: Any, request: Any, *, on_progress: ProgressRelay | None = None
) -> tuple[dict[str, Any], bytes | None]:
    """One request's result exactly as the upstream sent it: the JSON-RPC ``result`` object,
    without the SDK's own result validation and per-version member filtering (which would
    drop ``resultType``, or refuse an array ``structuredContent`` before the gate sees it),
    and the very bytes of that ``result`` member (:mod:`toolgate.mcp._wire`; None when
    the upstream is reached without a byte stream, in process).

    It stamps the request as the SDK's ``send_request`` does (protocol version, headers),
    then sends it through the session's dispatcher with a request id of the proxy's own.

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
    if on_progress is not None:  # the dispatcher sets the progressToken and routes the notifications
        opts["on_progress"] = on_progress
    headers = opts.setdefault("headers", {})
    key = getattr(type(request), "name_param", None)
    if key is not None and MCP_NAME_HEADER not in headers:
        name = (data.get("params") or {}).get(key)
        if isinstance(name, str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
    opts["request_id"] = request_id = _wire.new_request_id()
    try:
        raw = await dispatcher.send_raw_request(data["method"], data.get("params"), opts)
    finally:
        body = _wire.take(request_id)
    if not isinstance(raw, dict):
        raise TypeError("the result is not a JSON object")
    return raw, body


async def call_tool(
    session: Any,
    name: str,
    arguments: dict[str, Any] | None,
    trace: dict[str, str],
    timeout_s: float,
    progress_ceiling_s: float = PROGRESS_CEILING_S,
) -> tuple[dict[str, Any], bytes | None] | str:
    """The upstream's ``tools/call`` result as it came on the wire (parsed, and its bytes), or
    the fixed code of a failure; within ``timeout_s`` (``--upstream-timeout``), which each
    progress the upstream reports within the call's budget extends, to at most
    ``progress_ceiling_s`` in all (relayed to the host's call, :data:`HOST_PROGRESS`)."""
    import mcp.types as types
    from mcp.shared.exceptions import MCPError

    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if trace:
        params["_meta"] = dict(trace)
    request = types.CallToolRequest(params=types.CallToolRequestParams.model_validate(params))
    relay = HOST_PROGRESS.get()
    try:
        async with asyncio.timeout(timeout_s) as deadline:
            on_progress = extending(deadline, timeout_s, relay, ceiling_s=progress_ceiling_s)
            return await raw_exchange(session, request, on_progress=on_progress)
    except TimeoutError:
        return "UPSTREAM_TIMEOUT"
    except MCPError as exc:
        if exc.code == _wire.OVERSIZED:
            _log.warning("upstream tools/call %s: %s", name, exc.error.message)
            return "PAYLOAD_TOO_LARGE"
        _log.warning("upstream tools/call %s failed: %s", name, type(exc).__name__)
        return "UPSTREAM_ERROR"
    except Exception as exc:  # a protocol error or a broken upstream: its text stays here
        _log.warning("upstream tools/call %s failed: %s", name, type(exc).__name__)
        return "UPSTREAM_ERROR"


def bounded(raw: tuple[dict[str, Any], bytes | None], max_bytes: int, tool: str) -> bytes | None:
    """The result's bytes as they came (re-encoded only when the upstream was reached
    without a byte stream). Over ``max_bytes``, cut to ``max_bytes + 1`` so the gate
    decides it ``PAYLOAD_TOO_LARGE`` from its size alone; None when that is over what one
    record carries (:data:`MAX_RECORD_BYTES`): the proxy answers ``PAYLOAD_TOO_LARGE``."""
    parsed, exact = raw
    body = exact if exact is not None else call_tool_result_bytes(parsed)
    if len(body) <= max_bytes and len(body) <= MAX_RECORD_BYTES:
        return body
    if max_bytes + 1 <= MAX_RECORD_BYTES:
        _log.warning(
            "a result of %s is %d bytes: published cut to %d for the gate", tool, len(body), max_bytes + 1
        )
        return body[: max_bytes + 1]
    _log.warning(
        "a result of %s is %d bytes, over the %d a record carries: answered PAYLOAD_TOO_LARGE",
        tool,
        len(body),
        MAX_RECORD_BYTES,
    )
    return None
