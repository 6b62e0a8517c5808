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


class TestTheSetItDecidesWith:
    """The worker's metrics and /readyz name the contract set it decides with, reloads included."""

    def test_metrics_follow_the_loaded_set(self) -> None:
        """The generation gauge and the one info series follow a reload to another set."""
        w = worker(lambda: Gate(ContractSet(list(ContractSet.load(CONTRACTS))[1:], generation=4)))
        first = w.gate.contracts
        assert w.metrics.contract_set_generation._value.get() == 0
        assert w.metrics.contract_set_info.labels(first.label, first.digest)._value.get() == 1
        assert w.reload_contracts()
        second = w.gate.contracts
        assert second.digest != first.digest
        assert w.metrics.contract_set_generation._value.get() == 4
        samples = [s for m in w.metrics.contract_set_info.collect() for s in m.samples]
        assert [(s.labels["label"], s.labels["digest"]) for s in samples] == [(second.label, second.digest)]

    def test_readyz_names_the_set(self) -> None:
        """/readyz says the readiness first, then the set's label, generation and digest."""
        w = worker(None)
        contracts = w.gate.contracts
        status, line = w.readyz().split("\n")
        assert status == w.status()
        assert line == f"contracts {contracts.label} (generation 0, digest {contracts.digest})"
