"""Poison pills and limits on the real broker: a message that makes evaluation raise, a
pattern that would backtrack, a 10 MB result, and a burst of 10,000 unknown results."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import signal
import time
import urllib.request
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message
from toolgate.gate._rules import Evidence
from toolgate.gate._signing import Keyring
from toolgate.service._service import Worker, WorkerOptions

from tests import ROOT
from tests.integration.worker_kit import (
    CONTRACTS,
    KEYRING,
    drop_topics,
    private_config,
    read_all,
    start_worker,
)

CORPUS_CONTRACTS = ROOT / "tests" / "corpus" / "contracts"
INVALID = {"code": "INVALID_RESPONSE", "retryable": False}
TEN_MB = 10 * 1024 * 1024
BURST = 10_000
PEAK_RSS_LIMIT_MIB = 400  # a bound, not the figure: the burst peaks far below it


@pytest.fixture
async def config(bootstrap: str) -> AsyncIterator[Config]:
    cfg = await private_config(bootstrap, partitions=1)
    try:
        yield cfg
    finally:
        await drop_topics(cfg)


def make_gate(*folders: Path) -> Gate:
    contracts = [c for folder in (CONTRACTS, *folders) for c in ContractSet.load(folder)]
    return Gate(ContractSet(contracts), Keyring.load(KEYRING, environ={}))


def make_worker(config: Config, gate: Gate, **options: Any) -> Worker:
    opts = WorkerOptions(handle_signals=False, metrics_port=0, **options)
    return Worker(config, gate, options=opts)


async def run_until(worker: Worker, decided: int, seconds: float = 90) -> None:
    """Run the worker until it has decided ``decided`` results, then stop it cleanly."""
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(seconds):
            while worker.stats.decided < decided and not task.done():
                await asyncio.wait({task}, timeout=0.1)
    finally:
        worker.request_stop()
        await task


def review(request_id: str, change: str = "CR-1042") -> bytes:
    return json.dumps(
        {
            "tool": "review_status",
            "request_id": request_id,
            "outcome": "success",
            "data": {"change_id": change, "decision": "approved", "reviewed_by": "alice@example.com"},
        }
    ).encode()


def headers(tool: str, request_id: str, version: str = "1.4.2") -> list[tuple[str, bytes]]:
    return [
        ("tg-tool", tool.encode()),
        ("tg-request-id", request_id.encode()),
        ("tg-adapter", b"review-adapter"),
        ("tg-adapter-version", version.encode()),
    ]


def request(request_id: str, tool: str = "review_status", **bind: Any) -> bytes:
    now = datetime.now(UTC)
    return json.dumps(
        {
            "request_id": request_id,
            "tool": tool,
            "issued_at": (now - timedelta(seconds=5)).isoformat(),
            "expires_at": (now + timedelta(minutes=10)).isoformat(),
            "bind": bind,
            "attempt": 1,
            "max_attempts": 3,
        }
    ).encode()


Record = tuple[bytes, bytes, list[tuple[str, bytes]]]


async def send(config: Config, topic: str, records: list[Record], **producer: Any) -> None:
    client = AIOKafkaProducer(bootstrap_servers=config.bootstrap, acks="all", linger_ms=5, **producer)
    await client.start()
    try:
        futures = [await client.send(topic, value, key=key, headers=hdrs) for key, value, hdrs in records]
        await asyncio.gather(*futures)
    finally:
        await client.stop()


async def publish_reviews(config: Config, ids: list[str]) -> None:
    await send(
        config, config.topics.requests, [(rid.encode(), request(rid, change_id="CR-1042"), []) for rid in ids]
    )
    await send(
        config,
        config.topics.intake,
        [(rid.encode(), review(rid), headers("review_status", rid)) for rid in ids],
    )


def agent_by_key(records: list[Any]) -> dict[str, dict[str, Any]]:
    return {r.key: json.loads(r.value) for r in records}


class TestEvaluationRaises:
    async def test_raising_evaluation_is_quarantined_and_the_loop_goes_on(
        self, config: Config, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Evaluation raising in a rule or outside the gate is INTERNAL_ERROR; later results are decided."""
        ids = [f"req.poison{i:04d}" for i in range(30)]
        in_rule, in_evaluate = ids[9], ids[19]
        gate = make_gate()

        def boom(evidence: Evidence) -> None:
            if evidence.request_id == in_rule:
                raise RuntimeError("a rule that breaks on one message")

        monkeypatch.setitem(gate._rules, "review_status@v1", (*gate._rules["review_status@v1"], boom))
        evaluate = gate.evaluate

        def evaluate_or_raise(message: Message, *args: Any, **kwargs: Any) -> Any:
            if message.key == in_evaluate.encode():
                raise MemoryError("evaluation blew up outside the gate's own guard")
            return evaluate(message, *args, **kwargs)

        monkeypatch.setattr(gate, "evaluate", evaluate_or_raise)
        await publish_reviews(config, ids)
        worker = make_worker(config, gate, batch_size=4)
        await run_until(worker, len(ids))

        assert (worker.stats.decided, worker.stats.accepted) == (30, 28)
        assert worker.stats.by_code == {"INTERNAL_ERROR": 2}
        quarantine = {r.key: r for r in await read_all(config, config.topics.quarantine)}
        assert sorted(quarantine) == [in_rule, in_evaluate]
        assert quarantine[in_rule].headers["tg-error-stage"] == b"semantic"
        assert quarantine[in_evaluate].headers["tg-error-stage"] == b"project"
        for rid, record in quarantine.items():
            assert record.headers["tg-error-code"] == b"INTERNAL_ERROR"
            assert record.value == review(rid)
        agent = agent_by_key(await read_all(config, config.topics.agent))
        assert len(agent) == 30
        assert agent[in_rule]["error"] == INVALID
        assert agent[in_evaluate]["error"] == INVALID
        later = ids[20:]
        assert all(agent[rid]["outcome"] == "success" for rid in later)
        # One transaction per batch of 4: the batches after the poisons committed too.
        assert worker.stats.committed >= len(ids) // 4


