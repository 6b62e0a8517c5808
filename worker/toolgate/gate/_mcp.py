"""The MCP result envelope: a ``CallToolResult`` to toolgate's envelope. Pure: no Kafka.

A contract with an ``mcp:`` section declares that its tool answers with a Model Context
Protocol ``CallToolResult`` (``tools/call`` result) as the intake value. The gate reads
it at the ``parse`` stage and builds the envelope its schema validates:

* ``isError`` absent or false: ``{tool, request_id, outcome: "success", data:
  structuredContent}``; the schema validates ``structuredContent`` and projection reads
  it. No ``structuredContent`` means no ``data``: a ``schema`` rejection.
* ``isError: true``: ``{..., outcome: "failure", error: {code, retryable}}`` with the
  code and retryable flag the contract maps (MCP has no machine-readable error code):
  the first of ``mcp.error_codes`` whose RE2 pattern matches a text block in full, else
  ``mcp.error_code``; the retry policy then applies as for any failure envelope. The
  upstream text chooses among codes a person wrote; it never becomes one.
* ``content`` text blocks become one bounded ``untrusted_text`` string, never ``data``;
  other block types (image, audio, resources) never reach the agent. A text longer than
  the contract's ``text_max_length`` is cut, never silently: its end is replaced by the
  marker :func:`cut_text` writes (``[cut: the first N of M characters]``), within the bound;
  an upstream imitation of its opening anywhere in the text is rewritten (:func:`unforged`).
* ``_meta`` is dropped (its ``traceparent``/``tracestate`` are read as trace context).
* ``resultType``: absent means ``complete`` (servers before 2026-07-28 omit it);
  ``input_required`` or ``task``: ``RESULT_NOT_COMPLETE``; any other value, or not a
  string: ``MALFORMED_ENVELOPE`` (an unknown result type is an invalid result).
* a top-level member MCP does not define, a member of the wrong type, a content block
  that is not an object with a string ``type`` of a known block type:
  ``MALFORMED_ENVELOPE``.
* ``structuredContent`` that is not a JSON object (an array, a string, a number,
  ``null``): ``MALFORMED_ENVELOPE``, the detail naming the type, unless the contract says
  ``structured_content: value`` (MCP 2026-07-28 lets a server send any JSON value): then
  ``data`` is ``{"value": structuredContent}``, whatever its type. Import writes that for an
  ``outputSchema`` that does not say ``"type": "object"``.
* a text block beside ``structuredContent`` (and without ``isError``) is either another
  view of it or prose (:func:`second_view`). Another view: a string member of
  ``structuredContent`` verbatim (a ``{"content": <the text>}`` wrapper), or a text that
  parses strictly (toolgate's parse: one document, no duplicate member names, finite
  numbers, within the contract's depth, nothing but JSON white space around it) to
  ``structuredContent`` or to a member of it (an array the object wraps): dropped, so
  fields that projection leaves out cannot reach the agent through the text. Prose: a
  text that does not *look like JSON* (:func:`looks_like_json`), or that no JSON reader
  reads as a value (:func:`readable_as_json`: ``[FILE] a.txt``, ``[1, 2``): untrusted
  text. Anything else, a text some reader takes for JSON that does not parse strictly or
  says another value, is ``CONFLICTING_VIEWS``: a reader that takes the text would see
  another result than the one validated, the hazard duplicate member names are.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from toolgate._errors import RejectedInput
from toolgate.gate._contracts import WRAPPED_MEMBER, TextPattern
from toolgate.gate._parse import parse_json
from toolgate.gate._trace_context import TraceContext, from_meta

ErrorPattern = tuple[TextPattern, str, bool]  # (RE2 pattern, code, retryable)

MEMBERS = frozenset({"content", "structuredContent", "isError", "_meta", "resultType"})
BLOCK_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})
TEXT_BLOCK_MEMBERS = frozenset({"type", "text", "annotations", "_meta"})
MAX_BLOCKS = 256
UNTRUSTED_TEXT_KEY = "content"
NOT_COMPLETE = frozenset({"input_required", "task"})  # the result types of 2026-07-28 besides complete


class McpResult(msgspec.Struct, frozen=True, gc=False):
    """What the gate takes from one ``CallToolResult``."""

    envelope: dict[str, Any]
    text: str | None  # joined text blocks, already cut to the contract's bound
    trace: TraceContext | None  # from _meta, when it carries a valid traceparent


def definition_digest(tool: Mapping[str, Any]) -> str:
    """The digest a contract pins of an upstream tool definition: ``sha256:`` and the hex
    SHA-256 of the tool object exactly as ``tools/list`` sent it on the wire, every member
    but ``_meta``, as canonical JSON (sorted keys, no white space, UTF-8 unescaped).

    Any change a host's model could read (a description anywhere in ``inputSchema``, a
    title, an annotation, the output schema) changes it; ``_meta`` is transport detail.
    """
    pinned = {name: value for name, value in tool.items() if name != "_meta"}
    canonical = json.dumps(pinned, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


CUT_MARKER = re.compile(r"\n\[cut: the first [0-9]+ of [0-9]+ characters\]\Z")
# An upstream text holding what reads as the marker's opening anywhere, in any case, in
# fullwidth or other compatibility forms, or split by zero-width and other format characters:
# each such "[cut:" is rewritten, so that only a text toolgate cut holds the marker (the
# proxy flags those to the host).
_MARKER_OPENING = "[cut:"
_FORGED_MARKER = re.compile(r"\[cut:", re.IGNORECASE)
FORGED_MARKER_TEXT = "[the upstream wrote: cut:"


def normalised(text: str) -> str:
    """``text`` as a reader compares it: NFKC (fullwidth and other compatibility forms to
    their plain characters), without format characters (Unicode category Cf: zero-width
    spaces and joiners, bidirectional controls, soft hyphens, byte order marks)."""
    plain = unicodedata.normalize("NFKC", text)
    return "".join(char for char in plain if unicodedata.category(char) != "Cf")


def unforged(text: str) -> str:
    """``text`` with every imitation of :data:`CUT_MARKER`'s opening neutralised, compared
    on :func:`normalised` text without regard to case: a text holding one is returned
    normalised, each ``[cut:`` rewritten; any other text is returned as it is."""
    if _MARKER_OPENING not in normalised(text).casefold():
        return text
    out = _FORGED_MARKER.sub(lambda _m: FORGED_MARKER_TEXT, normalised(text))
    if _MARKER_OPENING in out.casefold():  # a full case fold the pattern's does not match
        out = out.replace("[", "(")
    return out


def cut_text(text: str, bound: int) -> str:
    """``text`` within ``bound`` characters; a longer one says where and how much was cut
    (a bound too small for the marker ends it with ``…``)."""
    if len(text) <= bound:
        return text
    shown = bound
    for _ in range(3):  # the marker's own digits move the cut, at most twice
        marker = f"\n[cut: the first {shown} of {len(text)} characters]"
        shown = bound - len(marker)
    if shown < 1:
        return text[: bound - 1] + "\u2026"
    marker = f"\n[cut: the first {shown} of {len(text)} characters]"
    cut = text[: bound - len(marker)] + marker
    return cut


def _malformed(detail: str, path: str = "") -> RejectedInput:
    return RejectedInput("parse", "MALFORMED_ENVELOPE", detail, instance_path=path)


def looks_like_json(text: str) -> bool:
    """Whether ``text`` claims to be JSON: its first character that is neither white
    space (``str.isspace``: JSON's four, NBSP, the Unicode spaces and line separators)
    nor a byte order mark (U+FEFF) is ``{`` or ``[``. Prose before the JSON
    (``Result: {...}``) is prose."""
    for char in text:
        if char.isspace() or char == "\ufeff":
            continue
        return char in "{["
    return False


_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def readable_as_json(text: str) -> bool:
    """Whether some JSON reader reads a value from ``text``: after white space and byte order
    marks, a lenient parse (duplicate names, ``NaN``, overflowing numbers, any nesting) reads a
    first value, trailing commas forgiven; what follows it does not count (a reader of one
    document stops there). ``[FILE] a.txt`` or ``[1, 2`` is read by none: it is prose."""
    start = 0
    while start < len(text) and (text[start].isspace() or text[start] == "\ufeff"):
        start += 1
    body = text[start:]
    decoder = json.JSONDecoder()
    for candidate in (body, _TRAILING_COMMA.sub(r"\1", body)):
        try:
            decoder.raw_decode(candidate)
        except RecursionError:
            return True  # deeper than this parser goes: a reader with more stack reads it
        except ValueError:
            continue
        return True
    return False


def second_view(text: str, structured: dict[str, Any], max_depth: int, where: str) -> bool:
    """Whether a text block beside ``structuredContent`` is another view of it (dropped: the
    validated ``structuredContent`` is what counts), or prose (False: untrusted text).

    The same view: the text is a string member of ``structuredContent`` (a ``{"content":
    <the text>}`` wrapper), or its strict JSON is ``structuredContent`` or a member of it
    (an array the object wraps). Prose: a text that does not look like JSON, or that no
    JSON reader reads as a value (:func:`readable_as_json`).

    Raises:
        RejectedInput: ``CONFLICTING_VIEWS``: a text some reader reads as JSON that does not
            parse strictly, or whose value is neither ``structuredContent`` nor a member of it.
    """
    members = list(structured.values())
    if any(isinstance(member, str) and member == text for member in members):
        return True
    if not looks_like_json(text) or not readable_as_json(text):
        return False
    try:
        claimed = parse_json(text.encode("utf-8", "surrogatepass"), max_depth)
    except RejectedInput:
        raise RejectedInput(
            "parse",
            "CONFLICTING_VIEWS",
            "a text block that reads as JSON does not parse strictly",
            instance_path=where,
        ) from None
    if same_json(claimed, structured) or any(same_json(claimed, member) for member in members):
        return True
    raise RejectedInput(
        "parse",
        "CONFLICTING_VIEWS",
        "a text block's JSON is neither structuredContent nor a member of it",
        instance_path=where,
    )


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return "an array" if isinstance(value, list) else "an object"


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
    error_patterns: Sequence[ErrorPattern] = (),
    wrap_value: bool = False,
) -> McpResult:
    """The envelope of a parsed ``CallToolResult``; with ``wrap_value`` (a contract's
    ``structured_content: value``) its ``data`` is ``{"value": structuredContent}``, whatever
    JSON value that is, instead of an object ``structuredContent`` itself.

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
    if result_type in NOT_COMPLETE:
        raise RejectedInput(
            "parse", "RESULT_NOT_COMPLETE", "resultType is not complete", instance_path="/resultType"
        )
    if result_type != "complete":
        raise _malformed("resultType is not one MCP defines (value masked)", "/resultType")
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
    if has_structured and wrap_value:
        structured = {WRAPPED_MEMBER: structured}
    elif has_structured and not isinstance(structured, dict):
        raise _malformed(
            f"structuredContent is {_type_name(structured)}, not an object", "/structuredContent"
        )
    texts: list[str] = []
    for i, block in enumerate(content):
        where = f"/content/{i}"
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str) or kind not in BLOCK_TYPES:
            raise _malformed("a content block of no known type", where)
        if kind != "text":
            continue  # images, audio and resources never reach the agent
        if not block.keys() <= TEXT_BLOCK_MEMBERS:
            raise _malformed("a text block member MCP does not define (name masked)", where)
        for member in ("annotations", "_meta"):
            if member in block and not isinstance(block[member], dict):
                raise _malformed(f"a text block's {member} is not an object", f"{where}/{member}")
        text = block.get("text")
        if not isinstance(text, str):
            raise _malformed("a text block without text", where + "/text")
        if (
            isinstance(structured, dict)
            and not is_error
            and second_view(text, structured, max_depth, where + "/text")
        ):
            continue  # the same view again: structuredContent is what counts
        texts.append(text)
    envelope: dict[str, Any] = {"tool": tool, "request_id": request_id}
    if is_error:
        code, retryable = error_code, error_retryable
        for pattern, mapped, mapped_retryable in error_patterns:
            if any(pattern.fullmatch(text) is not None for text in texts):
                code, retryable = mapped, mapped_retryable
                break
        envelope["outcome"] = "failure"
        envelope["error"] = {"code": code, "retryable": retryable}
    else:
        envelope["outcome"] = "success"
        if has_structured:
            envelope["data"] = structured
    joined = cut_text(unforged("\n".join(texts)), text_max_length) if texts and text_max_length > 0 else None
    return McpResult(envelope, joined or None, from_meta(meta))


__all__ = [
    "CUT_MARKER",
    "MEMBERS",
    "NOT_COMPLETE",
    "UNTRUSTED_TEXT_KEY",
    "ErrorPattern",
    "McpResult",
    "cut_text",
    "definition_digest",
    "looks_like_json",
    "normalised",
    "read_result",
    "readable_as_json",
    "same_json",
    "second_view",
    "unforged",
]
