"""The test suite: unit/ (no broker), repo/ (the repository's files), integration/ (the real broker)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root folder, for every test that reads a file of the repository."""
