"""The request table's packed form: every request rebuilds to the record it was applied as,
with its home partition, expiry through the index evicts exactly what a full scan would,
memory stays small, and only the newest requests are held decoded."""

from __future__ import annotations

import json
import tracemalloc
from datetime import UTC, datetime, timedelta, timezone

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolgate.gate._records import RequestRecord, decode_request
from toolgate.service._store import RequestTable, pack_request, unpack_held, unpack_request

from tests.properties import DERANDOMIZED
from tests.unit.builders import NOW

_ci = settings(DERANDOMIZED, max_examples=300, suppress_health_check=[HealthCheck.too_slow])

ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=128)
zones = st.one_of(
    st.just(UTC),
    st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m))),
)
moments = st.builds(
    lambda moment, zone: moment.replace(tzinfo=zone),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    zones,
)
bind_values = st.one_of(
    st.text(max_size=40),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.lists(st.text(max_size=12), max_size=4),
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A valid request record as the platform writes it (JSON), its fields varied."""
    issued = draw(moments)
    lifetime = draw(st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=400)))
    zone = draw(zones)
    try:
        expires = (issued + lifetime).astimezone(zone)
    except OverflowError:
        expires = issued + timedelta(microseconds=1)
    max_attempts = draw(st.one_of(st.integers(1, 10), st.integers(1, 2**63 - 1)))
    attempt = draw(st.integers(1, max_attempts))
    body: dict[str, object] = {
        "request_id": draw(ids),
        "tool": draw(st.one_of(st.sampled_from(["review_status", "ticket_lookup"]), st.text(max_size=300))),
        "issued_at": issued.isoformat(),
        "expires_at": expires.isoformat(),
        "attempt": attempt,
        "max_attempts": max_attempts,
    }
    bind = draw(st.none() | st.dictionaries(st.text(max_size=20), bind_values, max_size=5))
    if bind is not None:
        body["bind"] = bind
    return json.dumps(body).encode()


def same(got: RequestRecord | None, want: RequestRecord) -> None:
    """Equal field for field, including each timestamp's UTC offset and every value's type."""
    assert got is not None
    assert type(got) is RequestRecord
    assert got == want
    assert msgspec.json.encode(got) == msgspec.json.encode(want)
    assert got.issued_at.utcoffset() == want.issued_at.utcoffset()
    assert got.expires_at.utcoffset() == want.expires_at.utcoffset()
    assert got.issued_at.tzinfo is not None
    assert [type(v) for v in got.bind.values()] == [type(v) for v in want.bind.values()]


def _applied(raw: bytes) -> tuple[RequestRecord, RequestTable]:
    """The record ``raw`` decodes to, and a table holding it packed under its own key."""
    want = decode_request(raw)
    table = RequestTable(decoded=0)
    table.apply(want.request_id.encode(), raw)
    return want, table


class TestPackedForm:
    """A packed request rebuilds to the record it was applied as, with its home partition."""

    @_ci
    @given(requests())
    def test_get_returns_the_record_applied(self, raw: bytes) -> None:
        """Whatever valid request is applied, get() returns the record decode_request gives."""
        want, table = _applied(raw)
        same(table.get(want.request_id), want)
        same(unpack_request(want.request_id, pack_request(want)), want)

    @_ci
    @given(requests())
    def test_expiry_is_read_from_the_packed_form(self, raw: bytes) -> None:
        """A request is evicted at its expires_at, not a microsecond earlier, whatever its offset."""
        want, table = _applied(raw)
        assert table.evict_expired(want.expires_at - timedelta(microseconds=1)) == 0
        assert table.get(want.request_id) is not None
        assert table.evict_expired(want.expires_at) == 1
        assert table.get(want.request_id) is None

    @_ci
    @given(requests(), st.integers(-1, 2**31 - 1))
    def test_the_home_partition_is_packed_with_the_request(self, raw: bytes, home: int) -> None:
        """Whatever the request and its home partition, the packed form gives both back."""
        want = decode_request(raw)
        record, got_home = unpack_held(want.request_id, pack_request(want, home))
        same(record, want)
        assert got_home == home

    def test_common_requests_are_packed(self) -> None:
        """UTC timestamps, small attempt counts and a short tool name: held as bytes."""
        record = decode_request(_request(1))
        assert type(pack_request(record)) is bytes
        too_many = msgspec.structs.replace(record, attempt=70_000, max_attempts=70_000)
        assert pack_request(too_many, 3) == (too_many, 3)

    def test_an_answered_request_keeps_its_mark(self) -> None:
        """A request an MCP proxy answered (``answered``) is held as it is, the mark kept."""
        record = msgspec.structs.replace(decode_request(_request(1)), answered=True)
        assert pack_request(record, 2) == (record, 2)
        assert unpack_held(record.request_id, pack_request(record, 2)) == (record, 2)

    def test_a_replaced_request_is_served_as_replaced(self) -> None:
        """A re-applied request or a tombstone wins, decoded or packed."""
        for decoded in (0, 10):
            table = RequestTable(decoded=decoded)
            table.apply(b"req.00000001", _request(1))
            first = table.get("req.00000001")
            assert first is not None
            assert first.attempt == 1
            table.apply(b"req.00000001", _request(1, attempt=2))
            second = table.get("req.00000001")
            assert second is not None
            assert second.attempt == 2
            table.apply(b"req.00000001", None)
            assert table.get("req.00000001") is None


class TestDecodedWindow:
    """The newest ``decoded`` requests are served as held, the older ones rebuilt from their packing."""

    def test_only_the_newest_are_served_without_a_rebuild(self) -> None:
        """Past the window, a lookup rebuilds an equal record; inside it, it returns the one held."""
        table = RequestTable(decoded=3)
        for n in range(5):
            table.apply(f"req.{n:08d}".encode(), _request(n), home=n % 2)
        for n in range(5):
            rid = f"req.{n:08d}"
            first, second = table.get(rid), table.get(rid)
            assert first is not None
            assert first == decode_request(_request(n))
            assert (first is second) == (n >= 2)
            assert table.held(rid) == (first, n % 2)

    def test_a_re_applied_request_is_newest_again(self) -> None:
        """A request applied again is held decoded again, with the home it was applied with."""
        table = RequestTable(decoded=2)
        for n in range(4):
            table.apply(f"req.{n:08d}".encode(), _request(n), home=1)
        table.apply(b"req.00000000", _request(0, attempt=2), home=1)
        record = table.get("req.00000000")
        assert record is not None
        assert record.attempt == 2
        assert table.get("req.00000000") is record


# An operation on the table: apply (id, expiry minute offset, seconds), tombstone (id), sweep (minutes).
operations = st.lists(
    st.one_of(
        st.tuples(st.just("apply"), st.integers(0, 12), st.integers(0, 20), st.integers(0, 59)),
        st.tuples(st.just("tombstone"), st.integers(0, 12)),
        st.tuples(st.just("sweep"), st.integers(-2, 25), st.integers(0, 59)),
    ),
    max_size=60,
)


class TestExpiryIndex:
    """Expiry through the index evicts exactly what a full scan would, decoded or packed."""

    @_ci
    @given(operations, st.integers(2, 20))
    def test_sweeps_match_a_full_scan(self, ops: list[tuple[object, ...]], cap: int) -> None:
        """Re-applied requests, tombstones, the cap and sweeps at any time (also going back):
        each sweep evicts exactly what scanning the whole table would."""
        table = RequestTable(max_requests=cap, decoded=3)  # some held decoded, some packed
        model: dict[str, datetime] = {}
        for op in ops:
            if op[0] == "apply":
                _, n, minutes, seconds = op
                rid = f"req.{n:08d}"
                expires = NOW + timedelta(minutes=int(minutes), seconds=int(seconds))  # type: ignore[call-overload]
                table.apply(rid.encode(), _request(int(n), expires=expires))  # type: ignore[call-overload]
                model.pop(rid, None)
                model[rid] = expires
                if len(model) > cap:
                    del model[next(iter(model))]
            elif op[0] == "tombstone":
                rid = f"req.{op[1]:08d}"
                table.apply(rid.encode(), None)
                model.pop(rid, None)
            else:
                now = NOW + timedelta(minutes=int(op[1]), seconds=int(op[2]))  # type: ignore[call-overload]
                expired = [rid for rid, at in model.items() if at <= now]
                assert table.evict_expired(now) == len(expired)
                for rid in expired:
                    del model[rid]
            assert {rid for rid in model if table.get(rid) is not None} == set(model)
            assert len(table) == len(model)

    def test_the_index_is_rebuilt_when_mostly_stale(self) -> None:
        """Re-applying the same requests over and over does not grow the index without bound."""
        table = RequestTable()
        for round_ in range(60):
            for n in range(100):
                table.apply(f"req.{n:08d}".encode(), _request(n, expires=NOW + timedelta(minutes=round_ + 1)))
        assert table._indexed <= 2 * len(table) + 1024
        assert table.evict_expired(NOW + timedelta(minutes=59)) == 0
        assert table.evict_expired(NOW + timedelta(minutes=60)) == 100


def _request(n: int, *, expires: datetime | None = None, attempt: int = 1) -> bytes:
    return json.dumps(
        {
            "request_id": f"req.{n:08d}",
            "tool": "review_status",
            "issued_at": (NOW - timedelta(minutes=1)).isoformat(),
            "expires_at": (expires or NOW + timedelta(hours=2, seconds=n)).isoformat(),
            "bind": {"change_id": f"CR-{n:07d}"},
            "attempt": attempt,
            "max_attempts": 3,
        }
    ).encode()


def test_memory_per_request_stays_small() -> None:
    """tracemalloc's count of the table's allocations for 2,000 requests with distinct ids and
    bind values, past the window held decoded: about 200 B each (decoded records took about
    575 B); the bound has a margin."""
    values = [(f"req.{n:08d}".encode(), _request(n)) for n in range(2000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = RequestTable(decoded=0)
        for key, value in values:
            table.apply(key, value, home=3)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(table) == 2000
    assert held / 2000 <= 320
