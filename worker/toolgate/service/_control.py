"""The control topics' records (members, contracts), decoded strictly at the edge.

A record of the members or the contracts topic is decoded into a typed value with bounds
(:mod:`msgspec` Structs, bounded numbers, timezone-aware times) before anything reads it;
one that does not decode, or that its reader refuses (a signature that does not hold, a
generation nobody publishes), is one log line naming the topic, the partition, the offset,
the key and the reason (the field, for a record that does not decode), and is otherwise
ignored: the topics are compacted, so such a record stays and every restart meets it again.

:class:`Refusals` says each refused record, rate-limited by time per key and reason: a
second refusal of the same key within ``interval_s`` is counted and said with the next
line, never silenced for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import msgspec

from toolgate.gate._published import MAX_GENERATION
from toolgate.service._store import reading

__all__ = ["MAX_GENERATION", "Refusals", "decode_control"]

T = TypeVar("T")

_MAX_SLOTS: Final = 1000


class Refusals:
    """Log lines for refused control-topic records, at most one per key and reason per
    ``interval_s`` (the lines left out are counted in the next one).

    Args:
        logger: where the lines go.
        topic: the topic the records come from (named in every line).
        message: the lines' message.
        clock: monotonic seconds (injected by tests).
        interval_s: the shortest time between two lines of one key and reason.
    """

    def __init__(
        self,
        logger: logging.Logger,
        topic: str,
        message: str = "control topic record refused",
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = 60.0,
    ) -> None:
        self.log = logger
        self.topic = topic
        self.message = message
        self.clock = clock
        self.interval_s = interval_s
        self.count = 0  # every refused record, logged or not
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (last line's time, left out since)

    def refuse(self, key: bytes | str | None, reason: str) -> None:
        """Say that the record being read (``key``) was refused, and why."""
        self.count += 1
        name = key.decode("utf-8", "replace") if isinstance(key, bytes) else (key or "")
        name, reason = name[:200], reason[:300]
        slot = (name, reason)
        now = self.clock()
        last = self._last.pop(slot, None)
        if last is not None and now - last[0] < self.interval_s:
            self._last[slot] = (last[0], last[1] + 1)
            return
        while len(self._last) >= _MAX_SLOTS:  # bounded: the slot said longest ago goes first
            del self._last[next(iter(self._last))]
        self._last[slot] = (now, 0)
        topic, partition, offset = reading.get() or (self.topic, None, None)
        extra: dict[str, Any] = {
            "topic": topic or self.topic,
            "partition": partition,
            "offset": offset,
            "key": name,
            "reason": reason,
        }
        if last is not None and last[1]:
            extra["refused_since_last_line"] = last[1]
        self.log.warning(self.message, extra=extra)


def decode_control(
    decoder: msgspec.json.Decoder[T], value: bytes, key: bytes | None, refusals: Refusals
) -> T | None:
    """``value`` decoded, or None after one refusal line naming the field that failed."""
    try:
        return decoder.decode(value)
    except msgspec.ValidationError as exc:
        refusals.refuse(key, f"does not decode: {exc}")
    except msgspec.DecodeError as exc:
        refusals.refuse(key, f"not JSON: {exc}")
    return None
