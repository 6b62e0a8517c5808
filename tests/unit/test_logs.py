"""The worker's logs: one JSON object per line, exceptions and uncaught errors included."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from toolgate._logs import JsonFormatter


def _format(record: logging.LogRecord) -> dict[str, object]:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert isinstance(parsed, dict)
    return parsed


def _record(msg: str, *, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord("toolgate", logging.ERROR, __file__, 1, msg, None, exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


class TestFormatter:
    """What one log line holds."""

    def test_exception_becomes_fields(self) -> None:
        """exc_info gives an error field (type: message) and the traceback, inside the one JSON line."""
        try:
            raise ValueError("bad value")
        except ValueError as caught:
            line = _format(_record("failed", exc=caught))
        assert line["error"] == "ValueError: bad value"
        assert isinstance(line["traceback"], str)
        assert "Traceback (most recent call last)" in line["traceback"]
        assert "raise ValueError" in line["traceback"]

    def test_structured_extras_stay_structured(self) -> None:
        """A dict extra (the start-up configuration) is a JSON object, not a string."""
        line = _format(_record("configuration", config={"bootstrap": "b:1", "topics": {"intake": "i"}}))
        assert line["config"] == {"bootstrap": "b:1", "topics": {"intake": "i"}}

    def test_large_structured_extras_are_bounded(self) -> None:
        """An extra too large to log whole becomes bounded text."""
        line = _format(_record("big", items=["x" * 100] * 1000))
        assert isinstance(line["items"], str)
        assert len(line["items"]) <= 500

    def test_text_extras_are_bounded(self) -> None:
        """Long text extras are cut."""
        line = _format(_record("long", detail="y" * 10_000))
        assert line["detail"] == "y" * 500


class TestProcessLogs:
    """After configure(), nothing reaches stderr except JSON lines."""

    def test_uncaught_exception_is_a_json_line(self) -> None:
        """An exception nobody caught is logged as JSON with its traceback, not printed raw."""
        done = _run_python("from toolgate import _logs\n_logs.configure()\nraise KeyError('lost')\n")
        assert done.returncode == 1
        (line,) = [json.loads(text) for text in done.stderr.splitlines()]
        assert line["level"] == "critical"
        assert line["error"] == "KeyError: 'lost'"
        assert "KeyError" in line["traceback"]

    def test_thread_exception_is_a_json_line(self) -> None:
        """An exception that ends a thread is logged as JSON too."""
        code = (
            "import threading\nfrom toolgate import _logs\n_logs.configure()\n"
            "def boom():\n    raise RuntimeError('in a thread')\n"
            "t = threading.Thread(target=boom)\nt.start()\nt.join()\n"
        )
        done = _run_python(code)
        assert done.returncode == 0
        (line,) = [json.loads(text) for text in done.stderr.splitlines()]
        assert line["error"] == "RuntimeError: in a thread"

    def test_warnings_are_json_lines(self) -> None:
        """A Python warning goes through logging, as JSON."""
        code = "import warnings\nfrom toolgate import _logs\n_logs.configure()\nwarnings.warn('careful')\n"
        done = _run_python(code)
        (line,) = [json.loads(text) for text in done.stderr.splitlines()]
        assert line["logger"] == "py.warnings"
        assert "careful" in line["event"]

    def test_without_configure_python_prints_its_traceback(self) -> None:
        """The check can fail: an unconfigured process prints a plain traceback."""
        done = _run_python("raise KeyError('lost')\n")
        assert done.stderr.startswith("Traceback")
