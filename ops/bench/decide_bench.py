"""The worker's ``decide`` phase taken apart, outside the worker: why it costs more than the
gate bench's ``decide_batch``.

Usage::

    .venv/bin/python ops/bench/decide_bench.py [--results 3000] [--repeat 5] [--no-contend]

Steps, each CPU time (``process_time``) per result, median of ``--repeat`` loops over
``--results`` results in batches of 333 (the worker bench's results per transaction):

1. ``decide_batch`` on the gate bench's workload (``review_status``, 159 bytes, a dict as the
   request lookup): the gate bench's case;
2. the same on the worker bench's workload (``bench_listing``, about 1.2 KB, every tenth
   rejected), then its accepted and its rejected results alone;
3. plus what the worker's decide phase adds around ``decide_batch``: a ``Message`` built per
   intake record and the request lookup, three ways: from a packed table (a record rebuilt per
   lookup), with the misrouted check by the default partitioner's murmur2 of every key in
   Python (the worker before requests kept their home partition), and as the worker does it
   now (the newest requests held decoded with their home partition: no hash, no rebuild);
4. the last step again while another process keeps the other core busy (as the broker and
   the load generator do during the worker bench): CPU time per operation rises when the
   cores are shared (caches, memory bandwidth, the hypervisor);
5. the worker bench's workload with three ``cel`` rules added to its contract
   (:data:`CEL_RULES`: a list macro over the items, a count, the request and the clock),
   beside the same contract without them: the target is at most
   :data:`CEL_TARGET` times the cost per result (``--rules-only``: steps 2 and 5 alone); and
   the same rules with the fast path off (the runtime deciding every result, as before it).

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

import msgspec  # noqa: E402
from toolgate._config import Topics  # noqa: E402
from toolgate.gate._batch import AcceptedView, decide_batch  # noqa: E402
from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.gate._gate import Gate  # noqa: E402
from toolgate.gate._records import Message, Origin, RequestRecord  # noqa: E402
from toolgate.service._kafka import partition_of  # noqa: E402
from toolgate.service._store import RequestTable  # noqa: E402

from ops.bench import gate_bench  # noqa: E402
from ops.bench.backlog import PARTITIONS, results, write_contract  # noqa: E402

BATCH = 333  # results per transaction in the worker bench's backlog runs
CEL_TARGET = 1.5  # a contract with three cel rules costs at most this many times one without
CEL_RULES = """\
  - kind: cel
    name: blocked_items_scored_low
    expr: data.items.all(i, i.state != 'blocked' || i.score <= 100.0)
  - kind: cel
    name: count_is_items
    expr: data.count == size(data.items)
  - kind: cel
    name: asked_and_observed
    expr: data.query == request.bind.query && timestamp(data.observed_at) <= now
"""


def with_cel_rules(root: Path) -> Path:
    """The worker bench's contract under ``root`` with :data:`CEL_RULES` added."""
    write_contract(root)
    (path,) = root.glob("*/v1/contract.yaml")
    path.write_text(path.read_text().replace("projection:\n", CEL_RULES + "projection:\n", 1))
    return root


TOPICS = Topics(requests="r", intake="i", agent="a", quarantine="q", audit="au")


def per_result(loops: list[tuple[str, Callable[[], int]]], repeat: int) -> list[tuple[str, float]]:
    """Median CPU microseconds per result of each loop (each returns how many it decided),
    the loops interleaved: round 1 of every loop, then round 2, ... (a shared machine's
    noise spreads alike over all of them)."""
    for _, loop in loops:
        loop()  # warm: caches, compiled patterns
    spent: dict[str, list[float]] = {label: [] for label, _ in loops}
    for _ in range(repeat):
        for label, loop in loops:
            started = time.process_time()
            count = loop()
            spent[label].append((time.process_time() - started) / count * 1e6)
    return [(label, statistics.median(values)) for label, values in spent.items()]


def batches(
    gate: Gate,
    raw: list[tuple[bytes, bytes, list[tuple[str, bytes]]]],
    lookup: Callable[[list[bytes]], Callable[[str], Any]],
    now: datetime,
) -> Callable[[], int]:
    """A loop deciding ``raw`` (key, value, headers) in batches as the worker's decide does:
    the messages built per batch, ``lookup(keys)`` the batch's request lookup."""

    def loop() -> int:
        for start in range(0, len(raw), BATCH):
            chunk = raw[start : start + BATCH]
            messages = [
                Message(key=k, value=v, headers=h, origin=Origin("i", 0, start + i))
                for i, (k, v, h) in enumerate(chunk)
            ]
            decide_batch(
                gate,
                messages,
                lookup([k for k, _, _ in chunk]),
                AcceptedView(lambda _r, _a: False),
                now,
                topics=TOPICS,
                max_record_bytes=1 << 20,
            )
        return len(raw)

    return loop


