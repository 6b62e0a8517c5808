"""Partition-local state on the real broker: restored before deciding, held per owned partition."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from toolgate._config import Config
from toolgate.gate._signing import Keyring
from toolgate.operations._traffic import Sample, TrafficGenerator

from tests import ROOT
from tests.integration.test_worker import make_worker
from tests.integration.worker_kit import (
    KEYRING,
    publish,
    read_all,
    start_worker,
    wait_for_count,
    worker_env,
)


def accepted_samples(count: int) -> list[Sample]:
    """``count`` results that are accepted when first decided."""
    traffic = TrafficGenerator(Keyring.load(KEYRING, environ={}), seed=5, run_id=uuid.uuid4().hex[:8])
    now = datetime.now(UTC)
    kind = next(k for k in traffic.accepting if k.startswith("review"))
    return [traffic.kinds[kind](now) for _ in range(count)]


async def until(condition: object, seconds: float = 60) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def decisions(config: Config) -> dict[str, list[str]]:
    """Request id -> the codes of its decisions ('-' accepted), in audit order."""
    out: dict[str, list[str]] = {}
    for record in await read_all(config, config.topics.audit):
        event = json.loads(record.value or b"{}")
        if event.get("kind", "decision") == "decision":
            out.setdefault(record.key, []).append(event.get("code") or "-")
    return out


class TestDuplicateAcrossOwners:
    async def test_duplicate_after_restart(self, config: Config) -> None:
        """Attempt accepted, worker restarted, the same result again: DUPLICATE_RESULT."""
        items = accepted_samples(4)
        await publish(config, items)
        first = make_worker(config)
        task = asyncio.create_task(first.run())
        await until(lambda: first.stats.decided == 4)
        first.request_stop()
        await task
        await publish(config, items, requests=False)
        second = make_worker(config)
        task = asyncio.create_task(second.run())
        await until(lambda: second.stats.decided == 4)
        second.request_stop()
        await task
        codes = await decisions(config)
        assert {rid: codes[rid] for rid in codes} == {s.request_id: ["-", "DUPLICATE_RESULT"] for s in items}

    async def test_duplicate_after_the_partition_moved_to_another_process(
        self, config: Config, tmp_path: Path
    ) -> None:
        """Accepted by one worker process; the partition then owned by another: DUPLICATE_RESULT."""
        items = accepted_samples(6)
        await publish(config, items)
        log = tmp_path / "workers.log"
        a = start_worker(config, log=log)
        try:
            assert await wait_for_count(config, config.topics.audit, 6, 90) == 6
        finally:
            a.send_signal(signal.SIGTERM)
            assert a.wait(60) == 0, log.read_text()[-2000:]
        b = start_worker(config, log=log)
        try:
            await publish(config, items, requests=False)
            assert await wait_for_count(config, config.topics.audit, 12, 90) == 12
        finally:
            b.send_signal(signal.SIGTERM)
            assert b.wait(60) == 0, log.read_text()[-2000:]
        codes = await decisions(config)
        assert {rid: codes[rid] for rid in codes} == {s.request_id: ["-", "DUPLICATE_RESULT"] for s in items}


class TestRestoreBeforeDeciding:
    async def test_slow_restore_decides_nothing_and_readyz_says_restoring(self, config: Config) -> None:
        """A restore held back on purpose: no decision and /readyz 503 'restoring' until it ends;
        then every result is decided against its restored request."""
        items = accepted_samples(5)
        await publish(config, items)
        release = asyncio.Event()
        held: list[set[int]] = []

        async def slow(partitions: set[int]) -> None:
            held.append(partitions)
            await release.wait()

        worker = make_worker(config, restore_hook=slow)
        task = asyncio.create_task(worker.run())
        try:
            await until(lambda: bool(held) and worker.metrics_port is not None)
            url = f"http://127.0.0.1:{worker.metrics_port}/readyz"
            with pytest.raises(urllib.error.HTTPError) as caught:
                await asyncio.to_thread(urllib.request.urlopen, url, timeout=5)
            assert caught.value.code == 503
            # Readiness first; the second line names the contract set the worker decides with.
            assert caught.value.read().decode().splitlines()[0] == "restoring"
            assert worker.stats.decided == 0
            assert await read_all(config, config.topics.audit) == []
            release.set()
            await until(lambda: worker.stats.decided == 5)
            with await asyncio.to_thread(urllib.request.urlopen, url, timeout=5) as answer:
                assert answer.status == 200
        finally:  # a failed check above must not leave the worker waiting on its restore
            release.set()
            worker.request_stop()
            await task
        assert {rid: codes for rid, codes in (await decisions(config)).items()} == {
            s.request_id: ["-"] for s in items
        }


class TestCopartitioning:
    async def test_partition_count_mismatch_exits_with_one_line(self, config: Config, bootstrap: str) -> None:
        """Requests with another partition count than intake: `toolgate run` exits 2, one line."""
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            await admin.delete_topics([config.topics.requests])
            for _ in range(100):
                if config.topics.requests not in await admin.list_topics():
                    break
                await asyncio.sleep(0.1)
            await admin.create_topics([NewTopic(config.topics.requests, 2, 1)], timeout_ms=10000)
        finally:
            await admin.close()
        proc = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "toolgate.cli", "run"],
            cwd=ROOT,
            env=worker_env(config),
            capture_output=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr.decode()[-2000:]
        lines = [line for line in proc.stderr.decode().splitlines() if line.strip()]
        error = [line for line in lines if "must be equal" in line]
        assert len(error) == 1, lines
        assert f"{config.topics.requests} has 2 partitions and {config.topics.intake} has 3" in error[0]
        assert "Traceback" not in proc.stderr.decode()

    async def test_two_workers_hold_the_live_requests_between_them(self, config: Config) -> None:
        """Two workers: their toolgate_outstanding_requests sum to the live requests, each
        holding only the requests of its own partitions."""
        items = accepted_samples(60)
        await publish(config, items, results=False)
        first, second = make_worker(config), make_worker(config)
        tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
        try:
            await until(
                lambda: (
                    first.ready()
                    and second.ready()
                    and 0 < len(first._producers) < 3
                    and len(first.requests) + len(second.requests) == 60
                    and first.metrics.outstanding._value.get() + second.metrics.outstanding._value.get() == 60
                ),
                90,
            )
            from toolgate.service._kafka import partition_of

            for worker in (first, second):
                owned = {tp.partition for tp in worker._producers}
                held = {partition_of(rid.encode(), 3) for rid in worker.requests._requests}
                assert held <= owned
                assert 0 < len(worker.requests) < 60
        finally:
            for worker in (first, second):
                worker.request_stop()
            await asyncio.gather(*tasks)
