"""OpenTelemetry spans per decision, following the messaging semantic conventions for Kafka.

Off by default. :func:`tracer_from_env` turns tracing on when the standard
``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``, ... : any installed
``opentelemetry_traces_exporter`` entry point; ``OTEL_SDK_DISABLED=true`` or ``none``
keeps it off). Everything else comes from the standard ``OTEL_*`` variables the SDK
reads itself: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource),
``OTEL_TRACES_SAMPLER`` (sampling), ``OTEL_EXPORTER_OTLP_*`` (where to send),
``OTEL_BSP_*`` (batching). When off, nothing of OpenTelemetry is imported and the
gate's loop pays one ``is None`` test per message.

One span per decision, ``process <intake topic>``, kind ``CONSUMER``, from the start
of the gate's evaluation to its verdict; attributes ``messaging.system`` (``kafka``),
``messaging.destination.name``, ``messaging.consumer.group.name``,
``messaging.destination.partition.id``, ``messaging.kafka.offset``,
``messaging.kafka.message.key`` (a text key), ``messaging.message.body.size``,
``messaging.operation.name``/``.type`` (``process``), plus ``toolgate.*`` (tool,
contract, outcome, stage); a rejection sets ``error.type`` to its code and the span
status to error. The producer's context (the intake record's ``traceparent``, or an
MCP result's ``_meta``) is the span's parent and also its link, so the decision
lands in the adapter's trace; the agent, quarantine and audit records then carry the
decision span's context.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

from toolgate._errors import ConfigError
from toolgate.gate._records import Message, Origin, Verdict
from toolgate.gate._trace_context import TraceContext, from_headers

# (message, verdict, start ns, end ns) -> the context the output records carry
DecisionTracer = Callable[[Message, Verdict, int, int], TraceContext | None]

_EXPORTER_GROUP = "opentelemetry_traces_exporter"


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    return bool(names) and names != ["none"]


def tracer_from_env(environ: Mapping[str, str] | None = None, *, group: str) -> DecisionTracer | None:
    """A decision tracer configured by the ``OTEL_*`` variables, or None when tracing is off.

    Raises:
        ConfigError: an exporter that is not installed, or no OpenTelemetry SDK.
    """
    environ = os.environ if environ is None else environ
    if not enabled(environ):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ConfigError(
            "OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not installed: "
            "pip install 'toolgate[otel]'"
        ) from exc
    provider = TracerProvider(resource=Resource.create())
    for name in [n.strip() for n in environ["OTEL_TRACES_EXPORTER"].split(",") if n.strip()]:
        if name == "none":
            continue
        found = list(entry_points(group=_EXPORTER_GROUP, name=name))
        if not found:
            raise ConfigError(
                f"OTEL_TRACES_EXPORTER={name}: no such span exporter installed "
                "(otlp: pip install opentelemetry-exporter-otlp)"
            )
        provider.add_span_processor(BatchSpanProcessor(found[0].load()()))
    atexit.register(provider.shutdown)  # flush what the batch processor holds
    return DecisionSpans(provider, group=group)


class DecisionSpans:
    """Makes the span of each decision with a tracer of ``provider``.

    Args:
        provider: an OpenTelemetry ``TracerProvider`` (the tests pass one with an
            in-memory exporter).
        group: the worker's consumer group.
    """

    def __init__(self, provider: Any, *, group: str) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
        from opentelemetry.trace.status import Status, StatusCode

        self._trace = trace
        self._tracer = provider.get_tracer("toolgate")
        self._group = group
        self._types = (Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState)
        self._error = (Status, StatusCode)

    def parent(self, context: TraceContext) -> Any:
        """The remote span context of a producer's trace context."""
        _link, _span, span_context, _kind, flags, state = self._types
        tracestate = state.from_header([context.tracestate]) if context.tracestate else None
        return span_context(
            trace_id=int(context.trace_id, 16),
            span_id=int(context.parent_id, 16),
            is_remote=True,
            trace_flags=flags(int(context.traceparent[53:55], 16)),
            trace_state=tracestate,
        )

    def __call__(self, message: Message, verdict: Verdict, start_ns: int, end_ns: int) -> TraceContext | None:
        link_type, non_recording, _sc, kind, _flags, _state = self._types
        producer = from_headers(message.headers) or verdict.trace
        context = None
        links = []
        if producer is not None:
            remote = self.parent(producer)
            context = self._trace.set_span_in_context(non_recording(remote))
            links.append(link_type(remote))
        origin = message.origin
        topic, partition, offset = "", "", None
        if isinstance(origin, Origin):  # else a label (an offline check): no coordinates
            topic, partition, offset = origin.topic, str(origin.partition), origin.offset
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.destination.name": topic,
            "messaging.consumer.group.name": self._group,
            "messaging.destination.partition.id": partition,
            "messaging.message.body.size": len(message.value or b""),
            "toolgate.outcome": verdict.result,
        }
        if offset is not None:
            attributes["messaging.kafka.offset"] = offset
        if message.key is not None:
            # A key with no unambiguous text form is not set (as the conventions say).
            with contextlib.suppress(UnicodeDecodeError):
                attributes["messaging.kafka.message.key"] = message.key.decode("utf-8")
        for name, value in (("toolgate.tool", verdict.tool), ("toolgate.contract", verdict.contract)):
            if value is not None:
                attributes[name] = value
        if not verdict.accepted:
            attributes["error.type"] = verdict.code or "INTERNAL_ERROR"
            attributes["toolgate.stage"] = verdict.stage or ""
        span = self._tracer.start_span(
            f"process {topic}" if topic else "process",
            context=context,
            kind=kind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=start_ns,
        )
        if not verdict.accepted:
            status, code = self._error
            span.set_status(status(code.ERROR, f"{verdict.stage}/{verdict.code}"))
        span.end(end_time=end_ns)
        made = span.get_span_context()
        if not made.is_valid:
            return None
        tracestate = producer.tracestate if producer is not None else None
        return TraceContext(
            f"00-{made.trace_id:032x}-{made.span_id:016x}-{int(made.trace_flags):02x}", tracestate
        )


__all__ = ["DecisionSpans", "DecisionTracer", "enabled", "tracer_from_env"]
