"""Contract reload (SIGHUP): a good set replaces the running one, a bad one is refused."""

from __future__ import annotations

import pytest
from toolgate._config import Config
from toolgate._errors import ContractError
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.service._service import Worker, WorkerOptions

from tests.unit.builders import CONTRACTS


def worker(factory: object) -> Worker:
    gate = Gate(ContractSet.load(CONTRACTS))
    return Worker(Config(), gate, options=WorkerOptions(handle_signals=False), gate_factory=factory)  # type: ignore[arg-type]


class TestReload:
    def test_good_set_is_swapped_in(self) -> None:
        """A contract set that loads replaces the running gate and its contract metrics."""
        fresh = Gate(ContractSet.load(CONTRACTS))
        w = worker(lambda: fresh)
        w.request_reload()
        assert w.reload_contracts()
        assert w.gate is fresh
        digest = next(c.digest for c in fresh.contracts if c.key == "deploy_status@v2")
        assert w.metrics.contract_info.labels("deploy_status", "2", "shadow", digest)._value.get() == 1

    def test_bad_set_keeps_running_one(self, caplog: pytest.LogCaptureFixture) -> None:
        """A contract set that fails to load leaves the running gate in place and says why."""

        def broken() -> Gate:
            raise ContractError("contracts/x/v1/contract.yaml", "$.limits", "bad")

        w = worker(broken)
        running = w.gate
        assert not w.reload_contracts()
        assert w.gate is running
        errors = [getattr(r, "error", "") for r in caplog.records if r.levelname == "ERROR"]
        assert any("contract.yaml" in e for e in errors)

    def test_no_source_refuses(self) -> None:
        """A worker built without a contract source cannot reload."""
        w = worker(None)
        assert not w.reload_contracts()
