"""Every number a caller gives the client, checked: finite, in range, of the right type.

A NaN deadline would never pass and would stall the heap of deadlines behind it; an infinite
or huge ttl overflows a datetime; a bool is an int to Python but no count. Each check raises a
``TypeError`` (not a number, not a mapping) or a ``ValueError`` (out of range) naming the
parameter, before anything is sent or awaited.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from toolgate.gate._records import BindValue

# The longest a request may live (ttl, expires_at) and a wait may last (wait_s): a week.
MAX_TTL_S = 7 * 24 * 3600.0
# The most attempts a request record may allow (max_attempts, and an adapter's attempt).
MAX_ATTEMPTS = 1000
# A bind integer is a JSON integer every consumer reads exactly: signed 64 bits.
_INT64 = (-(2**63), 2**63 - 1)


def seconds(name: str, value: object, *, high: float = MAX_TTL_S) -> float:
    """``value`` (a number of seconds or a timedelta) as a float above 0 and at most ``high``."""
    if isinstance(value, timedelta):
        # total_seconds() of timedelta.max is finite; the bound below refuses it.
        number = value.total_seconds()
    elif isinstance(value, float):
        number = value
    elif isinstance(value, int) and not isinstance(value, bool):
        number = float(value) if abs(value) <= 2**53 else math.inf  # no OverflowError
    else:
        raise TypeError(f"{name}: a number of seconds, not {type(value).__name__}")
    if not math.isfinite(number) or not 0 < number <= high:
        raise ValueError(f"{name}: {value!r} is not a number of seconds above 0 and at most {high:g}")
    return number


def whole(name: str, value: object, *, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high`` (a bool is refused)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name}: a whole number, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: {value!r} is not from {low} to {high}")
    return value


def moment(name: str, value: object, *, after: datetime, within_s: float = MAX_TTL_S) -> datetime:
    """``value`` as a datetime with a UTC offset, after ``after`` and at most ``within_s`` later."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name}: a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name}: {value.isoformat()} has no UTC offset")
    gap = (value - after).total_seconds()
    if not 0 < gap <= within_s:
        raise ValueError(
            f"{name}: {value.isoformat()} is not after now ({after.isoformat()}) "
            f"and within {within_s:g} s of it"
        )
    return value


def bind_values(value: object) -> dict[str, BindValue]:
    """``bind`` as a dict of names to a string, integer, boolean or list of strings."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"bind: a mapping of names to values, not {type(value).__name__}")
    out: dict[str, BindValue] = {}
    for name, item in value.items():
        if not isinstance(name, str):
            raise TypeError(f"bind: names are strings, not {type(name).__name__} ({name!r})")
        out[name] = _bind_value(name, item)
    return out


def _bind_value(name: str, item: Any) -> BindValue:
    if isinstance(item, bool | str):
        return item
    if isinstance(item, int):
        if not _INT64[0] <= item <= _INT64[1]:
            raise ValueError(f"bind[{name!r}]: {item} is outside the signed 64-bit integers")
        return item
    if isinstance(item, list) and all(isinstance(v, str) for v in item):
        return list(item)
    raise ValueError(
        f"bind[{name!r}]: a string, integer, boolean or list of strings, not {type(item).__name__}"
    )
