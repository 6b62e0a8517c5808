"""The owned partition on its own: its collaborators are plain callables over the in-memory
broker, no worker around it (toolgate.service._partition)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
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
from toolgate.service._store import AcceptedLedger, RequestTable, StateUpdate

from tests.fakes.kafka import FakeBroker, FakeClients, FakeConsumer, FakeRecord
from tests.unit.builders import NOW, message, review_request, review_value

CONFIG = Config()
T = CONFIG.topics
TP = TopicPartition(T.intake, 0)
_METRICS = Metrics()


def rid(i: int) -> str:
    return f"req.alone{i:04d}"


class Harness:
    """One partition's collaborators over a one-partition broker, recording every call."""

    def __init__(self, gate: Gate) -> None:
        self.broker = FakeBroker(now_ms=int(NOW.timestamp() * 1000))
        for name in (T.requests, T.intake, T.agent, T.audit, T.state, T.quarantine):
            self.broker.create_topic(name, 1)
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
            committed=self.committed,
            aborted=self.aborted,
            fenced=self.fences.append,
            owns=lambda owned: owned is self.owner,
            crashed=self.crashes.append,
            sleep=lambda seconds: asyncio.sleep(0),
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
