"""toolgate.client against the real broker: a flood of issues, and a broker that is not there."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition
from toolgate._config import Config
from toolgate.client import Client

from tests import ROOT


async def records_on(config: Config, topic: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=config.bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        if not tps:
            tps = [TopicPartition(topic, p) for p in range(config.partitions.requests)]
        return sum((await consumer.end_offsets(tps)).values())
    finally:
        await consumer.stop()


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class TestTenThousandAtOnce:
    """10,000 issue() calls started together all succeed: the client queues its own sends and
    hands the producer a bounded number at a time, so none is blamed on the broker."""

    async def test_every_record_is_written_and_every_wait_open(self, config: Config) -> None:
        """No BrokerError, 10,000 waits open, 10,000 records on the requests topic."""
        async with Client(config) as client:
            results = await asyncio.gather(
                *(client.issue("review_status", ttl=60) for _ in range(10_000)), return_exceptions=True
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            assert errors == []
            assert client.pending == 10_000
        assert await records_on(config, config.topics.requests) == 10_000


class TestADecisionInOneRequest:
    """A decision's records, on three topics, leave in one produce request (linger 0); ten
    decisions started together share requests rather than queueing one behind another."""

    @staticmethod
    def produce_requests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
        """The partitions of each produce request aiokafka sends from now on (a spy on it)."""
        from aiokafka.producer import sender

        sent: list[int] = []
        real = sender.Sender._send_produce_req

        async def counted(self: Any, node_id: int, batches: dict[Any, Any]) -> Any:
            sent.append(len(batches))
            return await real(self, node_id, batches)

        monkeypatch.setattr(sender.Sender, "_send_produce_req", counted)
        return sent

    @staticmethod
    def decision(config: Config, key: bytes) -> list[tuple[str, bytes | None, bytes | None, list[Any]]]:
        t = config.topics
        return [(topic, key, b"{}", []) for topic in (t.requests, t.agent, t.audit)]

    async def test_one_request_per_decision(self, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each of five decisions made one after the other is one produce request of three partitions."""
        async with Client(config, answers=False) as client:
            await client.publish_records(self.decision(config, b"warm-up"))
            sent = self.produce_requests(monkeypatch)
            for i in range(5):
                await client.publish_records(self.decision(config, f"d{i}".encode()))
        assert sent == [3] * 5
        assert await records_on(config, config.topics.audit) == 6

    async def test_ten_at_once_share_requests(self, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
        """Ten decisions started together leave in at most two produce requests: the first,
        and every one appended while it was in flight."""
        async with Client(config, answers=False) as client:
            await client.publish_records(self.decision(config, b"warm-up"))
            sent = self.produce_requests(monkeypatch)
            await asyncio.gather(
                *(client.publish_records(self.decision(config, f"c{i}".encode())) for i in range(10))
            )
        assert 1 <= len(sent) <= 2
        assert await records_on(config, config.topics.agent) == 11


SCRIPT = """
import asyncio, gc, sys
from toolgate._config import Config
from toolgate._errors import BrokerError
from toolgate.client import Client

async def main() -> None:
    try:
        async with Client(Config(bootstrap=sys.argv[1]), send_timeout_s=5):
            print("started")
    except BrokerError as exc:
        print(exc)
    gc.collect()

asyncio.run(main())
gc.collect()
"""


class TestBrokerDown:
    """With nothing listening at the bootstrap, starting fails in one line and leaves nothing open."""

    def test_one_line_naming_the_bootstrap_and_nothing_unclosed(self) -> None:
        """The BrokerError is one line naming the address and the setting; stderr stays empty
        (no Unclosed AIOKafkaProducer/Consumer, no client log lines)."""
        bootstrap = f"127.0.0.1:{closed_port()}"
        done = subprocess.run(
            [sys.executable, "-X", "dev", "-c", textwrap.dedent(SCRIPT), bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        (line,) = done.stdout.splitlines()
        assert line.startswith(f"cannot reach the Kafka broker at {bootstrap} (")
        assert "Connection refused" in line
        assert "TOOLGATE_BOOTSTRAP" in line
