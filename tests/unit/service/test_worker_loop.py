"""Every branch of the worker loop, on the in-memory Kafka (tests/fakes/kafka.py).

The real-broker tests (tests/integration/test_worker.py and friends) prove the same
scheme against Kafka; these pin each branch down without one: commit, abort with
backoff and a new take-over, fencing, offset gaps and records from before a seek,
a failed take-over retried before the next batch, the request wait (caught up, timed
out, broker error), burst drain, max messages, rebalances and stop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from toolgate._config import load_config
from toolgate.gate._gate import Gate
from toolgate.gate._records import RequestRecord
from toolgate.service._service import Worker, WorkerOptions

from tests.fakes.kafka import FakeBroker, partition_for
from tests.unit.builders import NOW, message, review_request, review_value
from tests.unit.worker_kit import CONFIG, PARTITIONS, T, World, rid, until


@pytest.fixture
def world(gate: Gate) -> World:
    w = World()
    w.gate = gate
    return w


def tid(partition: int) -> str:
    return f"toolgate.{T.intake}.{partition}"


class TestCommit:
    async def test_batch_commits_outputs_and_offsets_in_one_transaction(self, world: World) -> None:
        """Each result is decided once; agent, audit and the group offset commit together."""
        for i in range(6):
            world.request(i)
            world.result(i)
        stats = await world.worker(burst=True).run()
        assert (stats.decided, stats.accepted, stats.aborted) == (6, 6, 0)
        assert sorted(e["request_id"] for e in world.agent()) == [rid(i) for i in range(6)]
        assert len(world.audit()) == 6
        for p in range(PARTITIONS):
            tp = TopicPartition(T.intake, p)
            data = [r for r in world.broker.logs[T.intake][p] if not r.control]
            if data:
                assert world.broker.group_offsets[(CONFIG.group_id, tp)] == data[-1].offset + 1

    async def test_outputs_are_copartitioned_with_intake(self, world: World) -> None:
        """Agent and audit records go to the intake record's partition number."""
        world.request(1)
        record = world.result(1)
        await world.worker(burst=True).run()
        agent = world.broker.committed_values(T.agent)
        assert [r.partition for r in agent] == [record.partition]
        assert record.partition == partition_for(rid(1).encode(), PARTITIONS)

    async def test_batches_that_fill_up_keep_every_record_once_in_order(self, world: World) -> None:
        """Records go out in producer batches of at most ``producer_batch_bytes``: a batch that
        fills up is sent and a new one started, every record once, each partition's in the
        intake order; quarantine (one partition, not co-partitioned) where murmur2 puts the key."""
        for i in range(12):
            world.request(i)
            world.result(i, decision="rejected!" if i % 4 == 3 else "approved")
        worker = world.worker(burst=True, producer_batch_bytes=700)
        stats = await worker.run()
        assert (stats.decided, stats.rejected, stats.aborted) == (12, 3, 0)
        assert worker.options.producer_batch_bytes == 700
        producers = [p for p in world.clients.producers if p.transactional_id]
        assert {p.options["max_batch_size"] for p in producers} == {700}
        for p in range(PARTITIONS):
            intake = [r.key for r in world.broker.logs[T.intake][p] if not r.control]
            for topic in (T.agent, T.audit):
                out = [r.key for r in world.broker.logs[topic][p] if not r.control]
                assert out == intake, topic
        quarantine = world.broker.committed_values(T.quarantine)
        assert sorted(r.key or b"" for r in quarantine) == sorted(rid(i).encode() for i in (3, 7, 11))

    async def test_a_topic_of_another_partition_count_gets_the_key_partition(self, gate: Gate) -> None:
        """Quarantine with 2 partitions (intake 3): each record where murmur2 puts its key."""
        w = World()
        w.gate = gate
        w.broker.logs[T.quarantine] = [[], []]
        for i in range(8):
            w.request(i)
            w.result(i, decision="rejected!")
        await w.worker(burst=True).run()
        quarantine = w.broker.committed_values(T.quarantine)
        assert len(quarantine) == 8
        assert {r.partition for r in quarantine} == {0, 1}
        for r in quarantine:
            assert r.partition == partition_for(r.key or b"", 2)

    async def test_duplicate_after_commit_is_rejected(self, world: World) -> None:
        """The ledger remembers what a committed batch accepted: a second result is a duplicate."""
        world.request(1)
        world.result(1)
        worker = world.worker(burst=True, batch_size=1)
        await worker.run()
        assert worker.ledger("req.loop0001", 1)
        world.result(1)
        await world.worker(burst=True).run()  # a fresh worker restores the ledger from state
        assert world.codes() == ["-", "DUPLICATE_RESULT"]


