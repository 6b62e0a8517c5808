"""The request table and the accepted ledger, fed record by record."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from aiokafka import TopicPartition
from toolgate.service._kafka import partition_of
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
    def entry(self, rid: str, attempts: list[int], expires: datetime) -> bytes:
        return json.dumps(
            {"request_id": rid, "accepted_attempts": attempts, "expires_at": expires.isoformat()}
        ).encode()

    def test_changelog_records_are_held_until_their_tombstone(self) -> None:
        """The latest record per request is its accepted attempts; a tombstone ends it."""
        ledger = AcceptedLedger()
        assert ledger.apply(b"req.a", self.entry("req.a", [1], NOW + timedelta(minutes=5)), NOW)
        assert ledger("req.a", 1)
        assert not ledger("req.a", 2)
        ledger.apply(b"req.a", self.entry("req.a", [1, 2], NOW + timedelta(minutes=5)), NOW)
        assert ledger("req.a", 2)
        ledger.apply(b"req.a", None)
        assert not ledger("req.a", 1)
        assert len(ledger) == 0

    def test_an_expired_entry_is_not_held(self) -> None:
        """At restore, an entry whose request has expired is not held (False: its tombstone is due)."""
        ledger = AcceptedLedger()
        assert not ledger.apply(b"req.a", self.entry("req.a", [1], NOW - timedelta(seconds=1)), NOW)
        assert not ledger("req.a", 1)
        assert len(ledger) == 0

    def test_entries_leave_with_their_request(self) -> None:
        """expired() forgets and names the entries whose request expired; end() a tombstoned one."""
        ledger = AcceptedLedger()
        ledger.record("req.a", 1, NOW + timedelta(minutes=1))
        ledger.record("req.b", 1, NOW + timedelta(minutes=10))
        ledger.record("req.c", 1, NOW + timedelta(minutes=10))
        assert ledger.expired(NOW + timedelta(minutes=2)) == ["req.a"]
        assert ledger.end("req.c")
        assert not ledger.end("req.c")
        assert not ledger("req.a", 1)
        assert ledger("req.b", 1)
        assert not ledger("req.c", 1)

    def test_updates_carry_every_accepted_attempt_and_the_expiry(self) -> None:
        """A batch's changelog record holds the attempts accepted before and in the batch;
        the ledger takes them in only on commit."""
        ledger = AcceptedLedger()
        expires = NOW + timedelta(minutes=5)
        ledger.record("req.a", 1, expires)
        view = ledger.batch()
        view.add("req.a", 2)
        view.add("req.b", 1)
        updates = ledger.updates(view, lambda rid: expires)
        assert [(u.request_id, sorted(u.attempts)) for u in updates] == [("req.a", [1, 2]), ("req.b", [1])]
        assert not ledger("req.b", 1)  # not committed yet
        ledger.commit(updates)
        assert ledger("req.a", 2)
        assert ledger("req.b", 1)
        again = AcceptedLedger()
        for update in updates:
            again.apply(update.key, update.value(), NOW)
        assert [again("req.a", 1), again("req.a", 2), again("req.b", 1)] == [True, True, True]
        assert again.expired(expires) == ["req.a", "req.b"]

    def test_drop_partitions(self) -> None:
        """A revoked partition's entries are forgotten, the others kept."""
        ledger = AcceptedLedger()
        rids = [f"req.{i}" for i in range(20)]
        for rid in rids:
            ledger.record(rid, 1, NOW + timedelta(minutes=5))
        dropped = ledger.drop_partitions({0}, 3)
        kept = [rid for rid in rids if ledger(rid, 1)]
        assert dropped == 20 - len(kept)
        assert all(partition_of(rid.encode(), 3) != 0 for rid in kept)
        assert 0 < dropped < 20

    def test_held_entries_leave_the_collector_alone(self) -> None:
        """Entries committed, recorded and restored hold no object the garbage collector keeps
        tracking, so many live requests do not lengthen its full collections."""
        ledger = AcceptedLedger()
        expires = NOW + timedelta(minutes=5)
        view = ledger.batch()
        view.add("req.a", 1)
        view.add("req.a", 2)
        ledger.commit(ledger.updates(view, lambda rid: expires))
        ledger.record("req.b", 1, expires)
        ledger.apply(b"req.c", self.entry("req.c", [2, 1, 2], expires), NOW)
        # A collection untracks a tuple whose items are all untracked: the inner tuple at the
        # first, the entry holding it at the next.
        gc.collect()
        gc.collect()
        entries = list(ledger._live.values())
        assert len(entries) == 3
        assert [gc.is_tracked(entry) for entry in entries] == [False, False, False]
        assert [ledger("req.a", 2), ledger("req.c", 1), ledger("req.c", 3)] == [True, True, False]

    def test_garbage_is_counted_and_ignored(self) -> None:
        """An undecodable changelog record changes nothing and is counted."""
        ledger = AcceptedLedger()
        ledger.apply(b"x", b"{", NOW)
        assert len(ledger) == 0
        assert ledger.invalid_records == 1


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


class TestRequestTableReads:
    def test_membership_and_expiry_without_rebuilding(self) -> None:
        """``in`` and expires_at() answer from the stored form, equal to the rebuilt record's."""
        table = RequestTable()
        table.apply(b"req.a", request_bytes("req.a", minutes=7))
        assert "req.a" in table
        assert "req.b" not in table
        record = table.get("req.a")
        assert record is not None
        assert table.expires_at("req.a") == record.expires_at == NOW + timedelta(minutes=7)
        assert table.expires_at("req.b") is None
        table.apply(b"req.a", None)
        assert "req.a" not in table
        assert table.expires_at("req.a") is None
