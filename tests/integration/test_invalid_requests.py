"""A request record that fails decoding, on the real broker: skipped, logged with its key, partition
and offset, counted in toolgate_invalid_request_records_total; its result is UNKNOWN_REQUEST."""

from __future__ import annotations

import json
import logging

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import generate_latest
from toolgate._config import Config
from toolgate.service._kafka import client_settings

from tests.integration.test_worker import make_worker, run_until
from tests.integration.worker_kit import publish, read_all, samples


async def test_invalid_request_record_is_logged_and_counted(
    config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """Two bad request records (not JSON; attempt above max_attempts) are skipped with their
    positions logged and counted; a result answering one of them is UNKNOWN_REQUEST."""
    good = samples(20)
    await publish(config, good)
    # a result whose request record is invalid (and was never valid)
    victim = next(s for s in samples(10, seed=5) if s.expect is None)
    broken = json.loads(victim.request_bytes() or b"{}") | {"attempt": 5, "max_attempts": 2}
    producer = AIOKafkaProducer(**client_settings(config), acks="all")
    await producer.start()
    try:
        sent = [
            await (await producer.send(config.topics.requests, b"not json {", key=b"req.garbage")),
            await (
                await producer.send(
                    config.topics.requests, json.dumps(broken).encode(), key=victim.request_id.encode()
                )
            ),
        ]
        result = victim.message
        await producer.send_and_wait(
            config.topics.intake, result.value, key=result.key, headers=list(result.headers)
        )
    finally:
        await producer.stop()
    worker = make_worker(config)
    with caplog.at_level(logging.WARNING, logger="toolgate.store"):
        await run_until(worker, len(good) + 1)
    logged = [r for r in caplog.records if r.getMessage() == "invalid request record skipped"]
    where = sorted((r.key, r.partition, r.offset) for r in logged)  # type: ignore[attr-defined]
    assert where == sorted(
        [
            ("req.garbage", sent[0].partition, sent[0].offset),
            (victim.request_id, sent[1].partition, sent[1].offset),
        ]
    )
    assert all(r.topic == config.topics.requests for r in logged)  # type: ignore[attr-defined]
    assert "not json" not in caplog.text  # the value is never logged
    metrics = generate_latest(worker.metrics.registry).decode()
    assert "toolgate_invalid_request_records_total 2.0" in metrics
    audit = [json.loads(r.value or b"") for r in await read_all(config, config.topics.audit)]
    last = [e for e in audit if e["request_id"] == victim.request_id][-1]
    assert (last["outcome"], last["code"]) == ("rejected", "UNKNOWN_REQUEST")
