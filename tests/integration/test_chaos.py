"""The copier-style crash test (Kafka's TransactionsBounceTest), CI size, on its own broker.

10,000 intake messages of the realistic mix over 3 partitions (some results before their
request records) are decided by worker subprocesses while the run SIGKILLs a worker at
a random point, has a second worker join and leave (SIGTERM), restarts the broker after
an outage longer than the clients' 40 s request timeout (so the workers' retry path runs,
not only aiokafka's reconnects), and crashes the remaining workers before a ``--burst``
worker drains the rest. Every intake
offset must end with exactly one decision, and no record of an aborted transaction may
ever reach the concurrent ``read_committed`` reader (see ``chaos_kit``). The broker is a
second ``ops/kafka/kafka.sh`` instance (from port 29092 on, data under the test's tmp
directory) because the run restarts it; the shared broker is not used.

``TOOLGATE_CHAOS_SEED`` replays a run's traffic and schedule (the figures print the
random seed; ``pytest -s`` shows them and the run's progress). The full-size run is
``ops/chaos/copier.py``.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest

from tests.integration.chaos_kit import Plan, PrivateBroker, run_chaos

MESSAGES = 10_000
OUTAGE_SECONDS = 45.0  # longer than the workers' request timeout (aiokafka's 40 s default)

pytestmark = pytest.mark.chaos


class TestCopier:
    async def test_kills_rebalances_and_a_broker_restart_decide_everything_once(
        self, own_broker: PrivateBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Exactly one decision per intake offset, and no aborted record read committed."""
        # This test's own clients reconnect through the broker restart: their connection errors
        # are expected (the workers' logs are files under tmp_path).
        caplog.set_level(logging.CRITICAL, logger="aiokafka")
        seed = int(os.environ.get("TOOLGATE_CHAOS_SEED") or random.SystemRandom().randrange(10**6))
        plan = Plan(
            messages=MESSAGES,
            seed=seed,
            kills=1,
            batch_size=200,
            max_ahead=2500,
            broker_down_seconds=OUTAGE_SECONDS,
        )
        report = await run_chaos(plan, own_broker, tmp_path / "run")
        figures = report.figures()
        print(f"\n{figures}\nworker logs: {tmp_path / 'run'}")
        assert report.violations == [], figures
        assert report.messages == MESSAGES, figures
        assert (report.duplicates, report.losses, report.aborted_seen) == (0, 0, 0), figures
        # The run did what it claims: crashes, a clean leave, rebalances, a broker restart,
        # and at least one transaction aborted by a crash (else the aborted-read check is empty).
        assert report.kills >= 2, figures
        assert report.sigterms == 1, figures
        # A join and a leave at least; counted from assignment log times, so merges can undercount.
        assert report.rebalances >= 2, figures
        assert report.broker_restarts == 1, figures
        assert report.aborted_records > 0, figures
