"""Long fuzz run of the gate: the properties of tests/unit/gate/test_fuzz.py for minutes or hours.

Usage::

    python ops/chaos/fuzz_long.py --minutes 60 [--engine auto|atheris|hypothesis]
                                  [--crash-dir DIR] [--json] [--replay FILE...]

Each input is one of: arbitrary bytes, arbitrary JSON, or an envelope generated from a
contract's schema and mutated (an unknown field holding a canary, a value replaced by a
canary, a changed type, a duplicated member in the raw bytes, truncation, a second
document, NaN/overflow, nesting past the limit). Every verdict is checked by
:func:`tests.fuzzing.check` against python-jsonschema and the contract's declared
projection: no exception, no INTERNAL_ERROR, no accept the schema rejects, no canary or
unknown field in an agent envelope, the known code for each structural mutation.

Engines:

* ``atheris`` (coverage-guided libFuzzer over the gate's Python code, ``pip install
  atheris``) drives the same hypothesis strategies through ``fuzz_one_input``; a
  failing input is saved to ``--crash-dir`` and the run goes on. ``--replay FILE``
  runs saved inputs again.
* ``hypothesis`` (the fallback): batches of fresh random examples until time is up; a
  failing example is shrunk, printed, counted, and the run goes on.

At the end (and every minute) it prints inputs tried, crashes, elapsed time and the
number of verdicts per outcome (``success``, ``failure``, ``stage/code``). Exit status
1 when any input broke a property.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import hypothesis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@dataclass
class Stats:
    """What the run has seen."""

    engine: str
    started: float = field(default_factory=time.monotonic)
    inputs: int = 0
    crashes: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    by_kind: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)
    last_report: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def summary(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "elapsed_s": round(self.elapsed, 1),
            "inputs": self.inputs,
            "inputs_per_s": round(self.inputs / max(self.elapsed, 1e-9)),
            "crashes": self.crashes,
            "outcomes": dict(sorted(self.outcomes.items())),
            "inputs_by_kind": dict(sorted(self.by_kind.items())),
            "failures": self.failures[:20],
        }

    def print(self, *, final: bool = False) -> None:
        line = (
            f"fuzz_long: {self.elapsed:8.1f} s  inputs {self.inputs:,}  "
            f"({self.inputs / max(self.elapsed, 1e-9):,.0f}/s)  crashes {self.crashes}  "
            f"unique outcomes {len(self.outcomes)}"
        )
        print(line, flush=True)
        if final:
            for outcome, count in sorted(self.outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {outcome:40s} {count:>12,}")
            for kind, count in sorted(self.by_kind.items()):
                print(f"  input kind {kind:29s} {count:>12,}")
            for failure in self.failures[:20]:
                print(f"  FAILURE {failure}")
        self.last_report = time.monotonic()


def build_property(stats: Stats, settings_: hypothesis.settings) -> Any:
    """The hypothesis test every engine drives: one input, every property."""
    from hypothesis import given
    from hypothesis import strategies as st

    from tests.fuzzing import arbitrary_message, check, fuzz_gate, label, scenarios, targets

    gate = fuzz_gate()
    contracts = targets(gate)
    oracles: dict[str, Any] = {}
    json_values = st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=40),
        lambda children: (
            st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=12), children, max_size=6)
        ),
        max_leaves=40,
    )

    @settings_
    @given(data=st.data())
    def prop(data: Any) -> None:
        contract = data.draw(st.sampled_from(contracts))
        kind = data.draw(st.sampled_from(["bytes", "json", "schema", "schema", "schema", "schema"]))
        if kind == "bytes":
            scenario = arbitrary_message(gate, contract, data.draw(st.binary(max_size=2048)))
        elif kind == "json":
            raw = json.dumps(data.draw(json_values)).encode()
            scenario = arbitrary_message(gate, contract, raw)
        else:
            scenario = data.draw(scenarios(gate, contract))
            kind = f"schema/{scenario.mutation}"
        stats.inputs += 1
        stats.by_kind[kind] += 1
        verdict = check(gate, scenario, oracles)
        stats.outcomes[label(verdict)] += 1

    return prop


def run_hypothesis(stats: Stats, deadline: float, batch: int) -> None:
    from hypothesis import HealthCheck, settings

    while time.monotonic() < deadline:
        prop = build_property(
            stats,
            settings(
                max_examples=batch,
                derandomize=False,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
        try:
            prop()
        except Exception as exc:  # a property broke: count it, keep fuzzing
            stats.crashes += 1
            text = "".join(traceback.format_exception_only(exc)).strip()
            notes = "\n".join(getattr(exc, "__notes__", []))
            stats.failures.append(f"{text[:500]} {notes[:2000]}")
            print(f"fuzz_long: PROPERTY BROKEN\n{text}\n{notes}", flush=True)
        if time.monotonic() - stats.last_report >= 60:
            stats.print()


def run_atheris(stats: Stats, deadline: float, crash_dir: Path, replay: list[Path]) -> None:
    import atheris
    from hypothesis import HealthCheck, settings

    # The gate's modules, instrumented for coverage feedback (before anything imports them).
    with atheris.instrument_imports(include=["toolgate"]):
        for name in ("_gate", "_parse", "_project", "_rules"):
            module = f"toolgate.gate.{name}"
            importlib.import_module(module)
    prop = build_property(
        stats, settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    )
    fuzz_one = prop.hypothesis.fuzz_one_input

    def one_input(buffer: bytes) -> None:
        try:
            fuzz_one(buffer)
        except Exception as exc:
            stats.crashes += 1
            crash_dir.mkdir(parents=True, exist_ok=True)
            path = crash_dir / f"crash-{stats.crashes:04d}.bin"
            path.write_bytes(buffer)
            text = "".join(traceback.format_exception_only(exc)).strip()
            stats.failures.append(f"{path}: {text[:500]}")
            print(f"fuzz_long: PROPERTY BROKEN (input saved to {path})\n{text}", flush=True)
        now = time.monotonic()
        if now - stats.last_report >= 60:
            stats.print()
        if now >= deadline:
            finish(stats)

    if replay:
        for path in replay:
            one_input(path.read_bytes())
        finish(stats)
    atheris.Setup([sys.argv[0], "-max_len=16384", "-len_control=0", "-rss_limit_mb=4096"], one_input)
    atheris.Fuzz()


_JSON = False


def finish(stats: Stats) -> None:
    stats.print(final=True)
    if _JSON:
        print(json.dumps(stats.summary()), flush=True)
    sys.stdout.flush()
    # atheris never returns from Fuzz(): leave from here, with the verdict as status.
    os._exit(1 if stats.crashes else 0)


def main(argv: list[str] | None = None) -> int:
    global _JSON
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to fuzz (10)")
    parser.add_argument(
        "--engine",
        choices=["auto", "atheris", "hypothesis"],
        default="auto",
        help="auto: atheris when it is installed, else hypothesis",
    )
    parser.add_argument(
        "--batch", type=int, default=2000, help="hypothesis engine: examples per batch (2000)"
    )
    parser.add_argument(
        "--crash-dir",
        type=Path,
        default=Path("fuzz-crashes"),
        help="atheris engine: where failing inputs are saved",
    )
    parser.add_argument(
        "--replay", type=Path, nargs="*", default=[], help="atheris engine: run these saved inputs and stop"
    )
    parser.add_argument("--json", action="store_true", help="also print the summary as JSON")
    args = parser.parse_args(argv)
    _JSON = args.json
    engine = args.engine
    if engine == "auto":
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "hypothesis"
    stats = Stats(engine)
    deadline = stats.started + args.minutes * 60
    print(f"fuzz_long: engine {engine}, {args.minutes:g} minutes", flush=True)
    if engine == "atheris":
        run_atheris(stats, deadline, args.crash_dir, args.replay)  # never returns
    run_hypothesis(stats, deadline, args.batch)
    finish(stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
