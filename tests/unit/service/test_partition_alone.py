"""The owned partition on its own: its collaborators are plain callables over the in-memory
broker, no worker around it (toolgate.service._partition)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError
from toolgate._config import Config
from toolgate.gate._batch import Batch
from toolgate.gate._gate import Gate
from toolgate.service._kafka import Outgoing, Producer
from toolgate.service._metrics import Metrics
from toolgate.service._partition import Collaborators, OwnedPartition, PartitionSettings
from toolgate.service._phases import NO_PHASES
from toolgate.service._store import AcceptedLedger, RequestTable, StateUpdate, restore_partitions

from tests.fakes.kafka import FakeBroker, FakeClients, FakeConsumer, FakeRecord
from tests.unit.builders import NOW, message, review_request, review_value

CONFIG = Config()
T = CONFIG.topics
TP = TopicPartition(T.intake, 0)
_METRICS = Metrics()


def rid(i: int) -> str:
    return f"req.alone{i:04d}"


class Harness:
    """One partition's collaborators over a one-partition broker (a new one, or another
    node's: two owners of the partition), recording every call."""

    def __init__(self, gate: Gate, broker: FakeBroker | None = None) -> None:
        if broker is None:
            broker = FakeBroker(now_ms=int(NOW.timestamp() * 1000))
            for name in (T.requests, T.intake, T.agent, T.audit, T.state, T.quarantine):
                broker.create_topic(name, 1)
        self.broker = broker
        self.clients = FakeClients(self.broker)
        consumer = self.clients.consumer(group_id=CONFIG.group_id, isolation_level="read_committed")
        assert isinstance(consumer, FakeConsumer)
        consumer.assign([TP])
        self.consumer = consumer
        self.requests = RequestTable()
        self.ledger = AcceptedLedger()
        self.commits: list[tuple[Batch, list[StateUpdate], int]] = []
        self.aborts: list[Exception] = []
        self.fences: list[OwnedPartition] = []
        self.catch_ups: list[int] = []
        self.behind: list[int] = []
        self.crashes: list[BaseException] = []
        self.owner: OwnedPartition | None = None
        self.restores: list[OwnedPartition] = []
        # Run during the abort's backoff (another node acting meanwhile), once.
        self.meanwhile: Callable[[], Awaitable[None]] | None = None
        self.uses = Collaborators(
            settings=PartitionSettings(group_id=CONFIG.group_id, topics=T, request_wait_seconds=0.01),
            clients=self.clients,
            consumer=lambda: self.consumer,
            held=self.requests.__contains__,
            lookup=lambda tp, records, keys: self.requests.get,
            catch_up=self.catch_up,
            gate=lambda: gate,
            contracts_behind=self.contracts_behind,
            ledger=self.ledger,
            clock=lambda: NOW,
            expires_of=self.requests.expires_at,
            outputs=self.outputs,
            prepare=self.prepare,
            restore=self.restore,
            committed=self.committed,
            aborted=self.aborted,
            fenced=self.fences.append,
            owns=lambda owned: owned is self.owner,
            crashed=self.crashes.append,
            sleep=self.sleep,
            metrics=_METRICS,
            phases=NO_PHASES,
        )

    def partition(self) -> OwnedPartition:
        self.owner = OwnedPartition(TP, self.uses)
        return self.owner

    async def catch_up(self, partition: int, wait_seconds: float) -> bool:
        self.catch_ups.append(partition)
        return True

    async def contracts_behind(self, batch: Batch, decide: Callable[[], Batch]) -> Batch:
        self.behind.append(len(batch.behind))
        return decide()

    async def prepare(self, producer: Producer) -> None:
        return None

    async def restore(self, owned: OwnedPartition) -> None:
        """As the worker: the partition's ledger read again from the state changelog."""
        self.restores.append(owned)
        self.ledger.drop_partitions({0}, 1)
        assert await restore_partitions(
            self.clients, T.state, {0}, lambda key, value: self.ledger.apply(key, value, NOW), 1.0
        )

    async def sleep(self, seconds: float) -> None:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            await meanwhile()
        await asyncio.sleep(0)

    async def outputs(
        self,
        producer: Producer,
        tp: TopicPartition,
        records: Any,
        updates: list[StateUpdate],
        ended: set[str],
    ) -> list[Outgoing]:
        out: list[Outgoing] = [(o.topic, 0, o.key, o.value, o.headers) for o in records]
        out += [(T.state, 0, u.key, u.value(), []) for u in updates]
        return out + [(T.state, 0, r.encode(), None, []) for r in sorted(ended)]

    def committed(self, batch: Batch, updates: list[StateUpdate], size: int, seconds: float) -> None:
        self.commits.append((batch, updates, size))
        self.ledger.commit(updates)

    def aborted(self, tp: TopicPartition, exc: Exception) -> float:
        self.aborts.append(exc)
        return 0.0

    def request(self, i: int) -> None:
        value = msgspec.json.encode(review_request(request_id=rid(i)))
        self.requests.apply(rid(i).encode(), value)

    def result(self, i: int) -> FakeRecord:
        msg = message(dict(review_value(), request_id=rid(i)), key=rid(i).encode(), tg_request_id=rid(i))
        return self.broker.append(T.intake, msg.value, key=msg.key, headers=msg.headers, partition=0)

    def audit_codes(self) -> list[str]:
        return [json.loads(r.value or b"").get("code") or "-" for r in self.broker.committed_values(T.audit)]


