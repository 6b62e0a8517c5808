"""MCP results of the SDK's own server through the live worker on the real broker.

The contract is what `toolgate contracts import-mcp` writes for the server's
``deploy_status`` tool. Each result goes to intake with a W3C traceparent; the worker
runs with OpenTelemetry's SDK and an in-memory exporter. Checked: every verdict
equals the one `toolgate check` gives (tests/unit/mcp/test_mcp_check.py, which also
compares with the SDK client's own validation), the agent, quarantine and audit
records carry the intake trace id, each decision's span has the Kafka messaging
attributes, rejections have ``error.type``, quarantine records have Kafka Connect's
dead-letter headers. A non-Python client (Debian's kcat, from `make tools`) produces
an MCP result with headers and reads the agent envelope read_committed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from toolgate._config import Config
from toolgate.mcp._import import fetch_listing, import_listing
from toolgate.service._kafka import client_settings
from toolgate.service._otel_spans import DecisionSpans

from tests import mcp_kit
from tests.integration.test_worker import make_worker, run_until
from tests.integration.worker_kit import read_all
from tests.unit.mcp.test_mcp_check import EXPECTED

TOOL = "deployer.deploy_status"


@pytest.fixture(scope="module")
def mcp_contracts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("contracts")
    tools = anyio.run(fetch_listing, mcp_kit.server())
    import_listing(root, mcp_kit.SERVER, tools, only=["deploy_status"], out=lambda _line: None)
    mcp_kit.review(root)  # a draft never decides: the reviewer's status: active
    return root


def _request(request_id: str) -> bytes:
    now = datetime.now(UTC)
    return json.dumps(
        {
            "request_id": request_id,
            "tool": TOOL,
            "issued_at": (now - timedelta(minutes=1)).isoformat(),
            "expires_at": (now + timedelta(minutes=10)).isoformat(),
        }
    ).encode()


def _headers(request_id: str, traceparent: str | None) -> list[tuple[str, bytes]]:
    headers = [
        ("tg-tool", TOOL.encode()),
        ("tg-request-id", request_id.encode()),
        ("tg-adapter", b"mcp-adapter"),
        ("tg-adapter-version", b"1.0.0"),
    ]
    if traceparent is not None:
        headers.append(("traceparent", traceparent.encode()))
    return headers


async def test_mcp_results_through_the_live_worker(config: Config, mcp_contracts: Path) -> None:
    cfg = msgspec.structs.replace(config, contracts_dir=str(mcp_contracts))
    tag = uuid.uuid4().hex[:8]
    cases: dict[str, tuple[str, str]] = {}  # request id -> (case, intake trace id)
    producer = AIOKafkaProducer(**client_settings(cfg), acks="all")
    await producer.start()
    try:
        for case in mcp_kit.CASES:
            wire, sdk_problem = await mcp_kit.call(case)
            # the SDK client's own verdict, beside toolgate's below (EXPECTED names both)
            assert (sdk_problem is None) == EXPECTED[case][0], (case, sdk_problem)
            request_id = f"req.{tag}.{case}"
            trace_id = uuid.uuid4().hex
            # the "trace" case carries its context in _meta only, not in the headers
            traceparent = None if case == "trace" else f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
            if case == "trace":
                trace_id = mcp_kit.TRACEPARENT.split("-")[1]
            cases[request_id] = (case, trace_id)
            await producer.send_and_wait(cfg.topics.requests, _request(request_id), key=request_id.encode())
            await producer.send_and_wait(
                cfg.topics.intake,
                json.dumps(wire).encode(),
                key=request_id.encode(),
                headers=_headers(request_id, traceparent),
            )
    finally:
        await producer.stop()

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    await run_until(make_worker(cfg, tracer=DecisionSpans(provider, group=cfg.group_id)), len(cases))

    agent = await read_all(cfg, cfg.topics.agent)
    audit = [
        r for r in await read_all(cfg, cfg.topics.audit) if json.loads(r.value or b"")["kind"] == "decision"
    ]
    quarantine = await read_all(cfg, cfg.topics.quarantine)
    assert sorted(r.key for r in agent) == sorted(cases)
    for record in audit:
        case, trace_id = cases[record.key]
        event = json.loads(record.value or b"")
        got = event["outcome"] if event["outcome"] != "rejected" else f"{event['stage']}/{event['code']}"
        assert got == EXPECTED[case][1], case
        assert record.headers["traceparent"].decode().split("-")[1] == trace_id, case
    for record in agent:
        case, trace_id = cases[record.key]
        assert record.headers["traceparent"].decode().split("-")[1] == trace_id, case
        envelope = json.loads(record.value or b"")
        assert "_meta" not in json.dumps(envelope)
        if case == "ok":
            assert envelope["data"] == mcp_kit.GOOD
    rejected = {k for k, (case, _t) in cases.items() if "/" in EXPECTED[case][1]}
    assert {r.key for r in quarantine} == rejected
    for record in quarantine:
        case, trace_id = cases[record.key]
        assert record.headers["__connect.errors.topic"] == cfg.topics.intake.encode()
        assert record.headers["__connect.errors.stage"] == record.headers["tg-error-stage"]
        assert record.headers["__connect.errors.exception.class.name"] == record.headers["tg-error-code"]
        assert record.headers["traceparent"].decode().split("-")[1] == trace_id

    spans = exporter.get_finished_spans()
    assert len(spans) == len(cases)
    for span in spans:
        attributes = dict(span.attributes or {})
        case, trace_id = cases[str(attributes["messaging.kafka.message.key"])]
        assert f"{span.context.trace_id:032x}" == trace_id, case
        assert span.name == f"process {cfg.topics.intake}"
        assert attributes["messaging.system"] == "kafka"
        assert attributes["messaging.destination.name"] == cfg.topics.intake
        assert attributes["messaging.consumer.group.name"] == cfg.group_id
        assert attributes["messaging.operation.type"] == "process"
        assert isinstance(attributes["messaging.kafka.offset"], int)
        assert attributes["messaging.destination.partition.id"] in {"0", "1", "2"}
        want = EXPECTED[case][1]
        assert attributes.get("error.type") == (want.split("/")[1] if "/" in want else None), case


KCAT = shutil.which("kcat")


def _kcat(*args: str, stdin: bytes | None = None) -> bytes:
    assert KCAT is not None
    done = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def _kcat_produce(producer: list[str], cfg: Config, request_id: str, wire: Any, *extra_headers: str) -> None:
    """The request record, then the MCP result with toolgate's headers, both keyed by request id."""
    _kcat(*producer, "-P", "-t", cfg.topics.requests, "-k", request_id, stdin=_request(request_id))
    header_args = [f"{name}={value.decode()}" for name, value in _headers(request_id, None)]
    header_args.extend(extra_headers)
    _kcat(
        *producer,
        "-P",
        "-t",
        cfg.topics.intake,
        "-k",
        request_id,
        *[arg for h in header_args for arg in ("-H", h)],
        stdin=json.dumps(wire).encode(),
    )


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make tools)")
async def test_kcat_produces_an_mcp_result_and_reads_the_agent_envelope(
    config: Config, mcp_contracts: Path
) -> None:
    cfg = msgspec.structs.replace(config, contracts_dir=str(mcp_contracts))
    request_id = f"req.kcat.{uuid.uuid4().hex[:8]}"
    trace_id = uuid.uuid4().hex
    wire, _sdk = await mcp_kit.call("ok")
    broker = ["-b", cfg.bootstrap]
    # librdkafka's default partitioner is not Kafka's murmur2: producers of requests and results
    # pick it explicitly, as the README tells adapter authors (requests are co-partitioned).
    producer = [*broker, "-X", "partitioner=murmur2_random"]
    _kcat_produce(producer, cfg, request_id, wire, f"traceparent=00-{trace_id}-b7ad6b7169203331-01")
    await run_until(make_worker(cfg), 1)
    out = _kcat(
        *broker,
        "-C",
        "-t",
        cfg.topics.agent,
        "-X",
        "isolation.level=read_committed",
        "-o",
        "beginning",
        "-e",
        "-J",
    )
    (line,) = [json.loads(x) for x in out.decode().splitlines() if x.strip()]
    assert line["key"] == request_id
    envelope: dict[str, Any] = json.loads(line["payload"])
    assert envelope == {"tool": TOOL, "request_id": request_id, "outcome": "success", "data": mcp_kit.GOOD}
    headers = dict(zip(line["headers"][::2], line["headers"][1::2], strict=True))
    assert headers["traceparent"].split("-")[1] == trace_id


