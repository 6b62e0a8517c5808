"""A deterministic asyncio event loop: virtual time, and a seed that orders the ready callbacks.

:class:`Choices` is the one source of every decision a simulated schedule makes: the
order of ready callbacks, latencies, faults. Drawn from a seed, it records each
choice; replayed from a recorded schedule, it returns the recorded choices (0, the
default, for any not recorded), so a schedule can be shrunk by zeroing choices.

:class:`SimLoop` is a selector event loop whose selector never waits: when nothing
is ready it moves the virtual clock to the next timer. ``call_soon`` lets
:class:`Choices` move each new callback ahead of others already ready, so every
interleaving of ready tasks is reachable, and the same choices give the same run.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import selectors
from collections.abc import Callable, Sequence
from typing import Any


class Stuck(Exception):
    """Nothing is ready and no timer is due: every task waits for something that never comes."""


class Choices:
    """Every choice of one schedule: drawn from ``seed``, or replayed from ``replay``.

    A choice is an integer in ``[0, n)``; 0 is the default (first in, first out; no
    fault; no latency). ``notes`` names each non-default choice made, by its index.
    """

    def __init__(self, seed: int, replay: dict[int, int] | None = None) -> None:
        self.seed = seed
        self._random = random.Random(seed)
        self.replay = replay
        self.count = 0
        self.made: dict[int, int] = {}  # index -> value, non-default choices only
        self.notes: dict[int, str] = {}

    def draw(self, n: int, p: float, note: str | Callable[[int], str]) -> int:
        """A choice among ``n``: non-default with probability ``p`` (uniform among 1..n-1)."""
        index = self.count
        self.count += 1
        if n < 2:
            return 0
        if self.replay is None:
            rnd = self._random
            value = rnd.randrange(1, n) if rnd.random() < p else 0
        else:
            value = min(self.replay.get(index, 0), n - 1)
        if value:
            self.made[index] = value
            self.notes[index] = note if isinstance(note, str) else note(value)
        return value

    def pick(self, weights: Sequence[float], note: Callable[[int], str]) -> int:
        """0 (nothing) or ``i`` with probability ``weights[i - 1]``."""
        index = self.count
        self.count += 1
        if self.replay is None:
            r = self._random.random()
            value = 0
            for i, weight in enumerate(weights, 1):
                r -= weight
                if r < 0:
                    value = i
                    break
        else:
            value = min(self.replay.get(index, 0), len(weights))
        if value:
            self.made[index] = value
            self.notes[index] = note(value)
        return value

    def chance(self, p: float, note: str) -> bool:
        """True with probability ``p`` (a fault, a pause)."""
        return self.draw(2, p, note) == 1


class _VirtualSelector(selectors.SelectSelector):
    """Never waits: a select with a timeout moves the loop's virtual clock instead."""

    def __init__(self, loop: SimLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Stuck("no callback ready and no timer due")
        if timeout > 0:
            self._loop.now += timeout
        return []


class SimLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time whose ready-callback order is chosen by :class:`Choices`."""

    # Probability that a callback made ready jumps ahead of others already ready.
    REORDER = 0.25

    def __init__(self, choices: Choices) -> None:
        self.now = 0.0
        self.choices = choices
        self.errors: list[BaseException] = []  # unexpected exceptions of abandoned tasks
        super().__init__(_VirtualSelector(self))
        self.set_exception_handler(self._abandoned)

    def time(self) -> float:
        return self.now

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        handle = super().call_soon(callback, *args, context=context)
        ready: Any = self._ready  # type: ignore[attr-defined]
        waiting = len(ready) - 1
        if waiting:
            ahead = self.choices.draw(waiting + 1, self.REORDER, "order")
            if ahead:
                ready.pop()
                ready.insert(len(ready) - ahead, handle)
        return handle

    def _abandoned(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """A task ended with an exception nobody awaited: kept for the report (a crashed
        node's tasks end so, and are not reported)."""
        error = context.get("exception")
        if error is not None and not getattr(error, "expected", False):
            self.errors.append(error)
