"""Run the deterministic simulation: schedules, planted bugs, and replays of failures.

Each schedule is one seed (tests/simulation/world.py): that number decides the traffic, the
order of every ready callback, every latency and every fault. A schedule that breaks an
invariant is shrunk (its non-default choices, delta-debugged) and written to
``.simulation/`` with the one command that replays it.

    python -m tests.simulation                          # 10,000 schedules from seed 0
    python -m tests.simulation --schedules 500 --seed 7000
    python -m tests.simulation --replay .simulation/seed-123.json
    python -m tests.simulation --seed 123 --schedules 1 --trace

Exit 0 when every schedule held, 1 when one failed or a planted bug went unfound,
2 on a usage error.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUT = Path(".simulation")
BUG_BOUND = 500  # a planted bug must be found within this many schedules
MAX_SHRUNK = 3  # failures shrunk and written out per run (the rest are listed with their seeds)
PROGRESS = 1000  # a long run prints a line each this many schedules, and each failure as found


def _gate() -> Any:
    from toolgate.authoring._fixtures import fixtures_keyring
    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._gate import Gate

    from tests.unit.builders import CONTRACTS

    return Gate(ContractSet.load(CONTRACTS), fixtures_keyring(CONTRACTS))


_GATE: Any = None


def _init() -> None:
    global _GATE
    _GATE = _gate()


def _worker_class(bug: str | None) -> Any:
    if bug is None:
        from tests.simulation.world import SimWorker

        return SimWorker
    from tests.simulation.bugs import BUGS

    return BUGS[bug]


def _run_seeds(job: tuple[list[int], str | None, bool]) -> list[tuple[int, str | None, str, dict[str, int]]]:
    """Run ``seeds`` (stop at the first failure when ``first``); one row per schedule run."""
    from tests.simulation.world import run_schedule

    seeds, bug, first = job
    rows = []
    for seed in seeds:
        outcome = run_schedule(seed, _GATE, worker_class=_worker_class(bug))
        v = outcome.violation
        counts = dict(outcome.faults)
        counts["oracle:checked"] = outcome.checked  # summed with the faults, printed apart
        counts["oracle:excused"] = outcome.excused
        counts["oracle:changelogs"] = outcome.changelogs
        counts["oracle:contracts"] = outcome.contracts
        rows.append((seed, v.invariant if v else None, v.detail if v else "", counts))
        if v is not None and first:
            break
    return rows


def shrink(
    seed: int,
    gate: Any,
    invariant: str,
    made: dict[int, int],
    bug: str | None,
    budget_s: float = 30.0,
    notes: dict[int, str] | None = None,
) -> dict[int, int]:
    """The smallest set of non-default choices found that still breaks ``invariant``: first
    without all reorderings, then without all latencies (when the failure survives that),
    then delta debugging: drop chunks of choices, halving the chunk until none can go."""
    from tests.simulation.world import run_schedule

    worker_class = _worker_class(bug)
    deadline = time.monotonic() + budget_s

    def fails(choices: dict[int, int]) -> bool:
        outcome = run_schedule(seed, gate, replay=choices, worker_class=worker_class)
        return outcome.violation is not None and outcome.violation.invariant == invariant

    keep = dict(made)
    for kind in ("order", "latency"):
        trial = {k: v for k, v in keep.items() if (notes or {}).get(k) != kind}
        if len(trial) < len(keep) and fails(trial):
            keep = trial
    chunks = 2
    while len(keep) >= 1 and time.monotonic() < deadline:
        keys = sorted(keep)
        size = max(1, len(keys) // chunks)
        reduced = False
        for start in range(0, len(keys), size):
            if time.monotonic() >= deadline:
                break
            drop = set(keys[start : start + size])
            trial = {k: v for k, v in keep.items() if k not in drop}
            if fails(trial):
                keep = trial
                chunks = max(chunks - 1, 2)
                reduced = True
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(keys), chunks * 2)
    return keep


def _report_failure(
    seed: int, invariant: str, detail: str, bug: str | None, gate: Any, budget_s: float
) -> None:
    from tests.simulation.world import profile_of, run_schedule

    worker_class = _worker_class(bug)
    first = run_schedule(seed, gate, worker_class=worker_class)
    made = first.choices.made
    small = made
    if first.violation is not None:
        small = shrink(seed, gate, invariant, made, bug, budget_s, first.choices.notes)
    final = run_schedule(seed, gate, replay=small, worker_class=worker_class)
    OUT.mkdir(exist_ok=True)
    name = f"seed-{seed}" + (f"-{bug}" if bug else "")
    path = OUT / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "seed": seed,
                # The profile is the one its seed drew (or --profile's) when recorded: replayed with it,
                # a schedule survives a change of PROFILES.
                "profile": profile_of(seed).name,
                "bug": bug,
                "invariant": invariant,
                "choices": {str(k): v for k, v in small.items()},
            },
            indent=1,
        )
    )
    notes = final.choices.notes
    minor = collections.Counter(note for note in notes.values() if note in ("order", "latency"))
    print(
        f"  schedule: {len(small)} of {len(made)} non-default choices kept (shrunk): "
        f"{minor['order']} reorderings, {minor['latency']} latencies (the replay lists them), and:"
    )
    for index in sorted(notes):
        if notes[index] not in minor:
            print(f"    #{index}: {notes[index]}")
    again = final.violation.invariant if final.violation else "nothing"
    print(f"  the shrunk schedule breaks: {again}")
    print(f"  replay: .venv/bin/python -m tests.simulation --replay {path}")


def _chunks(seeds: list[int], jobs: int) -> list[list[int]]:
    size = max(1, min(50, len(seeds) // (jobs * 4) or 1))
    return [seeds[i : i + size] for i in range(0, len(seeds), size)]


def replay(path: Path, gate: Any) -> int:
    """Run one recorded schedule and print what it chose and what broke."""
    from tests.simulation import world
    from tests.simulation.world import PROFILES, run_schedule

    try:
        spec = json.loads(path.read_text())
        seed = int(spec["seed"])
        choices = {int(k): int(v) for k, v in spec["choices"].items()}
        bug = spec.get("bug")
        profile = spec.get("profile")  # older recordings: the profile its seed draws now
        if profile is not None and profile not in {p.name for p in PROFILES}:
            raise ValueError(f"no profile {profile!r}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"simulation: {path}: not a recorded schedule ({exc})", file=sys.stderr)
        return 2
    if profile is not None:
        world.FORCED_PROFILE = profile
    outcome = run_schedule(seed, gate, replay=choices, worker_class=_worker_class(bug))
    for index in sorted(outcome.choices.notes):
        print(f"#{index}: {outcome.choices.notes[index]}")
    v = outcome.violation
    print(
        f"SEED={seed}"
        + (f" bug={bug}" if bug else "")
        + f": {v.invariant + ': ' + v.detail if v else 'held'}"
    )
    return 1 if v else 0


def first_failures(
    pool: Any, bugs: Sequence[str], seeds: list[int], jobs: int
) -> dict[str, tuple[int, str, str] | None]:
    """Per planted bug, its first failing schedule among ``seeds`` (seed, invariant, detail);
    ``pool`` None: in this process, one seed after another, up to the first failure."""
    found: dict[str, tuple[int, str, str] | None] = {}
    for bug in bugs:
        hit: tuple[int, str, str] | None = None
        if pool is None:
            row = next((r for r in _run_seeds((seeds, bug, True)) if r[1] is not None), None)
            found[bug] = None if row is None else (row[0], str(row[1]), row[2])
            continue
        for rows in pool.imap(_run_seeds, [(chunk, bug, True) for chunk in _chunks(seeds, jobs)]):
            row = next((row for row in rows if row[1] is not None), None)
            if row is not None and (hit is None or row[0] < hit[0]):
                hit = (row[0], str(row[1]), row[2])
        found[bug] = hit
    return found


def bug_table(first: int, schedules: int, jobs: int) -> int:
    """Print, per planted bug, the schedules to its first failure from ``first``."""
    from tests.simulation.bugs import BUGS

    seeds = list(range(first, first + schedules))
    started = time.perf_counter()
    if jobs == 1:
        found = first_failures(None, list(BUGS), seeds, jobs)
    else:
        with multiprocessing.get_context("fork").Pool(jobs, initializer=_init) as pool:
            found = first_failures(pool, list(BUGS), seeds, jobs)
    print(f"planted bugs, schedules from SEED={first} to the first failure (at most {schedules}):")
    print(f"{'bug':<30} {'schedules':>9}  first failing seed: invariant")
    for bug, hit in found.items():
        if hit is None:
            print(f"{bug:<30} {'>' + str(schedules):>9}  NOT FOUND")
        else:
            print(f"{bug:<30} {hit[0] - first + 1:>9}  SEED={hit[0]}: {hit[1]}")
    missed = sum(hit is None for hit in found.values())
    print(f"{len(found) - missed} of {len(found)} found in {time.perf_counter() - started:.1f} s")
    return 1 if missed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.simulation",
        description="Deterministic simulation of the worker loop: each schedule is one seed that "
        "decides the traffic, the order of every ready task, every latency and every fault; the "
        "exactly-once invariants are checked throughout. Failures are shrunk and written to "
        ".simulation/ with the command that replays them.",
        epilog="example: python -m tests.simulation --schedules 2000 --seed 40000 --jobs 2",
    )
    parser.add_argument("--schedules", type=int, default=10_000, help="how many seeds to run (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)"
    )
    parser.add_argument("--replay", type=Path, help="run one recorded schedule (.simulation/*.json)")
    parser.add_argument(
        "--bugs", action=argparse.BooleanOptionalAction, default=True, help="also hunt the planted bugs"
    )
    parser.add_argument(
        "--bug",
        help="run the schedules with one planted bug (tests/simulation/bugs.py) to see a failure reported",
    )
    parser.add_argument(
        "--bug-table",
        action="store_true",
        help="only hunt the planted bugs: per bug, the schedules from --seed to its first failure "
        "(at most --schedules)",
    )
    parser.add_argument(
        "--profile",
        choices=["mixed", "take-over", "rollout", "restore", "retry", "requests-race", "outage"],
        help="run every schedule with this profile instead of going round them all",
    )
    parser.add_argument("--shrink-seconds", type=float, default=30.0, help="time to shrink each failure")
    args = parser.parse_args(argv)
    if args.schedules < 1 or args.jobs < 1:
        parser.error("--schedules and --jobs must be at least 1")
    if args.replay is not None:
        return replay(args.replay, _gate())
    if args.bug is not None:
        from tests.simulation.bugs import BUGS

        if args.bug not in BUGS:
            parser.error(f"--bug: no planted bug {args.bug!r} (one of: {', '.join(BUGS)})")
        args.bugs = False
    if args.profile is not None:
        from tests.simulation import world

        world.FORCED_PROFILE = args.profile  # the pool's processes are forked: they inherit it
    _init()
    if args.bug_table:
        return bug_table(args.seed, args.schedules, args.jobs)
    seeds = list(range(args.seed, args.seed + args.schedules))
    started = time.perf_counter()
    faults: collections.Counter[str] = collections.Counter()
    failed: list[tuple[int, str, str]] = []
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(args.jobs, initializer=_init) as pool:
        jobs = [(chunk, args.bug, False) for chunk in _chunks(seeds, args.jobs)]
        done = 0
        for rows in pool.imap(_run_seeds, jobs):
            for seed, invariant, detail, counts in rows:
                done += 1
                faults.update(counts)
                if invariant is not None:
                    failed.append((seed, invariant, detail))
                    print(f"failing: SEED={seed}: {invariant}: {detail}", flush=True)  # shrunk at the end
            if len(seeds) >= PROGRESS and done % PROGRESS < len(rows):
                elapsed = time.perf_counter() - started
                print(
                    f"progress: {done} of {len(seeds)} schedules in {elapsed:.0f} s, {len(failed)} failing",
                    flush=True,
                )
        seconds = time.perf_counter() - started
        print(
            f"{len(seeds)} schedules in {seconds:.1f} s: {len(seeds) / seconds:.1f} schedules/s "
            f"({args.jobs} processes)"
        )
        checked, excused = faults.pop("oracle:checked", 0), faults.pop("oracle:excused", 0)
        changelogs = faults.pop("oracle:changelogs", 0)
        contracts = faults.pop("oracle:contracts", 0)
        print("faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
        print(
            f"oracle: {checked} committed decisions compared with the gate's verdict; "
            f"{excused} fresh attempts excused (their node could not see them: its bounded wait ran "
            "out, or it held an earlier attempt); "
            f"{changelogs} state changelog partitions equal to their owner's ledger after healing; "
            f"{contracts} decisions of results whose contract was published before them"
        )
        shrunk = 0
        for seed, invariant, detail in failed:
            print(f"FAIL SEED={seed}: {invariant}: {detail}")
            if shrunk < MAX_SHRUNK:
                shrunk += 1
                _report_failure(seed, invariant, detail, args.bug, _GATE, args.shrink_seconds)
        missed = 0
        if args.bugs:
            from tests.simulation.bugs import BUGS

            hits = first_failures(pool, list(BUGS), seeds[:BUG_BOUND], args.jobs)
            for bug, found in hits.items():
                if found is None:
                    missed += 1
                    print(
                        f"planted bug {bug}: NOT FOUND in {min(BUG_BOUND, len(seeds))} schedules "
                        f"from SEED={args.seed}"
                    )
                else:
                    print(
                        f"planted bug {bug}: found after {found[0] - args.seed + 1} schedules "
                        f"(SEED={found[0]}: {found[1]})"
                    )
    failures = len(failed) + missed
    print(f"simulation: {len(seeds)} schedules, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        # Set iteration order decides some await orders: fix it, so a seed replays exactly.
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.simulation", *sys.argv[1:]])
    sys.exit(main())
