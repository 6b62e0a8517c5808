"""The worker on a real broker: exactly one decision per intake message, in transactions."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.service._service import Worker, WorkerOptions

from tests.integration.worker_kit import (
    CLEAN,
    KEYRING,
    check_exactly_once,
    expected_rejections,
    kill_mid_stream_then_drain,
    publish,
    read_all,
    retry,
    samples,
    start_worker,
    wait_for_count,
)


def make_worker(config: Config, **options: object) -> Worker:
    gate = Gate(ContractSet.load(config.contracts_dir), Keyring.load(KEYRING, environ={}))
    opts = WorkerOptions(handle_signals=False, metrics_port=0, **options)  # type: ignore[arg-type]
    return Worker(config, gate, options=opts)


async def run_until(worker: Worker, decided: int, seconds: float = 60) -> None:
    """Run the worker until it has decided ``decided`` results, then stop it cleanly."""
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(seconds):
            while worker.stats.decided < decided:
                await asyncio.wait({task}, timeout=0.1)
                if task.done():
                    break
    finally:
        worker.request_stop()
        await task


class TestEndToEnd:
    async def test_every_result_decided_once(self, config: Config) -> None:
        """Each result gets one agent envelope and one audit event; exactly the rejected are quarantined."""
        items = samples(300)
        await publish(config, items)
        await run_until(make_worker(config), len(items))
        agent = await read_all(config, config.topics.agent)
        quarantine = await read_all(config, config.topics.quarantine)
        audit = await read_all(config, config.topics.audit)
        assert check_exactly_once(items, agent, quarantine, audit) | {"results": 300} == CLEAN | {
            "results": 300
        }

    async def test_quarantine_carries_diagnostics(self, config: Config) -> None:
        """A quarantine record keeps the original bytes and headers and adds the diagnosis."""
        items = samples(120, seed=5)
        await publish(config, items)
        await run_until(make_worker(config), len(items))
        rejected = expected_rejections(items)
        by_id = {s.request_id: s for s in items}
        quarantine = await read_all(config, config.topics.quarantine)
        assert len(quarantine) == len(rejected)
        for record in quarantine:
            sample = by_id[record.key]
            stage, code = rejected[record.key]
            assert record.value == sample.message.value
            assert record.headers["tg-error-stage"].decode() == stage
            assert record.headers["tg-error-code"].decode() == code
            detail = json.loads(record.headers["tg-error-detail"])
            assert detail["code"] == code
            for name, value in sample.message.headers:
                assert record.headers[name] == value
            for name in (
                "tg-origin",
                "tg-raw-sha256",
                "tg-worker-version",
                "tg-rejected-at",
                "tg-replay-count",
            ):
                assert record.headers[name]

    async def test_agent_sees_only_projection_or_fixed_failure(self, config: Config) -> None:
        """Rejected results reach the agent as INVALID_RESPONSE; accepted ones as projections."""
        items = samples(120, seed=9)
        await publish(config, items)
        await run_until(make_worker(config), len(items))
        rejected = expected_rejections(items)
        for record in await read_all(config, config.topics.agent):
            envelope = json.loads(record.value or b"")
            if record.key in rejected:
                assert envelope["error"] == {"code": "INVALID_RESPONSE", "retryable": False}
            else:
                assert "admin_override" not in json.dumps(envelope)
                assert "maintenance" not in json.dumps(envelope)

    async def test_metrics_scraped_over_http(self, config: Config) -> None:
        """The metrics endpoint reports results and rejections by tool, stage and code."""
        items = samples(100, seed=2)
        await publish(config, items)
        worker = make_worker(config)
        task = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(60):
                while worker.stats.decided < len(items):
                    await asyncio.wait({task}, timeout=0.1)
            port = worker.metrics_port
            body = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            )
            ready = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status
            )
        finally:
            worker.request_stop()
            await task
        text = body.decode()
        rejected = expected_rejections(items)
        total = sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("toolgate_results_total{")
        )
        rejections = sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("toolgate_rejections_total{")
        )
        assert (total, rejections) == (len(items), len(rejected))
        assert 'toolgate_rejections_total{code="DUPLICATE_KEY",stage="parse",tool="review_status"}' in text
        assert 'toolgate_transactions_total{result="committed"}' in text
        assert "toolgate_evaluation_seconds_bucket" in text
        assert re.search(
            r'^toolgate_contract_info\{digest="[0-9a-f]{16}",'
            r'status="active",tool="job_status",version="1"\} 1\.0$',
            text,
            re.MULTILINE,
        )
        assert ready == 200


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[Any]]:
    """The worker running and ready; stopped cleanly on exit."""
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(30):
            while not worker.ready():
                await asyncio.wait({task}, timeout=0.1)
        yield task
    finally:
        worker.request_stop()
        await task


async def until_decided(worker: Worker, task: asyncio.Task[Any], count: int, seconds: float = 60) -> None:
    """Until the worker has decided ``count`` results (or stopped)."""
    async with asyncio.timeout(seconds):
        while worker.stats.decided < count and not task.done():
            await asyncio.wait({task}, timeout=0.1)


class TestRequestOrdering:
    # A generous wait bound in both: these tests are about the order of events, not about speed.

    async def test_result_waits_for_lagging_request_reader(self, config: Config) -> None:
        """A result whose request record is behind a backlog is accepted, not UNKNOWN_REQUEST."""
        worker = make_worker(config, request_wait_seconds=60.0)
        async with running(worker) as task:
            items = [s for s in samples(40, seed=4) if s.expect is None]
            # A backlog of request records, then the ones our results need, then the results
            # immediately: the intake consumer sees the results before the reader gets there.
            await publish(config, samples(3000, seed=21), results=False)
            await publish(config, items)
            await until_decided(worker, task, len(items))
        audit = [json.loads(r.value or b"") for r in await read_all(config, config.topics.audit)]
        assert [e["code"] for e in audit if e["outcome"] == "rejected"] == []
        assert len(audit) == len(items)

    async def test_retry_waits_for_its_lagging_request_record(self, config: Config) -> None:
        """A retry's result read before the request record of its attempt (behind a backlog)
        is accepted, not STALE_RESULT against the attempt the worker held."""
        worker = make_worker(config, request_wait_seconds=60.0)
        async with running(worker) as task:
            # review_status: unsigned, so its retry needs no new signature over the attempt
            items = [s for s in samples(120, seed=5) if s.expect is None and s.tool == "review_status"]
            await publish(config, items)
            await until_decided(worker, task, len(items))
            await publish(config, [retry(s) for s in items], backlog=samples(5000, seed=22))
            await until_decided(worker, task, 2 * len(items))
        audit = [json.loads(r.value or b"") for r in await read_all(config, config.topics.audit)]
        assert [e["code"] for e in audit if e["outcome"] == "rejected"] == []
        assert sorted(e["attempt"] for e in audit) == [1] * len(items) + [2] * len(items)


class TestCrashes:
    async def test_sigkill_mid_stream_loses_and_duplicates_nothing(
        self, config: Config, tmp_path: Path
    ) -> None:
        """A worker killed mid-stream and restarted leaves every result decided exactly once."""
        items = samples(3000, seed=13)
        await publish(config, items)
        log = tmp_path / "worker.log"
        await kill_mid_stream_then_drain(
            start_worker,
            config,
            config,
            kill_at=300,
            total=len(items),
            log=log,
            kill_within=60,
            drain_within=120,
        )
        agent = await read_all(config, config.topics.agent)
        quarantine = await read_all(config, config.topics.quarantine)
        audit = await read_all(config, config.topics.audit)
        assert check_exactly_once(items, agent, quarantine, audit) | {"results": 0} == CLEAN | {"results": 0}
        uncommitted = await read_all(config, config.topics.agent, isolation="read_uncommitted")
        # The killed worker's open transaction left records a read_uncommitted reader sees.
        assert len(uncommitted) >= len(agent)

    async def test_rebalance_between_two_workers(self, config: Config, tmp_path: Path) -> None:
        """Two workers sharing the group, one leaving mid-stream, decide every result once."""
        items = samples(3000, seed=17)
        await publish(config, items[:1500])
        log = tmp_path / "workers.log"
        a = start_worker(config, "--batch-size", "25", log=log)
        b = None
        try:
            await wait_for_count(config, config.topics.audit, 200, 60)
            b = start_worker(config, "--batch-size", "25", log=log)
            await publish(config, items[1500:])
            await wait_for_count(config, config.topics.audit, 1800, 90)
            a.send_signal(signal.SIGTERM)
            assert a.wait(60) == 0, log.read_text()[-3000:]
            await wait_for_count(config, config.topics.audit, len(items), 120)
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(60)
        agent = await read_all(config, config.topics.agent)
        quarantine = await read_all(config, config.topics.quarantine)
        audit = await read_all(config, config.topics.audit)
        assert check_exactly_once(items, agent, quarantine, audit) | {"results": 0} == CLEAN | {"results": 0}
        assert "partitions assigned" in log.read_text()
