"""The scale-out run on a real broker (tests/integration/scale_kit.py): 1 -> 4 -> 1 workers on
12 intake partitions under a load burst, driven by KEDA's lag formula, one restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from toolgate._config import Config
from toolgate.service._kafka import client_settings

from tests.integration.scale_kit import ScaleRun, clean, hpa_replicas, keda_partition_lag, keda_total_lag
from tests.integration.test_worker import make_worker, run_until
from tests.integration.worker_kit import CLEAN, drop_topics, private_config, publish, samples


class TestKedaFormula:
    def test_partition_lag(self) -> None:
        """High watermark minus committed; no committed offset: 1 (latest) or all (earliest)."""
        assert keda_partition_lag(90, 100) == 10
        assert keda_partition_lag(None, 100, "latest") == 1
        assert keda_partition_lag(None, 100, "earliest") == 100
        assert keda_partition_lag(-1, 0, "latest") == 1

    def test_total_is_capped_at_one_worker_per_partition(self) -> None:
        """The metric never asks for more workers than partitions (allowIdleConsumers false)."""
        newest = dict.fromkeys(range(12), 10_000)
        assert keda_total_lag(dict.fromkeys(range(12), 0), newest, 25, "earliest") == 12 * 25
        assert hpa_replicas(12 * 25, 25, 1, 4) == 4
        assert hpa_replicas(12, 200, 1, 12) == 1  # a drained intake's markers: the minimum


class TestScaleOut:
    async def test_1_to_4_to_1_with_a_restart(self, bootstrap: str, tmp_path: Path) -> None:
        """0 lost, 0 duplicated; every scale event's pause printed; the restart within the
        session timeout moves no partition of the other workers (static membership)."""
        config: Config = await private_config(bootstrap, partitions=12)
        try:
            report = await ScaleRun(config, tmp_path, static=True, results=1500).run()
        finally:
            await drop_topics(config)
        print("\n".join(report.lines()))
        assert clean(report) == CLEAN, report.lines()
        assert max(report.replicas_seen) == 4
        assert report.replicas_seen[-1] == 1
        assert [e.what for e in report.events if e.what.startswith("restart")] == ["restart toolgate-1"]
        assert report.restart_rebalanced == [], report.lines()
        assert all(e.settled_s is not None for e in report.events), report.lines()
        assert report.drained_lag["earliest"] <= 12, report.lines()


class TestDrainedLag:
    """What KEDA's formula gives on a drained intake with this worker (docs/kubernetes.md)."""

    async def test_plain_and_transactional_adapters(self, bootstrap: str) -> None:
        """Adapters writing plainly leave a drained partition at lag 0; adapters writing in
        transactions leave each written partition at lag 1 (the commit marker after the last
        decided record), a partition never written at 0 (earliest) or 1 (latest): at most one
        per partition, below activationLagThreshold = partitions + 1 or more."""
        config = await private_config(bootstrap, partitions=12)
        try:
            items = samples(120, seed=41)
            plain, transactional = items[:60], items[60:]
            await publish(config, plain)
            await run_until(make_worker(config, burst=True), len(plain))
            after_plain = await keda_lags(config)
            await publish(config, transactional, results=False)
            producer = AIOKafkaProducer(
                **client_settings(config), transactional_id=f"adapter-{config.group_id}"
            )
            await producer.start()
            try:
                written: set[int] = set()
                for sample in transactional[:30]:  # a few partitions only
                    async with producer.transaction():
                        message = sample.message
                        sent = await producer.send_and_wait(
                            config.topics.intake,
                            message.value,
                            key=message.key,
                            headers=list(message.headers),
                        )
                        written.add(sent.partition)
            finally:
                await producer.stop()
            await run_until(make_worker(config, burst=True), 30)
            # A transaction's offsets reach the group once its markers are written, which the
            # broker does after EndTxn has answered: read until the lag settles (bounded).
            after_txn = await settled_lags(config, written)
        finally:
            await drop_topics(config)
        print(f"\nKEDA per-partition lag, drained, plain adapter: {after_plain}")
        print(f"KEDA per-partition lag, drained, transactional adapter: {after_txn}, wrote {sorted(written)}")
        assert after_plain["earliest"] == [0] * 12
        assert [after_txn["earliest"][p] for p in sorted(written)] == [1] * len(written)
        assert max(after_txn["latest"]) <= 1


async def settled_lags(config: Config, written: set[int], seconds: float = 30.0) -> dict[str, list[int]]:
    """:func:`keda_lags` once every written partition is at lag 1 (its last record decided,
    its commit marker after it), or as it is after ``seconds``: a worker that left records
    undecided never gets there, and the caller's assertion names the partitions."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        lags = await keda_lags(config)
        if all(lags["earliest"][p] <= 1 for p in written) or loop.time() >= deadline:
            return lags
        await asyncio.sleep(0.1)  # polling a condition: the markers' write, not a time


async def keda_lags(config: Config) -> dict[str, list[int]]:
    """Per-partition KEDA lag of the group on intake, for both offset reset policies."""
    admin = AIOKafkaAdminClient(**client_settings(config))
    reader = AIOKafkaConsumer(**client_settings(config), group_id=None)
    await admin.start()
    await reader.start()
    try:
        tps = [TopicPartition(config.topics.intake, p) for p in range(12)]
        offsets = await admin.list_consumer_group_offsets(config.group_id)
        committed = {tp.partition: m.offset for tp, m in offsets.items() if tp.topic == config.topics.intake}
        newest = {tp.partition: n for tp, n in (await reader.end_offsets(tps)).items()}
    finally:
        await reader.stop()
        await admin.close()
    return {
        policy: [keda_partition_lag(committed.get(p), newest[p], policy) for p in range(12)]
        for policy in ("earliest", "latest")
    }
