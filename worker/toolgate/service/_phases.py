"""Where the worker loop's CPU time goes, by phase (``ops/bench/worker_bench.py`` reports it).

A :class:`PhaseClock` is injected into the worker (``WorkerOptions.phase_clock``); the loop
calls ``enter(phase)`` at a handful of points: before it polls, before and after it decides a
batch, before it sends the offsets and commits, before it updates its metrics. Without one the
worker calls :data:`NO_PHASES`, whose ``enter`` does nothing: one method call per point and
batch, not per result.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

DECIDE: Final = "decide"  # decide_batch: the gate and the output records
SEND: Final = "send"  # the records' partitions, the records to the producer, their acknowledgement
COMMIT: Final = "commit"  # the consumed offsets into the transaction and its commit
POLL: Final = "poll"  # getmany: fetching and decoding the intake records
METRICS: Final = "metrics"  # counters, histograms and stats after the commit
LOOP: Final = "loop"  # everything else: request lookups, messages, sweeps, lag
PHASES: Final = (DECIDE, SEND, COMMIT, POLL, METRICS, LOOP)


class Phases(Protocol):
    """What the worker loop calls."""

    def enter(self, phase: str) -> None: ...


class PhaseClock:
    """One thread's CPU time, charged to the phase it last entered.

    ``enter(phase)`` charges the CPU time since the previous ``enter`` to the phase then
    current and makes ``phase`` current, so the totals add up to the thread's CPU time since
    the clock was made. Make it on the thread that runs the loop (``time.thread_time`` is per
    thread). In an event loop, whatever runs between two calls (another partition's batch, the
    Kafka client's background tasks) goes to the phase last entered: a phase that does not
    await before the next ``enter`` (decide, metrics) is exact, the split among those that
    await (send, commit, poll) approximate.
    """

    __slots__ = ("_clock", "_current", "_since", "totals")

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        self._clock = clock
        self._current: str = LOOP
        self._since = clock()
        self.totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def enter(self, phase: str) -> None:
        """Charge the time since the last call to the current phase; ``phase`` is current now."""
        now = self._clock()
        self.totals[self._current] += now - self._since
        self._current, self._since = phase, now

    def snapshot(self) -> dict[str, float]:
        """The totals in seconds up to now, the current phase's time included."""
        self.enter(self._current)
        return dict(self.totals)


class _NoPhases:
    """The default: nothing is measured."""

    __slots__ = ()

    def enter(self, phase: str) -> None:
        """Do nothing."""


NO_PHASES: Final[Phases] = _NoPhases()
