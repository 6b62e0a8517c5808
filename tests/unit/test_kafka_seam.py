"""One Kafka seam: clients are built in toolgate/service/_kafka.py only, and nothing uses
private attributes of aiokafka or prometheus-client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from toolgate._config import Config, Partitions, Topics
from toolgate.service._kafka import ensure_topics

from tests.fakes.kafka import FakeBroker, FakeClients

ROOT = Path(__file__).resolve().parents[2]
SEAM = ROOT / "worker" / "toolgate" / "service" / "_kafka.py"
SOURCES = sorted(p for d in ("worker", "ops") for p in (ROOT / d).rglob("*.py") if ".venv" not in p.parts)

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
        topics=Topics(requests="r", intake="i", agent="a", quarantine="q", audit="au", state="s"),
        partitions=Partitions(requests=4, intake=4, agent=4, quarantine=1, audit=4),
    )

    async def test_creates_the_missing_topics_then_reports_them_existing(self) -> None:
        """Idempotent: created once, existing the second time; requests and state compacted,
        both with intake's partition count."""
        broker = FakeBroker()
        clients = FakeClients(broker)
        first = await ensure_topics(self.CONFIG, clients=clients)
        assert sorted(first.created) == ["a", "au", "i", "q", "r", "s"]
        assert broker.configs["r"]["cleanup.policy"] == "compact"
        assert broker.configs["s"]["cleanup.policy"] == "compact"
        assert len(broker.logs["s"]) == len(broker.logs["r"]) == len(broker.logs["i"]) == 4
        second = await ensure_topics(self.CONFIG, clients=clients)
        assert (second.created, sorted(second.existing), second.warnings) == (
            [],
            ["a", "au", "i", "q", "r", "s"],
            [],
        )

    async def test_state_and_requests_follow_an_existing_intake(self) -> None:
        """Added next to an intake topic of another count than configured (an upgrade), the
        state changelog and requests get intake's count, so the worker can start."""
        broker = FakeBroker()
        broker.create_topic("i", 6)
        report = await ensure_topics(self.CONFIG, clients=FakeClients(broker))
        assert sorted(report.created) == ["a", "au", "q", "r", "s"]
        assert (len(broker.logs["s"]), len(broker.logs["r"])) == (6, 6)
        assert report.warnings == ["i has 6 partitions, configuration says 4 (left as it is)"]

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