@pytest.fixture
def harness(gate: Gate) -> Harness:
    return Harness(gate)


class TestTakeOver:
    async def test_it_continues_from_the_committed_offset(self, harness: Harness) -> None:
        """Taking over reads the group's committed offset and moves the consumer there."""
        harness.broker.group_offsets[(CONFIG.group_id, TP)] = 7
        owned = harness.partition()
        await owned.take_over()
        assert owned.next_offset == 7
        assert harness.consumer._positions[TP] == 7

    async def test_it_fences_the_previous_owner(self, harness: Harness) -> None:
        """A second owner's take-over fences the first: the first's next batch is not
        committed and its fence listener is told."""
        harness.request(1)
        first = harness.partition()
        await first.take_over()
        second = OwnedPartition(TP, harness.uses)
        await second.take_over()
        await first.decide_and_commit([harness.result(1)])
        assert harness.fences == [first]
        assert harness.commits == []
        assert harness.broker.committed_values(T.agent) == []


class TestDecideAndCommit:
    async def test_a_batch_commits_its_decisions_and_offset_together(self, harness: Harness) -> None:
        """The decisions, the changelog record of the acceptance and the next offset are
        committed in one transaction; the commit listener gets the batch."""
        harness.request(1)
        owned = harness.partition()
        await owned.take_over()
        record = harness.result(1)
        await owned.decide_and_commit([record])
        assert [size for _, _, size in harness.commits] == [1]
        assert harness.broker.group_offsets[(CONFIG.group_id, TP)] == record.offset + 1
        assert len(harness.broker.committed_values(T.agent)) == 1
        assert [r.key for r in harness.broker.committed_values(T.state)] == [rid(1).encode()]
        assert harness.ledger(rid(1), 1)
        assert harness.catch_ups == []  # the request was held: no wait

    async def test_a_missing_request_waits_for_the_reader_of_its_partition(self, harness: Harness) -> None:
        """A result whose request is not held waits for the request reader's catch-up of
        the partition's number, then fails closed."""
        owned = harness.partition()
        await owned.take_over()
        await owned.decide_and_commit([harness.result(1)])
        assert harness.catch_ups == [0]
        assert harness.audit_codes() == ["UNKNOWN_REQUEST"]

    async def test_a_failed_commit_leaves_the_ledger_and_retakes(self, harness: Harness) -> None:
        """A commit that fails is counted by the abort listener, nothing joins the ledger,
        and the partition is taken over again from the committed offset."""
        harness.request(1)
        owned = harness.partition()
        await owned.take_over()
        harness.broker.fail("send", KafkaError("injected"))
        record = harness.result(1)
        await owned.decide_and_commit([record])
        assert len(harness.aborts) == 1
        assert harness.commits == []
        assert not harness.ledger(rid(1), 1)
        assert owned.producer is not None
        assert owned.next_offset == 0
        await owned.decide_and_commit([record])  # decided again after the take-over
        assert len(harness.commits) == 1
        assert harness.ledger(rid(1), 1)