def spin(busy: Any) -> None:
    """Keep one core busy while ``busy`` (an Event) is set: the other process of the
    contended step; it runs until terminated."""
    while True:
        if not busy.wait(0.5):
            continue
        for _ in range(100_000):
            pass


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-contend", action="store_true", help="skip the step with the other core busy")
    parser.add_argument(
        "--rules-only",
        action="store_true",
        help="only the worker bench's workload with and without cel rules",
    )
    args = parser.parse_args()
    if args.results < BATCH or args.repeat < 1:
        parser.error(f"--results must be at least {BATCH} and --repeat at least 1")
    now = datetime.now(UTC)
    loops: list[tuple[str, Callable[[], int]]] = []

    if not args.rules_only:
        small_contracts, _ = gate_bench.load_contracts()
        small = gate_bench.small_workload(small_contracts)
        pool = (small.accepted * (args.results // len(small.accepted) + 1))[: args.results]
        small_raw = [(m.key or b"", m.value or b"", list(m.headers)) for m, _ in pool]
        small_requests = {r.request_id: r for _, r in pool}
        loops.append(
            (
                "gate bench's workload: review_status 159 B, dict lookup",
                batches(Gate(small_contracts), small_raw, lambda _k: small_requests.get, now),
            )
        )

    with tempfile.TemporaryDirectory() as tmp:
        gate = Gate(ContractSet.load(write_contract(Path(tmp) / "contracts")))
        ruled = Gate(ContractSet.load(with_cel_rules(Path(tmp) / "ruled")))
        slow_set = ContractSet.load(with_cel_rules(Path(tmp) / "slow"))
        for contract in slow_set:
            for rule in contract.cel_rules:
                rule.fast = None  # the runtime decides every result
        runtime_only = Gate(slow_set)
    backlog = list(results("decidebench", args.results, now))
    raw = [(r.key, r.value, r.headers) for r in backlog]
    requests = {r.key.decode(): msgspec.json.decode(r.request, type=RequestRecord) for r in backlog}
    size = len(backlog[0].value)

    def plain(_keys: list[bytes]) -> Callable[[str], Any]:
        return requests.get

    without_label = f"worker bench's workload: bench_listing {size} B, dict lookup"
    with_label = "  the same contract with three cel rules"
    loops.append((without_label, batches(gate, raw, plain, now)))
    loops.append((with_label, batches(ruled, raw, plain, now)))
    loops.append(
        ("  the same, the fast path off (the runtime alone)", batches(runtime_only, raw, plain, now))
    )
    if args.rules_only:
        return report(per_result(loops, args.repeat), args, without_label, with_label)
    accepted = [x for x, r in zip(raw, backlog, strict=True) if not r.rejected]
    rejected = [x for x, r in zip(raw, backlog, strict=True) if r.rejected]
    loops.append(("  its accepted results alone", batches(gate, accepted, plain, now)))
    loops.append(
        (
            "  its rejected results alone (every tenth)",
            batches(gate, rejected, plain, now),
        )
    )

    # Every request homed in partition 0 and every batch decided there: the worker's correctly
    # routed results. ``packed`` holds every request packed (a record rebuilt per lookup), as a
    # request older than the table's decoded window is; ``table`` as the worker holds the newest.
    packed_table, table = RequestTable(decoded=0), RequestTable()
    for result in backlog:
        packed_table.apply(result.key, result.request, 0)
        table.apply(result.key, result.request, 0)

    def rebuilt(_keys: list[bytes]) -> Callable[[str], Any]:
        return packed_table.get

    loops.append(
        ("  + the request table's lookup, packed (record rebuilt per get)", batches(gate, raw, rebuilt, now))
    )

    def hashed(keys: list[bytes]) -> Callable[[str], Any]:
        # The lookup before requests kept their home partition: murmur2 of every key.
        wrong = {key.decode() for key in keys if key and partition_of(key, PARTITIONS) != 0}
        get = packed_table.get
        return lambda request_id: None if request_id in wrong else get(request_id)

    loops.append(
        ("  + the misrouted check by murmur2 per key (the worker before)", batches(gate, raw, hashed, now))
    )

    def homed(keys: list[bytes]) -> Callable[[str], Any]:
        # As Worker._lookup_without_misrouted: the table's requests of the batch's partition.
        found, _ = table.in_partition(0, [key.decode() for key in keys], keys, PARTITIONS)
        return found.get

    whole = batches(gate, raw, homed, now)
    loops.append(("  + the worker's lookup (decoded, home partition kept): its decide", whole))
    keys = [k for k, _, _ in raw]
    started = time.process_time()
    for key in keys:
        partition_of(key, PARTITIONS)
    murmur = (time.process_time() - started) / len(keys) * 1e6
    ids = [key.decode() for key in keys]
    started = time.process_time()
    for request_id in ids:
        packed_table.get(request_id)
    unpack = (time.process_time() - started) / len(ids) * 1e6

    busy = multiprocessing.Event()
    other = multiprocessing.Process(target=spin, args=(busy,), daemon=True)
    if not args.no_contend:

        def contended() -> int:
            busy.set()
            time.sleep(0.05)  # the other process spinning before the loop starts
            try:
                return whole()
            finally:
                busy.clear()

        loops.append(("  the same, another process busy on the other core", contended))
        other.start()
    try:
        rows = per_result(loops, args.repeat)
    finally:
        if other.is_alive():
            other.terminate()
            other.join()

    report(rows, args, without_label, with_label)
    print(f"{'partition_of (murmur2 in Python) alone, per key':<66}{murmur:>8.1f}")
    print(f"{'the packed request table: get (a record rebuilt) alone, per lookup':<66}{unpack:>8.1f}")
    return 0


def report(rows: list[tuple[str, float]], args: argparse.Namespace, without: str, with_rules: str) -> int:
    """Print the rows, then the cel rules' ratio against :data:`CEL_TARGET` (met / not met)."""
    print(f"decide per result, CPU us (median of {args.repeat} loops of {args.results}, batches of {BATCH})")
    for label, us in rows:
        print(f"{label:<66}{us:>8.1f}")
    figures = dict(rows)
    ratio = figures[with_rules] / figures[without]
    verdict = "met" if ratio <= CEL_TARGET else "not met"
    print(f"three cel rules: {ratio:.2f}x the contract without them (target <= {CEL_TARGET}x): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