class TestAbort:
    async def test_failed_commit_aborts_backs_off_and_takes_over_again(self, world: World) -> None:
        """A failed commit is counted, backed off (0.1 s, doubling), and the batch decided again
        from the committed offset by a new producer: no output of the failed attempts is visible."""
        for i in range(3):
            world.request(i)
            world.result(i)
        world.broker.fail("commit", times=2)
        worker = world.worker(burst=True)
        stats = await worker.run()
        assert stats.aborted == 2
        assert world.sleeps[:2] == [0.1, 0.2]
        assert stats.decided == 3
        assert sorted(e["request_id"] for e in world.agent()) == [rid(i) for i in range(3)]
        assert worker.metrics.transactions.labels("aborted")._value.get() == 2
        assert worker._backoff == 0.0  # reset by the next commit

    async def test_backoff_is_capped(self, world: World) -> None:
        """Consecutive failures double the wait up to 5 s."""
        world.request(1)
        world.result(1)
        world.broker.fail("commit", times=8)
        await world.worker(burst=True).run()
        assert world.sleeps[:8] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]

    async def test_failure_of_the_new_take_over_is_retried_before_the_next_batch(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Commit fails, then starting the new producer fails too: the partition stays owned
        without a producer and is taken over before its next batch."""
        caplog.set_level(logging.DEBUG, logger="toolgate.worker")
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.broker.fail("commit")
        world.broker.fail("init")
        world.request(1)
        world.result(1)
        await until(lambda: worker.stats.decided == 1)
        worker.request_stop()
        await task
        assert len(world.agent()) == 1
        assert any("taking the partition over again failed" in r.getMessage() for r in caplog.records)

    async def test_abort_is_logged_once_per_state_change(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Three failures in a row log one error, and the recovery one line."""
        world.request(1)
        world.result(1)
        world.broker.fail("send", times=3)
        caplog.set_level(logging.INFO, logger="toolgate.worker")
        await world.worker(burst=True).run()
        messages = [r.getMessage() for r in caplog.records if r.name == "toolgate.worker"]
        assert messages.count("transaction aborted; the batch will be decided again") == 1
        assert messages.count("transactions recovered") == 1


class TestFencing:
    async def test_fenced_producer_stops_deciding_its_partition(self, world: World) -> None:
        """Another owner's producer with this partition's transactional id fences ours: the
        batch is not committed and the partition is dropped until the next assignment."""
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.request(1)
        partition = partition_for(rid(1).encode(), PARTITIONS)
        world.broker.init_transactions(tid(partition))  # the new owner starts
        world.result(1)
        await until(lambda: worker.stats.aborted == 1)
        assert TopicPartition(T.intake, partition) not in worker._producers
        assert world.agent() == []
        worker.request_stop()
        stats = await task
        assert stats.decided == 0


class TestOffsets:
    async def test_records_from_before_a_seek_are_dropped(self, world: World) -> None:
        """A fetch that returns records below the offset to continue from decides none of them."""
        for i in range(3):
            world.request(i)
        partition = partition_for(rid(0).encode(), PARTITIONS)
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        tp = TopicPartition(T.intake, partition)
        stale = world.result(0)
        worker._partitions[tp].next_offset = stale.offset + 1  # as after a seek past it
        await worker._partitions[tp].decide_and_commit([stale])
        assert worker.stats.decided == 0
        assert worker.stats.committed == 0
        worker.request_stop()
        await task

    async def test_offset_gap_is_decided_and_logged(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Records after a gap (aborted or compacted offsets) are decided; the gap is logged."""
        world.request(0)
        caplog.set_level(logging.DEBUG, logger="toolgate.worker")
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        partition = partition_for(rid(0).encode(), PARTITIONS)
        tp = TopicPartition(T.intake, partition)
        # An aborted transaction in intake leaves a gap of its records and its marker.
        txn = world.broker.begin("adapter")
        world.broker.append(T.intake, b"x", key=rid(0).encode(), txn=txn)
        world.broker.abort("adapter", txn)
        world.result(0)
        await until(lambda: worker.stats.decided == 1)
        gaps = [r for r in caplog.records if r.getMessage() == "offset gap"]
        assert gaps
        assert gaps[0].__dict__["partition"] == tp.partition
        worker.request_stop()
        await task


class TestTakeOver:
    async def test_failed_take_over_at_assignment_is_retried_before_the_next_batch(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Starting a producer fails at assignment: the partition is owned, not ready, and taken
        over before its next batch; the records in hand are dropped and read again."""
        world.broker.fail("init")
        worker = world.worker(burst=True)
        task = asyncio.create_task(worker.run())
        await until(lambda: len(worker._producers) == PARTITIONS)
        assert None in worker._producers.values()
        assert not worker.ready()
        assert worker.metrics.ready._value.get() == 0
        for i in range(3):
            world.request(i)
            world.result(i)
        stats = await task
        assert stats.decided == 3
        assert len(world.agent()) == 3
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "taking over a partition failed; retried before its next batch" in warnings

    async def test_a_take_over_retried_after_assignment_reads_the_state_again(self, world: World) -> None:
        """The assignment's take-over fails before it fences the previous owner, whose open
        transaction commits an acceptance after the assignment's restore read the state: the
        take-over retried reads it again, and a duplicate of that attempt is rejected, not
        answered a second time."""
        world.request(1)
        answered, duplicate = world.result(1), world.result(1)
        partition = answered.partition
        zombie = world.clients.producer(transactional_id=tid(partition))
        await zombie.start()
        await zombie.begin_transaction()  # the previous owner, paused with its transaction open
        entry = {
            "request_id": rid(1),
            "accepted_attempts": [1],
            "expires_at": (NOW + timedelta(minutes=5)).isoformat(),
        }
        await zombie.send(T.state, json.dumps(entry).encode(), key=rid(1).encode(), partition=partition)
        tp = TopicPartition(T.intake, partition)
        await zombie.send_offsets_to_transaction({tp: answered.offset + 1}, CONFIG.group_id)
        starts: list[Any] = []

        async def hook(operation: str, node: Any, client: Any) -> None:
            if operation != "init" or client is zombie or client.transactional_id != tid(partition):
                return
            starts.append(client)
            if len(starts) == 1:
                raise KafkaError("injected: the assignment's take-over fails to start")
            if len(starts) == 2:
                await zombie.commit_transaction()  # it resumes and commits just before the fence

        world.broker.hook = hook
        stats = await world.worker(burst=True).run()
        assert len(starts) == 2
        assert world.broker.group_offsets[(CONFIG.group_id, tp)] == duplicate.offset + 1
        assert stats.decided == 1
        assert world.codes() == ["DUPLICATE_RESULT"]
        assert world.agent() == []

    async def test_take_over_failing_again_is_retried_with_backoff(self, world: World) -> None:
        """After an abort, the take-over fails twice more: each retry is counted and backed off
        (doubling) until the cluster answers; then the batch is decided once."""
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.broker.fail("commit")
        world.broker.fail("init", times=2)
        world.request(1)
        world.result(1)
        await until(lambda: worker.stats.decided == 1)
        worker.request_stop()
        stats = await task
        assert stats.aborted == 2
        assert world.sleeps == [0.1, 0.2]
        assert len(world.agent()) == 1


class TestRequestWait:
    async def test_missing_request_waits_for_the_reader_to_catch_up(self, world: World) -> None:
        """A result whose request the reader has not applied yet waits for it and is accepted."""
        worker = world.worker(request_wait_seconds=30)
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.broker.stall(T.requests)
        world.request(1)
        before = world.broker.calls["end_offsets"]
        world.result(1)
        await until(lambda: world.broker.calls["end_offsets"] > before)
        world.broker.unstall(T.requests)
        await until(lambda: worker.stats.decided == 1)
        assert worker.stats.accepted == 1
        assert worker.metrics.request_waits.labels("caught_up")._value.get() == 1
        worker.request_stop()
        await task

    async def test_reader_behind_after_the_wait_decides_unknown_request(self, world: World) -> None:
        """The reader does not catch up in time: the result fails closed as UNKNOWN_REQUEST."""
        worker = world.worker(request_wait_seconds=0.01)
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.broker.stall(T.requests)
        world.request(1)
        world.result(1)
        await until(lambda: worker.stats.decided == 1)
        assert world.codes() == ["UNKNOWN_REQUEST"]
        assert worker.metrics.request_waits.labels("timeout")._value.get() == 1
        worker.request_stop()
        await task

    async def test_a_retry_read_before_its_request_record_waits_for_it(self, world: World) -> None:
        """The reader holds attempt 1 when attempt 2's result comes before attempt 2's request
        record: the worker reads on and accepts it, rather than call it STALE_RESULT."""
        worker = world.worker(request_wait_seconds=30)
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.request(1)
        await until(lambda: rid(1) in worker.requests)
        world.broker.stall(T.requests)
        world.request(1, attempt=2)
        before = world.broker.calls["end_offsets"]
        world.result(1, attempt="2")
        await until(lambda: world.broker.calls["end_offsets"] > before)
        world.broker.unstall(T.requests)
        await until(lambda: worker.stats.decided == 1)
        worker.request_stop()
        await task
        assert world.codes() == ["-"]
        assert [e["attempt"] for e in world.audit()] == [2]
        assert worker.metrics.request_waits.labels("caught_up")._value.get() == 1

    @pytest.mark.parametrize(
        ("held", "named", "reads"),
        [
            (1, "3", 1),  # an attempt never issued: read to the end, the request is still at 1
            (2, "1", 0),  # an earlier attempt: no newer record can make it current, nothing read
        ],
    )
    async def test_a_stale_attempt_stays_stale(self, world: World, held: int, named: str, reads: int) -> None:
        """A result for another attempt than the request's current one is STALE_RESULT, after
        at most one bounded read of the requests topic."""
        worker = world.worker(request_wait_seconds=30)
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.request(1, attempt=held)
        await until(lambda: rid(1) in worker.requests)
        world.result(1, attempt=named)
        await until(lambda: worker.stats.decided == 1)
        worker.request_stop()
        await task
        assert world.codes() == ["STALE_RESULT"]
        assert worker.metrics.request_waits.labels("caught_up")._value.get() == reads

    async def test_broker_error_during_the_wait_decides_nothing_then_retries(self, world: World) -> None:
        """Reading the end offsets fails: nothing is decided as unknown; the batch is retried."""
        worker = world.worker(burst=True)
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        world.broker.stall(T.requests)
        world.request(1)
        world.broker.fail("end_offsets")
        world.result(1)
        await until(lambda: worker.stats.aborted == 1)
        assert worker.stats.decided == 0
        world.broker.unstall(T.requests)
        stats = await task
        assert (stats.decided, stats.accepted) == (1, 1)


class TestStopping:
    async def test_burst_stops_when_every_partition_is_drained(self, world: World) -> None:
        """Burst mode returns once every owned partition is read to its last stable offset."""
        for i in range(4):
            world.request(i)
            world.result(i)
        stats = await world.worker(burst=True).run()
        assert stats.decided == 4

    async def test_burst_waits_while_another_member_owns_a_partition(self, world: World) -> None:
        """Burst mode does not stop while another member holds some of the intake."""
        other = world.clients.consumer(group_id=CONFIG.group_id)
        await other.start()
        from toolgate.service._kafka import RebalanceListener

        other.subscribe([T.intake], RebalanceListener())
        worker = world.worker(burst=True)
        task = asyncio.create_task(worker.run())
        await until(lambda: bool(worker._producers) and worker.ready())
        assert len(worker._producers) < PARTITIONS
        assert not await worker._drained()
        await other.stop()  # leaves: the worker gets everything and can drain
        stats = await task
        assert stats.decided == 0

    async def test_max_messages(self, world: World) -> None:
        """The worker returns once it has decided at least max_messages."""
        for i in range(6):
            world.request(i)
            world.result(i)
        stats = await world.worker(max_messages=2, batch_size=1).run()
        assert 2 <= stats.decided < 6

    async def test_stop_leaves_the_group_and_stops_the_producers(self, world: World) -> None:
        """request_stop: run returns, the consumer and every producer are stopped, not ready."""
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        worker.request_stop()
        await task
        assert all(p.stopped for p in world.clients.producers)
        assert not any(c.started for c in world.clients.consumers)
        assert worker.metrics.ready._value.get() == 0
        assert world.broker.members[CONFIG.group_id] == []

    async def test_batch_in_hand_when_stopping_is_left_for_the_next_owner(self, world: World) -> None:
        """Records handed to a partition after stop was requested are not decided."""
        world.request(1)
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        record = world.result(1)
        worker.request_stop()
        owned = worker._partitions[TopicPartition(T.intake, record.partition)]
        owned.offer([record])
        assert owned.idle
        await task
        assert worker.stats.decided == 0
        assert world.audit() == []


class TestRebalance:
    async def test_partitions_move_between_workers_and_each_result_is_decided_once(
        self, world: World
    ) -> None:
        """A second worker joins (partitions revoked and assigned), then leaves: every result is
        decided exactly once, and the lag series of revoked partitions are removed."""
        first = world.worker()
        first_task = asyncio.create_task(first.run())
        await until(first.ready)
        for i in range(6):
            world.request(i)
            world.result(i)
        # The lag is read at each poll: 0 once the batches committed and the loop polled again.
        await until(
            lambda: len(_lag_samples(first)) == PARTITIONS and all(s.value == 0 for s in _lag_samples(first))
        )
        assert {s.labels["partition"] for s in _lag_samples(first)} == {"0", "1", "2"}
        second = world.worker()
        second_task = asyncio.create_task(second.run())
        await until(lambda: second.ready() and first.ready() and world.broker.rebalances >= 2)
        owned = {tp.partition for tp in first._producers}
        assert 0 < len(owned) < PARTITIONS
        assert {s.labels["partition"] for s in _lag_samples(first)} <= {str(p) for p in owned}
        for i in range(6, 12):
            world.request(i)
            world.result(i)
        await until(lambda: first.stats.decided + second.stats.decided == 12)
        assert second.stats.decided > 0
        second.request_stop()
        await second_task
        await until(lambda: len(first._producers) == PARTITIONS and first.ready())
        first.request_stop()
        await first_task
        ids = sorted(e["request_id"] for e in world.agent())
        assert ids == sorted(rid(i) for i in range(12))


def _lag_samples(worker: Worker) -> list[Any]:
    return [s for m in worker.metrics.lag.collect() for s in m.samples]


class TestRequestStoreCap:
    async def test_evictions_are_counted_and_the_hint_names_the_setting(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """TOOLGATE_MAX_REQUESTS caps the store; each request dropped for room is counted."""
        config = load_config(environ={"TOOLGATE_MAX_REQUESTS": "2"})
        assert config.max_requests == 2
        for i in range(5):
            world.request(i)
        worker = Worker(
            config,
            world.gate,
            clock=lambda: NOW,
            options=WorkerOptions(handle_signals=False, metrics_port=0, burst=True, linger_ms=5),
            clients=world.clients,
            sleep=world.sleep,
        )
        await worker.run()
        assert len(worker.requests) == 2
        assert worker.metrics.request_store_evictions._value.get() == 3
        hints = [getattr(r, "hint", "") for r in caplog.records if r.getMessage().startswith("request store")]
        assert hints
        assert "TOOLGATE_MAX_REQUESTS" in hints[0]

    def test_options_override_the_configuration(self, world: World) -> None:
        """WorkerOptions.max_requests, when set, wins over the configuration."""
        worker = world.worker(max_requests=7)
        assert worker.requests.max_requests == 7
        assert world.worker().requests.max_requests == CONFIG.max_requests


def test_request_record_round_trip() -> None:
    """The fake's request records are what the platform writes."""
    record = review_request(request_id=rid(1))
    assert msgspec.json.decode(msgspec.json.encode(record), type=RequestRecord) == record


def test_kafka_error_is_the_injected_default() -> None:
    """An injected failure without an error raises a KafkaError naming the operation."""
    broker = FakeBroker()
    broker.fail("commit")
    with pytest.raises(KafkaError, match="commit"):
        broker.check("commit")


class TestPartitionLocalState:
    async def test_partition_counts_must_match(self, world: World) -> None:
        """Requests and intake with different partition counts: the worker refuses to start,
        one line naming both topics and counts."""
        from toolgate._errors import ConfigError

        world.broker.logs[T.requests].append([])  # 4 partitions against intake's 3
        with pytest.raises(ConfigError) as caught:
            await world.worker(burst=True).run()
        assert str(caught.value) == (
            f"{T.requests} has 4 partitions and {T.intake} has 3: they must be equal "
            "(state is restored per intake partition); grow them together: "
            "toolgate topics grow --partitions 4"
        )
        world.broker.logs[T.requests].pop()
        world.broker.logs[T.state].pop()  # the state changelog: 2 against 3
        with pytest.raises(ConfigError) as caught:
            await world.worker(burst=True).run()
        assert str(caught.value) == (
            f"{T.state} has 2 partitions and {T.intake} has 3: they must be equal "
            "(state is restored per intake partition); grow them together: "
            "toolgate topics grow --partitions 3"
        )
        del world.broker.logs[T.state]
        with pytest.raises(ConfigError) as caught:
            await world.worker(burst=True).run()
        assert str(caught.value) == f"topic {T.state!r} does not exist (run: toolgate topics ensure)"

    async def test_each_worker_holds_only_its_partitions_requests(self, world: World) -> None:
        """Two workers: each holds the requests of the intake partitions it owns; together all."""
        for i in range(30):
            world.request(i)
        first, second = world.worker(), world.worker()
        tasks = [asyncio.create_task(first.run()), asyncio.create_task(second.run())]
        await until(lambda: first.ready() and second.ready() and world.broker.rebalances >= 2)
        await until(lambda: len(first.requests) + len(second.requests) == 30)
        for worker in (first, second):
            owned = {tp.partition for tp in worker._producers}
            held = {partition_for(r.encode(), PARTITIONS) for r in worker.requests._requests}
            assert held <= owned
        assert 0 < len(first.requests) < 30
        for worker in (first, second):
            worker.request_stop()
        await asyncio.gather(*tasks)

    async def test_no_decision_before_the_restore_completes(self, world: World) -> None:
        """A slow restore: the partition is not decided and /readyz says restoring until it ends."""
        world.request(1)
        world.result(1)
        release = asyncio.Event()

        async def slow(partitions: set[int]) -> None:
            await release.wait()

        worker = world.worker(restore_hook=slow)
        task = asyncio.create_task(worker.run())
        await until(lambda: bool(worker._restoring))
        assert not worker.ready()
        assert worker.status() == "restoring"
        assert worker.metrics.restoring._value.get() == PARTITIONS
        assert worker.stats.decided == 0
        assert world.audit() == []
        release.set()
        await until(lambda: worker.stats.decided == 1)
        assert world.codes() == ["-"]  # the request was restored before deciding
        assert worker.ready()
        assert worker.metrics.restore_seconds._sum.get() > 0
        (family,) = worker.metrics.restore_last.collect()
        last = {sample.labels["partition"] for sample in family.samples}
        assert last == {str(p) for p in range(PARTITIONS)}
        worker.request_stop()
        await task

    async def test_restore_failure_is_retried_with_backoff_and_logged_once(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The broker does not answer during restore: retried with backoff, one warning."""
        world.request(1)
        world.result(1)
        injected: list[int] = []

        async def outage(partitions: set[int]) -> None:
            if not injected:
                injected.append(1)
                world.broker.fail("end_offsets", times=3)

        stats = await world.worker(burst=True, restore_hook=outage).run()
        assert stats.decided == 1
        assert world.codes() == ["-"]
        assert world.sleeps[:3] == [0.1, 0.2, 0.4]
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert warnings.count("state restore did not finish; retrying") == 1

    async def test_revoked_partitions_requests_are_dropped(self, world: World) -> None:
        """When a partition moves away, its requests leave this worker's memory."""
        for i in range(30):
            world.request(i)
        first = world.worker()
        first_task = asyncio.create_task(first.run())
        await until(lambda: first.ready() and len(first.requests) == 30)
        second = world.worker()
        second_task = asyncio.create_task(second.run())
        await until(lambda: second.ready() and first.ready() and len(first._producers) < PARTITIONS)
        owned = {tp.partition for tp in first._producers}
        assert {partition_for(r.encode(), PARTITIONS) for r in first.requests._requests} <= owned
        assert len(first.requests) < 30
        for worker, task in ((second, second_task), (first, first_task)):
            worker.request_stop()
            await task

    async def test_result_in_the_wrong_partition_is_unknown_and_counted(self, world: World) -> None:
        """A result written where murmur2 does not put its key (another client's partitioner)
        fails closed as UNKNOWN_REQUEST and counts in toolgate_misrouted_results_total."""
        world.request(1)
        right = partition_for(rid(1).encode(), PARTITIONS)
        value = dict(review_value(), request_id=rid(1))
        msg = message(value, key=rid(1).encode(), tg_request_id=rid(1))
        world.broker.append(
            T.intake, msg.value, key=msg.key, headers=msg.headers, partition=(right + 1) % PARTITIONS
        )
        worker = world.worker(burst=True, request_wait_seconds=0.01)
        await worker.run()
        assert world.codes() == ["UNKNOWN_REQUEST"]
        assert worker.metrics.misrouted._value.get() == 1
        (quarantined,) = world.broker.committed_values(T.quarantine)
        detail = json.loads(dict(quarantined.headers)["tg-error-detail"])["message"]
        assert f"misrouted, in intake partition {(right + 1) % PARTITIONS} while murmur2" in detail
        assert f"in {right};" in detail
        assert "partitioner=murmur2_random" in detail

    async def test_an_unknown_request_in_its_own_partition_is_not_called_misrouted(
        self, world: World
    ) -> None:
        """A result where murmur2 puts its key, for no request: the plain detail."""
        world.result(2)
        worker = world.worker(burst=True, request_wait_seconds=0.01)
        await worker.run()
        (quarantined,) = world.broker.committed_values(T.quarantine)
        assert json.loads(dict(quarantined.headers)["tg-error-detail"])["message"] == "no outstanding request"

    async def test_state_is_restored_before_deciding_an_assigned_partition(self, world: World) -> None:
        """What the previous owner accepted (the state changelog) must be held before the
        partition is decided: while the changelog cannot be read, restore retries and nothing
        is decided; then the repeated result is a DUPLICATE_RESULT."""
        world.request(1)
        world.result(1)
        stalled: list[int] = []

        async def previous_owner_accepted(partitions: set[int]) -> None:
            if not stalled:
                stalled.append(1)
                world.broker.stall(T.state)
                world.state_entry(1, [1])

        worker = world.worker(restore_hook=previous_owner_accepted, restore_wait_seconds=0.01)
        task = asyncio.create_task(worker.run())
        await until(lambda: len(world.sleeps) >= 2)
        assert worker.stats.decided == 0
        assert worker.status() == "restoring"
        world.broker.unstall(T.state)
        await until(lambda: worker.stats.decided == 1)
        worker.request_stop()
        await task
        assert [e.get("code") for e in world.audit() if e.get("tool")] == ["DUPLICATE_RESULT"]


class TestTakeOverAgain:
    """A take-over again (after a failed commit) that reads a committed offset the partition did
    not know restores that partition's state, as at assignment, before it decides."""

    async def test_a_moved_offset_restores_the_partition_from_the_changelog(self, world: World) -> None:
        """A commit whose answer was lost moved the offset: the partition alone is restored
        again, with what the changelog holds (here also another owner's entry), and a
        duplicate of that owner's attempt is rejected."""
        world.request(1)
        world.request(2)
        first = world.result(1)
        partition = first.partition
        restored: list[set[int]] = []

        async def hook(partitions: set[int]) -> None:
            restored.append(set(partitions))
            if len(restored) == 2:  # the restore again: another owner's acceptance is there
                world.state_entry(2, [1])

        world.broker.fail("commit", KafkaError("injected lost answer"), after=True)
        worker = world.worker(restore_hook=hook)
        task = asyncio.create_task(worker.run())
        await until(lambda: len(restored) >= 2 and worker.ready())
        assert restored[1] == {partition}
        assert worker.ledger(rid(1), 1)  # its own acceptance, from the changelog
        assert worker.ledger(rid(2), 1) == (partition_for(rid(2).encode(), PARTITIONS) == partition)
        world.result(1)
        await until(lambda: len(world.audit()) == 2)
        worker.request_stop()
        await task
        assert world.codes() == ["-", "DUPLICATE_RESULT"]

    async def test_a_restore_again_that_cannot_finish_ends_at_stop(self, world: World) -> None:
        """While the changelog cannot be read the restore again retries and nothing is decided;
        stopping the worker ends it."""
        world.request(1)
        world.result(1)
        restored: list[set[int]] = []

        async def hook(partitions: set[int]) -> None:
            restored.append(set(partitions))
            if len(restored) == 2:
                world.broker.stall(T.state)

        world.broker.fail("commit", KafkaError("injected lost answer"), after=True)
        worker = world.worker(restore_hook=hook, restore_wait_seconds=0.01)
        task = asyncio.create_task(worker.run())
        await until(lambda: len(restored) >= 4)
        world.result(1)
        assert worker.status() == "restoring"
        worker.request_stop()
        await task
        assert len(world.audit()) == 1


class TestStateChangelog:
    """Accepted attempts live in the state changelog: written with the decision, restored
    per partition, tombstoned when the request ends."""

    async def test_an_accepted_result_writes_its_entry_in_the_decision_transaction(
        self, world: World
    ) -> None:
        """One state record per request with accepted results, in the intake record's
        partition, committed with the decision; a rejected result writes none."""
        world.request(1)
        world.request(2)
        accepted = world.result(1)
        world.result(2, state="exploded")  # not in the schema's enum: rejected
        await world.worker(burst=True).run()
        assert world.codes() == ["-", "SCHEMA_VIOLATION"]
        assert world.state() == [
            (
                accepted.partition,
                rid(1),
                {
                    "request_id": rid(1),
                    "accepted_attempts": [1],
                    "expires_at": (NOW + timedelta(minutes=5)).isoformat().replace("+00:00", "Z"),
                },
            )
        ]

    async def test_an_aborted_batch_writes_no_entry(self, world: World) -> None:
        """A failed commit leaves no state record; the batch decided again writes one."""
        world.request(1)
        world.result(1)
        world.broker.fail("commit")
        await world.worker(burst=True).run()
        assert [(key, value["accepted_attempts"]) for _, key, value in world.state() if value] == [
            (rid(1), [1])
        ]
        assert world.codes() == ["-"]

    async def test_an_expired_request_is_tombstoned_by_the_sweep(self, world: World) -> None:
        """When the request expires, its entry leaves memory and an idle partition writes the
        tombstone in a transaction of its own."""
        now = [NOW]
        world.request(1)
        world.result(1)
        worker = world.worker(clock=lambda: now[0], sweep_seconds=0)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.stats.decided == 1)
        assert worker.ledger(rid(1), 1)
        now[0] = NOW + timedelta(minutes=6)
        await until(lambda: any(value is None for _, _, value in world.state()))
        worker.request_stop()
        await task
        assert [(key, value is None) for _, key, value in world.state()] == [(rid(1), False), (rid(1), True)]
        assert len(worker.ledger) == 0
        assert worker.metrics.state_tombstones._value.get() == 1

    async def test_a_request_tombstone_ends_its_entry(self, world: World) -> None:
        """The platform ends a request (tombstone): its accepted attempts are forgotten and
        tombstoned in the changelog."""
        world.request(1)
        world.result(1)
        worker = world.worker(sweep_seconds=0)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.stats.decided == 1)
        world.broker.append(T.requests, None, key=rid(1).encode())
        await until(lambda: any(value is None for _, _, value in world.state()))
        worker.request_stop()
        await task
        assert not worker.ledger(rid(1), 1)

    async def test_restore_skips_expired_entries_and_tombstones_them(self, world: World) -> None:
        """A previous owner's entry whose request has expired is not held; the new owner writes
        its tombstone. A live one is held."""
        world.state_entry(1, [1], expires=NOW - timedelta(seconds=1))
        world.state_entry(2, [1, 2])
        worker = world.worker(sweep_seconds=0)
        task = asyncio.create_task(worker.run())
        await until(lambda: any(value is None for _, _, value in world.state()))
        worker.request_stop()
        await task
        assert not worker.ledger(rid(1), 1)
        assert worker.ledger(rid(2), 2)
        assert [key for _, key, value in world.state() if value is None] == [rid(1)]

    async def test_revoked_partitions_entries_are_dropped(self, world: World) -> None:
        """A second worker joining takes partitions: the first forgets their entries."""
        for i in range(12):
            world.state_entry(i, [1])
        first = world.worker()
        task = asyncio.create_task(first.run())
        await until(lambda: len(first.ledger) == 12)
        second = world.worker()
        task2 = asyncio.create_task(second.run())
        await until(lambda: len(second.ledger) > 0 and len(first.ledger) + len(second.ledger) == 12)
        held = {i for i in range(12) if first.ledger(rid(i), 1)}
        owned = {tp.partition for tp in first._producers}
        assert held == {i for i in range(12) if partition_for(rid(i).encode(), PARTITIONS) in owned}
        first.request_stop()
        second.request_stop()
        await asyncio.gather(task, task2)


class TestAssignment:
    async def test_assigned_partitions_are_taken_over_together(self, world: World) -> None:
        """Every assigned partition's producer is started (fencing its previous owner) before
        any of them has finished: many partitions cost about one round, not one each. The
        worker is not ready until all are taken over and restored."""
        release = asyncio.Event()
        starting: list[int] = []
        make = world.clients.producer

        def slow_producer(**options: Any) -> Any:
            producer = make(**options)
            if not options.get("transactional_id"):
                return producer  # the members topic's writer: not a partition's
            start = producer.start

            async def held_start() -> None:
                starting.append(1)
                await release.wait()
                await start()

            producer.start = held_start  # type: ignore[method-assign]
            return producer

        world.clients.producer = slow_producer  # type: ignore[method-assign]
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(lambda: len(starting) == PARTITIONS)
        assert not worker.ready()
        assert worker.status() == "restoring"
        release.set()
        await until(worker.ready)
        worker.request_stop()
        await task
        (group,) = [c for c in world.clients.consumers if c.group is not None]
        assert group.options["session_timeout_ms"] == CONFIG.session_timeout_ms


class TestStallRecovery:
    """A worker that makes no progress while the cluster answers rebuilds its Kafka clients."""

    async def test_a_stuck_consumer_is_rebuilt_and_decisions_resume(
        self, world: World, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Records pending, no transaction committed for stall_seconds (an injected clock) and
        a fresh client's lookup answered: the worker says so once in its log and in
        toolgate_stall_recoveries_total, rejoins with a new consumer and decides the records."""
        caplog.set_level(logging.WARNING, logger="toolgate.worker")
        clock = [0.0]
        world.request(1)
        worker = world.worker(stall_seconds=60, monotonic=lambda: clock[0])
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        (stuck,) = [c for c in world.clients.consumers if c.group is not None]
        stuck.wedged = True
        world.result(1)
        polls = world.broker.calls["fetch"]
        clock[0] = 59.0  # not yet
        await until(lambda: world.broker.calls["fetch"] >= polls + 5)
        assert worker.metrics.stall_recoveries._value.get() == 0
        clock[0] = 61.0
        await until(lambda: worker.stats.decided == 1)
        assert worker.metrics.stall_recoveries._value.get() == 1
        assert [c for c in world.clients.consumers if c.group is not None][-1] is not stuck
        lines = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
        assert len(lines) == 1
        worker.request_stop()
        await task
        assert world.codes() == ["-"]

    async def test_no_rebuild_while_the_cluster_does_not_answer_or_nothing_is_pending(
        self, world: World
    ) -> None:
        """A lookup that fails (the cluster down) is no stall, and neither is a worker with no
        record pending, however long since its last commit."""
        clock = [0.0]
        worker = world.worker(stall_seconds=60, monotonic=lambda: clock[0])
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        clock[0] = 100.0  # idle: nothing pending
        probes = world.broker.calls["end_offsets"]
        await until(lambda: world.broker.calls["end_offsets"] > probes)
        (stuck,) = [c for c in world.clients.consumers if c.group is not None]
        stuck.wedged = True
        world.request(1)
        world.result(1)
        world.broker.fail("end_offsets", KafkaError("cluster down"), times=1000)
        clock[0] = 200.0
        polls = world.broker.calls["fetch"]
        await until(lambda: world.broker.calls["fetch"] >= polls + 5)
        assert worker.metrics.stall_recoveries._value.get() == 0
        assert worker.stats.decided == 0
        worker.request_stop()
        await task
