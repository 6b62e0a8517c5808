"""The broker SIGKILLed with transactions open while the machine is loaded, on its own broker.

Two worker subprocesses decide 3,000 intake messages of the realistic mix (the chaos kit's
traffic and checks, ``tests/integration/chaos_kit.py``). When a batch's records are seen
in the log (each transaction held open 200 ms before its commit, so the kill lands inside
one) the run SIGKILLs the broker's JVM, and CPU hogs, one per core, load the machine from
then on; the broker starts again 5 s later (its logs recovered from an unclean shutdown,
under the load) and the hogs run on until decisions flow again, for 120 s at most.
Decisions must resume within :data:`RESUME_BOUND_S` of the broker serving again, and at
the end every intake record has exactly one decision. The rest of the chaos schedule runs
too (a worker joins, one leaves on SIGTERM, the last ones are SIGKILLed and a ``--burst``
worker drains).

The broker is a second ``ops/kafka/kafka.sh`` instance (from port 29092 on, data under the
test's tmp directory), never the shared one. ``TOOLGATE_CHAOS_SEED`` replays a run's
traffic and schedule; ``pytest -s`` shows its progress and figures.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.chaos_kit import ChaosRun, Plan, PrivateBroker

MESSAGES = 3_000
DOWN_SECONDS = 5.0
HOG_SECONDS = 120.0  # each hog ends by itself after this long, whatever happens to the run
RESUME_BOUND_S = 120.0  # broker serving again -> decisions flow again, under the hogs

pytestmark = pytest.mark.chaos

# A busy loop that ends by itself: the load is bounded even if the test process dies.
HOG = (
    "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"
)


class LoadedKill(ChaosRun):
    """The chaos run whose broker restart is a SIGKILL followed by CPU hogs, which run from
    the kill until decisions flow again."""

    hogs: list[subprocess.Popen[bytes]]
    hogs_alive_at_restart = 0
    hog_seconds = 0.0
    _hogs_started = 0.0

    def _start_hogs(self) -> None:
        self.hogs = [
            subprocess.Popen([sys.executable, "-c", HOG, str(HOG_SECONDS)], stdin=subprocess.DEVNULL)
            for _ in range(os.cpu_count() or 2)
        ]
        self._hogs_started = time.monotonic()
        self.say(f"{len(self.hogs)} CPU hogs started (at most {HOG_SECONDS:g}s)")

    def _stop_hogs(self) -> None:
        hogs, self.hogs = getattr(self, "hogs", []), []
        if not hogs:
            return
        for hog in hogs:
            if hog.poll() is None:
                hog.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                hog.wait(10)
        self.hog_seconds = time.monotonic() - self._hogs_started
        self.say(f"CPU hogs stopped after {self.hog_seconds:.1f}s")

    async def bounce_broker(self, producer: Any) -> None:
        kill = self.broker._sigkill

        def kill_then_load() -> None:
            kill()
            self._start_hogs()

        self.broker._sigkill = kill_then_load  # type: ignore[method-assign]
        await super().bounce_broker(producer)
        self.hogs_alive_at_restart = sum(hog.poll() is None for hog in self.hogs)

    async def wait_recovered(self, producer: Any) -> None:
        restart = self._recovery is not None
        try:
            await super().wait_recovered(producer)
        finally:
            if restart:
                self._stop_hogs()

    async def cleanup(self, producer: Any) -> None:
        self._stop_hogs()
        await super().cleanup(producer)


class TestBrokerKilledUnderLoad:
    async def test_decisions_resume_after_a_sigkilled_broker_serves_again(
        self, own_broker: PrivateBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A broker SIGKILLed mid-transaction on a loaded machine: decisions flow again within
        the bound once it serves, and every intake record ends with exactly one decision."""
        caplog.set_level(logging.CRITICAL, logger="aiokafka")  # this test's own clients reconnect
        seed = int(os.environ.get("TOOLGATE_CHAOS_SEED") or random.SystemRandom().randrange(10**6))
        plan = Plan(
            messages=MESSAGES,
            seed=seed,
            kills=0,  # the run's last crash still SIGKILLs the workers before the drain
            broker_restarts=1,
            hard_broker_restart=True,
            broker_down_seconds=DOWN_SECONDS,
            batch_size=100,
            chunk=300,
            max_ahead=1500,
            hold_commit_ms=200,
            stall_seconds=RESUME_BOUND_S,
        )
        workdir = tmp_path / "run"
        workdir.mkdir()
        run = LoadedKill(plan, own_broker, workdir)
        report = await run.run()
        figures = report.figures() + (
            f"\nCPU hogs            {run.hogs_alive_at_restart} running when the broker served "
            f"again, {run.hog_seconds:.1f}s in all"
        )
        print(f"\n{figures}\nworker logs: {workdir}")
        assert report.violations == [], figures
        assert report.messages == MESSAGES, figures
        assert (report.duplicates, report.losses, report.aborted_seen) == (0, 0, 0), figures
        assert report.decided == MESSAGES, figures
        # The run did what it claims: a SIGKILL of the broker with a transaction open, under
        # the hogs, and decisions again within the bound after it served.
        assert report.broker_restarts == 1, figures
        assert report.restarts_mid_txn == 1, figures
        assert run.hogs_alive_at_restart == (os.cpu_count() or 2), figures
        assert len(report.restart_recovery_s) == 1, figures
        assert report.restart_recovery_s[0] <= RESUME_BOUND_S, figures
