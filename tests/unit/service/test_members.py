"""The group's view: each worker says on the members topic what it decides with, and every
worker knows when the group is split."""

from __future__ import annotations

import asyncio
import logging
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.service._contract_source import ContractSource
from toolgate.service._members import (
    ROLLOUT_SECONDS,
    GroupView,
    MemberRecord,
    disagreeing,
    hint,
    live_members,
)
from toolgate.service._service import Worker, WorkerOptions

from tests import ROOT
from tests.unit.builders import CONTRACTS, NOW
from tests.unit.worker_kit import CONFIG, World, until


def record(
    member: str, digest: str, *, group: str = "g", age_s: float = 0, tools: list[str] | None = None
) -> MemberRecord:
    return MemberRecord(
        group=group,
        member=member,
        generation=0,
        digest=digest,
        label=f"g0-{digest[:12]}",
        tools=tools or ["review_status"],
        at=NOW - timedelta(seconds=age_s),
        refresh_seconds=10,
    )


class TestLiveness:
    """A member is live for three refresh periods after its last record, and only in its group."""

    def test_old_and_foreign_records_are_not_live(self) -> None:
        """A record older than 30 s (refresh 10 s) or of another group is left out."""
        records = [
            record("a", "1"),
            record("b", "1", age_s=29),
            record("c", "2", age_s=31),
            record("d", "2", group="h"),
        ]
        assert [m.member for m in live_members(records, "g", NOW)] == ["a", "b"]

    def test_disagreement_is_more_than_one_digest(self) -> None:
        """Members with one digest agree; two digests disagree."""
        assert not disagreeing([record("a", "1"), record("b", "1")])
        assert disagreeing([record("a", "1"), record("b", "2")])

    def test_hint_names_what_the_differing_members_serve(self, contracts: ContractSet) -> None:
        """The gate's hint holds the tools of the members whose set differs, and says it differs."""
        others = [
            record("me", contracts.digest),
            record("b", contracts.digest, tools=["x"]),
            record("c", "2", tools=["y"]),
        ]
        got = hint(others, contracts, "me")
        assert got is not None
        assert (got.tools, got.differs) == (frozenset({"y"}), True)
        assert hint([record("me", contracts.digest)], contracts, "me") is None


def folder_worker(world: World, root: Path, keyring: Any, member: str) -> Worker:
    def load() -> Gate:
        return Gate(ContractSet.load(root), keyring)

    config = msgspec.structs.replace(
        CONFIG, contracts_dir=str(root), contracts_watch_seconds=0, group_instance_id=member
    )
    options = WorkerOptions(
        handle_signals=False, metrics_port=0, linger_ms=5, contract_source=ContractSource([root])
    )
    return Worker(
        config,
        load(),
        options=options,
        gate_factory=load,
        clock=lambda: NOW,
        clients=world.clients,
        sleep=world.sleep,
    )


class TestTwoFoldersInOneGroup:
    """Two workers of one group started with different folders: the log line and the metric say so."""

    async def test_both_see_the_split_and_say_it_once(
        self, tmp_path: Path, gate: Gate, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Each worker sets toolgate_contracts_group_disagreement to 1 at once and logs one line
        (info: a rollout may be moving them; the warning waits for the split to outlast one)."""
        caplog.set_level(logging.INFO, logger="toolgate.members")
        full, lacking = tmp_path / "full", tmp_path / "lacking"
        shutil.copytree(CONTRACTS, full, ignore=shutil.ignore_patterns("wire", "*.md"))
        shutil.copytree(CONTRACTS, lacking, ignore=shutil.ignore_patterns("wire", "*.md", "review_status"))
        world = World()
        first = folder_worker(world, full, gate.keyring, "worker-a")
        second = folder_worker(world, lacking, gate.keyring, "worker-b")
        tasks = [asyncio.create_task(w.run()) for w in (first, second)]
        try:
            await until(lambda: all(w.metrics.group_disagreement._value.get() == 1 for w in (first, second)))
            assert second.gate.group is not None
            assert "review_status" in second.gate.group.tools
            assert first.metrics.group_members._value.get() == 2
            lines = [r for r in caplog.records if "disagree on the contract set" in r.getMessage()]
            assert len(lines) == 2  # one per worker
            assert {r.levelname for r in lines} == {"INFO"}
            assert {r.this_member for r in lines} == {"worker-a", "worker-b"}  # type: ignore[attr-defined]
        finally:
            for w in (first, second):
                w.request_stop()
            await asyncio.gather(*tasks)

    async def test_one_set_is_agreement(self, tmp_path: Path, gate: Gate) -> None:
        """Two workers with the same folder: metric 0, two live members, no hint of a difference."""
        root = tmp_path / "same"
        shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md"))
        world = World()
        workers = [folder_worker(world, root, gate.keyring, name) for name in ("worker-a", "worker-b")]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        try:
            await until(lambda: all(w.metrics.group_members._value.get() == 2 for w in workers))
            assert [w.metrics.group_disagreement._value.get() for w in workers] == [0, 0]
            assert all(w.gate.group is not None and not w.gate.group.differs for w in workers)
        finally:
            for w in workers:
                w.request_stop()
            await asyncio.gather(*tasks)


class Clock:
    """The injected UTC clock, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _view(clock: Clock) -> GroupView:
    config = msgspec.structs.replace(CONFIG, group_id="g")
    return GroupView(config, World().clients, "me", clock)


def _hear(view: GroupView, clock: Clock, **digests: str) -> None:
    """Records of each member, heard now, deciding with the set of the given digest."""
    for member, digest in digests.items():
        view.records[member] = msgspec.structs.replace(record(member, digest), at=clock.now)


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "toolgate.members"]


