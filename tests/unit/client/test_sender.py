"""toolgate.client's send path: a bounded number of sends in the producer, callers beyond it
wait for room, and a broker that does not acknowledge is told apart from the client's queue."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from toolgate._errors import BrokerError
from toolgate.client import Client

from tests.unit.builders import NOW
from tests.unit.worker_kit import CONFIG, World, until

T = CONFIG.topics


class Gatekeeper:
    """A broker hook holding every send until the test lets it through (or fails it)."""

    def __init__(self) -> None:
        self.held = 0
        self.open = asyncio.Event()
        self.error: BaseException | None = None

    async def __call__(self, operation: str, node: Any, client: Any) -> None:
        if operation != "send":
            return
        self.held += 1
        try:
            await self.open.wait()
        finally:
            self.held -= 1
        if self.error is not None:
            error, self.error = self.error, None
            raise error


@pytest.fixture
def world() -> World:
    return World()


def requests_written(world: World) -> int:
    return sum(len(p) for p in world.broker.logs[T.requests])


class TestBackpressure:
    """Callers beyond max_sends wait for room; the broker sees at most max_sends at once."""

    async def test_at_most_max_sends_reach_the_producer(self, world: World) -> None:
        """Forty issues with room for four: four are held at the broker, the rest wait in the
        client without failing, and all forty are written once the broker answers."""
        gate = Gatekeeper()
        world.broker.hook = gate
        async with Client(CONFIG, clients=world.clients, clock=NOW.timestamp, max_sends=4) as client:
            calls = [asyncio.create_task(client.issue("review_status")) for _ in range(40)]
            await until(lambda: gate.held == 4 and client._sends.waiting == 36)
            for _ in range(50):
                await asyncio.sleep(0)
            assert gate.held == 4
            assert client._sends.in_flight == 4
            assert not any(call.done() for call in calls)
            gate.open.set()
            requests = await asyncio.wait_for(asyncio.gather(*calls), 10)
            assert client.pending == 40
        assert len({r.request_id for r in requests}) == 40
        assert requests_written(world) == 40

    async def test_an_unacknowledged_send_fails_the_sends_queued_behind_it(self, world: World) -> None:
        """The send in the producer times out: it says no acknowledgement came, the ones
        queued behind it fail at once saying a send ahead got none, and a send issued
        afterwards goes through (and clears the outage)."""
        gate = Gatekeeper()
        world.broker.hook = gate
        async with Client(CONFIG, clients=world.clients, clock=NOW.timestamp, max_sends=1) as client:
            first = asyncio.create_task(client.issue("review_status"))
            queued = [asyncio.create_task(client.issue("review_status")) for _ in range(5)]
            await until(lambda: gate.held == 1 and client._sends.waiting == 5)
            gate.error = TimeoutError()
            gate.open.set()
            with pytest.raises(BrokerError, match=rf"topic '{T.requests}': no acknowledgement within 10 s"):
                await first
            for call in queued:
                with pytest.raises(BrokerError, match="a send ahead of it got no acknowledgement"):
                    await call
            assert client.pending == 0
            later = await client.issue("review_status")
            again = await client.issue("review_status")
        assert requests_written(world) == 2
        assert {later.request_id, again.request_id} == {
            r.key.decode() for p in world.broker.logs[T.requests] for r in p if r.key
        }

    async def test_the_partition_count_is_asked_once(self, world: World) -> None:
        """However many sends start together, the topic's metadata is asked for once per topic."""
        asked: list[str] = []

        async def count(operation: str, node: Any, client: Any) -> None:
            if operation == "metadata":
                asked.append(operation)
                await asyncio.sleep(0)  # let the other sends arrive meanwhile

        world.broker.hook = count
        async with Client(CONFIG, clients=world.clients, clock=NOW.timestamp) as client:
            await asyncio.gather(*(client.issue("review_status") for _ in range(200)))
            await asyncio.gather(
                *(
                    client.publish_result(f"req.p{i:04d}", 1, b"{}", tool="t", adapter_version="1")
                    for i in range(50)
                )
            )
        assert len(asked) == 2


class TestADecisionsRecordsTogether:
    """The records of one decision are one hand-over: they hold one place among max_sends,
    each lands on its key's partition, and a failure names their topics."""

    async def test_one_place_for_every_record(self, world: World) -> None:
        """Three records with room for one: all three are in the producer at once, and an
        issue started meanwhile waits for room until they are acknowledged."""
        gate = Gatekeeper()
        world.broker.hook = gate
        records = [(topic, b"req.d1", b"{}", [("h", b"v")]) for topic in (T.requests, T.agent, T.audit)]
        async with Client(CONFIG, clients=world.clients, clock=NOW.timestamp, max_sends=1) as client:
            decision = asyncio.create_task(client.publish_records(records))
            await until(lambda: gate.held == 1 and client._sends.in_flight == 3)
            issue = asyncio.create_task(client.issue("review_status"))
            await until(lambda: client._sends.waiting == 1)
            gate.open.set()
            await asyncio.wait_for(asyncio.gather(decision, issue), 10)
        for topic in (T.requests, T.agent, T.audit):
            written = [r for p in world.broker.logs[topic] for r in p if r.key == b"req.d1"]
            assert [(r.value, list(r.headers)) for r in written] == [(b"{}", [("h", b"v")])]
        assert requests_written(world) == 2

    async def test_a_failure_names_the_topics(self, world: World) -> None:
        """No acknowledgement for a decision's records: one BrokerError naming every topic."""
        gate = Gatekeeper()
        world.broker.hook = gate
        records: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]]
        records = [(topic, b"req.d2", b"{}", []) for topic in (T.agent, T.audit)]
        async with Client(CONFIG, clients=world.clients, clock=NOW.timestamp) as client:
            decision = asyncio.create_task(client.publish_records(records))
            await until(lambda: gate.held == 1)
            gate.error = TimeoutError()
            gate.open.set()
            with pytest.raises(BrokerError, match=rf"topics '{T.agent}', '{T.audit}': no acknowledgement"):
                await decision

    async def test_nothing_to_send_returns_at_once(self, world: World) -> None:
        """No records: nothing is sent and nothing waits."""
        async with Client(CONFIG, clients=world.clients, clock=NOW.timestamp) as client:
            await client.publish_records([])
            assert client._sends.in_flight == 0
