"""One Kafka seam: clients are built in toolgate/service/_kafka.py only, and nothing uses
private attributes of aiokafka or prometheus-client."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from aiokafka.producer import sender as aiokafka_sender
from hypothesis import given
from hypothesis import strategies as st
from toolgate._config import Config, Partitions, Topics
from toolgate.service._kafka import (
    TXN_RETRY_SECONDS,
    AiokafkaClients,
    Outgoing,
    delete_topics,
    ensure_topics,
    murmur2,
    partition_for,
    send_records,
)

from tests import ROOT
from tests.fakes.kafka import FakeBroker, FakeClients

SEAM = ROOT / "worker" / "toolgate" / "service" / "_kafka.py"


def _sources(top: Path) -> list[Path]:
    """The Python files under ``top``, leaving out hidden and dependency folders (a broker's data
    folder, a build, node_modules), whose contents come and go while the tests run."""
    found: list[Path] = []
    for folder, names, files in os.walk(top):
        names[:] = [n for n in names if not n.startswith(".") and n != "node_modules"]
        found.extend(Path(folder) / f for f in files if f.endswith(".py"))
    return found


SOURCES = sorted(p for d in ("worker", "ops") for p in _sources(ROOT / d))

# A Kafka client class named anywhere (a constructor call or an import of it).
CONSTRUCTION = re.compile(r"\b(AIOKafkaConsumer|AIOKafkaProducer|AIOKafkaAdminClient|AIOKafkaClient)\b")
# Private attributes of aiokafka clients and prometheus-client metrics.
PRIVATE = re.compile(
    r"\.(_client|_subscription|_metrics|_send_request\w*|_txn_manager|_fetcher|_coordinator|_sender)\b"
)


def _code_lines(path: Path) -> list[tuple[int, str]]:
    return [
        (n, line)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if not line.lstrip().startswith("#")
    ]


def test_the_scan_sees_the_tree() -> None:
    """The scan covers the package and ops (a wrong root would pass vacuously)."""
    names = {p.name for p in SOURCES}
    assert {"_service.py", "_kafka.py", "_replay.py", "worker_bench.py"} <= names


def test_no_kafka_client_is_built_outside_the_seam() -> None:
    """Only service/_kafka.py names aiokafka's client classes."""
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in SOURCES
        if path != SEAM
        for n, line in _code_lines(path)
        if CONSTRUCTION.search(line)
    ]
    assert found == []


def test_no_private_attributes_of_aiokafka_or_prometheus_client() -> None:
    """No ``._client``, ``._subscription``, ``._metrics``, ``._send_request`` ... anywhere."""
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in SOURCES
        for n, line in _code_lines(path)
        if not line.lstrip().startswith(("from ", "import ")) and PRIVATE.search(line)
    ]
    assert found == []


def test_the_checks_catch_what_they_look_for() -> None:
    """The patterns match the forms they forbid."""
    assert CONSTRUCTION.search("consumer = AIOKafkaConsumer(**settings)")
    assert PRIVATE.search("cluster = await consumer._client.fetch_all_metadata()")
    assert PRIVATE.search("consumer._subscription.subscription")
    assert PRIVATE.search("metrics.lag._metrics")


class TestEnsureTopics:
    CONFIG = Config(
        topics=Topics(
            requests="r",
            intake="i",
            agent="a",
            quarantine="q",
            audit="au",
            state="s",
            contracts="c",
            members="m",
        ),
        partitions=Partitions(requests=4, intake=4, agent=4, quarantine=1, audit=4),
    )

    async def test_creates_the_missing_topics_then_reports_them_existing(self) -> None:
        """Idempotent: created once, existing the second time; requests and state compacted,
        both with intake's partition count."""
        broker = FakeBroker()
        clients = FakeClients(broker)
        first = await ensure_topics(self.CONFIG, clients=clients)
        assert sorted(first.created) == ["a", "au", "c", "i", "m", "q", "r", "s"]
        for compacted in ("r", "s", "c", "m"):
            assert broker.configs[compacted]["cleanup.policy"] == "compact"
        assert len(broker.logs["c"]) == len(broker.logs["m"]) == 1
        assert len(broker.logs["s"]) == len(broker.logs["r"]) == len(broker.logs["i"]) == 4
        second = await ensure_topics(self.CONFIG, clients=clients)
        assert (second.created, sorted(second.existing), second.warnings) == (
            [],
            ["a", "au", "c", "i", "m", "q", "r", "s"],
            [],
        )

    async def test_state_and_requests_follow_an_existing_intake(self) -> None:
        """Added next to an intake topic of another count than configured (an upgrade), the
        state changelog and requests get intake's count, so the worker can start."""
        broker = FakeBroker()
        broker.create_topic("i", 6)
        report = await ensure_topics(self.CONFIG, clients=FakeClients(broker))
        assert sorted(report.created) == ["a", "au", "c", "m", "q", "r", "s"]
        assert (len(broker.logs["s"]), len(broker.logs["r"])) == (6, 6)
        assert report.warnings == ["i has 6 partitions, configuration says 4 (left as it is)"]

    async def test_delete_topics_removes_every_configured_topic(self) -> None:
        """delete_topics drops exactly the topics the configuration names."""
        broker = FakeBroker()
        broker.create_topic("other", 1)
        clients = FakeClients(broker)
        await ensure_topics(self.CONFIG, clients=clients)
        await delete_topics(self.CONFIG, clients=clients)
        assert sorted(broker.logs) == ["other"]

    async def test_a_different_partition_count_is_a_warning(self) -> None:
        """An existing topic with another partition count is left as it is, with a warning."""
        broker = FakeBroker()
        broker.create_topic("i", 2)
        report = await ensure_topics(self.CONFIG, clients=FakeClients(broker))
        assert report.warnings == ["i has 2 partitions, configuration says 4 (left as it is)"]

    async def test_unreachable_cluster_is_a_broker_error(self) -> None:
        """A failing admin client becomes BrokerError naming the bootstrap servers."""
        from aiokafka.errors import KafkaConnectionError
        from toolgate._errors import BrokerError

        broker = FakeBroker()
        broker.fail("admin", KafkaConnectionError("no broker"))
        with pytest.raises(BrokerError, match=r"127\.0\.0\.1:19092"):
            await ensure_topics(self.CONFIG, clients=FakeClients(broker))


