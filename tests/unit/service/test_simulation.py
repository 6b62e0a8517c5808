"""The deterministic simulation (tests/simulation/): a short run holds, and it can fail.

A few hundred schedules must hold every invariant (the oracle's verdict for every
committed decision among them) while every kind of fault is injected and every profile
of targeted schedules runs; each planted bug (tests/simulation/bugs.py) must be found
within a small number of schedules; a failing schedule replays from its recorded choices
and shrinks. ``make simulate`` runs the long version (10,000 schedules).
"""

from __future__ import annotations

import collections

import pytest
from toolgate.gate._gate import Gate

from tests.simulation.__main__ import shrink
from tests.simulation.bugs import BUGS
from tests.simulation.world import FAULTS, PROFILES, profile_of, run_schedule

SCHEDULES = 300
FIRST_SEED = 1_000_000  # apart from make simulate's seeds 0..9999
# Every planted bug is found within this many schedules from FIRST_SEED: the targeted
# profiles reach the rare states (docs/simulation.md, Planted bugs, for the figures).
BUG_BOUND = 60


class TestSchedules:
    def test_a_few_hundred_schedules_hold_every_invariant(self, gate: Gate) -> None:
        """300 schedules with every kind of fault injected break no invariant."""
        faults: collections.Counter[str] = collections.Counter()
        failures = []
        checked = 0
        profiles = set()
        for seed in range(FIRST_SEED, FIRST_SEED + SCHEDULES):
            outcome = run_schedule(seed, gate)
            faults.update(outcome.faults)
            checked += outcome.checked
            profiles.add(profile_of(seed).name)
            if outcome.violation is not None:
                failures.append(f"SEED={seed}: {outcome.violation}")
        assert failures == []
        kinds = {kind for events in FAULTS.values() for kind, _ in events}
        kinds |= {"crash", "pause", "rebalance", "slow_restore", "failing_restore", "outage"}
        # The pipelined loop's states: a partition paused with its queue full, and one revoked
        # while its transaction is in flight.
        kinds |= {"queue_full", "revoke_in_flight"}
        assert {kind for kind in kinds if not faults[kind]} == set()
        assert profiles == {p.name for p in PROFILES}
        # The oracle compared every committed decision with the gate's verdict: a few per
        # intake record written (about ten records a schedule).
        assert checked >= 5 * SCHEDULES

    def test_a_seed_runs_the_same_schedule_every_time(self, gate: Gate) -> None:
        """The same seed makes the same choices and injects the same faults."""
        first, second = run_schedule(FIRST_SEED + 7, gate), run_schedule(FIRST_SEED + 7, gate)
        assert first.choices.made == second.choices.made
        assert first.faults == second.faults
        assert first.choices.count > 100


class TestOracle:
    def test_a_valid_result_rejected_as_a_duplicate_breaks_the_oracle(self, gate: Gate) -> None:
        """A ledger that answers "has an answer" for any attempt of a request rejects a
        second attempt's valid result: only the oracle's invariant names it (the others
        bound answers from above)."""
        worker = BUGS["ledger-ignores-attempt"]
        outcome = next(
            o
            for o in (
                run_schedule(s, gate, worker_class=worker) for s in range(FIRST_SEED, FIRST_SEED + BUG_BOUND)
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
                run_schedule(s, gate, worker_class=worker) for s in range(FIRST_SEED, FIRST_SEED + BUG_BOUND)
            )
            if o.violation is not None
        )
        assert outcome.violation is not None
        assert outcome.violation.invariant == "decisions go on after healing"
        assert outcome.faults["outage"] == 1


class TestPlantedBugs:
    @pytest.mark.parametrize("bug", sorted(BUGS))
    def test_each_planted_bug_is_found(self, gate: Gate, bug: str) -> None:
        """The simulation finds the planted bug within a bounded number of schedules."""
        found = next(
            (
                seed
                for seed in range(FIRST_SEED, FIRST_SEED + BUG_BOUND)
                if run_schedule(seed, gate, worker_class=BUGS[bug]).violation is not None
            ),
            None,
        )
        assert found is not None, f"{bug} not found in {BUG_BOUND} schedules"

    def test_a_failure_replays_from_its_choices_and_shrinks(self, gate: Gate) -> None:
        """A failing schedule's recorded choices break the same invariant again, and the
        shrunk schedule, with fewer choices, still does."""
        worker = BUGS["answer-without-ledger"]
        seed = next(
            s
            for s in range(FIRST_SEED, FIRST_SEED + BUG_BOUND)
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
