"""The MCP proxy follows its contract source while it runs: a set published to the contracts
topic becomes the proxy's within one look, a call naming a tool it does not serve or made
while the group is ahead catches up first, and deciding in process it is a member of the
group's view. Over the fake Kafka seam, with the workers' own catch-up and an injected clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.authoring._publish import signed_versions
from toolgate.client import Client
from toolgate.gate import ContractSet
from toolgate.gate._gate import GroupHint
from toolgate.gate._signing import Keyring
from toolgate.mcp._decide import Decider
from toolgate.mcp._follow import ContractFollower, Following
from toolgate.mcp._proxy import Proxy
from toolgate.operations._publish_topic import publish_to_topic
from toolgate.service._contract_source import CatchUp, TopicContractSource
from toolgate.service._members import GroupView, read_members

from tests import mcp_kit
from tests.unit.builders import CONTRACTS, NOW
from tests.unit.mcp.test_mcp_proxy import Upstream, code_of, imported
from tests.unit.worker_kit import CONFIG, World

T = CONFIG.topics
OK = {"case": "ok", "environment": "staging"}


class Clock:
    """Monotonic seconds that move only when the catch-up waits."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


@dataclass
class Seat:
    """The group's view as the proxy sees it: the newest generation another member decides
    with, and every set the proxy wrote to it."""

    generation: int = 0
    written: list[str] = field(default_factory=list)

    async def publish(self, contracts: ContractSet) -> None:
        self.written.append(contracts.label)

    def check(self, mine: ContractSet) -> tuple[GroupHint | None, bool]:
        if not self.generation:
            return None, False
        return GroupHint(self.generation, frozenset(), self.generation != mine.generation), False


@pytest.fixture
def keyring() -> Keyring:
    return fixtures_keyring(CONTRACTS)


async def publish(world: World, keyring: Keyring, contracts: ContractSet) -> int:
    """``contracts`` published to the contracts topic as the next generation."""
    key = keyring.publisher("sample-publisher")
    assert key is not None
    done = await publish_to_topic(
        CONFIG, list(signed_versions(contracts, key).values()), key, clients=world.clients
    )
    return done.generation


@dataclass
class Running:
    proxy: Proxy
    source: TopicContractSource
    upstream: Upstream
    clock: Clock

    @property
    def follower(self) -> ContractFollower:
        assert self.proxy.follower is not None
        return self.proxy.follower

    async def read_to_end(self) -> None:
        """The source's reader has read what is on the topic now (as its background tail does)."""
        await self.source.refresh(5)


@asynccontextmanager
async def proxied(
    world: World, keyring: Keyring, root: Path, *, seat: Seat | None = None
) -> AsyncIterator[Running]:
    """A proxy deciding in process over the contracts topic's newest set, followed."""
    source = TopicContractSource(T.contracts, world.clients, keyring, root / "sets")
    await source.start(5)
    clock = Clock()
    contracts = source.load()

    def seam(reload: Callable[[], bool], current: Callable[[], ContractSet]) -> CatchUp:
        return CatchUp(source, reload, current, clock=clock, sleep=clock.sleep)

    following = Following(
        seam=seam,
        load=source.load,
        changed=source.changed,
        every_s=2.0,
        bound_s=1.0,
        group=seat,
        refresh_s=10.0,
        clock=clock,
    )
    upstream = Upstream()
    try:
        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            decider = Decider(mcp_kit.SERVER, contracts, keyring, T)
            proxy = Proxy(mcp_kit.SERVER, up, client, contracts, decider=decider, following=following)
            await proxy.load_tools()
            yield Running(proxy, source, upstream, clock)
    finally:
        await source.stop()


def records_of(world: World, topic: str, rid: str) -> list[Any]:
    return [r for p in world.broker.logs[topic] for r in p if r.key == rid.encode()]


def stamp(world: World, result: Any) -> tuple[str, bytes]:
    """The contract set on the call's agent envelope and the generation on its request record."""
    rid = result.meta["io.toolgate/request_id"]
    (envelope,) = records_of(world, T.agent, rid)
    (request,) = records_of(world, T.requests, rid)
    return dict(envelope.headers)["tg-contract-set"].decode(), dict(request.headers)["tg-contract-generation"]


