"""The in-memory Kafka world the worker tests run on (tests/fakes/kafka.py), and a GET of the
worker's metrics and health endpoint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import msgspec
from toolgate._config import Config
from toolgate.gate._gate import Gate
from toolgate.service._service import Worker, WorkerOptions

from tests.fakes.kafka import FakeBroker, FakeClients, FakeRecord
from tests.unit.builders import NOW, message, review_request, review_value

CONFIG = Config()
T = CONFIG.topics
PARTITIONS = 3


def rid(i: int) -> str:
    return f"req.loop{i:04d}"


class World:
    """A fake broker with toolgate's topics, and workers built on it."""

    def __init__(self, partitions: int = PARTITIONS) -> None:
        self.broker = FakeBroker(now_ms=int(NOW.timestamp() * 1000))
        for name in (T.requests, T.intake, T.agent, T.audit, T.state):
            self.broker.create_topic(name, partitions)
        for name in (T.quarantine, T.contracts, T.members):
            self.broker.create_topic(name, 1)
        self.clients = FakeClients(self.broker)
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)

    def worker(self, clock: Callable[[], datetime] = lambda: NOW, **options: Any) -> Worker:
        opts: dict[str, Any] = {"handle_signals": False, "metrics_port": 0, "linger_ms": 5}
        opts.update(options)
        return Worker(
            CONFIG,
            self.gate,
            clock=clock,
            options=WorkerOptions(**opts),
            clients=self.clients,
            sleep=self.sleep,
        )

    gate: Gate

    def request(self, i: int, **changes: Any) -> None:
        record = review_request(request_id=rid(i), **changes)
        self.broker.append(T.requests, msgspec.json.encode(record), key=rid(i).encode())

    def result(self, i: int, *, attempt: str | None = None, **data: Any) -> FakeRecord:
        """Request ``i``'s result; ``attempt``: its ``tg-attempt`` header (None: none)."""
        value = dict(review_value(**data), request_id=rid(i))
        msg = message(value, key=rid(i).encode(), tg_request_id=rid(i), tg_attempt=attempt)
        return self.broker.append(T.intake, msg.value, key=msg.key, headers=msg.headers)

    def state_entry(self, i: int, attempts: list[int], expires: datetime | None = None) -> None:
        """A state changelog record, as a previous owner wrote it."""
        value = {
            "request_id": rid(i),
            "accepted_attempts": attempts,
            "expires_at": (expires or NOW + timedelta(minutes=5)).isoformat(),
        }
        self.broker.append(T.state, json.dumps(value).encode(), key=rid(i).encode())

    def state(self) -> list[tuple[int, str, dict[str, Any] | None]]:
        """The committed state records: (partition, key, value or None for a tombstone)."""
        return [
            (r.partition, (r.key or b"").decode(), None if r.value is None else json.loads(r.value))
            for r in self.broker.committed_values(T.state)
        ]

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(r.value or b"") for r in self.broker.committed_values(T.audit)]

    def agent(self) -> list[dict[str, Any]]:
        return [json.loads(r.value or b"") for r in self.broker.committed_values(T.agent)]

    def codes(self) -> list[str | None]:
        return sorted((e.get("code") or "-") for e in self.audit())


async def until(condition: Callable[[], bool], bound_s: float = 10.0) -> None:
    """Let the event loop run until ``condition`` holds; fail after ``bound_s``."""
    try:
        async with asyncio.timeout(bound_s):
            while not condition():  # noqa: ASYNC110 - a condition on worker state, no event to wait on
                await asyncio.sleep(0)
    except TimeoutError:
        raise AssertionError("condition not reached") from None


async def get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body
