"""An upstream's progress, relayed to the host's call it serves: the numbers as they came,
the message bounded and marked as the upstream's unreviewed text; each progress extends the
call's upstream wait (never past the ceiling, ``--progress-ceiling``, default
:data:`PROGRESS_CEILING_S`).

Progress is bounded per call (:class:`ProgressBudget`): a notification counts only when its
``progress`` is finite and above the call's last one (MCP: progress increases), within
:data:`PROGRESS_MAX_PER_CALL` in all and a rate of :data:`PROGRESS_RATE` a second (a burst of
:data:`PROGRESS_BURST`); any other is dropped, neither relayed nor extending the wait, so a
flood costs the call nothing but its reading.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

_log = logging.getLogger("toolgate.mcp_proxy")


ProgressRelay = Callable[[float, float | None, str | None], Awaitable[None]]
# The relay of the host's call being served (None: the host asked for no progress). A context
# variable, so the upstream call made for it (a task of its own) finds it.
HOST_PROGRESS: contextvars.ContextVar[ProgressRelay | None] = contextvars.ContextVar(
    "toolgate_host_progress", default=None
)
PROGRESS_MESSAGE_MAX = 200
PROGRESS_MARK = "[upstream progress, unreviewed] "
PROGRESS_CEILING_S = 600.0  # progress extends a call's upstream wait to at most this in all
PROGRESS_CEILING_MAX_S = 3600.0  # the highest --progress-ceiling
PROGRESS_MAX_PER_CALL = 1000  # progress notifications one call relays and is extended by, in all
PROGRESS_RATE = 4.0  # a second, on average
PROGRESS_BURST = 16


def progress_message(message: str | None) -> str | None:
    """An upstream's progress message as the host reads it: one line of printable characters,
    at most :data:`PROGRESS_MESSAGE_MAX` of them, marked as the upstream's unreviewed text."""
    if not message:
        return None
    line = "".join(c if c.isprintable() else " " for c in message[: PROGRESS_MESSAGE_MAX * 2])
    line = " ".join(line.split())[:PROGRESS_MESSAGE_MAX]
    return PROGRESS_MARK + line if line else None


def host_progress(ctx: Any) -> ProgressRelay | None:
    """The relay of an upstream's progress to the host's call ``ctx`` serves (its request-scoped
    session: the host's own ``progressToken``, nothing when the host asked for no progress): the
    numbers as they came, the message bounded and marked (:func:`progress_message`)."""
    report = getattr(getattr(ctx, "session", None), "report_progress", None)
    if report is None:
        return None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        if math.isfinite(progress) and (total is None or math.isfinite(total)):
            await report(progress, total, progress_message(message))

    return relay


class ProgressBudget:
    """Which of one call's progress notifications count (see the module docstring); ``clock``
    is a monotonic clock in seconds."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        max_count: int = PROGRESS_MAX_PER_CALL,
        rate: float = PROGRESS_RATE,
        burst: float = PROGRESS_BURST,
    ) -> None:
        self.clock = clock
        self.left = max_count
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = clock()
        self.last: float | None = None
        self.dropped = 0

    def admit(self, progress: float, total: float | None) -> bool:
        """Whether this notification counts (and is charged to the budget)."""
        if not math.isfinite(progress) or (total is not None and not math.isfinite(total)):
            return self._drop()
        if self.last is not None and progress <= self.last:
            return self._drop()
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.left <= 0 or self.tokens < 1:
            return self._drop()
        self.tokens -= 1
        self.left -= 1
        self.last = progress
        return True

    def _drop(self) -> bool:
        self.dropped += 1
        return False


def extending(
    deadline: Any,
    step_s: float,
    relay: ProgressRelay | None,
    *,
    ceiling_s: float = PROGRESS_CEILING_S,
    clock: Callable[[], float] | None = None,
) -> ProgressRelay:
    """``relay`` (if any), and each progress the call's :class:`ProgressBudget` admits moves
    ``deadline`` (an ``asyncio.timeout``) to ``step_s`` from now, never past ``ceiling_s``
    after the call began: a long operation that reports progress is not cut at
    ``--upstream-timeout``, and no upstream holds a call longer than the ceiling."""
    now = clock or asyncio.get_running_loop().time
    ceiling = now() + max(ceiling_s, step_s)
    budget = ProgressBudget(now)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if not budget.admit(progress, total):
            return
        deadline.reschedule(min(now() + step_s, ceiling))
        if relay is None:
            return
        try:
            await relay(progress, total, message)
        except Exception as exc:  # the host went away: the call goes on
            _log.debug("relaying progress failed: %s", type(exc).__name__)

    return on_progress