class TestPathologicalPattern:
    async def test_backtracking_pattern_is_decided_at_once(self, config: Config) -> None:
        """^(a+)+$ against 'aaa...a!', exponential when backtracking, is decided in milliseconds."""
        bad = {"req.redos0050": "a" * 50 + "!", "req.redos0255": "a" * 255 + "!"}
        good = {"req.redos0good": "a" * 64}
        items = {**bad, **good}
        await send(
            config,
            config.topics.requests,
            [(rid.encode(), request(rid, tool="token_check"), []) for rid in items],
        )
        await send(
            config,
            config.topics.intake,
            [
                (
                    rid.encode(),
                    json.dumps(
                        {
                            "tool": "token_check",
                            "request_id": rid,
                            "outcome": "success",
                            "data": {"token": token},
                        }
                    ).encode(),
                    headers("token_check", rid, "1.0.0"),
                )
                for rid, token in items.items()
            ],
        )
        worker = make_worker(config, make_gate(CORPUS_CONTRACTS))
        started = time.perf_counter()
        await run_until(worker, len(items))
        wall = time.perf_counter() - started

        registry = worker.metrics.registry
        schema_seconds = registry.get_sample_value("toolgate_evaluation_seconds_sum", {"stage": "schema"})
        schema_count = registry.get_sample_value("toolgate_evaluation_seconds_count", {"stage": "schema"})
        assert schema_seconds is not None
        assert schema_count is not None
        print(
            f"\npathological pattern: {schema_count:g} results rejected at the schema stage in "
            f"{schema_seconds * 1000:.2f} ms of gate time (run {wall:.1f} s)"
        )
        assert schema_count == len(bad)
        assert schema_seconds < 0.25  # 2**50 steps for a backtracking engine; here about a millisecond
        assert worker.stats.by_code == {"SCHEMA_VIOLATION": 2}
        agent = agent_by_key(await read_all(config, config.topics.agent))
        assert agent["req.redos0good"]["data"] == {"token": "a" * 64}
        assert all(agent[rid]["error"] == INVALID for rid in bad)


class TestHugeMessage:
    async def test_ten_megabytes_is_refused_by_size_and_quarantined_truncated(
        self, config: Config, admin: AIOKafkaAdminClient
    ) -> None:
        """A 10 MB result is PAYLOAD_TOO_LARGE, quarantined truncated (tg-truncated, full sha256)."""
        await admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC,
                    config.topics.intake,
                    configs={"max.message.bytes": str(16 << 20)},
                )
            ]
        )
        big_id, next_id = "req.huge0001", "req.huge0002"
        head = review(big_id)[:-2] + b',"padding":"'
        value = head + b"x" * (TEN_MB - len(head) - 3) + b'"}}'
        assert len(value) == TEN_MB
        await send(
            config,
            config.topics.requests,
            [(rid.encode(), request(rid, change_id="CR-1042"), []) for rid in (big_id, next_id)],
        )
        await send(
            config,
            config.topics.intake,
            [
                (big_id.encode(), value, headers("review_status", big_id)),
                (next_id.encode(), review(next_id), headers("review_status", next_id)),
            ],
            max_request_size=16 << 20,
        )
        worker = make_worker(config, make_gate())
        await run_until(worker, 2)

        assert worker.stats.by_code == {"PAYLOAD_TOO_LARGE": 1}
        assert worker.stats.accepted == 1
        [record] = await read_all(config, config.topics.quarantine)
        assert record.key == big_id
        assert record.headers["tg-error-stage"] == b"limits"
        assert record.headers["tg-error-code"] == b"PAYLOAD_TOO_LARGE"
        assert record.headers["tg-truncated"] == str(TEN_MB).encode()
        assert record.headers["tg-raw-sha256"] == hashlib.sha256(value).hexdigest().encode()
        assert record.value is not None
        assert 0 < len(record.value) < WorkerOptions().max_record_bytes
        assert value.startswith(record.value)
        agent = agent_by_key(await read_all(config, config.topics.agent))
        assert agent[big_id] == {
            "tool": "review_status",
            "request_id": big_id,
            "outcome": "failure",
            "error": INVALID,
        }
        assert agent[next_id]["outcome"] == "success"
        audit = {r.key: json.loads(r.value or b"null") for r in await read_all(config, config.topics.audit)}
        assert audit[big_id]["raw_sha256"] == hashlib.sha256(value).hexdigest()


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) of a process."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(rest.split()[0])
    return fields


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.split()[-1])
    return 0.0


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read().decode()


