"""Never reject as unknown while the set may be behind: the worker catches up on its contracts
first, and answers CONTRACTS_BEHIND (retryable) when it knows it is behind and cannot catch up."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate, GroupHint
from toolgate.gate._records import CONTRACT_GENERATION_HEADER, CONTRACT_SET_HEADER
from toolgate.service._contract_source import CatchUp, ContractSource, RegistryContractSource
from toolgate.service._service import Worker, WorkerOptions

from tests.unit.builders import CONTRACTS, NOW, message, pairs, review_request, review_value
from tests.unit.worker_kit import CONFIG, T, World, rid


def folder_without(tmp_path: Path, tool: str) -> Path:
    root = tmp_path / "contracts"
    shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md", tool))
    return root


def folder_worker(world: World, root: Path, keyring: Any, **options: Any) -> Worker:
    def load() -> Gate:
        return Gate(ContractSet.load(root), keyring)

    opts: dict[str, Any] = {
        "handle_signals": False,
        "metrics_port": 0,
        "linger_ms": 5,
        "burst": True,
        "contract_source": ContractSource([root]),
        "contracts_catch_up_seconds": 0.3,
    }
    opts.update(options)
    config = msgspec.structs.replace(CONFIG, contracts_dir=str(root), contracts_watch_seconds=0)
    world.gate = load()
    return Worker(
        config,
        world.gate,
        options=WorkerOptions(**opts),
        gate_factory=load,
        clock=lambda: NOW,
        clients=world.clients,
        sleep=world.sleep,
    )


def committed(world: World, topic: str) -> list[Any]:
    return list(world.broker.committed_values(topic))


def set_header(record: Any) -> bytes | None:
    return dict(record.headers or ()).get(CONTRACT_SET_HEADER)


class TestCatchUpBeforeUnknown:
    """A tool or version unknown to the loaded set makes the worker catch up on its source first."""

    async def test_a_tool_copied_in_before_the_result_is_decided_with_it(
        self, tmp_path: Path, gate: Gate
    ) -> None:
        """The folder gained review_status after the worker loaded it (no watch): the result is
        accepted after a rescan, and its records name the new set."""
        root = folder_without(tmp_path, "review_status")
        world = World()
        worker = folder_worker(world, root, gate.keyring)
        first = worker.gate.contracts
        assert "review_status" not in first.tools
        shutil.copytree(CONTRACTS / "review_status", root / "review_status")
        world.request(1)
        world.result(1)
        stats = await worker.run()
        assert (stats.decided, stats.accepted, stats.by_code) == (1, 1, {})
        label = worker.gate.contracts.label.encode()
        assert label != first.label.encode()
        for topic in (T.agent, T.audit):
            assert [set_header(r) for r in committed(world, topic)] == [label]
        assert worker.metrics.contract_catch_ups.labels("caught_up")._value.get() == 1

    async def test_a_tool_nobody_has_is_unknown_after_one_rescan(self, tmp_path: Path, gate: Gate) -> None:
        """With nothing newer anywhere, the unknown tool is UNKNOWN_TOOL at once (no wait to the bound)."""
        root = folder_without(tmp_path, "review_status")
        world = World()
        worker = folder_worker(world, root, gate.keyring, contracts_catch_up_seconds=300)
        world.request(1)
        world.result(1)
        stats = await worker.run()
        assert stats.by_code == {"UNKNOWN_TOOL": 1}
        assert worker.metrics.contract_catch_ups.labels("unchanged")._value.get() == 1
        (envelope,) = world.agent()
        assert envelope["error"] == {"code": "INVALID_RESPONSE", "retryable": False}


class TestKnownBehind:
    """A worker that knows it is behind and cannot catch up answers CONTRACTS_BEHIND, retryable."""

    async def test_a_newer_generation_named_by_the_result(self, tmp_path: Path, gate: Gate) -> None:
        """tg-contract-generation above the folder's: CONTRACTS_BEHIND, retryable, after the bound."""
        root = folder_without(tmp_path, "job_status")
        world = World()
        worker = folder_worker(world, root, gate.keyring)
        world.request(1)
        value = dict(review_value(), request_id=rid(1))
        msg = message(value, key=rid(1).encode(), tg_request_id=rid(1), tg_contract_generation="3")
        world.broker.append(T.intake, msg.value, key=msg.key, headers=msg.headers)
        stats = await worker.run()
        assert stats.by_code == {"CONTRACTS_BEHIND": 1}
        (envelope,) = world.agent()
        assert envelope["error"] == {"code": "CONTRACTS_BEHIND", "retryable": True}
        (quarantined,) = committed(world, T.quarantine)
        detail = json.loads(dict(quarantined.headers)["tg-error-detail"])
        assert "generation 3" in detail["message"]
        assert worker.metrics.contract_catch_ups.labels("behind")._value.get() == 1

    def test_the_group_serves_the_tool(self, gate: Gate) -> None:
        """An unknown tool that another live member serves is CONTRACTS_BEHIND, not UNKNOWN_TOOL."""
        lacking = Gate(
            ContractSet([c for c in gate.contracts if c.spec.tool != "review_status"]), gate.keyring
        )
        assert lacking.evaluate(message(), review_request(), NOW).code == "UNKNOWN_TOOL"
        lacking.group = GroupHint(0, frozenset({"review_status"}), True)
        verdict = lacking.evaluate(message(), review_request(), NOW)
        assert verdict.code == "CONTRACTS_BEHIND"
        assert json.loads(verdict.agent)["error"] == {"code": "CONTRACTS_BEHIND", "retryable": True}
        lacking.group = GroupHint(0, frozenset({"job_status"}), False)
        assert lacking.evaluate(message(), review_request(), NOW).code == "UNKNOWN_TOOL"

    def test_a_version_unknown_while_the_group_differs(self, gate: Gate) -> None:
        """An adapter version no version serves is CONTRACTS_BEHIND while another member's set differs."""
        newer = message(tg_adapter_version="9.0.0")
        assert gate.evaluate(newer, review_request(), NOW).code == "UNKNOWN_CONTRACT_VERSION"
        behind = Gate(gate.contracts, gate.keyring)
        behind.group = GroupHint(0, frozenset(), True)
        assert behind.evaluate(newer, review_request(), NOW).code == "CONTRACTS_BEHIND"

    def test_a_generation_header_that_is_no_number_is_a_mismatch(self, gate: Gate) -> None:
        """tg-contract-generation must be decimal digits: anything else is HEADER_MISMATCH."""
        bad = pairs(message(), (CONTRACT_GENERATION_HEADER, "x1"))
        assert gate.evaluate(bad, review_request(), NOW).code == "HEADER_MISMATCH"
        same = pairs(message(), (CONTRACT_GENERATION_HEADER, "0"))
        assert gate.evaluate(same, review_request(), NOW).accepted


