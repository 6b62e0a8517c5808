"""What ``toolgate mcp-proxy`` answers the host: the ``CallToolResult`` built from a decided
envelope alone (:func:`host_result`), or one of the proxy's own fixed codes (:data:`CODES`,
:func:`error_result`). Not one byte of upstream text or structure that did not pass the gate.
"""

from __future__ import annotations

import json
from typing import Any

from toolgate.client import Answer
from toolgate.gate._mcp import CUT_MARKER

# The fixed codes of what the proxy itself answers with (isError), and whether a host may
# call again. None carries upstream text.
CODES: dict[str, bool] = {
    "UNKNOWN_TOOL": False,  # no contract for the tool, or the upstream lists no such tool
    "TOOL_DRAFT": False,  # only a draft contract: not reviewed yet
    "TOOL_DISABLED": False,  # status: disabled, reviewed and deliberately not served
    "TOOL_CHANGED": False,  # the live definition differs from the pinned one: review it again
    "TOOL_NOT_SERVED": False,  # an active contract without a pinned definition: import it again
    "INVALID_ARGUMENTS": False,  # the arguments fail the reviewed input schema (not called)
    "UPSTREAM_ERROR": True,  # the upstream answered tools/call with a protocol error
    "UPSTREAM_TIMEOUT": True,  # the upstream did not answer within --upstream-timeout
    "GATE_TIMEOUT": True,  # no decided envelope within --timeout, or no worker in the group
    "BROKER_UNAVAILABLE": True,  # the request record or result could not be published
    "PROXY_BUSY": True,  # --max-concurrent calls running and --max-queued waiting
    "TASK_REQUIRED": False,  # the tool runs only as a task (execution.taskSupport): not driven
    "NOTHING_PASSED": False,  # a success of which nothing may reach the host (never an empty success)
    "PAYLOAD_TOO_LARGE": False,  # the result is over what one intake record carries (1,000,000 bytes)
    "PROXY_ERROR": True,  # the proxy failed on the call (logged): never a JSON-RPC error
    "CONTRACTS_BEHIND": True,  # the group decides with a newer contract set than the proxy could load
}
TRUNCATED_META = "io.toolgate/truncated"
REQUEST_ID_META = "io.toolgate/request_id"


def error_result(
    code: str, retryable: bool, request_id: str | None = None, *, lines: list[str] | None = None
) -> Any:
    """An ``isError`` result carrying only a fixed code and the retryable flag (and, for
    ``INVALID_ARGUMENTS``, a second text block of lines the proxy wrote from the schema)."""
    import mcp.types as types

    body = {"error": {"code": code, "retryable": retryable}}
    content: list[Any] = [types.TextContent(text=json.dumps(body, separators=(",", ":")))]
    if lines:
        content.append(types.TextContent(text="\n".join(lines)))
    return types.CallToolResult(
        content=content,
        is_error=True,
        _meta={REQUEST_ID_META: request_id} if request_id else None,
    )


def host_result(answer: Answer, *, structured: bool = True) -> Any:
    """The host's ``CallToolResult``, built from the decided envelope alone.

    ``structured`` is False for a text-only contract (no projected ``data``): its envelope's
    ``data`` is the empty object, which the host gets neither as ``structuredContent`` (the
    tool is listed without an output schema) nor as a text block; only the gate's bounded
    ``untrusted_text`` reaches it.
    """
    import mcp.types as types

    meta: dict[str, Any] = {REQUEST_ID_META: answer.request_id}
    if answer.outcome != "success":
        return error_result(answer.code or "INVALID_RESPONSE", answer.retryable, answer.request_id)
    data = answer.data if structured else None
    content: list[Any] = []
    if data is not None:
        content.append(types.TextContent(text=json.dumps(data, separators=(",", ":"), ensure_ascii=False)))
    for text in (answer.untrusted_text or {}).values():
        # The upstream's text, for the person, not the model (MCP content annotations).
        content.append(types.TextContent(text=text, annotations=types.Annotations(audience=["user"])))
        if CUT_MARKER.search(text):
            # Only toolgate's cut ends so: the gate rewrites an upstream imitation of it.
            meta[TRUNCATED_META] = True
    return types.CallToolResult(content=content, structured_content=data, _meta=meta)


def nothing_passed(result: Any) -> bool:
    """Whether a host result is a success carrying nothing: no content, no structured data."""
    return not result.is_error and not result.content and not result.structured_content
