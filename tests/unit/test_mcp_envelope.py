"""The MCP result envelope: a CallToolResult read into toolgate's envelope (pure function)."""

from __future__ import annotations

from typing import Any

import pytest
from toolgate._errors import RejectedInput
from toolgate.gate._mcp import read_result, same_json
from toolgate.gate._trace import TraceContext

from tests import mcp_kit

GOOD = mcp_kit.GOOD


def _read(value: Any, **kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "tool": "deployer.deploy_status",
        "request_id": "req.1234567890",
        "error_code": "TOOL_ERROR",
        "error_retryable": False,
        "text_max_length": 40,
        "max_depth": 16,
    }
    options.update(kwargs)
    return read_result(value, **options)


def _code(value: Any) -> tuple[str, str]:
    with pytest.raises(RejectedInput) as caught:
        _read(value)
    return caught.value.stage, caught.value.code


def test_success_is_structured_content_and_duplicate_text_is_dropped() -> None:
    """The SDK's own result (structured plus its JSON as text): data is structuredContent."""
    wire, _sdk = mcp_kit.wire("ok")
    result = _read(wire)
    assert result.envelope == {
        "tool": "deployer.deploy_status",
        "request_id": "req.1234567890",
        "outcome": "success",
        "data": GOOD,
    }
    assert result.text is None  # the same view again: not passed as text


def test_is_error_is_a_failure_with_the_contract_code() -> None:
    wire, _sdk = mcp_kit.wire("error")
    result = _read(wire, error_retryable=True)
    assert result.envelope["outcome"] == "failure"
    assert result.envelope["error"] == {"code": "TOOL_ERROR", "retryable": True}
    assert "data" not in result.envelope
    assert result.text == "the deploy API answered 503"


def test_text_is_bounded_and_never_data() -> None:
    value = {
        "content": [
            {"type": "text", "text": "x" * 100},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
        ],
        "structuredContent": GOOD,
    }
    result = _read(value)
    assert result.text == "x" * 40
    assert result.envelope["data"] == GOOD
    assert _read(value, text_max_length=0).text is None


def test_meta_is_dropped_and_its_trace_context_read() -> None:
    wire, _sdk = mcp_kit.wire("trace")
    result = _read(wire)
    assert "_meta" not in result.envelope
    assert "serverInfo" not in str(result.envelope)
    assert result.trace == TraceContext(mcp_kit.TRACEPARENT)
    wire["_meta"] = {"traceparent": "00-zz"}
    assert _read(wire).trace is None


def test_input_required_is_not_complete() -> None:
    wire, _sdk = mcp_kit.wire("input_required")
    assert _code(wire) == ("parse", "RESULT_NOT_COMPLETE")
    assert _code({"content": [], "structuredContent": GOOD, "resultType": "task"}) == (
        "parse",
        "RESULT_NOT_COMPLETE",
    )


def test_text_disagreeing_with_structured_content_is_rejected() -> None:
    wire, sdk = mcp_kit.wire("mismatch")
    assert sdk is None  # the SDK client takes it
    assert _code(wire) == ("parse", "CONFLICTING_VIEWS")


@pytest.mark.parametrize(
    "value",
    [
        [],
        {"content": [], "structuredContent": GOOD, "approved": True},
        {"structuredContent": GOOD},
        {"content": "text", "structuredContent": GOOD},
        {"content": [{"type": "video"}], "structuredContent": GOOD},
        {"content": [{"type": "text"}], "structuredContent": GOOD},
        {"content": [{"type": "text", "text": "a", "extra": 1}], "structuredContent": GOOD},
        {"content": [], "structuredContent": GOOD, "isError": "false"},
        {"content": [], "structuredContent": GOOD, "_meta": []},
        {"content": [], "structuredContent": GOOD, "resultType": 1},
    ],
)
def test_malformed_envelopes(value: Any) -> None:
    assert _code(value) == ("parse", "MALFORMED_ENVELOPE")


def test_json_equality_is_strict_about_types() -> None:
    assert same_json({"a": 1, "b": [1.0]}, {"b": [1], "a": 1})
    assert not same_json({"a": True}, {"a": 1})
    assert not same_json([0], [False])
    assert not same_json({"a": None}, {})
    assert not same_json("1", 1)


def test_text_that_is_not_json_is_plain_text() -> None:
    value = {"content": [{"type": "text", "text": "{not json"}], "structuredContent": GOOD}
    assert _read(value).text == "{not json"
