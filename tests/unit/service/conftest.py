"""Fixtures of the contract-source tests: the fixtures keyring and its sample publisher key."""

from __future__ import annotations

import pytest
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.gate._signing import Key, Keyring

from tests.unit.builders import CONTRACTS


@pytest.fixture
def keyring() -> Keyring:
    """The bundled contracts' fixtures keyring (its [publishers] name sample-publisher)."""
    return fixtures_keyring(CONTRACTS)


@pytest.fixture
def key(keyring: Keyring) -> Key:
    """The sample publisher key, with its private key."""
    found = keyring.publisher("sample-publisher")
    assert found is not None
    return found
