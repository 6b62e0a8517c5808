"""The two maintained CEL runtimes on PyPI, side by side on what toolgate's rules use.

Usage::

    .venv/bin/pip install common-expression-language   # the second candidate (not a dependency)
    .venv/bin/python ops/bench/cel_choice.py [--evaluations 3000]

1. Conformance: cases in the manner of the CEL specification's conformance suite
   (cel-spec tests/simple: macros, has(), timestamps and durations, string functions,
   heterogeneous equality, errors for overflow, division by zero, a missing key, a type
   mismatch) on each runtime: the expected value, or an error where the spec says one.
2. Cost per evaluation on the worker bench's result (bench_listing, 8 items, ~1.2 KB of
   JSON parsed to Python): a two-clause rule with a list macro alone, then three rules over
   one conversion of the input, each on a fresh parsed value (as per result in the gate).

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

from cel_expr_python import cel as google_cel  # noqa: E402
from toolgate.gate._parse import parse_json  # noqa: E402

from ops.bench.backlog import results  # noqa: E402

ERROR = object()  # the case must evaluate to an error
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
DATA = {
    "state": "succeeded",
    "finished_at": "2026-05-01T11:59:00Z",
    "amount": 120,
    "items": [{"tenant": "acme", "n": 1}, {"tenant": "acme", "n": 2}, {"tenant": "evil", "n": 3}],
    "path": "/srv/docs/a.txt",
}
CASES: list[tuple[str, Any]] = [
    ("data.items.all(i, i.n > 0)", True),
    ("data.items.exists(i, i.tenant == 'evil')", True),
    ("data.items.exists_one(i, i.tenant == 'evil')", True),
    ("data.items.filter(i, i.tenant == 'acme').size() == 2", True),
    ("data.items.map(i, i.n) == [1, 2, 3]", True),
    ("has(data.finished_at) && !has(data.error_code)", True),
    ("data.state != 'succeeded' || has(data.finished_at)", True),
    ("timestamp(data.finished_at) <= now", True),
    ("now - timestamp(data.finished_at) < duration('2m')", True),
    ("now - timestamp(data.finished_at) > duration('1h')", False),
    ("timestamp('2026-05-01T12:00:00+02:00') < now", True),
    ("duration('1h30m') == duration('90m')", True),
    ("data.path.startsWith('/srv/docs/') && !data.path.contains('..')", True),
    ("data.path.matches('^/srv/[a-z]+/')", True),
    ("size(data.path) <= 64", True),
    ("data.amount <= 100 || data.amount % 2 == 0", True),
    ("1 == 1.0", True),
    ("dyn('1') == 1", False),  # heterogeneous equality is false (toolgate's checker refuses '1' == 1)
    ("data.amount / 0 > 1", ERROR),
    ("9223372036854775807 + data.amount > 0", ERROR),
    ("data.missing > 0", ERROR),
    ("data.state < 3", ERROR),
    ("data.path.matches('(')", ERROR),
    ("timestamp('not a time') < now", ERROR),
]
RULES = (
    "data.items.all(i, i.state != 'blocked' || i.score <= 100.0)",
    "data.count == size(data.items)",
    "data.query == 'Q-1' && timestamp(data.observed_at) <= now",
)
TWO_CLAUSES = "data.count == size(data.items) && data.items.all(i, i.score >= 0.0)"


class Google:
    name = "cel-expr-python (Google, C++)"

    def __init__(self) -> None:
        dyn = google_cel.Type.Map(google_cel.Type.STRING, google_cel.Type.DYN)
        self.env = google_cel.NewEnv(variables={"data": dyn, "now": google_cel.Type.TIMESTAMP})

    def compile(self, expr: str) -> Any:
        return self.env.compile(expr, disable_check=True)  # dyn: type errors at run time

    def run(self, programs: list[Any], variables: dict[str, Any]) -> list[Any]:
        activation = self.env.Activation(variables)
        out = []
        for program in programs:
            value = program.eval(activation)
            out.append(ERROR if value.type() == google_cel.Type.ERROR else value.value())
        return out


class Rust:
    name = "common-expression-language (Rust)"

    def __init__(self) -> None:
        import cel

        self.cel = cel

    def compile(self, expr: str) -> Any:
        return self.cel.compile(expr)

    def run(self, programs: list[Any], variables: dict[str, Any]) -> list[Any]:
        context = self.cel.Context(variables=variables)
        out = []
        for program in programs:
            try:
                out.append(program.execute(context))
            except Exception:
                out.append(ERROR)
        return out


def conformance(runtime: Any) -> tuple[int, list[str]]:
    passed, failed = 0, []
    for expr, want in CASES:
        try:
            got = runtime.run([runtime.compile(expr)], {"data": DATA, "now": NOW})[0]
        except Exception:
            got = ERROR
        if (got is ERROR) == (want is ERROR) and (want is ERROR or got == want):
            passed += 1
        else:
            failed.append(expr)
    return passed, failed


def cost(runtime: Any, exprs: tuple[str, ...], datas: list[Any]) -> float:
    programs = [runtime.compile(e) for e in exprs]
    run: Callable[[list[Any], dict[str, Any]], list[Any]] = runtime.run
    run(programs, {"data": datas[0], "now": NOW})
    started = time.process_time()
    for data in datas:
        run(programs, {"data": data, "now": NOW})
    return (time.process_time() - started) / len(datas) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evaluations", type=int, default=3000)
    args = parser.parse_args()
    runtimes: list[Any] = [Google()]
    try:
        runtimes.append(Rust())
    except ImportError:
        print("common-expression-language is not installed: its column is left out")
    datas = [parse_json(r.value, 16)["data"] for r in results("celchoice", args.evaluations, NOW)]
    for runtime in runtimes:
        passed, failed = conformance(runtime)
        two = cost(runtime, (TWO_CLAUSES,), datas)
        three = cost(runtime, RULES, datas)
        print(f"{runtime.name}")
        print(
            f"  conformance cases passed      {passed}/{len(CASES)}"
            + (f"  failed: {failed}" if failed else "")
        )
        print(f"  two clauses with a list macro {two:8.1f} us per evaluation (fresh input)")
        print(f"  three rules, one conversion   {three:8.1f} us per result (fresh input)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
