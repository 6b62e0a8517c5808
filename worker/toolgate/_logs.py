"""Structured logs: one JSON object per line, never a payload byte.

Fields passed with ``extra=`` become top-level keys: numbers, booleans and null as
they are, dicts and lists as JSON when small, anything else as bounded text, so a
log line stays bounded whatever a message carried. An exception becomes two fields,
``error`` (type and message) and ``traceback``; once :func:`configure` ran, an
uncaught exception, in any thread, is logged the same way instead of printed.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import traceback
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_MAX_VALUE = 500
# Structured values (the start-up configuration) are ours, not a message's: room for them whole.
_MAX_STRUCTURED = 8000
_MAX_TRACEBACK = 8000


def _field(value: Any) -> Any:
    if isinstance(value, int | float | bool | type(None)):
        return value
    if isinstance(value, dict | list):
        try:
            if len(json.dumps(value, default=str)) <= _MAX_STRUCTURED:
                return value
        except (TypeError, ValueError):
            pass
    return str(value)[:_MAX_VALUE]


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
                line[key] = _field(value)
        if record.exc_info and record.exc_info[0] is not None:
            kind, exc, tb = record.exc_info
            line["error"] = f"{kind.__name__}: {exc}"[:_MAX_VALUE]
            text = "".join(traceback.format_exception(kind, exc, tb))
            line["traceback"] = text[-_MAX_TRACEBACK:]  # the innermost frames matter most
        if record.stack_info:
            line["stack"] = record.stack_info[-_MAX_TRACEBACK:]
        return json.dumps(line, ensure_ascii=False, default=str)


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, exc, tb)
        return
    logging.getLogger("toolgate").critical("uncaught exception", exc_info=(kind, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None:
        return
    logging.getLogger("toolgate").critical(
        "uncaught exception in a thread",
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def configure(level: str = "INFO") -> None:
    """Send every log record, warning and uncaught exception to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiokafka is chatty at INFO about every rebalance step; keep its warnings.
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread
