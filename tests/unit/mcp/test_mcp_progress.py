"""An upstream's progress notifications: bounded in count and rate, a ceiling on how long they
hold a call, and no log line quoting a malformed one's values."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client as McpClient
from toolgate.client import Client
from toolgate.mcp._options import ProxyOptions
from toolgate.mcp._progress import (
    PROGRESS_BURST,
    PROGRESS_CEILING_S,
    PROGRESS_MAX_PER_CALL,
    PROGRESS_RATE,
    ProgressBudget,
    extending,
)
from toolgate.mcp._proxy import Proxy

from tests import hostile_mcp, mcp_kit
from tests.unit.mcp.test_mcp_hostile import hook, hostile, hostile_contracts
from tests.unit.worker_kit import CONFIG, World


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Deadline:
    """What ``asyncio.timeout`` offers: the deadline each admitted progress moves."""

    def __init__(self) -> None:
        self.moves: list[float] = []

    def reschedule(self, when: float) -> None:
        self.moves.append(when)


class TestProgressIsBounded:
    """A call relays, and is extended by, at most PROGRESS_BURST notifications at once, PROGRESS_RATE
    a second after that and PROGRESS_MAX_PER_CALL in all; progress must increase."""

    async def test_a_flood_at_one_instant_relays_the_burst(self) -> None:
        """20,000 notifications at one instant: the burst is relayed, the rest dropped."""
        clock, deadline, relayed = Clock(), Deadline(), []

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            relayed.append(progress)

        on_progress = extending(deadline, 30.0, relay, clock=clock)
        for i in range(1, hostile_mcp.PROGRESS_FLOOD + 1):
            await on_progress(float(i), None, "step")
        assert len(relayed) == PROGRESS_BURST
        assert len(deadline.moves) == PROGRESS_BURST

    async def test_the_rate_and_the_count_hold_over_time(self) -> None:
        """A notification every 10 ms for an hour: PROGRESS_RATE a second, then none past the count."""
        clock, deadline, relayed = Clock(), Deadline(), []

        async def relay(progress: float, total: float | None, message: str | None) -> None:
            relayed.append(clock.now)

        on_progress = extending(deadline, 30.0, relay, ceiling_s=3600.0, clock=clock)
        for i in range(1, 100 * 60 + 1):  # one minute
            clock.now += 0.01
            await on_progress(float(i), None, None)
        assert len(relayed) <= PROGRESS_BURST + PROGRESS_RATE * 60 + 1
        assert len(relayed) >= PROGRESS_RATE * 60
        budget = ProgressBudget(clock)
        admitted = 0
        for i in range(1, 10 * PROGRESS_MAX_PER_CALL):
            clock.now += 1.0
            admitted += budget.admit(float(i), None)
        assert admitted == PROGRESS_MAX_PER_CALL

    def test_progress_must_increase_and_be_finite(self) -> None:
        """A repeated, lower, infinite or NaN progress (or total) is dropped."""
        budget = ProgressBudget(Clock())
        assert budget.admit(1.0, 10.0)
        assert not budget.admit(1.0, 10.0)
        assert not budget.admit(0.5, None)
        assert not budget.admit(float("inf"), None)
        assert not budget.admit(float("nan"), None)
        assert not budget.admit(2.0, float("inf"))
        assert budget.admit(2.0, None)
        assert budget.dropped == 5


class TestTheCeiling:
    """Progress moves the deadline to --upstream-timeout from now, never past the ceiling after the start."""

    async def test_the_deadline_never_passes_the_ceiling(self) -> None:
        """Progress every 10 s for two hours: the last deadline is the start plus the ceiling."""
        clock, deadline = Clock(), Deadline()
        start = clock.now
        on_progress = extending(deadline, 30.0, None, ceiling_s=120.0, clock=clock)
        for i in range(1, 721):
            clock.now += 10.0
            await on_progress(float(i), None, None)
        assert max(deadline.moves) == start + 120.0
        assert deadline.moves[0] == start + 10.0 + 30.0

    def test_the_default_and_the_option(self) -> None:
        """The default ceiling is PROGRESS_CEILING_S; --progress-ceiling outside 0.1..3600 is refused."""
        import argparse

        from toolgate._errors import ConfigError
        from toolgate.mcp._options import add_arguments, options_from

        parser = argparse.ArgumentParser()
        add_arguments(parser)
        base = ["--server", "s", "--upstream-command", "x"]
        assert options_from(parser.parse_args(base)).progress_ceiling_s == PROGRESS_CEILING_S == 600.0
        assert options_from(parser.parse_args([*base, "--progress-ceiling", "60"])).progress_ceiling_s == 60.0
        with pytest.raises(ConfigError, match="--progress-ceiling"):
            options_from(parser.parse_args([*base, "--progress-ceiling", "7200"]))


class TestMalformedProgressQuotesNothing:
    """A malformed progress notification is dropped, and no log record quotes what it carried."""

    @pytest.fixture
    def world(self, gate: Any) -> World:
        w = World()
        w.gate = gate
        return w

    async def test_no_record_quotes_the_upstream(
        self, world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The SDK's records of the notifications it cannot read keep their template only."""
        from toolgate.mcp import _sdk_logs

        hook()
        _sdk_logs.quiet()
        caplog.set_level(logging.DEBUG)
        relayed: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            relayed.append(progress)

        async with Client(CONFIG, clients=world.clients) as client, McpClient(hostile()) as up:
            proxy = Proxy(
                mcp_kit.SERVER, up, client, hostile_contracts(tmp_path), options=ProxyOptions(wait_s=0.01)
            )
            await proxy.load_tools()
            async with McpClient(proxy.mcp_server()) as host:
                await host.call_tool(
                    "deploy_status", {"case": "progress-malformed"}, progress_callback=on_progress
                )
        formatter = logging.Formatter()
        sdk = [r for r in caplog.records if r.name == "client" or r.name.startswith("mcp")]
        assert sdk, "the SDK logged nothing of the malformed notifications"
        written = "\n".join(formatter.format(r) for r in caplog.records)
        assert hostile_mcp.SECRET not in written
        assert "wire the funds" not in written
        assert relayed == [1.0]  # the one notification whose numbers were sound