def _heard_later(
    view: GroupView, clock: Clock, contracts: ContractSet, seconds: float, **digests: str
) -> bool:
    """``seconds`` later, every member heard from with the set of its digest; whether they disagree."""
    clock.advance(seconds)
    _hear(view, clock, **digests)
    return view.check(contracts)[1]


class TestRolloutIsNoWarning:
    """Members disagree while a rollout moves them: an info line at the start and the end of the
    split; the warning only for a split that outlasts ROLLOUT_SECONDS, once (by the injected clock)."""

    @pytest.fixture
    def clock(self, caplog: pytest.LogCaptureFixture) -> Clock:
        caplog.set_level(logging.INFO, logger="toolgate.members")
        return Clock()

    def test_a_rollout_within_the_bound_warns_nothing(
        self, contracts: ContractSet, caplog: pytest.LogCaptureFixture, clock: Clock
    ) -> None:
        """Members move from one set to the next within the bound: info lines only, no warning."""
        view = _view(clock)
        sets = {"me": "1", "b": "1", "c": "1"}
        assert _heard_later(view, clock, contracts, 0, **sets) is False
        for member in sets:  # one member at a time, a minute apart
            sets[member] = "2"
            _heard_later(view, clock, contracts, 60, **sets)
        assert view.check(contracts)[1] is False
        said = _said(caplog)
        assert [level for level, _ in said] == ["INFO", "INFO"]
        assert "a warning follows if they still do after 300 s" in said[0][1]
        assert said[1][1] == "the workers of this group decide with one contract set again"

    def test_a_split_past_the_bound_warns_once(
        self, contracts: ContractSet, caplog: pytest.LogCaptureFixture, clock: Clock
    ) -> None:
        """A split still there ROLLOUT_SECONDS after it began: one warning naming every member's set."""
        view = _view(clock)
        assert _heard_later(view, clock, contracts, 0, me="1", b="2") is True
        _heard_later(view, clock, contracts, ROLLOUT_SECONDS - 1, me="1", b="2")
        assert [level for level, _ in _said(caplog)] == ["INFO"]
        for seconds in (1, ROLLOUT_SECONDS):
            _heard_later(view, clock, contracts, seconds, me="1", b="2")
        warnings = [r for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1
        assert warnings[0].getMessage() == "the workers of this group decide with different contract sets"
        assert warnings[0].members == {"b": "g0-2", "me": "g0-1"}  # type: ignore[attr-defined]
        assert warnings[0].for_seconds == ROLLOUT_SECONDS  # type: ignore[attr-defined]

    def test_the_bound_is_the_alerts(self) -> None:
        """ROLLOUT_SECONDS is the `for` of ToolgateContractSetsDisagree: the log and the alert agree."""
        rules = yaml.safe_load((ROOT / "ops" / "prometheus" / "rules" / "toolgate.yml").read_text())
        (alert,) = [
            rule
            for group in rules["groups"]
            for rule in group["rules"]
            if rule.get("alert") == "ToolgateContractSetsDisagree"
        ]
        assert alert["for"] == f"{ROLLOUT_SECONDS / 60:g}m"
