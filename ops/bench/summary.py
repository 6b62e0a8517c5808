"""The worker bench's figures: medians over the rounds, the targets met or not, the report.

Every latency figure is printed also as a multiple of the floor's (:mod:`ops.bench.floor`)
measured in the same run: absolute milliseconds on a shared machine are mostly noise, the
ratio to Kafka's own exactly-once round trip at the same moment is not.
"""

from __future__ import annotations

import statistics
from typing import Any

from ops.bench.backlog import BASELINE, FLOOR, PARTITIONS
from ops.bench.measure import (
    CONTENDED_CPUS,
    at_least,
    at_most,
    median_or_none,
    opt,
    print_percentiles,
    print_targets,
    ratio,
    target,
)

# One result at a time (an agent waiting on each call), against the floor in the same run.
TARGET_ONE_P50_OVER_FLOOR = 1.5
TARGET_ONE_P99_OVER_FLOOR = 2.0
# At half the sustained rate: absolute, and against the floor's p99 at that rate.
TARGET_P99_MS = 50.0
TARGET_P99_OVER_FLOOR = 3.0
TARGET_OVER_PEER = 2.5  # results per CPU-second, the peer in the same run on the same backlog
GOAL_OVER_PEER = 3.0  # where that is meant to go
TARGET_RATE_OVER_BASELINE = 1.0  # the sustained rate against the baseline checkout's (main)
TARGET_ONE_OVER_BASELINE = 1.0  # one result at a time, p50 and p99, against the baseline's
# The worker's decide phase per result against decide_batch alone on the same workload (the
# gate bench's case): what the loop adds around the gate (lookup, messages, a shared core).
TARGET_DECIDE_OVER_ALONE = 1.5
TARGET_WORKER_OVER_RELAY = 0.7  # results per CPU-second
TARGET_RS_OVER_PY = 3.0
TARGET_RELAY_OVER_COPIER = 1.5  # CPU per result
TARGET_RESULTS_PER_TXN = 200  # at full load (the backlog runs)
TARGET_BROKER_OVER_PEER = 3.0
TARGET_PARTITION_SPREAD = 1.3  # CPU per result, most against least, over the partition sweep


