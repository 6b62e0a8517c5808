"""The scale-out run on a real broker (tests/integration/scale_kit.py): 1 -> 4 -> 1 workers on
12 intake partitions under a load burst, driven by KEDA's lag formula, one restart."""

from __future__ import annotations

from pathlib import Path

from toolgate._config import Config

from tests.integration.scale_kit import ScaleRun, clean, hpa_replicas, keda_partition_lag, keda_total_lag
from tests.integration.worker_kit import CLEAN, drop_topics, private_config


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
