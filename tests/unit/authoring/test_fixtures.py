"""Every bundled contract fixture is a test case: accepts accept, rejects hit their stage and code."""

from __future__ import annotations

import pytest
from toolgate.authoring._fixtures import Case, fixtures_keyring, load_cases, run_case
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate

from tests.unit.builders import CONTRACTS

_CONTRACTS = ContractSet.load(CONTRACTS)
_KEYRING = fixtures_keyring(CONTRACTS)
_CASES = [case for contract in _CONTRACTS for case in load_cases(contract, _KEYRING)]
_GATE = Gate(_CONTRACTS, _KEYRING)


@pytest.mark.parametrize("case", _CASES, ids=[case.name for case in _CASES])
def test_fixture(case: Case) -> None:
    """The fixture's verdict is the one it declares."""
    outcome = run_case(_GATE, case)
    assert outcome.ok, f"{case.path}: {outcome.problem}"


class TestCoverage:
    def test_every_version_has_both_kinds(self) -> None:
        """Every contract version ships accept and reject fixtures."""
        for contract in _CONTRACTS:
            kinds = {case.kind for case in _CASES if case.contract is contract}
            assert kinds == {"accept", "reject"}, contract.key

    def test_rejected_fixtures_never_leak(self) -> None:
        """A rejected fixture's agent envelope is the fixed failure."""
        for case in _CASES:
            verdict = run_case(_GATE, case).verdict
            if not verdict.accepted:
                assert b'"INVALID_RESPONSE"' in verdict.agent
                assert b'"data"' not in verdict.agent


class TestKeyring:
    def test_a_missing_signing_key_names_the_keyring_setting(self) -> None:
        """A signed fixture without its key says which key, and --keyring / TOOLGATE_KEYRING."""
        from toolgate._errors import ContractError
        from toolgate.gate._signing import Keyring

        (deploy,) = [c for c in _CONTRACTS if c.key == "deploy_status@v1"]
        with pytest.raises(ContractError, match=r"'deploy-adapter-2026'.*--keyring FILE or TOOLGATE_KEYRING"):
            load_cases(deploy, Keyring())
