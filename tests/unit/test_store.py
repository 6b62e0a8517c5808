"""The request table and the accepted ledger, fed record by record."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from aiokafka import TopicPartition
from toolgate.service._store import AcceptedLedger, RequestTable, TopicReader

from tests.fakes.kafka import FakeBroker, FakeClients, FakeConsumer
from tests.unit.builders import NOW


def request_bytes(rid: str, minutes: int = 5, **extra: object) -> bytes:
    return json.dumps(
        {
            "request_id": rid,
            "tool": "review_status",
            "issued_at": (NOW - timedelta(minutes=1)).isoformat(),
            "expires_at": (NOW + timedelta(minutes=minutes)).isoformat(),
            **extra,
        }
    ).encode()


class TestRequestTable:
    def test_record_then_tombstone(self) -> None:
        """A request record is held until its tombstone."""
        table = RequestTable()
        table.apply(b"req.a", request_bytes("req.a"))
        assert table.get("req.a") is not None
        table.apply(b"req.a", None)
        assert table.get("req.a") is None

    def test_strict_decoding(self) -> None:
        """Unknown fields, naive timestamps and key mismatches are skipped and counted."""
        table = RequestTable()
        table.apply(b"req.a", request_bytes("req.a", admin=True))
        table.apply(
            b"req.b",
            json.dumps(
                {
                    "request_id": "req.b",
                    "tool": "t",
                    "issued_at": "2026-05-01T11:00:00",
                    "expires_at": "2026-05-01T13:00:00",
                }
            ).encode(),
        )
        table.apply(b"req.c", request_bytes("req.other"))
        table.apply(b"req.d", b"not json")
        assert len(table) == 0
        assert table.invalid_records == 4

    def test_expired_are_evicted(self) -> None:
        """Eviction drops the requests whose expires_at has passed on the injected clock."""
        table = RequestTable()
        table.apply(b"req.short", request_bytes("req.short", minutes=1))
        table.apply(b"req.long", request_bytes("req.long", minutes=60))
        assert table.evict_expired(NOW + timedelta(minutes=2)) == 1
        assert table.get("req.long") is not None
        assert table.get("req.short") is None

    def test_cap_drops_oldest_and_reports_once(self) -> None:
        """A full table drops its oldest request and calls on_full once per time it fills."""
        calls: list[int] = []
        table = RequestTable(max_requests=2, on_full=calls.append)
        for rid in ("req.1", "req.2", "req.3", "req.4"):
            table.apply(rid.encode(), request_bytes(rid))
        assert len(table) == 2
        assert table.get("req.1") is None
        assert table.get("req.4") is not None
        assert calls == [2]
        assert table.evicted_for_space == 2


class TestAcceptedLedger:
    def event(self, outcome: str, attempt: int | None = 1) -> bytes:
        return json.dumps(
            {
                "request_id": "req.a",
                "outcome": outcome,
                "attempt": attempt,
                "decided_at": NOW.isoformat(),
                "tool": "x",
            }
        ).encode()

    def test_accepted_events_are_remembered(self) -> None:
        """Success and failure audit events mark the attempt answered; rejections do not."""
        ledger = AcceptedLedger()
        ledger.apply(b"req.a", self.event("rejected"))
        assert not ledger("req.a", 1)
        ledger.apply(b"req.a", self.event("success"))
        assert ledger("req.a", 1)
        assert not ledger("req.a", 2)

    def test_old_entries_are_forgotten(self) -> None:
        """Entries older than the cutoff are dropped."""
        ledger = AcceptedLedger()
        ledger.record("req.a", 1, NOW - timedelta(days=2))
        ledger.record("req.b", 1, NOW)
        assert ledger.evict_older_than(NOW - timedelta(days=1)) == 1
        assert not ledger("req.a", 1)
        assert ledger("req.b", 1)

    def test_garbage_is_ignored(self) -> None:
        """An undecodable audit event changes nothing."""
        ledger = AcceptedLedger()
        ledger.apply(None, b"{")
        assert len(ledger) == 0


class _WriteDuringLookup(FakeConsumer):
    """A consumer whose time lookup sees the log as it was, while a record lands right after."""

    def __init__(self, broker: FakeBroker, late: Callable[[], object], **options: Any) -> None:
        super().__init__(broker, **options)
        self._late = late

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
        found = await super().offsets_for_times(timestamps)
        self._late()
        return found


class TestTopicReaderFromATime:
    async def test_a_record_written_during_the_lookup_is_read(self) -> None:
        """A partition with nothing at or after start_ms starts at its end as it was before the
        lookup: a record written meanwhile is read, not skipped by a later seek to the end."""
        broker = FakeBroker()
        broker.create_topic("audit", 2)
        broker.append("audit", b"old", partition=0)
        start_ms = broker.now_ms + 1
        late = lambda: broker.append("audit", b"new", partition=0)  # noqa: E731
        clients = FakeClients(broker)
        clients.consumer = lambda *t, **o: _WriteDuringLookup(broker, late, **o)  # type: ignore[method-assign]
        seen: list[bytes | None] = []
        reader = TopicReader("audit", lambda _k, v: seen.append(v), clients, start_ms=start_ms)
        await reader.start()
        try:
            await reader.catch_up(5)
        finally:
            await reader.stop()
        assert seen == [b"new"]
