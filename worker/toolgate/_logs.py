"""Structured logs: one JSON object per line, never a payload byte.

Fields passed with ``extra=`` become top-level keys; values are truncated so a
log line stays bounded whatever a message carried.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_MAX_VALUE = 500


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line: ts, level, logger, event, then the extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage()[:_MAX_VALUE],
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                if not isinstance(value, int | float | bool | type(None)):
                    value = str(value)[:_MAX_VALUE]
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["error"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"[:_MAX_VALUE]
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka is chatty at INFO about every rebalance step; keep its warnings.
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
