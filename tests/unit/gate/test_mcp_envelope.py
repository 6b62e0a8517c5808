"""The MCP result envelope: a CallToolResult read into toolgate's envelope (pure function)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from toolgate._errors import RejectedInput
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._mcp import read_result, same_json
from toolgate.gate._records import Message, RequestRecord
from toolgate.gate._trace_context import TraceContext
from toolgate.mcp._import import fetch_listing, import_listing

from tests import mcp_kit
from tests.properties import DERANDOMIZED

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
    # Cut within the bound, never silently: the end says how much of how much is shown.
    assert result.text == "xxx\n[cut: the first 3 of 100 characters]"
    assert len(result.text) == 40
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


class TestTextThatLooksLikeJson:
    """A text block that looks like JSON is a second view: it must parse strictly to structuredContent."""

    BODY = json.dumps(GOOD)[1:-1]  # the members of GOOD, without the braces

    @pytest.mark.parametrize(
        "text",
        [
            "{" + BODY + ', "state": "failed"}',  # a duplicate member: a reader may take the second
            "{" + BODY + ', "st\\u0061te": "failed"}',  # the same duplicate, its name escaped
            "[" * 40 + "]" * 40,  # nested deeper than max_depth
            "{" + BODY + ', "big": 1e400}',  # an infinite number
            "{" + BODY + ",}",  # a trailing comma
            json.dumps(GOOD) + json.dumps(GOOD),  # two documents
            "\ufeff" + json.dumps(GOOD),  # a byte order mark before the JSON
            "\u00a0" + json.dumps(GOOD),  # an NBSP before the JSON
            json.dumps({**GOOD, "state": "failed"}),  # strict JSON of another value
            json.dumps([GOOD]),  # strict JSON of an array that is no member
            json.dumps(GOOD["state"]).join("[]"),  # ["healthy"]: a member's value inside another
        ],
    )
    def test_json_looking_text_that_does_not_parse_strictly_is_a_conflicting_view(self, text: str) -> None:
        """Strict parse failures are refused, never passed on as untrusted_text."""
        value = {"content": [{"type": "text", "text": text}], "structuredContent": GOOD}
        assert _code(value) == ("parse", "CONFLICTING_VIEWS")

    def test_json_text_after_white_space_equal_to_structured_content_is_dropped(self) -> None:
        """JSON white space before an equal view is the same view again."""
        value = {"content": [{"type": "text", "text": " \n\t" + json.dumps(GOOD)}], "structuredContent": GOOD}
        assert _read(value).text is None

    def test_prose_before_json_is_prose(self) -> None:
        """Text whose first non-space character is not a brace or bracket is untrusted text."""
        value = {"content": [{"type": "text", "text": "Result: {}"}], "structuredContent": GOOD}
        assert _read(value).text == "Result: {}"

    @pytest.mark.parametrize(
        "text",
        [
            "[FILE] a.txt\n[DIR] sub",  # server-filesystem's list_directory
            "[1, 2",  # cut short: no reader reads a value
            "{not json",
            "[DIR] logs\n[FILE] {weird}.txt",
        ],
    )
    def test_text_no_json_reader_reads_is_prose(self, text: str) -> None:
        """A text that only starts like JSON, and that no JSON reader reads as a value, is untrusted text."""
        value = {"content": [{"type": "text", "text": text}], "structuredContent": GOOD}
        assert _read(value, text_max_length=100).text == text

    def test_a_wrapped_text_is_the_same_view(self) -> None:
        """server-filesystem's read_text_file of a JSON file: the text is a member verbatim."""
        file = '{"approve": true}\n'
        value = {"content": [{"type": "text", "text": file}], "structuredContent": {"content": file}}
        result = _read(value)
        assert result.text is None
        assert result.envelope["data"] == {"content": file}

    def test_the_json_of_a_wrapped_array_is_the_same_view(self) -> None:
        """server-memory's create_entities: the text is the JSON of the array structuredContent wraps."""
        entities = [{"name": "a", "entityType": "person", "observations": ["x"]}]
        value = {
            "content": [{"type": "text", "text": json.dumps(entities, indent=2)}],
            "structuredContent": {"entities": entities},
        }
        assert _read(value).text is None

    def test_the_json_of_a_member_must_still_parse_strictly(self) -> None:
        """A member's JSON carrying a duplicate name is a conflicting view, not the member."""
        entities = [{"name": "a"}]
        value = {
            "content": [{"type": "text", "text": '[{"name": "b", "name": "a"}]'}],
            "structuredContent": {"entities": entities},
        }
        assert _code(value) == ("parse", "CONFLICTING_VIEWS")

    def test_json_looking_text_without_structured_content_is_text(self) -> None:
        """With no structuredContent there is no second view: a text-only result's text is text."""
        value = {"content": [{"type": "text", "text": "{not json"}]}
        assert _read(value).text == "{not json"


