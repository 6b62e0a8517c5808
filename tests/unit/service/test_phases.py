"""The phase clock charges a thread's CPU time to the loop phase it last entered."""

from __future__ import annotations

from toolgate.gate._gate import Gate
from toolgate.service._phases import COMMIT, DECIDE, LOOP, METRICS, NO_PHASES, PHASES, POLL, SEND, PhaseClock

from tests.unit.worker_kit import World


class Ticks:
    """A clock that returns the given readings in turn."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0)


class Recorder:
    """Phases that remember the order they were entered in."""

    def __init__(self) -> None:
        self.entered: list[str] = []

    def enter(self, phase: str) -> None:
        self.entered.append(phase)


class TestPhaseClock:
    def test_time_goes_to_the_phase_entered_before_it(self) -> None:
        """Each interval between two calls is charged to the phase current during it."""
        clock = PhaseClock(Ticks(10.0, 11.0, 13.5, 14.0, 20.0))
        clock.enter(DECIDE)  # 10 -> 11 was the loop's
        clock.enter(SEND)  # 11 -> 13.5 decide's
        clock.enter(DECIDE)  # 13.5 -> 14 send's
        totals = clock.snapshot()  # 14 -> 20 decide's again
        assert totals == {DECIDE: 8.5, SEND: 0.5, COMMIT: 0.0, POLL: 0.0, METRICS: 0.0, LOOP: 1.0}

    def test_totals_add_up_to_the_clock(self) -> None:
        """Whatever the phases, their totals are the clock's advance since the clock was made."""
        clock = PhaseClock(Ticks(0.0, 0.25, 0.5, 2.0, 3.0, 7.0))
        for phase in (POLL, LOOP, COMMIT, POLL):
            clock.enter(phase)
        assert sum(clock.snapshot().values()) == 7.0

    def test_every_phase_is_reported_even_when_never_entered(self) -> None:
        """A snapshot names every phase, so a bench's columns do not depend on the run."""
        assert tuple(PhaseClock(Ticks(0.0, 0.0)).snapshot()) == PHASES

    def test_the_default_keeps_no_state(self) -> None:
        """Without a clock the worker's calls go to an object with nothing to record into."""
        NO_PHASES.enter(DECIDE)
        assert not hasattr(NO_PHASES, "__dict__")
        assert not isinstance(NO_PHASES, PhaseClock)


class TestWorkerPhases:
    async def test_each_batch_passes_through_the_phases_in_order(self, gate: Gate) -> None:
        """Decide, send, commit, metrics: once per committed batch, in its partition's task,
        while the loop polls (its poll and loop entries interleave where the task awaits)."""
        world = World(partitions=1)
        world.gate = gate
        for i in range(4):
            world.request(i)
            world.result(i)
        recorder = Recorder()
        stats = await world.worker(burst=True, phase_clock=recorder).run()
        assert stats.committed >= 1
        assert recorder.entered[:2] == [POLL, LOOP]
        batches = [phase for phase in recorder.entered if phase not in (POLL, LOOP)]
        assert batches == [DECIDE, SEND, COMMIT, METRICS] * stats.committed
        assert set(recorder.entered) == set(PHASES)
