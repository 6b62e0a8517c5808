"""Request table benchmark: memory per live request and the cost of apply, get and the sweep.

Side by side in one run, for the same request records:

* ``decoded``: the table's earlier form, a dict of decoded :class:`RequestRecord` by request id
  (apply = decode_request + insert, get = a dict lookup);
* ``packed``: :class:`RequestTable` as it is (decoded, validated, held packed, rebuilt on get).

Three record sets: the state bench's records (one bind entry, the same value in every record),
distinct bind values per request, and no bind. Memory is tracemalloc's count of the table's own
allocations per request; times are CPU time per operation (process_time), medians of ``--repeat``
runs, the two tables' runs interleaved.

    .venv/bin/python ops/bench/request_table_bench.py [--live N] [--repeat N]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

from toolgate.gate._records import RequestRecord, decode_request  # noqa: E402
from toolgate.service._store import RequestTable  # noqa: E402

from ops.bench.state_bench import filled_traced, request_value  # noqa: E402


class DecodedTable:
    """The earlier form: decoded records in a dict (for comparison only)."""

    def __init__(self) -> None:
        self._requests: dict[str, RequestRecord] = {}

    def apply(self, key: bytes | None, value: bytes) -> None:
        record = decode_request(value)
        self._requests.pop(record.request_id, None)
        self._requests[record.request_id] = record

    def get(self, request_id: str) -> RequestRecord | None:
        return self._requests.get(request_id)

    def evict_expired(self, now: datetime) -> int:
        expired = [rid for rid, rec in self._requests.items() if rec.expires_at <= now]
        for rid in expired:
            del self._requests[rid]
        return len(expired)


def records(kind: str, live: int, now: datetime) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(live):
        rid = f"req.live{i:09d}"
        if kind == "bench":
            value = request_value(rid, now)
        else:
            body = {
                "request_id": rid,
                "tool": "review_status",
                "issued_at": now.isoformat(),
                "expires_at": (now + timedelta(hours=2, seconds=i % 7200)).isoformat(),
                "attempt": 1,
                "max_attempts": 3,
            }
            if kind == "distinct-bind":
                body["bind"] = {"change_id": f"CR-{i:07d}"}
            value = json.dumps(body).encode()
        out.append((rid.encode(), value))
    return out


Table = Callable[[], "RequestTable | DecodedTable"]


def per_op(run: Callable[[], int]) -> float:
    """CPU seconds of one call of ``run`` (which returns how many operations it did) per operation."""
    gc.collect()
    started = time.process_time()
    n = run()
    return (time.process_time() - started) / n


def measure(values: list[tuple[bytes, bytes]], now: datetime, repeat: int) -> dict[str, dict[str, float]]:
    """Both tables, their samples interleaved (decoded, packed, decoded, ...): medians per figure."""
    ids = [key.decode() for key, _ in values]
    samples: dict[str, dict[str, list[float]]] = {}
    makers: dict[str, Table] = {"decoded": DecodedTable, "packed": RequestTable}
    for _ in range(repeat):
        for name, make in makers.items():
            table = make()

            def apply_all(table: RequestTable | DecodedTable = table) -> int:  # into an empty table
                for key, value in values:
                    table.apply(key, value)
                return len(values)

            def get_distinct(table: RequestTable | DecodedTable = table) -> int:  # nothing reused
                get = table.get
                for rid in ids:
                    get(rid)
                return len(ids)

            def get_twice(
                table: RequestTable | DecodedTable = table,
            ) -> int:  # twice in a row
                get = table.get
                for rid in ids:
                    get(rid)
                    get(rid)
                return 2 * len(ids)

            def sweep(table: RequestTable | DecodedTable = table) -> int:  # nothing expired
                table.evict_expired(now)
                return 1

            figures = samples.setdefault(name, {})
            figures.setdefault("apply_us", []).append(per_op(apply_all) * 1e6)
            figures.setdefault("get_us", []).append(per_op(get_distinct) * 1e6)
            figures.setdefault("get2_us", []).append(per_op(get_twice) * 1e6)
            figures.setdefault("sweep_ms", []).append(per_op(sweep) * 1e3)
    rows = {name: {k: statistics.median(v) for k, v in figures.items()} for name, figures in samples.items()}
    rows["decoded"]["bytes"] = filled_traced(DecodedTable, values)[1]
    rows["packed"]["bytes"] = filled_traced(RequestTable, values)[1]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    now = datetime.now(UTC)
    print(f"live requests {args.live:,}; CPU time, medians of {args.repeat}; Python {sys.version.split()[0]}")
    print(
        f"{'records':<14} {'table':<8} {'B/request':>9} {'apply µs':>9} {'get µs':>7} "
        f"{'get x2 µs/get':>13} {'sweep ms':>9}"
    )
    for kind in ("bench", "distinct-bind", "no-bind"):
        values = records(kind, args.live, now)
        rows = measure(values, now, args.repeat)
        for name, row in rows.items():
            print(
                f"{kind:<14} {name:<8} {row['bytes']:9.0f} {row['apply_us']:9.2f} {row['get_us']:7.3f} "
                f"{row['get2_us']:13.3f} {row['sweep_ms']:9.3f}"
            )
        d, p = rows["decoded"], rows["packed"]
        print(
            f"{kind:<14} {'ratio':<8} {p['bytes'] / d['bytes']:9.2f} {p['apply_us'] / d['apply_us']:9.2f} "
            f"{p['get_us'] / d['get_us']:7.1f} {p['get2_us'] / d['get2_us']:13.1f} "
            f"{p['sweep_ms'] / d['sweep_ms']:9.3f}"
        )


if __name__ == "__main__":
    main()