class _Counting(ContractSource):
    def __init__(self, changes_at: int) -> None:
        super().__init__([])
        self.refreshes = 0
        self.changes_at = changes_at

    async def refresh(self, wait_seconds: float) -> bool:
        self.refreshes += 1
        return self.refreshes == self.changes_at


class TestCatchUpSeam:
    """CatchUp refreshes its source once, or until the set is no longer behind or the deadline."""

    async def test_refreshes_until_not_behind(self, contracts: ContractSet) -> None:
        """A source that catches up on its third refresh is refreshed three times, and reloaded once."""
        source = _Counting(changes_at=3)
        reloads: list[int] = []
        now = [0.0]

        async def tick(seconds: float) -> None:
            now[0] += seconds

        def reload() -> bool:
            reloads.append(1)
            return True

        seam = CatchUp(
            source,
            reload,
            lambda: contracts,
            clock=lambda: now[0],
            sleep=tick,
        )
        await seam.catch_up(10.0, behind=lambda _: not reloads)
        assert (source.refreshes, len(reloads)) == (3, 1)

    async def test_gives_up_at_the_deadline(self, contracts: ContractSet) -> None:
        """A source that never catches up is refreshed until the deadline; the set is returned as it is."""
        source = _Counting(changes_at=-1)
        now = [0.0]

        async def tick(seconds: float) -> None:
            now[0] += seconds

        seam = CatchUp(
            source, lambda: True, lambda: contracts, clock=lambda: now[0], sleep=tick, poll_seconds=0.5
        )
        assert await seam.catch_up(2.0, behind=lambda _: True) is contracts
        assert source.refreshes == 5
        assert now[0] == pytest.approx(2.0)


class TestSources:
    """Each source's refresh says whether there is something newer to load."""

    async def test_a_folder_changed_since_the_last_look(self, tmp_path: Path) -> None:
        """A rescan finds a file added since the last one, once."""
        source = ContractSource([tmp_path])
        assert not await source.refresh(1)
        (tmp_path / "new.yaml").write_text("x")
        assert await source.refresh(1)
        assert not await source.refresh(1)

    async def test_a_registry_is_fetched_now(self, tmp_path: Path) -> None:
        """The registry is fetched on each refresh; a new snapshot says so."""
        fetched: list[int] = []

        def poll() -> bool:
            fetched.append(1)
            return len(fetched) == 2

        source = RegistryContractSource(poll, [tmp_path])
        assert not await source.refresh(1)
        assert await source.refresh(1)
        assert len(fetched) == 2
