"""The deterministic simulation (tests/simulation/): a short run holds, and it can fail.

A few hundred schedules must hold every invariant (the oracle's verdict for every
committed decision among them) while every kind of fault is injected and every profile
of targeted schedules runs; each planted bug (tests/simulation/bugs.py) must be found
within a small number of schedules; a failing schedule replays from its recorded choices
and shrinks. ``make simulate`` runs the long version (10,000 schedules).
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from toolgate.gate._gate import Gate

from tests import ROOT
from tests.simulation.__main__ import shrink
from tests.simulation.bugs import BUGS
from tests.simulation.world import FAULTS, PROFILES, profile_of, run_schedule

SCHEDULES = 300
FIRST_SEED = 1_000_000  # apart from make simulate's seeds 0..9999
# Every planted bug is found within this many schedules from FIRST_SEED: the targeted
# profiles reach the rare states (docs/simulation.md, Planted bugs, for the figures).
BUG_BOUND = 60
# The in-process hunts of this file run with this process's hash seed, not the table's: a
# schedule's await order may differ, so they look a little further.
HUNT = 100
RULE_SCHEDULES = 30  # schedules over the contract set with cel rules


def _simulation(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m tests.simulation ARGS`` (it runs itself with hash seed 0)."""
    return subprocess.run(
        [sys.executable, "-m", "tests.simulation", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def bug_hunt() -> dict[str, tuple[int, str] | None]:
    """``python -m tests.simulation --bug-table`` from FIRST_SEED, at most BUG_BOUND schedules
    per bug: planted bug -> the schedules to its first failure and the invariant it broke
    (None: not found). Run as ``make simulate`` runs, hash seed 0, so the figures are the
    documented ones."""
    run = _simulation("--bug-table", "--seed", str(FIRST_SEED), "--schedules", str(BUG_BOUND), "--jobs", "1")
    rows: dict[str, tuple[int, str] | None] = {}
    for line in run.stdout.splitlines():
        match = re.match(r"^(\S+)\s+(>?\d+)\s+(?:SEED=\d+: (.+)|NOT FOUND)$", line)
        if match:
            rows[match[1]] = None if match[2].startswith(">") else (int(match[2]), match[3])
    assert rows, f"no bug table in the output (exit {run.returncode}):\n{run.stdout}\n{run.stderr}"
    return rows


@pytest.fixture(scope="module")
def bug_table(bug_hunt: dict[str, tuple[int, str] | None]) -> dict[str, int | None]:
    """Planted bug -> the schedules to its first failure (None: not found)."""
    return {bug: None if hit is None else hit[0] for bug, hit in bug_hunt.items()}


class TestSchedules:
    def test_a_few_hundred_schedules_hold_every_invariant(self) -> None:
        """300 schedules, every profile and every kind of fault among them, break no
        invariant, and the oracle compares their committed decisions with the gate's
        verdicts. Run as ``make simulate`` runs them (hash seed 0): a failure here prints
        its seed and the command that replays it, the same on every machine."""
        run = _simulation(
            "--schedules", str(SCHEDULES), "--seed", str(FIRST_SEED), "--jobs", "1", "--no-bugs",
            "--shrink-seconds", "10",
        )  # fmt: skip
        out = run.stdout
        assert f"simulation: {SCHEDULES} schedules, 0 failures" in out, out[-4000:] + run.stderr[-2000:]
        faults = dict(
            (name, int(count))
            for name, count in re.findall(
                r"(\w+) (\d+)", out.split("faults injected: ", 1)[1].splitlines()[0]
            )
        )
        kinds = {kind for events in FAULTS.values() for kind, _ in events}
        kinds |= {"crash", "pause", "rebalance", "slow_restore", "failing_restore", "outage"}
        # The pipelined loop's states: a partition paused with its queue full, and one revoked
        # while its transaction is in flight.
        kinds |= {"queue_full", "revoke_in_flight"}
        # The rollout profile's contracts topic: its reads lag, or are cut off until healed.
        kinds |= {"contracts_lag", "contracts_cut"}
        # The retry profile: a failed transaction's backoff ends as its partition is revoked.
        kinds |= {"revoked_at_backoff"}
        assert {kind for kind in kinds if not faults.get(kind)} == set(), out[-4000:]
        seeds = range(FIRST_SEED, FIRST_SEED + SCHEDULES)
        assert {profile_of(seed).name for seed in seeds} == {p.name for p in PROFILES}
        # The oracle compared committed decisions with the gate's verdict: a few per intake
        # record written (about ten records a schedule).
        match = re.search(r"oracle: (\d+) committed decisions", out)
        assert match is not None, out[-4000:]
        assert int(match[1]) >= 5 * SCHEDULES
        # The changelog was compared with a live owner's ledger, not empty, after healing in
        # most schedules (three partitions each).
        match = re.search(r"(\d+) state changelog partitions equal to their owner's ledger", out)
        assert match is not None, out[-4000:]
        assert int(match[1]) >= SCHEDULES
        # Results of a published contract version, written after its set marker, were decided
        # and committed, and checked against the set that decided them (invariants 17, 18).
        match = re.search(r"(\d+) decisions of results whose contract was published before them", out)
        assert match is not None, out[-4000:]
        assert int(match[1]) >= SCHEDULES // len(PROFILES)

    def test_a_seed_runs_the_same_schedule_every_time(self, gate: Gate) -> None:
        """The same seed makes the same choices and injects the same faults."""
        first, second = run_schedule(FIRST_SEED + 7, gate), run_schedule(FIRST_SEED + 7, gate)
        assert first.choices.made == second.choices.made
        assert first.faults == second.faults
        assert first.choices.count > 100


class TestRules:
    def test_schedules_with_cel_rules_hold_every_invariant(self, gate: Gate) -> None:
        """Schedules whose review_status carries a rule that raises at run time (on retries) and
        one over the decision's clock break no invariant, and the oracle saw both refuse."""
        from tests.simulation.contracts import ruled_gate

        ruled = ruled_gate(gate)
        outcomes = [run_schedule(seed, ruled) for seed in range(FIRST_SEED, FIRST_SEED + RULE_SCHEDULES)]
        assert [(o.seed, o.violation) for o in outcomes if o.violation is not None] == []
        rejected = sum((o.codes for o in outcomes), collections.Counter[str]())
        assert rejected["RULE_FAILED"] > 0, rejected


REGRESSIONS = sorted((ROOT / "tests" / "simulation" / "regressions").glob("seed-*.json"))


class TestRegressions:
    """Schedules that broke an invariant, shrunk and kept with their cause
    (tests/simulation/regressions/, docs/simulation.md, What it found): each replays to the
    faults it was kept for, and holds."""

    def test_every_kept_schedule_names_its_invariant_and_cause(self) -> None:
        """Each kept schedule says which invariant it broke and why, and lists its faults."""
        assert len(REGRESSIONS) >= 2
        for path in REGRESSIONS:
            spec = json.loads(path.read_text())
            for key in ("invariant", "cause", "faults"):
                assert spec[key], f"{path.name}: no {key}"
            assert path.name == f"seed-{spec['seed']}.json"

    @pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
    def test_the_kept_schedule_reaches_its_faults_and_holds(self, path: Path) -> None:
        """The replay injects the faults the schedule was kept for (the worker's client calls
        still lead it there) and breaks no invariant."""
        spec = json.loads(path.read_text())
        run = _simulation("--replay", str(path))
        out = run.stdout
        made = set(re.findall(r"^(#\d+: .+)$", out, re.M))
        moved = [fault for fault in spec["faults"] if fault not in made]
        assert not moved, (
            f"{path.name} no longer reaches {moved[:3]}: a change of the worker's client calls moved "
            "its choices; find the state again (docs/simulation.md, Replaying and shrinking a failure)"
        )
        verdict = [line for line in out.splitlines() if line.startswith("SEED=")]
        assert verdict == [f"SEED={spec['seed']}: held"], f"{verdict or run.stderr[-2000:]}: {spec['cause']}"


class TestOracle:
    def test_a_valid_result_rejected_as_a_duplicate_breaks_the_oracle(self, gate: Gate) -> None:
        """A ledger that answers "has an answer" for any attempt of a request rejects a
        second attempt's valid result: only the oracle's invariant names it (the others
        bound answers from above)."""
        worker = BUGS["ledger-ignores-attempt"]
        outcome = next(
            o
            for o in (
                run_schedule(s, gate, worker_class=worker) for s in range(FIRST_SEED, FIRST_SEED + HUNT)
            )
            if o.violation is not None
        )
        assert outcome.violation is not None
        assert outcome.violation.invariant == "every committed decision is the gate's verdict"
        assert "DUPLICATE_RESULT" in outcome.violation.detail

    def test_a_worker_that_stops_deciding_after_an_outage_breaks_progress(self, gate: Gate) -> None:
        """A worker that gives its partitions up after a long broker outage leaves records
        undecided once the broker serves again: the progress invariant names it."""
        worker = BUGS["gives-up-after-outage"]
        outcome = next(
            o
            for o in (
                run_schedule(s, gate, worker_class=worker) for s in range(FIRST_SEED, FIRST_SEED + HUNT)
            )
            if o.violation is not None
        )
        assert outcome.violation is not None
        assert outcome.violation.invariant == "decisions go on after healing"
        assert outcome.faults["outage"] == 1


CHANGELOG = "the state changelog equals the owners' ledger"


class TestWaitsAndAbortedState:
    """A wait whose read failed decides nothing, and what an aborted transaction carried
    reaches the state changelog and the ledger when its batch is decided again: each
    planted bug of these classes is found, by the invariants of its class."""

    def test_a_wait_that_gave_up_on_a_failed_read_is_named(
        self, bug_hunt: dict[str, tuple[int, str] | None]
    ) -> None:
        """A wait that takes a failed end-offsets lookup for its bound running out, and
        decides, breaks the failed-wait invariant (the oracle would excuse its unknown
        request as a wait that timed out)."""
        hit = bug_hunt.get("wait-gives-up-on-error")
        assert hit is not None
        assert hit[1] == "a wait that failed decides nothing"

    def test_a_failed_read_taken_for_caught_up_decides_with_less_than_it_owes(
        self, bug_hunt: dict[str, tuple[int, str] | None]
    ) -> None:
        """A catch-up or restore that counts a failed end-offsets lookup as reached decides
        before applying what it owed: the oracle or the restore invariant names it."""
        hit = bug_hunt.get("failed-read-as-caught-up")
        assert hit is not None
        assert hit[1] in ("restore before decisions", "every committed decision is the gate's verdict")

    @pytest.mark.parametrize("bug", ["retry-drops-state-records", "retry-forgets-ledger"])
    def test_state_lost_with_an_aborted_transaction_is_named(
        self, bug_hunt: dict[str, tuple[int, str] | None], bug: str
    ) -> None:
        """A retried batch whose state records or ledger updates are lost leaves a ledger
        that differs from the changelog or from the committed acceptances."""
        hit = bug_hunt.get(bug)
        assert hit is not None
        assert hit[1] in (CHANGELOG, "accepted ledger equals committed acceptances")

    def test_the_changelog_check_finds_what_the_others_miss(
        self, bug_hunt: dict[str, tuple[int, str] | None]
    ) -> None:
        """The changelog invariant is the first to break for some planted bugs: state lost
        with an aborted transaction (or by a take-over that fences nothing) on a partition
        that decides nothing more breaks no other invariant before the end."""
        first = {bug for bug, hit in bug_hunt.items() if hit is not None and hit[1] == CHANGELOG}
        assert first & {"retry-drops-state-records", "retry-forgets-ledger", "no-fence-on-take-over"}


class TestRetries:
    def test_a_retry_decided_before_reading_its_request_is_found(
        self, bug_hunt: dict[str, tuple[int, str] | None]
    ) -> None:
        """A retry's result names its attempt: a node that holds the earlier one and decides
        it STALE_RESULT without reading its requests on leaves a valid, fresh attempt
        unanswered, which invariant 10 no longer excuses."""
        hit = bug_hunt.get("stale-without-reading")
        assert hit is not None, f"stale-without-reading not found in {BUG_BOUND} schedules"
        assert hit[1] == "every valid, fresh result's attempt is answered once"


UNKNOWN_AFTER_PUBLISHED = "no valid result is rejected as unknown once its contract was published before it"


class TestContractPublication:
    """A contract version published to the contracts topic while its results flow: no
    valid result is rejected as unknown once its contract was published before it, a
    worker that knows it is behind answers retryable, and each decision names the set that
    made it. Each planted bug of the contracts catch-up is found by the invariant of its
    class."""

    @pytest.mark.parametrize(
        ("bug", "invariant"),
        [
            ("unknown-without-catching-up", UNKNOWN_AFTER_PUBLISHED),
            ("catch-up-to-stale-end", "a contracts catch-up that says it caught up read to its end"),
            ("header-names-wrong-set", "each decision names the set that made it"),
            ("old-set-after-bound", "a set that knows it is behind answers retryable"),
        ],
    )
    def test_the_planted_bug_breaks_its_invariant(
        self, bug_hunt: dict[str, tuple[int, str] | None], bug: str, invariant: str
    ) -> None:
        """The first schedule that finds the planted bug breaks the contracts invariant it
        was planted for."""
        hit = bug_hunt.get(bug)
        assert hit is not None, f"{bug} not found in {BUG_BOUND} schedules"
        assert hit[1] == invariant


class TestPlantedBugs:
    @pytest.mark.parametrize("bug", sorted(BUGS))
    def test_each_planted_bug_is_found(self, bug_table: dict[str, int | None], bug: str) -> None:
        """The simulation finds the planted bug within a small number of schedules (the
        figure ``--bug-table`` prints, the same in every run: PYTHONHASHSEED=0)."""
        assert bug in bug_table, f"{bug}: no row in the bug table"
        found = bug_table[bug]
        assert found is not None, f"{bug} not found in {BUG_BOUND} schedules"
        assert 1 <= found <= BUG_BOUND

    def test_a_failure_replays_from_its_choices_and_shrinks(self, gate: Gate) -> None:
        """A failing schedule's recorded choices break the same invariant again, and the
        shrunk schedule, with fewer choices, still does."""
        worker = BUGS["answer-without-ledger"]
        seed = next(
            s
            for s in range(FIRST_SEED, FIRST_SEED + HUNT)
            if run_schedule(s, gate, worker_class=worker).violation
        )
        first = run_schedule(seed, gate, worker_class=worker)
        assert first.violation is not None
        again = run_schedule(seed, gate, replay=first.choices.made, worker_class=worker)
        assert again.violation is not None
        assert str(again.violation) == str(first.violation)
        small = shrink(
            seed, gate, first.violation.invariant, first.choices.made, "answer-without-ledger", 10.0
        )
        assert len(small) < len(first.choices.made)
        shrunk = run_schedule(seed, gate, replay=small, worker_class=worker)
        assert shrunk.violation is not None
        assert shrunk.violation.invariant == first.violation.invariant
