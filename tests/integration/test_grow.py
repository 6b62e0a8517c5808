"""toolgate topics grow on a real broker: intake, requests and state grown 3 -> 6 with live
requests outstanding, every result decided once and as it should be, before and after."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from toolgate._config import Config
from toolgate.operations._grow import GrowRefused, grow_topics
from toolgate.operations._traffic import Sample
from toolgate.service._kafka import client_settings, partition_of, partitions_of

from tests import ROOT
from tests.integration.test_worker import make_worker, run_until
from tests.integration.worker_kit import Record, publish, read_all, samples, worker_env


def decisions(audit: list[Record]) -> list[dict[str, object]]:
    events = [json.loads(r.value or b"{}") for r in audit]
    return [e for e in events if e.get("kind", "decision") == "decision"]


async def resend(config: Config, items: list[Sample]) -> None:
    """The same results again (an adapter's retry), with a producer that sees today's count."""
    producer = AIOKafkaProducer(**client_settings(config), acks="all")
    await producer.start()
    try:
        for sample in items:
            message = sample.message
            await producer.send(
                config.topics.intake, message.value, key=message.key, headers=list(message.headers)
            )
        await producer.flush()
    finally:
        await producer.stop()


class TestGrow:
    async def test_grow_3_to_6_with_live_requests(self, config: Config) -> None:
        """Results decided before the growth, live requests answered after it, retries of
        accepted results: each decided once, as the traffic expects, none UNKNOWN_REQUEST
        or accepted twice because its request or accepted attempt sat in the old partition."""
        items = samples(240, seed=23)
        before, live = items[:120], items[120:]
        await publish(config, before)
        await publish(config, live, results=False)  # requests outstanding across the growth

        # Undecided results in intake: refused, nothing grown.
        with pytest.raises(GrowRefused, match="records no worker decided yet"):
            await grow_topics(config, 6, wait_s=30)
        assert len(await partitions_of_intake(config)) == 3

        await run_until(make_worker(config, burst=True), len(before))
        accepted_before = [s for s in before if s.expect is None and s.request is not None]
        assert accepted_before

        report = await grow_topics(config, 6, wait_s=30)
        t = config.topics
        assert report.after == {t.requests: 6, t.state: 6, t.intake: 6}
        moving = {s.request_id for s in items if s.request is not None}
        moved = sum(1 for rid in moving if partition_of(rid.encode(), 3) != partition_of(rid.encode(), 6))
        assert report.moved[t.requests] == moved > 0
        assert report.moved[t.state] > 0  # accepted attempts moved with their requests

        # Run again: nothing left to move, counts unchanged (idempotent).
        again = await grow_topics(config, 6, wait_s=30)
        assert again.moved == {t.requests: 0, t.state: 0}

        retried = accepted_before[:20]
        await publish(config, live, requests=False)
        await resend(config, retried)
        await run_until(make_worker(config, burst=True), len(live) + len(retried))

        events = decisions(await read_all(config, config.topics.audit))
        per_request = Counter(str(e["request_id"]) for e in events)
        retried_ids = {s.request_id for s in retried}
        for sample in items:
            assert per_request[sample.request_id] == (2 if sample.request_id in retried_ids else 1), sample
        verdicts: dict[str, list[tuple[object, object]]] = {}
        for event in events:
            verdicts.setdefault(str(event["request_id"]), []).append((event["outcome"], event["code"]))
        for sample in live:
            ((outcome, code),) = verdicts[sample.request_id]
            if sample.expect is None:
                assert outcome in ("success", "failure"), (sample.kind, outcome, code)
            else:
                assert (outcome, code) == ("rejected", sample.expect[1]), sample.kind
        for sample in retried:
            first, second = verdicts[sample.request_id]
            assert first[0] in ("success", "failure")
            assert second == ("rejected", "DUPLICATE_RESULT"), sample.kind

    async def test_the_cli_refuses_a_group_with_members_and_shrinking(self, config: Config) -> None:
        """topics grow exits 1 naming the group while a worker is a member; fewer partitions
        than the topics have is a usage error (exit 2)."""
        worker = make_worker(config)
        task = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(60):
                while not worker.ready():  # noqa: ASYNC110 - worker state, no event to wait on
                    await asyncio.sleep(0.1)
            done = await asyncio.to_thread(_grow_cli, config, "6")
        finally:
            worker.request_stop()
            await task
        assert done.returncode == 1, done.stderr
        assert f"consumer group {config.group_id!r} has 1 members: stop every worker first" in done.stderr
        assert len(await partitions_of_intake(config)) == 3
        shrink = await asyncio.to_thread(_grow_cli, config, "2")
        assert shrink.returncode == 2
        assert "already has 3 partitions (Kafka cannot remove partitions)" in shrink.stderr


def _grow_cli(config: Config, partitions: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolgate.cli", "topics", "grow", "--partitions", partitions],
        cwd=ROOT,
        env=worker_env(config),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def partitions_of_intake(config: Config) -> list[TopicPartition]:
    from toolgate.service._kafka import AiokafkaClients

    return await partitions_of(AiokafkaClients(config), config.topics.intake)
