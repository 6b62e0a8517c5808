"""The request table and the accepted ledger, fed record by record."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiokafka import TopicPartition
from toolgate.service import _store
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
    """Requests are decoded strictly, held until their tombstone or expiry, and bounded."""

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
    """Membership and expiry are read from the stored form, no record rebuilt."""

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


COUNT = 4  # intake partitions in the home-partition tests


def homed(rid: str) -> tuple[bytes, int]:
    """The key of ``rid`` and its home partition among COUNT (murmur2)."""
    key = rid.encode()
    return key, partition_of(key, COUNT)


class TestRequestHomes:
    """Each request is held with its home partition, read when applied: a batch's lookup and a
    revocation use it instead of hashing every key, with the same outcome as hashing."""

    @pytest.fixture
    def hashes(self, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
        """Every key the table hashes (murmur2), in order."""
        seen: list[bytes] = []

        def counting(key: bytes, count: int) -> int:
            seen.append(key)
            return partition_of(key, count)

        monkeypatch.setattr(_store, "partition_of", counting)
        return seen

    @pytest.mark.parametrize("decoded", [0, 100])
    def test_requests_at_home_are_found_without_a_hash(self, decoded: int, hashes: list[bytes]) -> None:
        """A batch of a request's home partition gets the request, and no key is hashed."""
        table = RequestTable(decoded=decoded)
        rids = [f"req.{n}" for n in range(20)]
        for rid in rids:
            key, home = homed(rid)
            table.apply(key, request_bytes(rid), home)
        hashes.clear()
        for partition in range(COUNT):
            mine = [rid for rid in rids if homed(rid)[1] == partition]
            found, misrouted = table.in_partition(partition, mine, [r.encode() for r in mine], COUNT)
            assert sorted(found) == sorted(mine)
            assert all(found[rid] == table.get(rid) for rid in mine)
            assert misrouted == set()
        assert hashes == []

    @pytest.mark.parametrize("decoded", [0, 100])
    def test_a_result_outside_its_home_is_misrouted(self, decoded: int, hashes: list[bytes]) -> None:
        """A result in another partition than its request's home gets no request and is named
        misrouted, held or not; an unknown request in its own partition is not misrouted."""
        table = RequestTable(decoded=decoded)
        key, home = homed("req.held")
        table.apply(key, request_bytes("req.held"), home)
        wrong = (home + 1) % COUNT
        hashes.clear()
        found, misrouted = table.in_partition(wrong, ["req.held"], [key], COUNT)
        assert found == {}
        assert misrouted == {"req.held"}
        assert hashes == []  # the held request's home said so
        unknown, unknown_home = homed("req.unknown")
        found, misrouted = table.in_partition(unknown_home, ["req.unknown"], [unknown], COUNT)
        assert (found, misrouted) == ({}, set())
        found, misrouted = table.in_partition((unknown_home + 1) % COUNT, ["req.unknown"], [unknown], COUNT)
        assert (found, misrouted) == ({}, {"req.unknown"})

    def test_a_request_read_outside_a_partition_is_hashed(self) -> None:
        """A request applied with no home (-1) is placed by its key's murmur2, as before."""
        table = RequestTable()
        key, home = homed("req.a")
        table.apply(key, request_bytes("req.a"))
        assert table.held("req.a") is not None
        found, misrouted = table.in_partition(home, ["req.a"], [key], COUNT)
        assert list(found) == ["req.a"]
        assert misrouted == set()
        found, misrouted = table.in_partition((home + 1) % COUNT, ["req.a"], [key], COUNT)
        assert (found, misrouted) == ({}, {"req.a"})

    def test_an_unknown_partition_count_calls_nothing_misrouted(self) -> None:
        """Before the partition count is known (0), every held request is found."""
        table = RequestTable()
        key, home = homed("req.a")
        table.apply(key, request_bytes("req.a"), home)
        found, misrouted = table.in_partition((home + 1) % COUNT, ["req.a", "req.b"], [key, b"req.b"], 0)
        assert list(found) == ["req.a"]
        assert misrouted == set()

    @pytest.mark.parametrize("decoded", [0, 7, 100])
    def test_revocation_drops_the_requests_of_those_partitions(
        self, decoded: int, hashes: list[bytes]
    ) -> None:
        """drop_partitions forgets exactly the requests homed in the revoked partitions, hashing
        only those applied with no home."""
        table = RequestTable(decoded=decoded)
        rids = [f"req.{n}" for n in range(40)]
        for n, rid in enumerate(rids):
            key, home = homed(rid)
            table.apply(key, request_bytes(rid), home if n % 10 else -1)
        hashes.clear()
        revoked = {0, 2}
        assert table.drop_partitions(revoked, COUNT) == sum(homed(rid)[1] in revoked for rid in rids)
        assert {rid for rid in rids if rid in table} == {rid for rid in rids if homed(rid)[1] not in revoked}
        assert sorted(hashes) == sorted(rid.encode() for n, rid in enumerate(rids) if not n % 10)

    @pytest.mark.parametrize("decoded", [0, 2, 100])
    def test_the_cap_and_expiry_evict_decoded_and_packed_alike(self, decoded: int) -> None:
        """The cap drops the oldest and expiry the expired, whether they are held decoded or packed."""
        table = RequestTable(max_requests=5, decoded=decoded)
        for n in range(8):
            key, home = homed(f"req.{n}")
            table.apply(key, request_bytes(f"req.{n}", minutes=1 + n % 2 * 60), home)
        assert [f"req.{n}" in table for n in range(8)] == [False] * 3 + [True] * 5
        assert table.evicted_for_space == 3
        assert table.evict_expired(NOW + timedelta(minutes=2)) == 2  # req.4 and req.6
        assert sorted(rid for rid in (f"req.{n}" for n in range(8)) if rid in table) == [
            "req.3",
            "req.5",
            "req.7",
        ]
        for rid in ("req.3", "req.5", "req.7"):
            held = table.held(rid)
            assert held is not None
            assert held[1] == homed(rid)[1]