class TestMurmur2:
    @given(st.binary(max_size=300))
    def test_equals_aiokafkas(self, data: bytes) -> None:
        """The word-at-a-time murmur2 is aiokafka's (the Java client's) on any bytes."""
        assert murmur2(data) == aiokafka_murmur2(data)

    def test_known_values(self) -> None:
        """Kafka's own test vectors (clients' UtilsTest, as unsigned 32 bits)."""
        assert murmur2(b"21") & 0xFFFFFFFF == (-973932308) & 0xFFFFFFFF
        assert murmur2(b"foobar") & 0xFFFFFFFF == (-790332482) & 0xFFFFFFFF
        assert murmur2(b"a-little-bit-long-string") & 0xFFFFFFFF == (-985981536) & 0xFFFFFFFF

    def test_partition_for_a_keyless_record_is_one_of_the_partitions(self) -> None:
        assert {partition_for(None, 3) for _ in range(200)} == {0, 1, 2}


class TestSendRecords:
    async def _producer(self, broker: FakeBroker, batch_bytes: int) -> Any:
        producer = FakeClients(broker).producer(transactional_id="t", max_batch_size=batch_bytes)
        await producer.start()
        return producer

    async def test_one_batch_per_partition_in_order(self) -> None:
        broker = FakeBroker()
        broker.create_topic("out", 2)
        producer = await self._producer(broker, 10_000)
        records = [("out", i % 2, f"k{i}".encode(), f"v{i}".encode(), [("h", b"x")]) for i in range(10)]
        async with producer.transaction():
            await send_records(producer, records)
        assert broker.calls["send"] == 2
        for p in (0, 1):
            got = [(r.key, r.value, r.headers) for r in broker.committed_values("out") if r.partition == p]
            assert got == [(k, v, list(h)) for _, q, k, v, h in records if q == p]

    async def test_a_full_batch_is_sent_and_a_new_one_started(self) -> None:
        broker = FakeBroker()
        broker.create_topic("out", 1)
        producer = await self._producer(broker, 25)
        records: list[Outgoing] = [("out", 0, b"k", b"x" * 10, []) for _ in range(5)]
        records.append(("out", 0, b"k", b"y" * 100, []))
        async with producer.transaction():
            await send_records(producer, records)
        assert broker.calls["send"] == 4  # 2 + 2 + 1 records of 11 bytes, then the large one alone
        assert [r.value for r in broker.committed_values("out")] == [v for *_, v, _ in records]

    async def test_a_failed_batch_raises(self) -> None:
        broker = FakeBroker()
        broker.create_topic("out", 1)
        producer = await self._producer(broker, 1000)
        broker.fail("send", times=1)
        with pytest.raises(KafkaError):
            async with producer.transaction():
                await send_records(producer, [("out", 0, b"k", b"v", [])])
        assert broker.committed_values("out") == []


class TestTransactionRetry:
    def test_aiokafka_still_has_the_setting(self) -> None:
        """The installed aiokafka has the retry wait the seam shortens (an upgrade that drops
        it fails here rather than bringing the 20 ms wait back unnoticed)."""
        assert isinstance(aiokafka_sender.BACKOFF_OVERRIDE, float)

    async def test_a_transactional_producer_shortens_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Only building a transactional producer sets it, to TXN_RETRY_SECONDS."""
        monkeypatch.setattr(aiokafka_sender, "BACKOFF_OVERRIDE", 0.02)
        clients = AiokafkaClients(Config())
        plain = clients.producer(acks="all")
        assert aiokafka_sender.BACKOFF_OVERRIDE == 0.02
        transactional = clients.producer(transactional_id="toolgate.test.0", enable_idempotence=True)
        assert aiokafka_sender.BACKOFF_OVERRIDE == TXN_RETRY_SECONDS < 0.02
        for producer in (plain, transactional):  # never started: stop closes their clients
            await producer.stop()
