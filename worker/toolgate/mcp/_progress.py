"""An upstream's progress, relayed to the host's call it serves: the numbers as they came,
the message bounded and marked as the upstream's unreviewed text; each progress extends the
call's upstream wait (never past :data:`PROGRESS_CEILING_S`).
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
PROGRESS_CEILING_S = 3600.0  # progress extends a call's upstream wait to at most this in all


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


def extending(deadline: Any, step_s: float, relay: ProgressRelay | None) -> ProgressRelay:
    """``relay`` (if any), and each progress moves ``deadline`` (an ``asyncio.timeout``) to ``step_s``
    from now, never past :data:`PROGRESS_CEILING_S` after the call began: a long operation
    that reports progress is not cut at ``--upstream-timeout``."""
    loop = asyncio.get_running_loop()
    ceiling = loop.time() + max(PROGRESS_CEILING_S, step_s)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        deadline.reschedule(min(loop.time() + step_s, ceiling))
        if relay is None:
            return
        try:
            await relay(progress, total, message)
        except Exception as exc:  # the host went away: the call goes on
            _log.debug("relaying progress failed: %s", type(exc).__name__)

    return on_progress