class TestUnknownBurst:
    async def test_ten_thousand_unknown_results_keep_the_worker_up_and_bounded(
        self, bootstrap: str, tmp_path: Path
    ) -> None:
        """10,000 unknown-request results are each counted UNKNOWN_REQUEST; the worker stays up, bounded."""
        config = await private_config(bootstrap, partitions=3)
        try:
            await self._burst(config, tmp_path)
        finally:
            await drop_topics(config)

    async def _burst(self, config: Config, tmp_path: Path) -> None:
        ids = [f"req.burst{i:08d}" for i in range(BURST)]
        await send(
            config,
            config.topics.intake,
            [(rid.encode(), review(rid), headers("review_status", rid)) for rid in ids],
        )
        log = tmp_path / "worker.log"
        proc = start_worker(config, log=log)
        samples: list[int] = []
        try:
            port = await _metrics_port(log, proc.pid)
            base = f"http://127.0.0.1:{port}"
            started = time.monotonic()
            decided = 0.0
            while decided < BURST and time.monotonic() - started < 180 and proc.poll() is None:
                samples.append(_status(proc.pid)["VmRSS"])
                _, text = await asyncio.to_thread(_get, f"{base}/metrics")
                decided = _metric(
                    text,
                    "toolgate_rejections_total",
                    code="UNKNOWN_REQUEST",
                    stage="correlate",
                    tool="review_status",
                )
                await asyncio.sleep(0.25)  # polling a running process, not waiting for time
            seconds = time.monotonic() - started
            status = _status(proc.pid)
            health, _ = await asyncio.to_thread(_get, f"{base}/healthz")
            ready, _ = await asyncio.to_thread(_get, f"{base}/readyz")
            _, text = await asyncio.to_thread(_get, f"{base}/metrics")
            assert proc.poll() is None, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, log.read_text()[-3000:]
        peak_mib = status["VmHWM"] / 1024
        print(
            f"\nunknown-request burst: {BURST:,} decided in {seconds:.1f} s; worker RSS "
            f"first sample {samples[0] / 1024:.1f} MiB, last {status['VmRSS'] / 1024:.1f} MiB, "
            f"peak (VmHWM) {peak_mib:.1f} MiB"
        )
        assert decided == BURST
        assert _metric(text, "toolgate_results_total", outcome="rejected", tool="review_status") == BURST
        assert (health, ready) == (200, 200)
        assert peak_mib < PEAK_RSS_LIMIT_MIB

        audit = [json.loads(r.value or b"") for r in await read_all(config, config.topics.audit)]
        assert len(audit) == BURST
        assert {(e["stage"], e["code"]) for e in audit} == {("correlate", "UNKNOWN_REQUEST")}
        assert {e["request_id"] for e in audit} == set(ids)
        agent = await read_all(config, config.topics.agent)
        assert len(agent) == BURST
        # The agent hears nothing about requests it never issued: no request id echoed.
        assert {r.value for r in agent} == {
            json.dumps(
                {"tool": "review_status", "request_id": None, "outcome": "failure", "error": INVALID},
                separators=(",", ":"),
            ).encode()
        }
        assert len(await read_all(config, config.topics.quarantine)) == BURST


async def _metrics_port(log: Path, pid: int, seconds: float = 60) -> int:
    """The metrics port a ``toolgate run`` subprocess logged at start-up."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        port = await asyncio.to_thread(_logged_port, log)
        if port is not None:
            return port
        if not await asyncio.to_thread(Path(f"/proc/{pid}").exists):
            break
        await asyncio.sleep(0.2)  # polling a log file, not waiting for time
    raise AssertionError(f"no metrics port logged:\n{log.read_text()[-3000:]}")  # noqa: ASYNC240


def _logged_port(log: Path) -> int | None:
    if not log.exists():
        return None
    for line in log.read_text(errors="replace").splitlines():
        match = re.search(r'"metrics_port": (\d+)', line)
        if match and '"worker started"' in line:
            return int(match[1])
    return None