def summarise(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    rows = []
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        rates = [r["results_per_s"] for r in mine]
        rows.append(
            {
                "variant": variant,
                "workers": mine[0]["workers"],
                "intake_partitions": mine[0]["intake_partitions"],
                "results_per_s": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "cpu_us_per_result": statistics.median(r["cpu_us_per_result"] for r in mine),
                "phases_us_per_result": {
                    phase: statistics.median(r["phases_us_per_result"].get(phase, 0.0) for r in mine)
                    for phase in mine[0]["phases_us_per_result"]
                },
                "gc_us_per_result": statistics.median(r["gc_us_per_result"] for r in mine),
                "gc_in_decide_us_per_result": median_or_none(
                    r.get("gc_in_decide_us_per_result") for r in mine
                ),
                "broker_us_per_result": median_or_none(r["broker_us_per_result"] for r in mine),
                "broker_cpus": median_or_none(r["broker_cpus"] for r in mine),
                "other_cpus": statistics.median(r["other_cpus"] for r in mine),
                "seconds": statistics.median(r["seconds"] for r in mine),
                "transactions": statistics.median(r["transactions"] for r in mine),
                "results_per_txn": statistics.median(r["results"] / max(1, r["transactions"]) for r in mine)
                if mine[0]["transactions"]
                else None,
            }
        )
    by = {row["variant"]: row["results_per_s"] for row in rows}
    cpu = {row["variant"]: row["cpu_us_per_result"] for row in rows}
    ratios = {}
    # Throughput ratios, and the same from CPU time per result (results per CPU-second):
    # the latter hardly moves when other users take CPUs away mid-run.
    if "worker" in by and "relay" in by:
        ratios["worker/relay"] = by["worker"] / by["relay"]
        ratios["worker/relay, per CPU-second"] = cpu["relay"] / cpu["worker"]
    if "worker" in by and "worker-pyjsonschema" in by:
        ratios["worker/pyjsonschema"] = by["worker"] / by["worker-pyjsonschema"]
        ratios["worker/pyjsonschema, per CPU-second"] = cpu["worker-pyjsonschema"] / cpu["worker"]
    if "worker" in by and "worker x2" in by:
        ratios["x2/x1"] = by["worker x2"] / by["worker"]
    if "relay" in by and "copier" in by:
        ratios["relay/copier, CPU per result"] = cpu["relay"] / cpu["copier"]
    if "worker" in by and "peer" in by:
        ratios["worker/peer"] = by["worker"] / by["peer"]
        ratios["worker/peer, per CPU-second"] = cpu["peer"] / cpu["worker"]
    if "worker" in by and BASELINE in by:
        ratios["worker/baseline, CPU per result"] = cpu["worker"] / cpu[BASELINE]
        ratios["worker/baseline, throughput"] = by["worker"] / by[BASELINE]
    return {"rows": rows, "ratios": ratios}


def round_ratios(runs: list[dict[str, Any]], variant: str = "worker") -> dict[str, list[float]]:
    """Per latency round, ``variant``'s figures over the floor's of the same round (the floor
    runs first in every round): lists of p50 and p99 ratios at the fed rate (``total``) and one
    at a time (``one``), one entry per round that has both runs."""
    out: dict[str, list[float]] = {"total p50": [], "total p99": [], "one p50": [], "one p99": []}
    floors = {r["repeat"]: r for r in runs if r["variant"] == FLOOR}
    for run in runs:
        floor = floors.get(run["repeat"])
        if run["variant"] != variant or floor is None:
            continue
        for name, key in (("total", "total"), ("one", "one_at_a_time")):
            for q in ("p50", "p99"):
                value = ratio(run[key].get(q), floor[key].get(q))
                if value is not None:
                    out[f"{name} {q}"].append(value)
    return out


def baseline_round_ratios(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per latency round, the worker's one-at-a-time p50 and p99 over the baseline's of the
    same round, one entry per round that has both runs."""
    out: dict[str, list[float]] = {"one p50": [], "one p99": []}
    bases = {r["repeat"]: r for r in runs if r["variant"] == BASELINE}
    for run in runs:
        base = bases.get(run["repeat"])
        if run["variant"] != "worker" or base is None:
            continue
        for q in ("p50", "p99"):
            value = ratio(run["one_at_a_time"].get(q), base["one_at_a_time"].get(q))
            if value is not None:
                out[f"one {q}"].append(value)
    return out


def _median_ratio(result: dict[str, Any], name: str, fallback: float | None) -> float | None:
    """The median over rounds of the worker's ratio ``name`` to the same round's floor; with one
    round (or none measured) the ratio of the reported runs."""
    values = round_ratios(result.get("latency_runs") or []).get(name) or []
    return statistics.median(values) if len(values) > 1 else fallback


def _load_note(*others: float | None) -> str:
    known = [o for o in others if o is not None]
    if not known:
        return ""
    text = "others " + "/".join(f"{o:.2f}" for o in known) + " CPUs"
    return text + (": machine busy, figures unreliable" if max(known) > CONTENDED_CPUS else "")


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the worker bench: what was measured and whether it is met.

    ``met`` is None where the run did not measure it (a variant or the floor left out).
    """
    rows = {row["variant"]: row for row in result["rows"]}
    ratios = result["ratios"]
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: str, met: bool | None, note: str = "") -> None:
        out.append(target(name, value, goal, met, note))

    lat, floor = result.get("latency"), result.get("latency_floor")
    both_others = _load_note(lat["other_cpus"] if lat else None, floor["other_cpus"] if floor else None)
    one = lat["one_at_a_time"] if lat else {}
    one_floor = floor["one_at_a_time"] if floor else {}
    rounds = len(round_ratios(result.get("latency_runs") or [])["one p50"])
    floor_note = (
        f"worker {one['p50']:.1f} / {one['p99']:.1f} ms, floor {one_floor['p50']:.1f} / "
        f"{one_floor['p99']:.1f} ms (p50 / p99); {both_others}"
        + (f"; the ratios: median over {rounds} rounds, each to its own floor" if rounds > 1 else "")
        if one and one_floor
        else "needs --one-at-a-time and the latency run"
    )
    value = _median_ratio(result, "one p50", ratio(one.get("p50"), one_floor.get("p50")))
    add(
        "one result at a time: p50 / the floor's",
        value,
        f"<= {TARGET_ONE_P50_OVER_FLOOR:g}",
        at_most(value, TARGET_ONE_P50_OVER_FLOOR),
        floor_note,
    )
    value = _median_ratio(result, "one p99", ratio(one.get("p99"), one_floor.get("p99")))
    add(
        "one result at a time: p99 / the floor's",
        value,
        f"<= {TARGET_ONE_P99_OVER_FLOOR:g}",
        at_most(value, TARGET_ONE_P99_OVER_FLOOR),
    )
    total = lat["total"] if lat else {}
    total_floor = floor["total"] if floor else {}
    p99 = total.get("p99")
    rate_note = (
        f"fed {lat['rate']:,.0f}/s (achieved {lat['achieved_rate']:,.0f}/s); {both_others}" if lat else ""
    )
    add(
        "half the sustained rate: p99, ms",
        p99,
        f"<= {TARGET_P99_MS:g}",
        at_most(p99, TARGET_P99_MS),
        rate_note,
    )
    value = _median_ratio(result, "total p99", ratio(p99, total_floor.get("p99")))
    add(
        "half the sustained rate: p99 / the floor's p99 at that rate",
        value,
        f"<= {TARGET_P99_OVER_FLOOR:g}",
        at_most(value, TARGET_P99_OVER_FLOOR),
        f"floor p99 {total_floor['p99']:.1f} ms" if total_floor else "needs the floor's latency run",
    )
    worker, peer = rows.get("worker"), rows.get("peer")
    value = ratios.get("worker/peer, per CPU-second")
    add(
        "worker/peer, results per CPU-second",
        value,
        f">= {TARGET_OVER_PEER:g} (goal {GOAL_OVER_PEER:g}; same run, same backlog)",
        at_least(value, TARGET_OVER_PEER),
        f"per result: peer {peer['cpu_us_per_result']:,.0f} us, "
        f"worker {worker['cpu_us_per_result']:,.0f} us; "
        + _load_note(peer["other_cpus"], worker["other_cpus"])
        if peer and worker
        else result.get("peer_skipped", "") or "needs the peer variant",
    )
    base = rows.get(BASELINE)
    value = ratios.get("worker/baseline, throughput")
    add(
        "sustained rate / the baseline checkout's (side by side)",
        value,
        f">= {TARGET_RATE_OVER_BASELINE:g}",
        at_least(value, TARGET_RATE_OVER_BASELINE),
        f"worker {worker['results_per_s']:,.0f}/s ({worker['min']:,.0f}-{worker['max']:,.0f}), baseline "
        f"{base['results_per_s']:,.0f}/s ({base['min']:,.0f}-{base['max']:,.0f}); "
        + _load_note(worker["other_cpus"], base["other_cpus"])
        if worker and base
        else "needs --baseline-worktree",
    )
    value = ratios.get("worker/baseline, CPU per result")
    add(
        "worker CPU per result / the baseline checkout's",
        value,
        "<= 1 (not above)",
        at_most(value, 1.0),
        f"worker {worker['cpu_us_per_result']:,.0f} us, baseline {base['cpu_us_per_result']:,.0f} us"
        if worker and base
        else "needs --baseline-worktree",
    )
    base_lat = result.get("latency_baseline")
    base_one = base_lat["one_at_a_time"] if base_lat else {}
    by_round = baseline_round_ratios(result.get("latency_runs") or [])
    for q in ("p50", "p99"):
        values = by_round[f"one {q}"]
        value = statistics.median(values) if values else ratio(one.get(q), base_one.get(q))
        add(
            f"one result at a time: {q} / the baseline checkout's",
            value,
            f"<= {TARGET_ONE_OVER_BASELINE:g} (not worse)",
            at_most(value, TARGET_ONE_OVER_BASELINE),
            (
                f"worker {one[q]:.1f} ms, baseline {base_one[q]:.1f} ms"
                + (f"; median over {len(values)} rounds, each to its own" if len(values) > 1 else "")
            )
            if one and base_one
            else "needs --baseline-worktree and --one-at-a-time",
        )
    decide = (worker.get("phases_us_per_result") or {}).get("decide") if worker else None
    alone = result.get("decide_batch_us")
    value = ratio(decide, alone)
    add(
        "worker's decide per result / decide_batch alone, same workload",
        value,
        f"<= {TARGET_DECIDE_OVER_ALONE:g}",
        at_most(value, TARGET_DECIDE_OVER_ALONE),
        f"decide {decide:.1f} us in the worker, decide_batch {alone:.1f} us alone (the gate bench's case, "
        "this run's contract and backlog, between the rounds)"
        if decide is not None and alone is not None
        else "needs the worker variant",
    )
    value = ratios.get("worker/relay, per CPU-second")
    add(
        "worker/relay, results per CPU-second",
        value,
        f">= {TARGET_WORKER_OVER_RELAY}",
        at_least(value, TARGET_WORKER_OVER_RELAY),
    )
    value = ratios.get("relay/copier, CPU per result")
    add(
        "relay/copier, CPU per result",
        value,
        f"<= {TARGET_RELAY_OVER_COPIER}",
        at_most(value, TARGET_RELAY_OVER_COPIER),
    )
    value = worker["results_per_txn"] if worker else None
    add(
        "results per transaction at full load",
        value,
        f">= {TARGET_RESULTS_PER_TXN}",
        at_least(value, TARGET_RESULTS_PER_TXN),
    )
    mine, theirs = (row["broker_us_per_result"] if row else None for row in (worker, peer))
    value = ratio(mine, theirs)
    add(
        "broker CPU per result, worker/peer",
        value,
        f"<= {TARGET_BROKER_OVER_PEER:g}",
        at_most(value, TARGET_BROKER_OVER_PEER),
        f"worker {mine:,.0f} us, peer {theirs:,.0f} us; counts every user of the broker"
        if value is not None and mine is not None and theirs is not None
        else "needs the peer and a local broker",
    )
    sweep = {
        row["intake_partitions"]: row["cpu_us_per_result"]
        for row in result["rows"]
        if row["variant"] == "worker" or row["variant"].startswith("worker p")
    }
    value = max(sweep.values()) / min(sweep.values()) if len(sweep) > 1 else None
    add(
        f"CPU per result, most/least over {', '.join(map(str, sorted(sweep)))} intake partitions",
        value,
        f"<= {TARGET_PARTITION_SPREAD}",
        at_most(value, TARGET_PARTITION_SPREAD),
        ", ".join(f"{p}: {us:,.0f} us" for p, us in sorted(sweep.items()))
        if len(sweep) > 1
        else "needs --partitions",
    )
    return out


def print_phases(rows: list[dict[str, Any]]) -> None:
    """CPU per result by phase of the worker loop, for the variants that report phases."""
    timed = [row for row in rows if row["phases_us_per_result"]]
    if not timed:
        return
    names = list(timed[0]["phases_us_per_result"])
    header = f"{'CPU us per result':<22}" + "".join(f"{n:>9}" for n in names)
    header += f"{'= thread':>10}{'+ others':>10}{'= cpu':>8}{'gc in decide':>14}"
    print(header)
    print("-" * len(header))
    for row in timed:
        phases = row["phases_us_per_result"]
        thread = sum(phases.values())
        cells = "".join(f"{phases.get(n, 0.0):>9,.1f}" for n in names)
        print(
            f"{row['variant']:<22}{cells}{thread:>10,.1f}{row['cpu_us_per_result'] - thread:>10,.1f}"
            f"{row['cpu_us_per_result']:>8,.0f}{opt(row.get('gc_in_decide_us_per_result'), '14,.1f')}"
        )
    print(
        "the loop thread's CPU time (time.thread_time) charged to the phase it last entered: decide\n"
        "(decide_batch), send (partitions, records to the producer, their acknowledgement), commit\n"
        "(offsets, commit), poll (getmany: fetch and decode), metrics (counters and stats after the\n"
        "commit), loop (the rest: request lookup, messages, sweeps). decide and metrics do not await,\n"
        "gc in decide: the collector's pauses that interrupted decide (part of decide, wall time);\n"
        "so they are exact; while a partition's batch awaits, other partitions' work and the client's\n"
        "background tasks go to the phase last entered. + others: the process's other threads (the\n"
        "metrics server, the bench's control reader); = cpu: the process's CPU per result (cpu us/res)"
    )
    print()


def print_latency(lat: dict[str, Any], whose: str, floor: dict[str, Any] | None = None) -> None:
    """One latency run: percentiles, where the time went inside the worker, the CPUs busy;
    with ``floor`` (the floor's run), each latency also as a multiple of the floor's."""
    print()
    print(
        f"latency, {whose}: fed at {lat['rate']:,.0f} results/s ("
        f"achieved {lat['achieved_rate']:,.0f}/s for {lat['send_seconds']:.0f}s), "
        f"{lat['received']:,}/{lat['sent']:,} received"
    )
    print(
        f"{'ms':<44}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}"
        + ("   x floor  p50   p90   p99   max" if floor else "")
    )
    for name, label in (
        ("total", "intake CreateTime -> agent read (committed)"),
        ("to_decision", "  intake CreateTime -> audit record sent"),
        ("decision_to_agent", "  audit record sent -> agent read"),
    ):
        row = lat[name]
        if row:
            print_percentiles(label, row, floor["total"] if floor and name == "total" else None)
    if lat.get("gc_max_ms") is not None:
        print(
            f"worker: {lat['transactions']:,.0f} transactions (first send to commit: mean "
            f"{lat['txn_mean_ms']:.1f} ms, p99 <= {lat['txn_p99_ms']:.0f} ms), mean batch "
            f"{lat['batch_mean']:.1f} results; {lat['gc_full']} full collections, longest GC "
            f"pause {lat['gc_max_ms']:.0f} ms ({lat['requests_held']:,} requests held)"
        )
    for name, label in (
        ("queued", "  intake CreateTime -> its batch in the loop"),
        ("batch", "  a batch: decision and transaction"),
        ("between", "  a partition: commit -> its next batch"),
    ):
        row = lat.get("waits", {}).get(name)
        if row:
            print_percentiles(label, row)
    print(
        f"CPUs busy while sending: worker {lat['worker_cpus']:.2f}, broker {lat['broker_cpus']:.2f}, "
        f"bench producer+consumer {lat['bench_cpus']:.2f}, other users (others) {lat['other_cpus']:.2f}"
    )
    one = lat["one_at_a_time"]
    if one:
        print_percentiles(
            "one result at a time: send -> agent read", one, floor["one_at_a_time"] if floor else None
        )
        print(f"{'':<44}({lat['one_at_a_time_received']}/{lat['one_at_a_time_sent']} round trips)")
    if lat["other_cpus"] > CONTENDED_CPUS:
        print(
            f"WARNING: other users kept {lat['other_cpus']:.2f} CPUs busy during the latency run: "
            "the worker was starved, the figures say more about the machine than the worker"
        )


def print_rounds(runs: list[dict[str, Any]]) -> None:
    """Every latency round: each run's p50 / p99 at the fed rate and one at a time, as a multiple
    of the same round's floor, and the CPUs other users kept busy; then the spread of the ratios."""
    if len({r["repeat"] for r in runs}) < 2:
        return
    print()
    print(
        f"latency rounds, ms{'':<17}{'fed rate p50':>13}{'p99':>8}{'one p50':>9}{'p99':>8}"
        "   x floor (p50 p99 one p50 p99)  others"
    )
    floors = {r["repeat"]: r for r in runs if r["variant"] == FLOOR}
    for run in sorted(runs, key=lambda r: (r["repeat"], r["variant"] != FLOOR)):
        total, one, floor = run["total"], run["one_at_a_time"], floors.get(run["repeat"])
        cells = "".join(opt(row.get(q), "8.1f") for row in (total, one) for q in ("p50", "p99"))
        ratios = ""
        if floor is not None and run["variant"] != FLOOR:
            ratios = " ".join(
                opt(ratio(row.get(q), base.get(q)), "5.2f")
                for row, base in ((total, floor["total"]), (one, floor["one_at_a_time"]))
                for q in ("p50", "p99")
            )
        print(f"  {run['repeat']} {run['variant']:<30}{cells}      {ratios:<28}{run['other_cpus']:>6.2f}")
    for variant in sorted({r["variant"] for r in runs} - {FLOOR}):
        spread = round_ratios(runs, variant)
        parts = [
            f"{name} median {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
            for name, v in spread.items()
            if v
        ]
        if parts:
            print(f"  {variant} x floor over rounds: " + "; ".join(parts))


def print_report(result: dict[str, Any]) -> None:
    print(f"command: {result['command']}")
    if result.get("others_before") is not None:
        print(f"machine before the run: {result['others_before']:.2f} CPUs busy (others' work)")
    print(
        f"broker {result['bootstrap']}; {result['messages']} results of ~{result['bytes']} bytes "
        f"({result['rejected_share']:.0%} rejected), {PARTITIONS} intake partitions (unless named), "
        f"transactions on, batch {result['batch_size']} / linger {result['linger_ms']} ms; "
        f"{result['cpus']} CPUs shared with the broker; median of {result['repeat']} interleaved runs"
    )
    print()
    header = (
        f"{'variant':<22}{'procs':>6}{'results/s':>11}{'min':>9}{'max':>9}"
        f"{'cpu us/res':>12}{'decide':>8}{'gc':>6}{'broker':>8}{'res/txn':>9}{'others':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in result["rows"]:
        print(
            f"{row['variant']:<22}{row['workers']:>6}{row['results_per_s']:>11,.0f}"
            f"{row['min']:>9,.0f}{row['max']:>9,.0f}{row['cpu_us_per_result']:>12,.0f}"
            f"{opt(row['phases_us_per_result'].get('decide'), '8,.0f')}{row['gc_us_per_result']:>6,.0f}"
            f"{opt(row['broker_us_per_result'], '8,.0f')}{opt(row['results_per_txn'], '9,.0f')}"
            f"{row['other_cpus']:>8.2f}"
        )
    print(
        "cpu us/res: CPU time of the worker process(es) per result; decide: of it, the loop thread's\n"
        "CPU time in decide_batch (gate + output records, before the transaction opens); gc: wall\n"
        "time in the garbage collector; broker: the broker's CPU per result; res/txn: results per\n"
        "transaction; peer: the Benthos json_schema pipeline (no transactions), CPU from /proc;\n"
        "others: CPUs busy with other users' work during the run (machine busy time minus the\n"
        "workers, the broker and this process). copier: aiokafka alone, no toolgate code;\n"
        f"{BASELINE}: the worker of the checkout given with --baseline-worktree"
        + (f" ({result['baseline']})" if result.get("baseline") else "")
    )
    print()
    print_phases(result["rows"])
    contended = [row["variant"] for row in result["rows"] if row["other_cpus"] > CONTENDED_CPUS]
    if contended:
        print(
            f"WARNING: other users kept more than {CONTENDED_CPUS} CPUs busy (median) during: "
            f"{', '.join(contended)}; compare per CPU-second"
        )
    goals = {
        "worker/relay": f"target >= {TARGET_WORKER_OVER_RELAY}",
        "worker/pyjsonschema": f"target >= {TARGET_RS_OVER_PY}",
        "x2/x1": "at most 1.5 with 3 partitions, given the cores",
        "relay/copier, CPU per result": f"target <= {TARGET_RELAY_OVER_COPIER}",
        "worker/peer, per CPU-second": f"target >= {TARGET_OVER_PEER:g}",
        "worker/baseline, CPU per result": "target <= 1",
        "worker/baseline, throughput": f"target >= {TARGET_RATE_OVER_BASELINE:g}",
    }
    for name, value in result["ratios"].items():
        print(f"{name:<36}{value:>6.2f}   {goals.get(name, '')}")
    if result.get("decide_batch_us") is not None:
        print(
            f"decide_batch alone on this workload (the gate bench's case, median of the rounds): "
            f"{result['decide_batch_us']:.1f} us per result"
        )
    floor = result.get("latency_floor")
    if floor:
        print_latency(floor, "the floor (aiokafka transactional relay, one record per input)")
        print(
            f"floor: {floor['transactions'] or 0:,} transactions, "
            f"mean {floor['batch_mean'] or 0:.1f} records each, "
            f"first send to commit mean {floor['txn_mean_ms'] or 0:.1f} ms"
        )
    for key, whose in (
        ("latency", "this checkout's worker"),
        ("latency_baseline", "the baseline checkout's worker"),
    ):
        if result.get(key):
            # Against the floor of the same round where there is one (the shown runs are each
            # variant's median run, not always of the same round).
            same = [
                r
                for r in result.get("latency_runs") or []
                if r["variant"] == FLOOR and r["repeat"] == result[key]["repeat"]
            ]
            shown = same[0] if same else floor
            if shown is not floor and shown is not None:
                whose += f" (x floor: round {shown['repeat']}'s floor)"
            print_latency(result[key], whose, shown)
    print_rounds(result.get("latency_runs") or [])
    base = result.get("latency_baseline")
    lat = result.get("latency")
    if lat and base and lat["total"] and base["total"]:
        print()
        for name, key in (("at the fed rate", "total"), ("one at a time", "one_at_a_time")):
            mine, theirs = lat[key], base[key]
            if mine and theirs:
                print(
                    f"latency {name}, this/baseline: p50 {mine['p50'] / theirs['p50']:.2f}, "
                    f"p99 {mine['p99'] / theirs['p99']:.2f}"
                )
    print()
    print("targets (others: CPUs other users kept busy meanwhile; on a shared machine compare ratios):")
    print_targets(result["targets"])
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")
