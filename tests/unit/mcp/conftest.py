"""Fixtures of the MCP proxy's unit tests."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.worker_kit import World


@pytest.fixture
def world(gate: Any) -> World:
    """The fake broker with toolgate's topics, its gate the conftest's."""
    w = World()
    w.gate = gate
    return w