def _partitions(topic: str, bootstrap: str) -> int:
    meta = json.loads(_kcat("-b", bootstrap, "-L", "-t", topic, "-J"))
    (entry,) = meta["topics"]
    return len(entry["partitions"])


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make tools)")
async def test_kcat_default_partitioner_fails_closed_and_is_counted(
    config: Config, mcp_contracts: Path
) -> None:
    """librdkafka's default partitioner (CRC32 of the key) puts a request and its result where
    Kafka's murmur2 would not: the worker answers INVALID_RESPONSE, never the data, and counts
    the result in toolgate_misrouted_results_total."""
    cfg = msgspec.structs.replace(config, contracts_dir=str(mcp_contracts))
    count = _partitions(cfg.topics.intake, cfg.bootstrap)
    assert count > 1, "the test needs an intake topic with more than one partition"
    request_id = next(
        rid
        for rid in (f"req.kcat.{uuid.uuid4().hex[:8]}" for _ in range(1000))
        if zlib.crc32(rid.encode()) % count != (murmur2(rid.encode()) & 0x7FFFFFFF) % count
    )
    wire, _sdk = await mcp_kit.call("ok")
    broker = ["-b", cfg.bootstrap]
    _kcat_produce(broker, cfg, request_id, wire)  # librdkafka's default partitioner
    worker = make_worker(cfg)
    await run_until(worker, 1)
    assert worker.metrics.misrouted._value.get() == 1
    out = _kcat(*broker, "-C", "-t", cfg.topics.agent, "-o", "beginning", "-e", "-J")
    (line,) = [json.loads(x) for x in out.decode().splitlines() if x.strip()]
    envelope: dict[str, Any] = json.loads(line["payload"])
    assert envelope["outcome"] == "failure"
    assert envelope["error"] == {"code": "INVALID_RESPONSE", "retryable": False}
    assert "data" not in envelope
