"""Session settings for every test: no test depends on a default port being free."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _no_default_ports() -> Iterator[None]:
    """A worker or ``toolgate run`` a test starts in-process, or as a child inheriting this
    environment, serves its metrics on a free port (``TOOLGATE_METRICS_PORT=0``), never on the
    default 9464 another process (``make run``'s demo worker) may hold. A test that sets the
    variable itself keeps its value."""
    before = os.environ.get("TOOLGATE_METRICS_PORT")
    os.environ.setdefault("TOOLGATE_METRICS_PORT", "0")
    yield
    if before is None:
        os.environ.pop("TOOLGATE_METRICS_PORT", None)