class TestEnvelopeMembers:
    """Every member of a CallToolResult of the wrong shape is MALFORMED_ENVELOPE, never a crash."""

    @pytest.mark.parametrize(
        "block",
        [
            {"type": ["text"], "text": "x"},
            {"type": {"text": 1}, "text": "x"},
            {"type": None},
            {"type": "text", "text": "x", "annotations": []},
            {"type": "text", "text": "x", "_meta": "m"},
        ],
    )
    def test_malformed_content_blocks(self, block: Any) -> None:
        """A block type that is not a string (unhashable or not) is a malformed envelope."""
        assert _code({"content": [block], "structuredContent": GOOD}) == ("parse", "MALFORMED_ENVELOPE")

    @pytest.mark.parametrize(
        ("structured", "named"),
        [([GOOD], "an array"), (None, "null"), ("ok", "a string"), (1, "a number"), (True, "a boolean")],
    )
    def test_structured_content_that_is_not_an_object(self, structured: Any, named: str) -> None:
        """structuredContent of another JSON type is refused at the parse stage, naming the type."""
        with pytest.raises(RejectedInput) as caught:
            _read({"content": [], "structuredContent": structured})
        assert (caught.value.stage, caught.value.code) == ("parse", "MALFORMED_ENVELOPE")
        assert caught.value.detail == f"structuredContent is {named}, not an object"
        assert caught.value.instance_path == "/structuredContent"

    @pytest.mark.parametrize("result_type", ["input_required", "task"])
    def test_result_types_that_are_not_complete(self, result_type: str) -> None:
        """input_required and task results are not results an agent may act on."""
        assert _code({"resultType": result_type}) == ("parse", "RESULT_NOT_COMPLETE")

    @pytest.mark.parametrize("result_type", ["completed", "COMPLETE", "", "complete\n"])
    def test_an_unknown_result_type_is_invalid(self, result_type: str) -> None:
        """A result type MCP does not define is an invalid result, not an incomplete one."""
        value = {"content": [], "structuredContent": GOOD, "resultType": result_type}
        assert _code(value) == ("parse", "MALFORMED_ENVELOPE")

    def test_a_missing_result_type_is_complete(self) -> None:
        """Servers before 2026-07-28 omit resultType: it means complete."""
        assert _read({"content": [], "structuredContent": GOOD}).envelope["outcome"] == "success"

    @settings(DERANDOMIZED, max_examples=400)
    @given(
        member=st.sampled_from(["content", "structuredContent", "isError", "_meta", "resultType", "block"]),
        inner=st.sampled_from(["type", "text", "annotations", "_meta"]),
        junk=st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
            max_leaves=6,
        ),
    )
    def test_arbitrary_json_in_any_member_never_crashes(self, member: str, inner: str, junk: Any) -> None:
        """Whatever JSON value any envelope member or text block member holds, the read
        returns or rejects at the parse stage: never another exception."""
        value: dict[str, Any] = {
            "content": [{"type": "text", "text": json.dumps(GOOD)}],
            "structuredContent": GOOD,
            "_meta": {"traceparent": mcp_kit.TRACEPARENT},
            "resultType": "complete",
        }
        if member == "block":
            value["content"][0][inner] = junk
        else:
            value[member] = junk
        outcome: tuple[str, str] = ("parse", "READ")
        try:
            _read(value)
        except RejectedInput as exc:
            outcome = (exc.stage, exc.code)
        assert outcome[0] == "parse"
        assert outcome[1] in ("READ", "MALFORMED_ENVELOPE", "RESULT_NOT_COMPLETE", "CONFLICTING_VIEWS")


