"""replay --apply against live workers on the real broker: it compares the local contracts with
the digests the workers report (refuses with the difference, --force overrides), and --wait
follows the replayed records to their decisions."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests import ROOT
from tests.integration.live import LiveWorker
from tests.integration.test_replay import contracts_with_v2, gate_for, publish_reviews
from tests.integration.worker_kit import KEYRING, read_all

COUNT = 12  # review results from adapter 1.5.0; every third carries `comment` (quarantined by v1)


@pytest.fixture
def live(bootstrap: str) -> Any:
    worker = LiveWorker(bootstrap)
    try:
        worker.start()
        yield worker
    finally:
        worker.stop()


def replay(live: LiveWorker, contracts: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return live.run(
        "toolgate", "replay", "--code", "SCHEMA_VIOLATION", "--contracts", str(contracts),
        "--keyring", str(KEYRING), *args, timeout=180,
    )  # fmt: skip


def intake_count(live: LiveWorker) -> int:
    assert live.config is not None
    return len(asyncio.run(read_all(live.config, live.config.topics.intake)))


def test_apply_checks_the_workers_contracts_and_waits(live: LiveWorker, tmp_path: Path) -> None:
    """Refused while the group's live worker runs other contracts; --force replays (still rejected, shown by
    --wait); after the worker reloads the fixed contracts, the replay passes the check and --wait
    shows every replayed record accepted."""
    assert live.config is not None
    assert live.worker is not None
    flags = asyncio.run(publish_reviews(live.config, COUNT, comment_every=3))
    commented = sum(flags.values())
    live.wait_decided(COUNT)
    fixed = contracts_with_v2(tmp_path / "fixed", "active")

    # 1. The worker runs the bundled contracts, the local folder has review_status v2: refused.
    refused = replay(live, fixed, "--apply")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    # The group's view (the members topic) says what the live worker decides with.
    running = live.worker.gate.contracts.label
    local = gate_for(fixed).contracts.label
    assert running != local
    assert (
        f"replay refused: the live workers of group {live.config.group_id} decide with {running}, "
        f"the local contracts are {local}"
    ) in refused.stdout
    v2 = next(c for c in gate_for(fixed).contracts if c.key == "review_status@v2")
    assert intake_count(live) == COUNT  # nothing was sent

    # 2. --force replays anyway; --wait shows what the worker (still on v1) decided.
    before_force = datetime.now(UTC).isoformat()
    forced = replay(live, fixed, "--apply", "--force", "--wait", "60")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"--force: replaying although the live workers of group {live.config.group_id}" in forced.stdout
    assert f"replayed {commented} records" in forced.stdout
    assert f"decided: {commented} of {commented}   accepted now: 0   rejected again: {commented}" in (
        forced.stdout
    )
    assert any(
        line.split() == ["review_status", "SCHEMA_VIOLATION", "rejected", "SCHEMA_VIOLATION", str(commented)]
        for line in forced.stdout.splitlines()
    ), forced.stdout

    # 3. The worker reloads the fixed contracts: the check passes, every replayed record is accepted.
    worker = live.worker
    worker.gate_factory = lambda: gate_for(fixed)
    assert live._loop is not None
    live._loop.call_soon_threadsafe(worker.request_reload)

    def reports_v2() -> bool:
        with urllib.request.urlopen(live.metrics_url, timeout=5) as response:
            return f'digest="{v2.digest}"' in response.read().decode()

    live.wait_until(reports_v2, 30, "reporting the reloaded contracts")
    done = replay(live, fixed, "--apply", "--until", before_force, "--wait", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"live workers of group {live.config.group_id} run the local contracts ({local})" in done.stdout
    assert (
        f"decided: {commented} of {commented}   accepted now: {commented}   rejected again: 0" in done.stdout
    )
    assert any(
        line.split() == ["review_status", "SCHEMA_VIOLATION", "success", "-", str(commented)]
        for line in done.stdout.splitlines()
    ), done.stdout


def test_an_unreachable_worker_refuses(live: LiveWorker, tmp_path: Path) -> None:
    """A --workers URL nobody answers: refused naming it (nothing sent)."""
    assert live.config is not None
    asyncio.run(publish_reviews(live.config, 3, comment_every=1))
    live.wait_decided(3)
    dead = "http://127.0.0.1:9/metrics"
    result = replay(live, ROOT / "contracts", "--apply", "--workers", dead)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cannot compare with the worker at {dead}" in result.stdout
    assert intake_count(live) == 3
