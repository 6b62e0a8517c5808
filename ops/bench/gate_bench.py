"""Gate benchmark: the end-to-end gate against the floor of parse + schema check.

Usage::

    python ops/bench/gate_bench.py [--seconds S] [--repeat R] [--cpu N] [--json] [--profile N]

Every case is measured in the same run, on one pinned core, as the median of R
timed loops of about S seconds each. The repeats are interleaved (repeat 1 of
every case, then repeat 2, ...) so that noise from a shared machine spreads over
all cases alike and the ratios stay comparable. Each loop cycles through a pool
of distinct messages, each with its own request id and request record, as real
traffic has. The garbage collector stays on, as in the worker. Times are the
process's CPU time (``time.process_time``), so other users of a shared machine
taking the pinned core away do not count as gate time.

Cases:

* ``floor``: ``jiter.from_json`` (duplicate keys caught, no NaN) plus the
  contract's compiled jsonschema-rs validator ``is_valid`` on the same bytes:
  what parsing and validating alone cost, without any gate;
* ``gate``: ``Gate.evaluate`` end to end on an accepted result;
* ``gate (rejected)``: the same result with one extra property, rejected at the
  ``schema`` stage (the reject path: error search, masking, failure envelope);
* the same at about 20 KB, on a contract written by this script into a temporary
  folder (``review_status`` cannot carry 20 KB);
* after the table, the worst case per bundled contract: inputs as large as its
  ``max_bytes`` allows, of the shapes that cost most (one long string, an array of
  numbers, nesting to the depth limit, whitespace padding, a long text line), and
  the slowest one's median time: what one message can cost at most;
* ``gate, python-jsonschema``: the gate with each contract's validator replaced
  by python-jsonschema (``Draft202012Validator`` with its format checker), through
  an adapter with ``is_valid`` and ``iter_errors``. Only the contract schema is
  swapped; the closed output-schema check on the agent envelope stays on
  jsonschema-rs.

* ``decide_batch, tracing off`` / ``tracing on``: the worker's batch step (gate,
  output records with the trace context carried, shadow check) over the same accepted
  results, each with a ``traceparent`` header; on: one OpenTelemetry span per decision
  through the SDK's ``BatchSpanProcessor`` to an exporter that discards (what the
  worker does with ``OTEL_TRACES_EXPORTER`` set, minus the network). Off is the
  default: no OpenTelemetry import, one ``is None`` test per message.
* ``decide_batch, rejected``: the batch step over the rejected results (tracing off):
  the quarantine record and the audit event of each rejection.

Targets, printed with met / not met: an accepted 159 B result <= 3x the floor and
>= 100,000 verdicts/s; a rejection <= 1.5x an acceptance of the same size (159 B
and 20 KB); an accepted 20 KB result <= 1.3x the floor. ``--profile N`` then runs
each jsonschema-rs gate case and the untraced ``decide_batch`` cases under cProfile
and prints where its time goes.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))  # this checkout's package, not the editable install's

import jiter  # noqa: E402
import jsonschema  # noqa: E402
import msgspec  # noqa: E402
from toolgate._config import Topics  # noqa: E402
from toolgate._errors import ContractError  # noqa: E402
from toolgate.gate._batch import AcceptedView, DecisionTracer, decide_batch  # noqa: E402
from toolgate.gate._contracts import Contract, ContractSet, load_contract  # noqa: E402
from toolgate.gate._gate import Gate  # noqa: E402
from toolgate.gate._records import Message, Origin, RequestRecord  # noqa: E402

from ops.bench.backlog import ITEM_SCHEMA, listing_schema  # noqa: E402
from ops.bench.measure import short_commit  # noqa: E402

SAMPLE = ROOT / "contracts" / "review_status" / "v1"
GATE_TARGET_RATIO = 3.0  # accepted 159 B result against the floor
VERDICTS_TARGET = 100_000  # accepted 159 B results per second on one core
REJECTED_TARGET_RATIO = 1.5  # a rejection against an acceptance of the same size
LARGE_TARGET_RATIO = 1.3  # accepted 20 KB result against the floor
LARGE_BYTES = 20 * 1024


# --------------------------------------------------------------------------- inputs

POOL = 256  # distinct messages per workload, cycled through by every timed loop


class Workload:
    """Accepted and rejected messages for a contract, each with its request record.

    Every message of the pool has its own request id (key, ``tg-request-id``,
    ``request_id`` and request record), as real traffic does, so nothing keyed
    on those values stays warm from one message to the next.
    """

    def __init__(
        self,
        contract: Contract,
        accepted: dict[str, Any],
        rejected: dict[str, Any],
        headers: dict[str, str],
        request: RequestRecord,
        now: datetime,
    ) -> None:
        self.contract = contract
        self.now = now
        self.accepted: list[tuple[Message, RequestRecord]] = []
        self.rejected: list[tuple[Message, RequestRecord]] = []
        for i in range(POOL):
            request_id = f"req.{i:08d}"
            own = msgspec.structs.replace(request, request_id=request_id)
            encoded = [
                (name, (request_id if name == "tg-request-id" else value).encode())
                for name, value in headers.items()
            ]
            for value, pool in ((accepted, self.accepted), (rejected, self.rejected)):
                raw = msgspec.json.encode({**value, "request_id": request_id})
                pool.append((Message(key=request_id.encode(), value=raw, headers=encoded), own))
        self.raws = [message.value or b"" for message, _ in self.accepted]
        self.size = len(self.raws[0])
        self.rejected_size = len(self.rejected[0][0].value or b"")


def small_workload(contracts: ContractSet) -> Workload:
    """``review_status`` v1: its accepted fixture and defaults (about 160 bytes)."""
    defaults = json.loads((SAMPLE / "fixtures" / "defaults.json").read_bytes())
    value = json.loads((SAMPLE / "fixtures" / "accept" / "approved.json").read_bytes())["value"]
    extra = {**value, "data": {**value["data"], "admin_override": True}}
    contract = next(c for c in contracts if c.key == "review_status@v1")
    return Workload(
        contract,
        value,
        extra,
        {"tg-tool": "review_status", **defaults["headers"]},
        msgspec.convert(defaults["request"], RequestRecord, strict=False),
        datetime.fromisoformat(defaults["now"]),
    )


LARGE_CONTRACT = """\
tool: bench_items
version: 1
status: active
description: Benchmark only, a listing of up to 200 closed items.
adapter_versions: ["1.*"]
schema: schema.json
limits:
  max_bytes: 65536
  max_depth: 6