def listed(proxy: Proxy) -> list[str]:
    return sorted(tool.name for tool in proxy.tools())


class TestANewGeneration:
    """A set published while the proxy serves becomes its set at its next look, without a
    restart: tools served and withdrawn as the set says, calls decided and stamped by it."""

    async def test_one_look_serves_the_new_set(self, world: World, keyring: Keyring, tmp_path: Path) -> None:
        """Generation 2 adds job-runs.list: after one look it is listed, and the next call's
        records name generation 2 (``tg-contract-set`` g2-..., ``tg-contract-generation`` 2)."""
        one = imported(tmp_path / "one", ["deploy_status"])
        two = imported(tmp_path / "two", ["deploy_status", "job-runs.list"])
        assert await publish(world, keyring, one) == 1
        async with proxied(world, keyring, tmp_path) as running:
            proxy = running.proxy
            assert listed(proxy) == ["deploy_status"]
            first = await proxy.call("deploy_status", OK, None)
            assert stamp(world, first)[0].startswith("g1-")
            assert await publish(world, keyring, two) == 2
            await running.read_to_end()
            await running.follower.tick()
            assert listed(proxy) == ["deploy_status", "job-runs.list"]
            assert proxy.contracts.generation == 2
            second = await proxy.call("deploy_status", OK, None)
        assert second.structured_content == mcp_kit.GOOD
        label, generation = stamp(world, second)
        assert (label, generation) == (proxy.contracts.label, b"2")
        assert label.startswith("g2-")

    async def test_a_tool_the_new_set_drops_is_withdrawn(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """Generation 2 holds job-runs.list only: deploy_status is no longer listed, and a call
        of it is answered UNKNOWN_TOOL without reaching the upstream."""
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status", "job-runs.list"]))
        async with proxied(world, keyring, tmp_path) as running:
            await publish(world, keyring, imported(tmp_path / "two", ["job-runs.list"]))
            await running.read_to_end()
            await running.follower.tick()
            assert listed(running.proxy) == ["job-runs.list"]
            result = await running.proxy.call("deploy_status", OK, None)
            assert code_of(result) == "UNKNOWN_TOOL"
            assert running.upstream.calls == 0

    async def test_nothing_moved_nothing_reloaded(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """A look at a source that did not move keeps the very set (no reload, no log)."""
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        async with proxied(world, keyring, tmp_path) as running:
            before = running.proxy.contracts
            await running.follower.tick()
            assert running.proxy.contracts is before

    async def test_a_set_it_cannot_serve_is_refused(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """Generation 2 requires a signature key the keyring lacks: the proxy keeps deciding
        with generation 1 and says so, as a worker keeps a set that fails to reload."""
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        two = tmp_path / "two"
        imported(two, ["deploy_status"])
        path = two / "deployer.deploy_status" / "v1" / "contract.yaml"
        path.write_text(path.read_text() + "signature:\n  algorithm: hmac-sha256\n  key_id: nowhere-2026\n")
        async with proxied(world, keyring, tmp_path) as running:
            await publish(world, keyring, ContractSet.load(two))
            await running.read_to_end()
            await running.follower.tick()
            assert running.proxy.contracts.generation == 1
            result = await running.proxy.call("deploy_status", OK, None)
        assert stamp(world, result)[1] == b"1"


class TestSourceMoved:
    """A folder (a registry's snapshots too) says it moved without fetching anything."""

    async def test_a_file_written_is_a_move_until_refreshed(self, tmp_path: Path) -> None:
        """changed() is False, True once a file is added, False again after refresh()."""
        from toolgate.service._contract_source import ContractSource

        (tmp_path / "a.yaml").write_text("a: 1\n")
        source = ContractSource([tmp_path])
        assert not source.changed()
        (tmp_path / "b.yaml").write_text("b: 2\n")
        assert source.changed()
        assert await source.refresh(1)
        assert not source.changed()


class TestCatchUpBeforeACall:
    """A call is never answered from a set the proxy could have known to be stale."""

    async def test_a_tool_it_does_not_serve_catches_up_first(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """job-runs.list, published in generation 2 and not looked at yet, is decided (by
        generation 2) rather than answered UNKNOWN_TOOL."""
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        async with proxied(world, keyring, tmp_path) as running:
            await publish(world, keyring, imported(tmp_path / "two", ["deploy_status", "job-runs.list"]))
            result = await running.proxy.call("job-runs.list", {"job": "nightly"}, None)
            assert running.upstream.calls == 1
            rid = result.meta["io.toolgate/request_id"]
            (audit,) = records_of(world, T.audit, rid)
            assert dict(audit.headers)["tg-contract-set"].decode().startswith("g2-")

    async def test_a_group_ahead_is_caught_up_with(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """The group decides with generation 2, on the topic but not looked at yet: the call
        catches up and is decided by generation 2."""
        seat = Seat()
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        async with proxied(world, keyring, tmp_path, seat=seat) as running:
            await publish(world, keyring, imported(tmp_path / "two", ["deploy_status", "job-runs.list"]))
            seat.generation = 2
            result = await running.proxy.call("deploy_status", OK, None)
        assert result.structured_content == mcp_kit.GOOD
        assert stamp(world, result)[1] == b"2"

    async def test_still_behind_after_the_bound_is_contracts_behind(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """The group decides with generation 3, which the topic does not hold: after the bound
        (the injected clock) the call is CONTRACTS_BEHIND, retryable, the upstream not called
        and nothing written."""
        seat = Seat()
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        async with proxied(world, keyring, tmp_path, seat=seat) as running:
            seat.generation = 3
            start = running.clock.now
            result = await running.proxy.call("deploy_status", OK, None)
            waited = running.clock.now - start
        assert code_of(result) == "CONTRACTS_BEHIND"
        assert json.loads(result.content[0].text)["error"]["retryable"] is True
        assert running.upstream.calls == 0
        assert [r for p in world.broker.logs[T.agent] for r in p] == []
        assert 1.0 <= waited < 1.5  # the bound, not more


class TestAMemberOfTheGroup:
    """Deciding in process, the proxy writes the set it decides with to the group's view."""

    async def test_written_on_each_new_set_and_every_period(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """Once at the first look, again at once when a new set loads, then only when the
        refresh period passed."""
        seat = Seat()
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        async with proxied(world, keyring, tmp_path, seat=seat) as running:
            follower = running.follower
            await follower.tick()
            await follower.tick()
            assert [label[:3] for label in seat.written] == ["g1-"]
            await publish(world, keyring, imported(tmp_path / "two", ["deploy_status", "job-runs.list"]))
            await running.read_to_end()
            await follower.tick()
            assert [label[:3] for label in seat.written] == ["g1-", "g2-"]
            running.clock.now += 10.0
            await follower.tick()
            assert len(seat.written) == 3

    async def test_the_members_topic_lists_the_proxy_with_its_set(
        self, world: World, keyring: Keyring, tmp_path: Path
    ) -> None:
        """Over the workers' own GroupView: the members topic holds the proxy's record, named
        mcp-proxy:<server>, with the label of the set it decides with."""
        await publish(world, keyring, imported(tmp_path / "one", ["deploy_status"]))
        view = await GroupView.open(
            CONFIG, world.clients, "mcp-proxy:deployer@test", lambda: NOW + timedelta(seconds=1)
        )
        assert view is not None
        try:
            async with proxied(world, keyring, tmp_path, seat=None) as running:
                seat_following = running.follower.following
                object.__setattr__(seat_following, "group", view)
                await running.follower.tick()
                label = running.proxy.contracts.label
            (member,) = await read_members(CONFIG, world.clients, wait_seconds=5)
            assert (member.member, member.label, member.group) == (
                "mcp-proxy:deployer@test",
                label,
                CONFIG.group_id,
            )
        finally:
            await view.stop()