# --- property: whatever an MCP server answers, the agent sees only projected structured data ---


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
_state = st.sampled_from(["healthy", "failed", "maintenance"])
_structured = st.fixed_dictionaries(
    {
        "environment": st.sampled_from(["staging", "production"]),
        "revision": st.just("a83f19c"),
        "state": _state,
    },
    optional={"note": st.text(max_size=40), "approve_production": st.booleans()},
)
_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=60)}),
    st.builds(lambda v: {"type": "text", "text": json.dumps(v)}, _structured),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["image", "audio", "video"]), "data": st.text(max_size=4)}
    ),
    st.fixed_dictionaries({"type": _json, "text": _json}, optional={"annotations": _json, "_meta": _json}),
    _json,
)
_result = st.fixed_dictionaries(
    {"content": st.lists(_block, max_size=3)},  # a missing content is test_malformed_envelopes'
    optional={
        "structuredContent": _structured | _json,
        "isError": st.booleans() | st.booleans() | _json,
        "_meta": st.dictionaries(st.text(max_size=6), _json, max_size=2),
        "resultType": st.sampled_from(["complete", "complete", "input_required", "task"]),
        "approved": _json,
    },
)


@pytest.fixture(scope="module")
def mcp_gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Gate, RequestRecord, datetime]:
    root = tmp_path_factory.mktemp("contracts")
    tools = anyio.run(fetch_listing, mcp_kit.server())
    import_listing(Path(root), mcp_kit.SERVER, tools, only=["deploy_status"], out=lambda _line: None)
    mcp_kit.review(Path(root))
    now = datetime.fromisoformat("2026-05-01T09:15:00+00:00")
    request = RequestRecord(
        request_id="req.1234567890",
        tool="deployer.deploy_status",
        issued_at=datetime.fromisoformat("2026-05-01T09:14:00+00:00"),
        expires_at=datetime.fromisoformat("2026-05-01T09:20:00+00:00"),
    )
    return Gate(ContractSet.load(root)), request, now


def test_agent_sees_only_projected_structured_content(mcp_gate: tuple[Gate, RequestRecord, datetime]) -> None:
    gate, request, now = mcp_gate
    projected = {"environment", "revision", "state", "note"}
    seen = {"success": 0, "failure": 0}

    # Derandomized, with one accepted success and one accepted failure among the examples, so the
    # counts below do not depend on what a random run happens to draw.
    @settings(DERANDOMIZED, max_examples=300)
    @given(_result)
    @example(
        {
            "content": [{"type": "text", "text": "ok"}],
            "structuredContent": {"environment": "staging", "revision": "a83f19c", "state": "healthy"},
        }
    )
    @example({"content": [{"type": "text", "text": "upstream said no"}], "isError": True})
    def check(value: dict[str, Any]) -> None:
        message = Message(
            key=b"req.1234567890",
            value=msgspec.json.encode(value),
            headers=[
                ("tg-tool", b"deployer.deploy_status"),
                ("tg-request-id", b"req.1234567890"),
                ("tg-adapter-version", b"1.0.0"),
            ],
        )
        verdict = gate.evaluate(message, request, now)
        assert verdict.code != "INTERNAL_ERROR"  # malformed input is a named rejection, never a crash
        agent = json.loads(verdict.agent)
        if not verdict.accepted:
            assert agent["error"] == {"code": "INVALID_RESPONSE", "retryable": False}
            return
        assert value.get("resultType", "complete") == "complete"
        assert set(value) <= {"content", "structuredContent", "isError", "_meta", "resultType"}
        seen[agent["outcome"]] += 1
        if agent["outcome"] == "success":
            assert set(agent["data"]) <= projected
            assert agent["data"] == {k: v for k, v in value["structuredContent"].items() if k in projected}
            assert "approve_production" not in json.dumps(agent)
            assert len(agent.get("untrusted_text", {}).get("content", "")) <= 1000
        else:
            assert value["isError"] is True
            assert agent["error"]["code"] == "TOOL_ERROR"

    check()
    assert seen["success"] > 0  # the property held on accepted results, not only on rejections
    assert seen["failure"] > 0
