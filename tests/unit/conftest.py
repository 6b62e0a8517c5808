"""Session fixtures for the unit tests."""

from __future__ import annotations

import pytest
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate

from tests.unit.builders import CONTRACTS


@pytest.fixture(scope="session")
def contracts() -> ContractSet:
    """The bundled contracts."""
    return ContractSet.load(CONTRACTS)


@pytest.fixture(scope="session")
def gate(contracts: ContractSet) -> Gate:
    """A gate over the bundled contracts with the fixtures keyring."""
    return Gate(contracts, fixtures_keyring(CONTRACTS))
