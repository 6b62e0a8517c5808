"""The MCP result envelope: a ``CallToolResult`` to toolgate's envelope. Pure: no Kafka.

A contract with an ``mcp:`` section declares that its tool answers with a Model Context
Protocol ``CallToolResult`` (``tools/call`` result) as the intake value. The gate reads
it at the ``parse`` stage and builds the envelope its schema validates:

* ``isError`` absent or false: ``{tool, request_id, outcome: "success", data:
  structuredContent}``; the schema validates ``structuredContent`` and projection reads
  it. No ``structuredContent`` means no ``data``: a ``schema`` rejection.
* ``isError: true``: ``{..., outcome: "failure", error: {code, retryable}}`` with the
  code and retryable flag the contract maps (MCP has no machine-readable error code);
  the retry policy then applies as for any failure envelope.
* ``content`` text blocks become one bounded ``untrusted_text`` string, never ``data``;
  other block types (image, audio, resources) never reach the agent.
* ``_meta`` is dropped (its ``traceparent``/``tracestate`` are read as trace context).
* ``resultType`` other than ``complete`` (``input_required``, a task): ``RESULT_NOT_COMPLETE``.
* a top-level member MCP does not define, or a member of the wrong type:
  ``MALFORMED_ENVELOPE``.
* a text block that claims to be the JSON form of ``structuredContent`` (its text is a
  JSON object or array) and is not equal to it: ``CONFLICTING_VIEWS``. Two views of
  one result that differ are the hazard duplicate member names are: a reader that
  takes the text sees another result than the one validated. A text block equal to
  ``structuredContent`` is the same view again and is dropped, so fields that
  projection leaves out cannot reach the agent through the text.
"""

from __future__ import annotations

from typing import Any

import msgspec

from toolgate._errors import RejectedInput
from toolgate.gate._parse import parse_json
from toolgate.gate._trace import TraceContext, from_meta

MEMBERS = frozenset({"content", "structuredContent", "isError", "_meta", "resultType"})
BLOCK_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})
TEXT_BLOCK_MEMBERS = frozenset({"type", "text", "annotations", "_meta"})
MAX_BLOCKS = 256
UNTRUSTED_TEXT_KEY = "content"


class McpResult(msgspec.Struct, frozen=True, gc=False):
    """What the gate takes from one ``CallToolResult``."""

    envelope: dict[str, Any]
    text: str | None  # joined text blocks, already cut to the contract's bound
    trace: TraceContext | None  # from _meta, when it carries a valid traceparent


def _malformed(detail: str, path: str = "") -> RejectedInput:
    return RejectedInput("parse", "MALFORMED_ENVELOPE", detail, instance_path=path)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``, member order does not count."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_json, a, b))
    return type(a) is type(b) and a == b


def read_result(
    value: Any,
    *,
    tool: str | None,
    request_id: str | None,
    error_code: str,
    error_retryable: bool,
    text_max_length: int,
    max_depth: int,
) -> McpResult:
    """The envelope of a parsed ``CallToolResult``.

    Raises:
        RejectedInput: stage ``parse``: ``MALFORMED_ENVELOPE``, ``RESULT_NOT_COMPLETE``
            or ``CONFLICTING_VIEWS``.
    """
    if not isinstance(value, dict):
        raise _malformed("a CallToolResult is a JSON object")
    # resultType first: an input_required or task result has members of its own.
    result_type = value.get("resultType", "complete")
    if not isinstance(result_type, str):
        raise _malformed("resultType is not a string", "/resultType")
    if result_type != "complete":
        raise RejectedInput(
            "parse", "RESULT_NOT_COMPLETE", "resultType is not complete", instance_path="/resultType"
        )
    for name in value:
        if name not in MEMBERS:
            raise _malformed("a member CallToolResult does not define (name masked)")
    is_error = value.get("isError", False)
    if not isinstance(is_error, bool):
        raise _malformed("isError is not a boolean", "/isError")
    meta = value.get("_meta")
    if meta is not None and not isinstance(meta, dict):
        raise _malformed("_meta is not an object", "/_meta")
    content = value.get("content")
    if not isinstance(content, list):
        raise _malformed("content is not an array", "/content")
    if len(content) > MAX_BLOCKS:
        raise _malformed(f"more than {MAX_BLOCKS} content blocks", "/content")
    has_structured = "structuredContent" in value
    structured = value.get("structuredContent")
    texts: list[str] = []
    for i, block in enumerate(content):
        where = f"/content/{i}"
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            raise _malformed("a content block of no known type", where)
        if block["type"] != "text":
            continue  # images, audio and resources never reach the agent
        if not block.keys() <= TEXT_BLOCK_MEMBERS:
            raise _malformed("a text block member MCP does not define (name masked)", where)
        text = block.get("text")
        if not isinstance(text, str):
            raise _malformed("a text block without text", where + "/text")
        if has_structured and not is_error and text.lstrip()[:1] in ("{", "["):
            try:
                claimed = parse_json(text.encode("utf-8", "surrogatepass"), max_depth)
            except RejectedInput:
                claimed = None  # not JSON after all: plain text
            else:
                if not same_json(claimed, structured):
                    raise RejectedInput(
                        "parse",
                        "CONFLICTING_VIEWS",
                        "a text block's JSON differs from structuredContent",
                        instance_path=where + "/text",
                    )
                continue  # the same view again: structuredContent is what counts
        texts.append(text)
    envelope: dict[str, Any] = {"tool": tool, "request_id": request_id}
    if is_error:
        envelope["outcome"] = "failure"
        envelope["error"] = {"code": error_code, "retryable": error_retryable}
    else:
        envelope["outcome"] = "success"
        if has_structured:
            envelope["data"] = structured
    joined = "\n".join(texts)[:text_max_length] if texts and text_max_length > 0 else None
    return McpResult(envelope, joined or None, from_meta(meta))


__all__ = ["MEMBERS", "UNTRUSTED_TEXT_KEY", "McpResult", "read_result", "same_json"]