class TestTakeOverAgain:
    """An abort takes the partition over again (its producer re-initialised, fencing any
    newer owner): when the committed offset it reads is not the one this owner last knew,
    another owner may have committed meanwhile, and the partition's state is restored again
    before it decides."""

    def two_owners(self, harness: Harness, gate: Gate) -> Harness:
        other = Harness(gate, harness.broker)
        other.request(1)
        other.request(2)
        return other

    async def test_a_newer_owners_commits_are_restored_before_deciding(
        self, harness: Harness, gate: Gate
    ) -> None:
        """A paused owner whose commit timed out, taking over again after another owner
        accepted an attempt, rejects that attempt's duplicate instead of answering it twice."""
        other = self.two_owners(harness, gate)
        harness.request(1)
        harness.request(2)
        first = harness.partition()
        await first.take_over()
        answered, accepted, duplicate = harness.result(1), harness.result(2), harness.result(2)

        async def newer_owner_commits() -> None:
            second = other.partition()
            await second.take_over()  # the group gave the partition to the other node
            await second.decide_and_commit([answered, accepted])

        harness.meanwhile = newer_owner_commits
        harness.broker.fail("commit", KafkaError("injected commit timeout"))
        await first.decide_and_commit([answered])
        assert first.next_offset == accepted.offset + 1
        await first.decide_and_commit([duplicate])
        assert harness.audit_codes()[-1] == "DUPLICATE_RESULT"
        assert len(harness.broker.committed_values(T.agent)) == 2  # each attempt answered once
        assert harness.restores == [first]

    async def test_a_newer_owner_at_the_same_offset_is_not_taken_for_its_own_commit(
        self, harness: Harness, gate: Gate
    ) -> None:
        """The other owner decided the same record differently (it held the request, this owner
        did not) and committed to the offset this owner's timed-out commit would have: the
        offset cannot tell them apart, so the state is read again and the duplicate rejected."""
        other = self.two_owners(harness, gate)
        first = harness.partition()
        await first.take_over()
        answered = harness.result(1)

        async def newer_owner_commits() -> None:
            second = other.partition()
            await second.take_over()
            await second.decide_and_commit([answered])  # accepted: its request is held there

        harness.meanwhile = newer_owner_commits
        harness.broker.fail("commit", KafkaError("injected commit timeout"))
        await first.decide_and_commit([answered])  # UNKNOWN_REQUEST here; the commit times out
        assert first.next_offset == answered.offset + 1
        harness.request(1)  # the request record is read late
        await first.decide_and_commit([harness.result(1)])
        assert harness.audit_codes() == ["-", "DUPLICATE_RESULT"]
        assert harness.restores == [first]

    async def test_its_own_lost_commit_is_read_back_from_the_changelog(self, harness: Harness) -> None:
        """A commit that went through with its answer lost moves the committed offset: the state
        is read again, and its acceptance is in the ledger from the changelog."""
        harness.request(1)
        owned = harness.partition()
        await owned.take_over()
        harness.broker.fail("commit", KafkaError("injected lost answer"), after=True)
        record = harness.result(1)
        await owned.decide_and_commit([record])
        assert harness.restores == [owned]
        assert owned.next_offset == record.offset + 1
        harness.ledger.drop_partitions({0}, 1)  # what the settle added: the changelog must hold it too
        await harness.restore(owned)
        assert harness.ledger(rid(1), 1)

    async def test_a_failed_commit_with_no_other_owner_keeps_the_state(self, harness: Harness) -> None:
        """A commit that failed with no other owner leaves the committed offset where this
        owner last knew it: nothing is read again, and the batch is decided again."""
        harness.request(1)
        owned = harness.partition()
        await owned.take_over()
        harness.broker.fail("commit", KafkaError("injected commit failure"))
        record = harness.result(1)
        await owned.decide_and_commit([record])
        assert harness.restores == []
        assert owned.next_offset == 0
        await owned.decide_and_commit([record])
        assert harness.ledger(rid(1), 1)
        assert harness.restores == []  # its own commit moved the offset it knows


class TestAbortWhenNoLongerOwned:
    """An abort whose partition was revoked, fenced or stopped during its backoff retires the
    failed producer all the same: the partition's task decides nothing more, and the next
    owner decides the failed batch, from the committed offset."""

    async def test_records_queued_during_the_backoff_are_not_committed_past_the_failed_batch(
        self, harness: Harness
    ) -> None:
        """The partition is revoked while its abort backs off and a later record is queued:
        nothing is committed (an offset past the failed record would leave it undecided for
        good), and the next owner decides both records."""
        harness.request(1)
        harness.request(2)
        owned = harness.partition()
        await owned.take_over()
        failed, later = harness.result(1), harness.result(2)

        async def revoked() -> None:
            harness.owner = None  # the group moved it; its release has not run yet
            owned.offer([later])  # fetched meanwhile: queued behind the failed batch

        harness.meanwhile = revoked
        harness.broker.fail("send", KafkaError("injected"))
        owned.offer([failed])
        assert owned.task is not None
        await owned.task
        assert len(harness.aborts) == 1
        assert harness.commits == []
        assert (CONFIG.group_id, TP) not in harness.broker.group_offsets
        assert owned.producer is None
        assert owned.closing
        successor = harness.partition()
        await successor.take_over()
        assert successor.next_offset == failed.offset
        await successor.decide_and_commit([failed, later])
        assert harness.broker.group_offsets[(CONFIG.group_id, TP)] == later.offset + 1
        assert harness.audit_codes() == ["-", "-"]
