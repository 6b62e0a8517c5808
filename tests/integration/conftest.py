"""Fixtures for tests against a real Kafka broker.

The broker is the local one (``ops/kafka/kafka.sh ensure``, 127.0.0.1:19092) unless
``TOOLGATE_BOOTSTRAP`` names another cluster. Without a reachable broker the tests
are skipped, or fail when ``TOOLGATE_REQUIRE_KAFKA=1`` (CI sets it so that a broker
that did not come up can never turn into a green run).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, for_code
from toolgate._config import Config

from tests.integration.chaos_kit import PrivateBroker, private_broker
from tests.integration.live import LiveWorker
from tests.integration.worker_kit import drop_topics, private_config

LOCAL_BOOTSTRAP = "127.0.0.1:19092"
PROBE_TIMEOUT_S = 10.0

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration needs the broker: mark it ``kafka``."""
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.kafka)


async def _probe(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await admin.start()
        await admin.list_topics()
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def bootstrap() -> str:
    """The bootstrap servers of a broker that has just answered a request."""
    servers = os.environ.get("TOOLGATE_BOOTSTRAP") or LOCAL_BOOTSTRAP
    try:
        asyncio.run(asyncio.wait_for(_probe(servers), PROBE_TIMEOUT_S))
    except TimeoutError:
        problem = f"no answer within {PROBE_TIMEOUT_S:g}s"
    except (KafkaError, OSError) as exc:
        problem = str(exc) or type(exc).__name__
    else:
        return servers
    reason = f"no Kafka broker answers on {servers} ({problem}); start it with ops/kafka/kafka.sh ensure"
    if os.environ.get("TOOLGATE_REQUIRE_KAFKA") == "1":
        pytest.fail(f"TOOLGATE_REQUIRE_KAFKA=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
async def admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


TopicFactory = Callable[..., Awaitable[str]]


@pytest.fixture
async def topic_factory(admin: AIOKafkaAdminClient) -> AsyncIterator[TopicFactory]:
    """``await topic_factory("intake", partitions=2)`` creates a uniquely named topic
    (``tg-test-intake-<uuid>``); every topic made this way is deleted afterwards."""
    created: list[str] = []

    async def make(label: str = "topic", *, partitions: int = 1) -> str:
        name = f"tg-test-{label}-{uuid.uuid4().hex[:12]}"
        resp = await admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            timeout_ms=10000,
        )
        for topic, code, *_ in resp.topic_errors:
            if code:
                raise for_code(code)(f"creating topic {topic}")
        created.append(name)
        return name

    yield make

    if created:
        await admin.delete_topics(created, timeout_ms=10000)


@pytest.fixture(scope="module")
def live(bootstrap: str) -> Iterator[LiveWorker]:
    """An in-process worker on private topics (its own thread) that has decided 200 sample
    results and keeps running for the module's tests; stopped and its topics dropped after."""
    worker = LiveWorker(bootstrap)
    try:
        worker.start()
        worker.feed(200)
        worker.wait_decided()
        yield worker
    finally:
        worker.stop()


@pytest.fixture
async def config(bootstrap: str) -> AsyncIterator[Config]:
    """A configuration with private, freshly created topics (3 partitions), dropped afterwards."""
    cfg = await private_config(bootstrap)
    try:
        yield cfg
    finally:
        await drop_topics(cfg)


@pytest.fixture
async def own_broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PrivateBroker]:
    """A broker instance of the test's own, for a test that stops or kills it (chaos_kit: a
    second ``kafka.sh`` instance from port 29092 on, data under the test's tmp directory, never
    the shared broker), stopped at the end."""
    async with private_broker(tmp_path / "kafka", request.node.nodeid) as broker:
        yield broker
