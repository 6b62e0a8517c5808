"""Decision spans (OpenTelemetry SDK, in-memory exporter): semantic-convention attributes,
the producer's trace continued, error.type on rejections; nothing imported when off."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from toolgate._config import Topics
from toolgate._errors import ConfigError
from toolgate.gate._batch import AcceptedView, decide_batch
from toolgate.gate._gate import Gate
from toolgate.gate._records import Origin
from toolgate.service._otel_spans import DecisionSpans, enabled, tracer_from_env

from tests.unit.builders import NOW, REQUEST_ID, message, review_request, review_value

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TOPICS = Topics(requests="r", intake="toolgate.intake", agent="a", quarantine="q", audit="au")


@pytest.fixture
def spans() -> tuple[DecisionSpans, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return DecisionSpans(provider, group="toolgate"), exporter


def _decide(gate: Gate, tracer: DecisionSpans, *messages: object) -> object:
    request = review_request()
    return decide_batch(
        gate,
        list(messages),  # type: ignore[arg-type]
        lambda key: request if key == REQUEST_ID else None,
        AcceptedView(lambda _r, _a: False),
        NOW,
        topics=TOPICS,
        max_record_bytes=1024 * 1024,
        tracer=tracer,
    )


def test_accepted_decision_span(gate: Gate, spans: tuple[DecisionSpans, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    msg = msgspec.structs.replace(
        message(review_value(), traceparent=PARENT), origin=Origin("toolgate.intake", 2, 41)
    )
    batch = _decide(gate, tracer, msg)
    (span,) = exporter.get_finished_spans()
    assert span.name == "process toolgate.intake"
    assert span.kind is SpanKind.CONSUMER
    attributes = dict(span.attributes or {})
    assert attributes == {
        "messaging.system": "kafka",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "toolgate.intake",
        "messaging.consumer.group.name": "toolgate",
        "messaging.destination.partition.id": "2",
        "messaging.kafka.offset": 41,
        "messaging.kafka.message.key": REQUEST_ID,
        "messaging.message.body.size": len(msg.value or b""),
        "toolgate.outcome": "success",
        "toolgate.tool": "review_status",
        "toolgate.contract": "review_status@v1",
    }
    # the producer's context is the parent (same trace) and a link
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.parent is not None
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert [f"{link.context.span_id:016x}" for link in span.links] == ["00f067aa0ba902b7"]
    # the output records carry the decision span's context
    for record in batch.records:  # type: ignore[attr-defined]
        assert dict(record.headers)["traceparent"] == f"00-{TRACE_ID}-{span.context.span_id:016x}-01".encode()


def test_rejection_has_error_type(gate: Gate, spans: tuple[DecisionSpans, InMemorySpanExporter]) -> None:
    tracer, exporter = spans
    msg = msgspec.structs.replace(
        message(review_value(admin_override=True), traceparent=PARENT), origin=Origin("toolgate.intake", 0, 7)
    )
    batch = _decide(gate, tracer, msg)
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["error.type"] == "SCHEMA_VIOLATION"
    assert span.attributes["toolgate.stage"] == "schema"
    assert span.status.status_code is StatusCode.ERROR
    quarantine = [r for r in batch.records if r.topic == "q"]  # type: ignore[attr-defined]
    assert dict(quarantine[0].headers)["traceparent"].decode().split("-")[1] == TRACE_ID


def test_no_producer_context_starts_a_trace(
    gate: Gate, spans: tuple[DecisionSpans, InMemorySpanExporter]
) -> None:
    tracer, exporter = spans
    batch = _decide(gate, tracer, message(review_value(), traceparent="00-garbage"))
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    assert span.links == ()
    agent = batch.records[0]  # type: ignore[attr-defined]
    assert dict(agent.headers)["traceparent"].decode().split("-")[1] == f"{span.context.trace_id:032x}"


def test_a_failing_tracer_never_changes_a_decision(gate: Gate) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("exporter down")

    batch = _decide(gate, broken, message(review_value(), traceparent=PARENT))  # type: ignore[arg-type]
    assert batch.decisions[0].verdict.accepted  # type: ignore[attr-defined]
    assert dict(batch.records[0].headers)["traceparent"] == PARENT.encode()  # type: ignore[attr-defined]


def test_configured_by_otel_variables() -> None:
    assert not enabled({})
    assert not enabled({"OTEL_TRACES_EXPORTER": "none"})
    assert not enabled({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"})
    assert enabled({"OTEL_TRACES_EXPORTER": "console"})
    assert tracer_from_env({}, group="g") is None
    assert isinstance(tracer_from_env({"OTEL_TRACES_EXPORTER": "console"}, group="g"), DecisionSpans)
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER=nosuch"):
        tracer_from_env({"OTEL_TRACES_EXPORTER": "nosuch"}, group="g")


def test_off_imports_nothing_of_opentelemetry() -> None:
    """Tracing off: the worker's modules and a decided batch import no OpenTelemetry module."""
    code = (
        "import sys, json\n"
        "import toolgate.service._service\n"
        "from toolgate.service._otel_spans import tracer_from_env\n"
        "assert tracer_from_env({}, group='g') is None\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []
