"""Session fixtures for the unit tests."""

from __future__ import annotations

import pytest

from tests.unit.builders import CONTRACTS
from worker._contracts import ContractSet
from worker._fixtures import fixtures_keyring
from worker._gate import Gate


@pytest.fixture(scope="session")
def contracts() -> ContractSet:
    """The bundled contracts."""
    return ContractSet.load(CONTRACTS)


@pytest.fixture(scope="session")
def gate(contracts: ContractSet) -> Gate:
    """A gate over the bundled contracts with the fixtures keyring."""
    return Gate(contracts, fixtures_keyring(CONTRACTS))