rules:
  - kind: bind
    pointer: /data/query
    request_key: query
projection:
  - /data/query
  - /data/count
"""

LARGE_SCHEMA = listing_schema(
    "bench_items",
    {
        "query": {"type": "string", "pattern": "^Q-[0-9]{1,10}$"},
        "count": {"type": "integer", "minimum": 0, "maximum": 200},
        "items": {"type": "array", "maxItems": 200, "items": ITEM_SCHEMA},
    },
    ["query", "count", "items"],
)


def write_large_contract(root: Path) -> Path:
    """Write ``bench_items/v1`` (contract.yaml + schema.json) under ``root``."""
    folder = root / "bench_items" / "v1"
    folder.mkdir(parents=True)
    (folder / "contract.yaml").write_text(LARGE_CONTRACT)
    (folder / "schema.json").write_text(json.dumps(LARGE_SCHEMA, indent=1))
    return folder


def large_workload(contract: Contract, small: Workload) -> Workload:
    """A ``bench_items`` result of about 20 KB (as many items as fit, at most 200)."""
    request_id = "req.00000000"  # as long as the pool's own ids
    items: list[dict[str, Any]] = []
    value: dict[str, Any] = {
        "tool": "bench_items",
        "request_id": request_id,
        "outcome": "success",
        "data": {"query": "Q-77", "count": 0, "items": items},
    }
    for i in range(200):
        item = {
            "id": f"IT-{100000 + i}",
            "name": f"nightly build step {i:03d} of the pipeline",
            "state": ("open", "closed", "blocked")[i % 3],
            "score": round(i * 0.37, 2),
            "owner": f"team-{i % 7}@example.com",
        }
        if len(msgspec.json.encode(value)) + len(msgspec.json.encode(item)) + 1 > LARGE_BYTES:
            break
        items.append(item)
        value["data"]["count"] = len(items)
    extra = {**value, "data": {**value["data"], "admin_override": True}}
    request = msgspec.structs.replace(small.accepted[0][1], tool="bench_items", bind={"query": "Q-77"})
    headers = {
        "tg-tool": "bench_items",
        "tg-request-id": request_id,
        "tg-adapter": "bench-adapter",
        "tg-adapter-version": "1.0.0",
        "tg-source": "https://bench.invalid/items",
    }
    return Workload(contract, value, extra, headers, request, small.now)


# ------------------------------------------------------------ python-jsonschema swap


class _Kind:
    __slots__ = ("context",)

    def __init__(self, context: list[list[_PyError]]) -> None:
        self.context = context


class _PyError(ValueError):
    """A python-jsonschema error in the shape the gate reads from jsonschema-rs."""

    def __init__(self, error: jsonschema.ValidationError) -> None:
        super().__init__(error.message)
        self.message = error.message
        self.instance_path = list(error.absolute_path)
        self.schema_path = list(error.absolute_schema_path)
        branches: dict[int, list[_PyError]] = {}
        for sub in error.context or ():
            branches.setdefault(int(sub.relative_schema_path[0]), []).append(_PyError(sub))
        self.kind = _Kind([branches[i] for i in sorted(branches)])


class PythonJsonschema:
    """``is_valid`` / ``iter_errors`` of python-jsonschema, formats asserted."""

    def __init__(self, schema: dict[str, Any]) -> None:
        cls = jsonschema.Draft202012Validator
        self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def is_valid(self, value: Any) -> bool:
        return bool(self._validator.is_valid(value))

    def iter_errors(self, value: Any) -> Iterator[_PyError]:
        return (_PyError(e) for e in self._validator.iter_errors(value))

    def validate(self, value: Any) -> None:
        for error in self._validator.iter_errors(value):
            raise _PyError(error)


def with_python_jsonschema(contracts: list[Contract]) -> list[Contract]:
    """Swap the compiled validator of freshly loaded contracts (the jsonschema-rs gates
    keep their own objects). Swap before building a Gate: it reads validators once."""
    for contract in contracts:
        contract.validator = PythonJsonschema(contract.schema)
    return contracts


# -------------------------------------------------------------------------- timing

Loop = Callable[[int], None]  # runs the case `loops` times, cycling through its pool


class Case:
    def __init__(self, name: str, size: int, loop: Loop, floor: str | None) -> None:
        self.name = name
        self.size = size
        self.loop = loop
        self.floor = floor  # the name of the case this one is compared to
        self.loops = 1
        self.samples: list[float] = []

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples)


def calibrate(case: Case, seconds: float) -> None:
    """Loop count so that one timed loop lasts about ``seconds``."""
    loops = 16
    while True:
        elapsed = timed(case.loop, loops)
        if elapsed > 0.02:
            break
        loops *= 4
    case.loops = max(1, int(loops * seconds / elapsed))


def timed(loop: Loop, loops: int) -> float:
    """CPU seconds of this process for ``loops`` iterations: on a shared machine the
    time other processes hold the pinned core is not counted (wall time would be)."""
    started = time.process_time()
    loop(loops)
    return time.process_time() - started


def measure(cases: list[Case], seconds: float, repeat: int) -> None:
    for case in cases:
        calibrate(case, seconds)
    for _ in range(repeat):
        for case in cases:
            gc.collect()
            case.samples.append(timed(case.loop, case.loops) / case.loops * 1e6)


def floor_loop(raws: list[bytes], validator: Any) -> Loop:
    is_valid, from_json = validator.is_valid, jiter.from_json

    def loop(loops: int) -> None:
        for raw in itertools.islice(itertools.cycle(raws), loops):
            is_valid(from_json(raw, allow_inf_nan=False, catch_duplicate_keys=True))

    return loop


def gate_loop(gate: Gate, pool: list[tuple[Message, RequestRecord]], now: datetime) -> Loop:
    evaluate = gate.evaluate

    def loop(loops: int) -> None:
        for message, request in itertools.islice(itertools.cycle(pool), loops):
            evaluate(message, request, now)

    return loop


TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TOPICS = Topics(requests="r", intake="toolgate.intake", agent="a", quarantine="q", audit="au")


def batch_loop(
    gate: Gate, pool: list[tuple[Message, RequestRecord]], now: datetime, tracer: DecisionTracer | None
) -> Loop:
    traced = [
        (
            msgspec.structs.replace(
                m, headers=[*m.headers, ("traceparent", TRACEPARENT)], origin=Origin("t", 0, i)
            ),
            r,
        )
        for i, (m, r) in enumerate(pool)
    ]
    requests = {r.request_id: r for _, r in traced}

    def loop(loops: int) -> None:
        messages = [m for m, _ in itertools.islice(itertools.cycle(traced), loops)]
        for start in range(0, len(messages), POOL):
            decide_batch(
                gate,
                messages[start : start + POOL],
                requests.get,
                AcceptedView(lambda _r, _a: False),
                now,
                topics=TOPICS,
                max_record_bytes=1024 * 1024,
                tracer=tracer,
            )

    return loop


def decide_batch_us(
    gate: Gate,
    pool: list[tuple[Message, RequestRecord]],
    now: datetime,
    *,
    seconds: float = 0.3,
    repeat: int = 3,
) -> float:
    """The ``decide_batch`` case on ``pool`` (another workload, e.g. the worker bench's): CPU
    microseconds per result, the median of ``repeat`` timed loops of about ``seconds`` each,
    batches of the pool's size at most, a dict as the request lookup, no tracing."""
    requests = {r.request_id: r for _, r in pool}
    messages = [m for m, _ in pool]

    def loop(loops: int) -> None:
        for start in range(0, loops, len(messages)):
            decide_batch(
                gate,
                messages[: min(len(messages), loops - start)],
                requests.get,
                AcceptedView(lambda _r, _a: False),
                now,
                topics=TOPICS,
                max_record_bytes=1024 * 1024,
            )

    case = Case("decide_batch", 0, loop, None)
    measure([case], seconds, repeat)
    return case.median_us


def otel_tracer() -> DecisionTracer | None:
    """Decision spans through the SDK's batch processor to a discarding exporter (None: no SDK)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    except ImportError:
        return None
    from toolgate.service._otel_spans import DecisionSpans

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return DecisionSpans(provider, group="toolgate")


# --------------------------------------------------------------------------- cases


def pin(cpu: int | None) -> int:
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu is None else cpu
    os.sched_setaffinity(0, {chosen})
    return chosen


def load_contracts() -> tuple[ContractSet, str]:
    try:
        return ContractSet.load(ROOT / "contracts"), "contracts/"
    except ContractError as exc:  # another contract is half-written: bench the sample alone
        return ContractSet([load_contract(SAMPLE)]), f"{SAMPLE.relative_to(ROOT)} only ({exc})"


def build_cases(tmp: Path) -> tuple[list[Case], str]:
    contracts, source = load_contracts()
    small = small_workload(contracts)
    large_folder = write_large_contract(tmp)
    large = large_workload(load_contract(large_folder), small)

    rs_gate = Gate(contracts)
    rs_large_gate = Gate(ContractSet([large.contract]))
    py_small = with_python_jsonschema([load_contract(c.folder) for c in contracts])
    py_gate = Gate(ContractSet(py_small))
    py_large_gate = Gate(ContractSet(with_python_jsonschema([load_contract(large_folder)])))

    for gate, work in ((rs_gate, small), (rs_large_gate, large), (py_gate, small), (py_large_gate, large)):
        for message, request in work.accepted:
            verdict = gate.evaluate(message, request, work.now)
            assert verdict.accepted, (verdict.stage, verdict.code, verdict.diagnostics)
        for message, request in work.rejected:
            verdict = gate.evaluate(message, request, work.now)
            assert (verdict.stage, verdict.code) == ("schema", "SCHEMA_VIOLATION"), verdict
    validator = small.contract.validator
    assert all(validator.is_valid(jiter.from_json(raw)) for raw in small.raws)

    cases: list[Case] = []
    for label, work, gate, py in (
        ("", small, rs_gate, py_gate),
        (" 20KB", large, rs_large_gate, py_large_gate),
    ):
        floor = f"floor{label}"
        cases += [
            Case(floor, work.size, floor_loop(work.raws, work.contract.validator), None),
            Case(f"gate{label}", work.size, gate_loop(gate, work.accepted, work.now), floor),
            Case(
                f"gate{label} (rejected)", work.rejected_size, gate_loop(gate, work.rejected, work.now), floor
            ),
            Case(f"gate{label}, python-jsonschema", work.size, gate_loop(py, work.accepted, work.now), floor),
        ]
    traced_size = small.size
    cases.append(
        Case(
            "decide_batch, tracing off",
            traced_size,
            batch_loop(rs_gate, small.accepted, small.now, None),
            "floor",
        )
    )
    cases.append(
        Case(
            "decide_batch, rejected",
            small.rejected_size,
            batch_loop(rs_gate, small.rejected, small.now, None),
            "floor",
        )
    )
    tracer = otel_tracer()
    if tracer is not None:
        cases.append(
            Case(
                "decide_batch, tracing on",
                traced_size,
                batch_loop(rs_gate, small.accepted, small.now, tracer),
                "floor",
            )
        )
    return cases, source


def report(cases: list[Case], cpu: int, source: str, seconds: float, repeat: int) -> dict[str, Any]:
    by_name = {c.name: c for c in cases}

    def ratio(a: str, b: str) -> float:
        return by_name[a].median_us / by_name[b].median_us

    rows = [
        {
            "case": c.name,
            "bytes": c.size,
            "us_per_result": round(c.median_us, 3),
            "results_per_s": round(1e6 / c.median_us),
            "ratio_to_floor": round(ratio(c.name, c.floor), 2) if c.floor else 1.0,
            "min_us": round(min(c.samples), 3),
            "max_us": round(max(c.samples), 3),
            "loops": c.loops,
        }
        for c in cases
    ]
    return {
        "cpu": cpu,
        "contracts": source,
        "seconds": seconds,
        "repeat": repeat,
        "pool": POOL,
        "python": sys.version.split()[0],
        "cases": rows,
        "gate_over_floor": round(ratio("gate", "floor"), 2),
        "gate_over_floor_target": GATE_TARGET_RATIO,
        "accepted_verdicts_per_s": round(1e6 / by_name["gate"].median_us),
        "accepted_verdicts_per_s_target": VERDICTS_TARGET,
        "gate_over_floor_20kb": round(ratio("gate 20KB", "floor 20KB"), 2),
        "rejected_over_accepted": round(ratio("gate (rejected)", "gate"), 2),
        "rejected_over_accepted_20kb": round(ratio("gate 20KB (rejected)", "gate 20KB"), 2),
        "python_jsonschema_over_rs": round(ratio("gate, python-jsonschema", "gate"), 1),
        "python_jsonschema_over_rs_20kb": round(ratio("gate 20KB, python-jsonschema", "gate 20KB"), 1),
        "tracing_on_over_off": (
            round(ratio("decide_batch, tracing on", "decide_batch, tracing off"), 2)
            if "decide_batch, tracing on" in by_name
            else None
        ),
        "tracing_on_extra_us": (
            round(
                by_name["decide_batch, tracing on"].median_us
                - by_name["decide_batch, tracing off"].median_us,
                2,
            )
            if "decide_batch, tracing on" in by_name
            else None
        ),
    } | {"targets": targets(by_name)}


def targets(by_name: dict[str, Case]) -> list[dict[str, Any]]:
    """Every target of the gate bench, measured in this run, with met / not met."""

    def us(name: str) -> float:
        return by_name[name].median_us

    small, large = by_name["gate"].size, by_name["gate 20KB"].size
    rows = [
        ("accepted / floor", small, us("gate") / us("floor"), "<=", GATE_TARGET_RATIO),
        ("accepted verdicts/s", small, 1e6 / us("gate"), ">=", VERDICTS_TARGET),
        ("rejected / accepted", small, us("gate (rejected)") / us("gate"), "<=", REJECTED_TARGET_RATIO),
        (
            "rejected / accepted",
            large,
            us("gate 20KB (rejected)") / us("gate 20KB"),
            "<=",
            REJECTED_TARGET_RATIO,
        ),
        ("accepted / floor", large, us("gate 20KB") / us("floor 20KB"), "<=", LARGE_TARGET_RATIO),
    ]
    return [
        {
            "target": name,
            "bytes": size,
            "measured": round(value, 2),
            "goal": f"{op} {goal:,g}",
            "met": value <= goal if op == "<=" else value >= goal,
        }
        for name, size, value, op, goal in rows
    ]


def print_table(result: dict[str, Any]) -> None:
    print(
        f"pinned to CPU {result['cpu']}; contracts: {result['contracts']}; "
        f"Python {result['python']}; median of {result['repeat']} interleaved loops "
        f"of ~{result['seconds']}s CPU each over {result['pool']} distinct messages; gc on"
    )
    print(
        "python-jsonschema cases swap the contract validator only; "
        "the closed output-schema check stays on jsonschema-rs"
    )
    print()
    header = f"{'case':<34}{'bytes':>7}{'us/result':>12}{'results/s':>12}{'x floor':>9}"
    print(header)
    print("-" * len(header))
    for row in result["cases"]:
        print(
            f"{row['case']:<34}{row['bytes']:>7}{row['us_per_result']:>12.2f}"
            f"{row['results_per_s']:>12,}{row['ratio_to_floor']:>9.2f}"
        )
    print()
    print("floor: jiter.from_json + the contract's jsonschema-rs is_valid on the same bytes")
    header = f"{'target':<28}{'bytes':>7}{'measured':>12}  {'goal':<12}"
    print(header)
    print("-" * (len(header) + 8))
    for row in result["targets"]:
        verdict = "met" if row["met"] else "NOT MET"
        print(f"{row['target']:<28}{row['bytes']:>7}{row['measured']:>12,.2f}  {row['goal']:<12}{verdict}")
    print()
    print(f"python-jsonschema gate / jsonschema-rs gate = {result['python_jsonschema_over_rs']:.1f}")
    print(
        f"python-jsonschema gate / jsonschema-rs gate at 20KB = "
        f"{result['python_jsonschema_over_rs_20kb']:.1f}"
    )
    if result["tracing_on_over_off"] is None:
        print("tracing on: not measured (opentelemetry-sdk is not installed: pip install 'toolgate[otel]')")
    else:
        print(
            f"decide_batch tracing on / off = {result['tracing_on_over_off']:.2f} "
            f"(+{result['tracing_on_extra_us']:.2f} us per decision); off is the default and imports "
            "no OpenTelemetry"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example, side by side with another checkout (git worktree add ../base main):\n"
        "  .venv/bin/python ops/bench/gate_bench.py --baseline-worktree ../base --repeat 5",
    )
    parser.add_argument("--seconds", type=float, default=0.2, help="length of one timed loop (default 0.2)")
    parser.add_argument(
        "--repeat", type=int, default=7, help="timed loops per case; the median is reported (default 7)"
    )
    parser.add_argument(
        "--cpu", type=int, default=None, help="core to pin to (default: the last one allowed)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="then run each gate case under cProfile for about N times its timed loop and print "
        "where the time goes (functions by own time)",
    )
    parser.add_argument(
        "--baseline-worktree",
        metavar="PATH",
        help="side by side: this checkout's bench and PATH's own ops/bench/gate_bench.py (its "
        "package first on PYTHONPATH) in alternating rounds of one loop per case, on one core; "
        "medians per case and this/baseline (git worktree add PATH <commit>)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeat < 1:
        parser.error("--seconds must be positive and --repeat at least 1")
    if args.baseline_worktree:
        baseline = Path(args.baseline_worktree).resolve()
        if not (baseline / "ops" / "bench" / "gate_bench.py").is_file():
            parser.error(f"--baseline-worktree {args.baseline_worktree}: no ops/bench/gate_bench.py there")
        return side_by_side(baseline, args.seconds, args.repeat, pin(args.cpu), args.json)
    cpu = pin(args.cpu)
    with tempfile.TemporaryDirectory(prefix="gate-bench-") as tmp:
        cases, source = build_cases(Path(tmp))
        measure(cases, args.seconds, args.repeat)
        result = report(cases, cpu, source, args.seconds, args.repeat)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print_table(result)
        if not args.json:
            print_worst_cases(args.repeat)
        if args.profile:
            for case in cases:
                if (case.name.startswith("gate") and "python" not in case.name) or (
                    case.name.startswith("decide_batch") and "tracing on" not in case.name
                ):
                    profile(case, args.profile)
    return 0


def _one_round(checkout: Path, seconds: float, cpu: int) -> dict[str, Any]:
    """One round of ``checkout``'s own gate bench (one loop per case), as its JSON report."""
    done = subprocess.run(
        [
            sys.executable,
            str(checkout / "ops" / "bench" / "gate_bench.py"),
            "--json",
            "--repeat",
            "1",
            "--seconds",
            str(seconds),
            "--cpu",
            str(cpu),
        ],
        cwd=checkout,
        env=os.environ | {"PYTHONPATH": str(checkout / "worker")},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"gate bench of {checkout} failed:\n{done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def side_by_side(baseline: Path, seconds: float, repeat: int, cpu: int, as_json: bool) -> int:
    """This checkout's gate against ``baseline``'s, alternating rounds, medians per case."""
    sides = {"this": ROOT, "baseline": baseline}
    rounds: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
    for n in range(repeat):
        order = list(sides) if n % 2 == 0 else list(reversed(sides))  # neither always goes first
        for side in order:
            rounds[side].append(_one_round(sides[side], seconds, cpu))
    medians = {
        side: {
            row["case"]: statistics.median(
                next(r["us_per_result"] for r in rep["cases"] if r["case"] == row["case"]) for rep in reports
            )
            for row in reports[0]["cases"]
        }
        for side, reports in rounds.items()
    }
    result: dict[str, Any] = {
        "cpu": cpu,
        "rounds": repeat,
        "this": str(ROOT),
        "baseline": str(baseline),
        "us_per_result": medians,
        "this_over_baseline": {
            case: round(us / medians["baseline"][case], 3)
            for case, us in medians["this"].items()
            if case in medians["baseline"]
        },
        "targets": {
            side: _targets_of_medians(medians[side], {r["case"]: r["bytes"] for r in reports[0]["cases"]})
            for side, reports in rounds.items()
        },
    }
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"pinned to CPU {cpu}; {repeat} alternating rounds of each checkout's own gate bench "
        f"(one ~{seconds}s loop per case); medians"
    )
    commits = [short_commit(checkout) or "unknown commit" for checkout in (ROOT, baseline)]
    print(f"this:     {ROOT} ({commits[0]})\nbaseline: {baseline} ({commits[1]})\n")
    header = f"{'case':<34}{'this us':>10}{'base us':>10}{'this/base':>11}"
    print(header)
    print("-" * len(header))
    for case, us in medians["this"].items():
        base = medians["baseline"].get(case)
        if base is None:
            print(f"{case:<34}{us:>10.2f}{'-':>10}{'-':>11}")
        else:
            print(f"{case:<34}{us:>10.2f}{base:>10.2f}{us / base:>11.2f}")
    print()
    header = f"{'target':<28}{'goal':<12}{'this':>10}{'':<9}{'baseline':>10}"
    print(header)
    print("-" * len(header))
    for mine, theirs in zip(result["targets"]["this"], result["targets"]["baseline"], strict=True):
        verdicts = ["met" if row["met"] else "NOT MET" for row in (mine, theirs)]
        print(
            f"{mine['target'] + ' ' + str(mine['bytes']) + ' B':<28}{mine['goal']:<12}"
            f"{mine['measured']:>10,.2f} {verdicts[0]:<8}{theirs['measured']:>10,.2f} {verdicts[1]}"
        )
    return 0


def _targets_of_medians(us: dict[str, float], sizes: dict[str, int]) -> list[dict[str, Any]]:
    """The targets of :func:`targets` from median microseconds and sizes per case."""
    cases = {}
    for name, value in us.items():
        case = Case(name, sizes[name], lambda loops: None, None)
        case.samples = [value]
        cases[name] = case
    return targets(cases)


def worst_inputs(contract: Contract) -> Iterator[tuple[str, bytes]]:
    """Inputs as large as ``contract`` allows (its max_bytes), of the shapes that cost most:
    the whole value one string, one array of numbers, objects nested to the depth limit,
    an accepted-looking envelope padded with whitespace; for a text contract, one long line."""
    size = contract.spec.limits.max_bytes
    if contract.spec.content_type == "text/plain":
        yield "one long line", b"a" * size
        yield "almost matching", b"a" * (size - 1) + b"!"
        return
    head = (
        b'{"tool":"%s","request_id":"req.worst0001","outcome":"success","data":' % contract.spec.tool.encode()
    )
    room = size - len(head) - 1
    for field in ("x", *(tokens[-1] for _, tokens in contract.data_projection)):
        yield (
            f"string in data.{field}",
            head + b'{"' + field.encode() + b'":"' + b"a" * (room - len(field) - 7) + b'"}}',
        )
    numbers = b",".join([b"1"] * ((room - 2) // 2))
    yield "array of numbers", head + b"[" + numbers + b"]}"
    depth = contract.spec.limits.max_depth - 2
    yield "nested to the depth limit", head + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
    body = head + b'{"a":1}}'
    yield "padded with whitespace", body[:-1] + b" " * (size - len(body)) + b"}"


def print_worst_cases(repeat: int) -> None:
    """The slowest decision per bundled contract over inputs of its max_bytes: what one
    message can cost at most (median of ``repeat`` runs of each input)."""
    contracts = ContractSet.load(ROOT / "contracts")
    gate = Gate(contracts)
    now = datetime.fromisoformat("2026-05-01T12:00:00+00:00")
    print("\nworst case per bundled contract (inputs of max_bytes; median of", repeat, "runs)")
    print(f"{'contract':<22} {'max_bytes':>9} {'worst input':<28} {'us':>10}  stage/code")
    for contract in contracts:
        worst: tuple[float, str, str] = (0.0, "", "")
        for name, raw in worst_inputs(contract):
            headers = [
                ("tg-tool", contract.spec.tool.encode()),
                ("tg-request-id", b"req.worst0001"),
                ("tg-adapter-version", contract.spec.adapter_versions[0].replace("*", "0").encode()),
            ]
            if contract.spec.content_type == "text/plain":
                headers.append(("tg-content-type", b"text/plain"))
            message = Message(key=b"req.worst0001", value=raw, headers=headers)
            forced = contract if contract.spec.status != "active" else None
            samples = []
            for _ in range(repeat):
                started = time.perf_counter()
                verdict = gate.evaluate(message, None, now, contract=forced)
                samples.append(time.perf_counter() - started)
            seconds = statistics.median(samples)
            if seconds > worst[0]:
                worst = (seconds, name, f"{verdict.stage}/{verdict.code}")
        print(
            f"{contract.key:<22} {contract.spec.limits.max_bytes:>9} {worst[1]:<28} "
            f"{worst[0] * 1e6:>10.1f}  {worst[2]}"
        )


def profile(case: Case, times: int) -> None:
    """Where one case's time goes: cProfile over ``times`` timed loops, by own time."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    case.loop(case.loops * times)
    profiler.disable()
    print(f"\n=== {case.name}: {case.loops * times:,} evaluations under cProfile")
    stats = pstats.Stats(profiler)
    stats.strip_dirs().sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    sys.exit(main())
