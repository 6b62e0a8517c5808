"""The owned partition's take-over after a failed commit, and the request reader's survival.

Both were found by the deterministic simulation (tests/simulation/): a commit whose
answer was lost left its acceptances out of the accepted ledger, and a revoke that
changed the request reader's assignment while it read a position ended the reader.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
import toolgate.gate._batch as batch_module
import toolgate.gate._gate as gate_module
import toolgate.gate._records as records_module
import toolgate.service._partition as partition_module
from aiokafka.errors import KafkaTimeoutError
from toolgate.gate._gate import Gate
from toolgate.service._store import TopicReader

from tests.fakes.kafka import FakeBroker, FakeClients
from tests.unit.builders import review_request
from tests.unit.worker_kit import World, rid, until


@pytest.fixture
def world(gate: Gate) -> World:
    w = World()
    w.gate = gate
    return w


class TestAmbiguousCommit:
    async def test_a_commit_whose_answer_was_lost_keeps_its_acceptances(self, world: World) -> None:
        """The commit went through but its answer timed out: the take-over finds it committed,
        its acceptance joins the ledger, and a duplicate of the result is rejected, not
        answered a second time."""
        world.request(1)
        world.broker.fail("commit", KafkaTimeoutError("answer lost"), after=True)
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.result(1)
        await until(lambda: worker.stats.aborted == 1 and worker.ready())
        assert worker.ledger(rid(1), 1)
        world.result(1)  # delivered again
        await until(lambda: len(world.audit()) == 2)
        worker.request_stop()
        await task
        assert world.codes() == ["-", "DUPLICATE_RESULT"]
        assert len(world.agent()) == 1

    async def test_a_commit_that_did_not_happen_is_decided_again(self, world: World) -> None:
        """The commit timed out before it committed: nothing joins the ledger, and the
        batch is decided again and answered once."""
        world.request(1)
        world.broker.fail("commit", KafkaTimeoutError("timed out"))
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.result(1)
        await until(lambda: worker.stats.committed == 1)
        worker.request_stop()
        await task
        assert world.codes() == ["-"]
        assert len(world.agent()) == 1
        assert worker.ledger(rid(1), 1)


class TestRequestKey:
    async def test_each_record_s_key_is_read_once(
        self, world: World, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The worker reads a record's request key once: the wait for its request, the
        misrouted filter and the gate share it."""
        calls: list[bytes | None] = []
        real = records_module.request_key

        def counting(key: bytes | None) -> str:
            calls.append(key)
            return real(key)

        for module in (partition_module, batch_module, gate_module):
            monkeypatch.setattr(module, "request_key", counting)
        world.request(1)
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.result(1)
        await until(lambda: len(world.audit()) == 1)
        worker.request_stop()
        await task
        assert calls == [rid(1).encode()]


class TestRequestReader:
    async def test_a_revoke_while_the_reader_reads_a_position_leaves_it_reading(self) -> None:
        """A disown that lands while the reader waits for a partition's position does not end
        the reader: records written after it are still applied."""
        broker = FakeBroker()
        broker.create_topic("requests", 2)
        seen: list[bytes | None] = []
        reader = TopicReader("requests", lambda _k, v: seen.append(v), FakeClients(broker), owned=True)
        await reader.start()
        await reader.own({0, 1})
        armed = True
        positions = 0

        async def hook(operation: str, node: Any, client: Any) -> None:
            nonlocal armed, positions
            positions += operation == "position"
            if positions == 2 and armed:  # partition 1's, in the reader's first round
                armed = False
                asyncio.ensure_future(reader.disown({1}))  # noqa: RUF006 - awaited through its effect
                for _ in range(5):
                    await asyncio.sleep(0)

        broker.hook = hook
        try:
            await until(lambda: not armed)
            value = msgspec.json.encode(review_request(request_id=rid(0)))
            broker.append("requests", value, key=rid(0).encode(), partition=0)
            assert await reader.catch_up(5)
            assert seen == [value]
        finally:
            broker.hook = None
            await reader.stop()

    async def test_a_failed_read_is_retried(self) -> None:
        """A poll the client library gives up on is retried after a pause; the reader goes on."""
        broker = FakeBroker()
        broker.create_topic("requests", 1)
        seen: list[bytes | None] = []
        reader = TopicReader("requests", lambda _k, v: seen.append(v), FakeClients(broker), owned=True)
        broker.fail("read", times=2)
        await reader.start()
        await reader.own({0})
        try:
            broker.append("requests", b"{}", key=b"req.x", partition=0)
            assert await reader.catch_up(5)
            assert seen == [b"{}"]
            assert broker.calls["read"] >= 3
        finally:
            await reader.stop()

    async def test_a_catch_up_waits_only_for_the_partitions_it_names(self) -> None:
        """Several partitions may wait on the reader at once, each for its own requests
        partition: a record behind in partition 1 holds a catch-up of partition 1 (until it
        is read), not one of partition 0; the end offsets are looked up on a consumer of
        their own, not the reader's."""
        broker = FakeBroker()
        broker.create_topic("requests", 2)
        clients = FakeClients(broker)
        reader = TopicReader("requests", lambda _k, v: None, clients, owned=True)
        await reader.start()
        await reader.own({0, 1})
        try:
            broker.stall("requests")  # the reader reads nothing for now
            broker.append("requests", b"{}", key=b"req.x", partition=1)
            assert await reader.catch_up(0.05, {0})
            assert not await reader.catch_up(0.05, {1})
            assert not await reader.catch_up(0.05)
            both = asyncio.gather(reader.catch_up(5, {1}), reader.catch_up(5, {0, 1}))
            broker.unstall("requests")
            assert list(await both) == [True, True]
            assert len(clients.consumers) == 2  # the reader's and the end offsets'
        finally:
            await reader.stop()
