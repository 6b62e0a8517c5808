"""Worker benchmark: the Kafka loop end to end, against a relay that does not validate.

Usage::

    .venv/bin/python ops/bench/worker_bench.py [--messages N] [--repeat R] [--json]
        [--baseline-worktree PATH] [--partitions 3 12 24] [--variants ...]
        [--peer-source PATH] [--one-at-a-time N]

Needs the broker (``bash ops/kafka/kafka.sh start``; ``TOOLGATE_BOOTSTRAP`` points
elsewhere). Everything the run creates is its own: topics ``bench.<run id>.*``,
consumer groups and transactional ids with the same tag, a bench-only contract in
a temporary folder. Topics and groups are deleted at the end, also on failure.

Backlog throughput. Every variant consumes the same backlog of N results of
about 1 KB (``bench_listing``: a few bounded strings and an array of small
closed objects; no signature, so crypto does not dominate; every tenth result
has an extra property and is rejected at the ``schema`` stage, so quarantine
records are written too). The workers run in subprocesses (this process only
waits) with transactions on, the production batch size and linger, and one
transactional producer per intake partition (3 partitions).

One module per variant in this package (``ops/bench/``), this script their entry:

* ``peer`` (:mod:`ops.bench.peer`): what a user would run instead, side by side on the
  same backlog and broker: a Benthos ``json_schema`` pipeline over franz-go clients, no
  transactions; built with Go from ``shared/peer`` (or ``--peer-source``) into
  ``~/.cache/toolgate/bench-peer/<digest>/`` once and reused; skipped where Go is missing.
* ``copier`` (:mod:`ops.bench.copier`): the client's own limit, aiokafka alone writing the
  same records in the same transactions, no toolgate code.
* ``relay`` (:mod:`ops.bench.relay`): the ceiling, the same ``Worker`` loop with a gate
  that returns a precomputed verdict.
* ``worker`` (:mod:`ops.bench.worker`): the real ``Worker`` with the real ``Gate``.
* ``worker-pyjsonschema``: the same, the contract's validator python-jsonschema.
* ``worker x2``: two worker processes in one consumer group (3 partitions: one
  process owns two, the other one, so 1.5 is the ideal ratio on enough cores).
* ``baseline worker`` (``--baseline-worktree PATH``): the worker of another
  checkout, e.g. ``git worktree add ../base <commit>``, run by that checkout's own
  ``ops/bench/worker_bench.py --child`` (its own package and imports, this
  virtualenv's libraries), interleaved with the others: today's code against an
  earlier commit's on one machine at one time.
* ``floor`` (:mod:`ops.bench.floor`), in the latency cases only: an aiokafka
  transactional relay, one output record per input record and its offsets in a
  transaction, read back by the same ``read_committed`` consumer at the same rates.
* ``worker pN`` (``--partitions 3 12 24``): the worker with N intake partitions
  (agent and audit topics as many, requests co-partitioned), one transactional
  producer each: what more partitions cost per result.

Each run gets fresh intake and output topics holding the same records (fresh
output topics also mean an empty accepted-results ledger). The backlog is written
in one producer transaction that stays open while the workers start and the group
settles (for ``x2``: until both processes own partitions), so nothing is decided
during start-up or a rebalance; it is committed once every worker is ready.
Throughput is N over the wall time from the first batch any worker took to the
commit of the last decision (timestamps taken inside the worker processes; the
audit records' timestamp span is printed beside it as a cross-check). Runs are
interleaved (repeat 1 of every variant, then repeat 2, ...) and medians reported,
so noise on a shared machine spreads alike over all variants. The audit topic is
read back (``read_committed``) after each run: exactly N events, the expected
rejections, or the run is reported as a problem (exit status 1).

Where the time goes, per result: ``cpu`` is the worker processes' CPU time over
the window; ``decide`` the loop thread's CPU time in ``decide_batch`` (gate and
output records, before the transaction opens); below the table, the loop
thread's CPU time by phase (decide, send, commit, poll and decode, metrics, the
rest of the loop) from a phase clock injected into the worker
(``toolgate.service._phases``), adding up to its thread time, beside the
process's; ``gc`` the garbage collector's pauses; ``broker`` the broker's CPU time
(read from /proc for the local broker; it counts every user of the broker);
``others`` how many CPUs the rest of the machine kept busy meanwhile. Ratios are
given from throughput and from CPU time per result; the latter barely moves when
other users take CPUs away mid-run.

Latency. Then one real worker runs live and a producer sends results at half
the median ``worker`` throughput for ``--latency-seconds`` (request records are
written first, as the platform writes them before it calls an adapter); latency
is from the intake record's timestamp (CreateTime, set when it was sent) to the
moment a ``read_committed`` consumer of the agent topic receives the envelope,
split at the audit record's timestamp (when the worker sent its decision). The
producer and that consumer share this process. Then ``--one-at-a-time`` results
go one by one, each sent (linger 0) once the previous one's envelope was read: an
agent waiting on each call; its latency is send to read, on this process's clock. The
floor runs the same two cases first in each round; every latency is printed also as a
multiple of the floor's (``x floor``).

The worker processes are this script (``--child``, :mod:`ops.bench.worker`), the copier
``--copier``, the floor ``--floor``. ``--profile DIR`` runs each variant once more
under cProfile (or py-spy with ``--py-spy BIN``).

Targets. The report ends with every target, the measured figure and met / not
met (:mod:`ops.bench.summary`), with the CPUs other users kept busy beside them: one
result at a time p50 <= 1.5x and p99 <= 2x the floor's; at half the sustained rate
p99 <= 50 ms and <= 3x the floor's p99 at that rate; worker/peer per CPU-second >= 2.5
(goal 3); nothing worse than the baseline checkout side by side (sustained rate, worker
CPU per result, one result at a time p50 and p99, each round against its own); the
worker's ``decide`` per result within 1.5x of the gate bench's ``decide_batch`` case on
the same contract and backlog, measured in this process between the rounds;
worker/relay per CPU-second (>= 0.7), relay/copier CPU per result (<= 1.5), results
per transaction at full load (>= 200), broker CPU per result against the peer's
(<= 3x), CPU per result over the partition sweep (most/least <= 1.3).

Everything a run creates goes at its end, also on failure: its topics (the state
changelogs too), consumer groups (the peer's too) and the temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pstats
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[2]
sys.path.insert(0, str(ROOT))
# This checkout's own package first: a --baseline-worktree child imports its checkout's
# toolgate, not the one the virtualenv's editable install points at.
sys.path.insert(0, str(ROOT / "worker"))

from ops.bench.backlog import PARTITIONS, VARIANTS  # noqa: E402
from ops.bench.harness import bench_main  # noqa: E402
from ops.bench.measure import baseline_problem  # noqa: E402
from ops.bench.peer import (  # noqa: E402
    PEER_FILES,
    build_peer,
    find_peer,
    peer_cache,
    peer_pipeline,
    peer_source,
)
from ops.bench.summary import print_report  # noqa: E402

__all__ = ["PEER_FILES", "build_peer", "find_peer", "main", "peer_cache", "peer_pipeline", "peer_source"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example, the peer and the loop side by side with latency:\n"
        "  .venv/bin/python ops/bench/worker_bench.py --messages 20000 --repeat 3 \\\n"
        "      --variants peer copier relay worker --latency-seconds 20 --one-at-a-time 300",
    )
    parser.add_argument("--messages", type=int, default=20_000, help="results in the backlog (default 20000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per variant; the median is reported (default 3)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=20.0,
        help="length of the live latency run, 0 to skip (default 20)",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="feed the live worker R results/s (default: half the worker variant's median rate)",
    )
    parser.add_argument(
        "--latency-repeat",
        type=int,
        default=1,
        metavar="N",
        help="latency runs (with --baseline-worktree: of each checkout, alternating); the run with "
        "the median p99 is reported (default 1)",
    )
    parser.add_argument(
        "--one-at-a-time",
        type=int,
        default=300,
        metavar="N",
        help="after the latency run, N results each sent once the previous one's envelope is read "
        "(an agent waiting on each call), 0 to skip (default 300)",
    )
    parser.add_argument(
        "--peer-source",
        metavar="PATH",
        help="the peer's sources (default: shared/peer beside or above this checkout); built with "
        f"Go into {peer_cache()} once and reused",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=VARIANTS,
        metavar="VARIANT",
        help=f"subset of {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="also run each variant once under cProfile, stats to DIR/<variant>"
    )
    parser.add_argument(
        "--py-spy", metavar="BIN", help="with --profile: sample with this py-spy binary instead (raw stacks)"
    )
    parser.add_argument(
        "--hex-ids",
        action="store_true",
        help="request ids with a hex segment (digit before 'e'), see run_tag()",
    )
    parser.add_argument(
        "--baseline-worktree",
        metavar="PATH",
        help="also run the worker of this checkout of an earlier commit (git worktree add PATH "
        "<commit>), interleaved with the others, with that checkout's own bench script and code",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help=f"also run the worker with N intake partitions (the partition sweep; {PARTITIONS} is "
        "the worker variant itself), e.g. --partitions 3 12 24",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--copier", help=argparse.SUPPRESS)
    parser.add_argument("--floor", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        from ops.bench.worker import child_main

        return child_main(json.loads(args.child))
    if args.copier:
        from ops.bench.copier import copier_main

        return copier_main(json.loads(args.copier))
    if args.floor:
        from ops.bench.floor import floor_main

        return floor_main(json.loads(args.floor))
    if args.messages < 100 or args.repeat < 1:
        parser.error("--messages must be at least 100 and --repeat at least 1")
    if any(n < 1 for n in args.partitions):
        parser.error("--partitions takes positive partition counts")
    problem = args.baseline_worktree and baseline_problem(args.baseline_worktree, "ops/bench/worker_bench.py")
    if problem:
        parser.error(problem)
    if args.baseline_worktree:
        args.baseline_worktree = str(Path(args.baseline_worktree).resolve())
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(bench_main(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print()
        print_report(result)
        if args.profile:
            kind = "py-spy raw stacks" if args.py_spy else "cProfile"
            print(f"\nprofiles of one run of each variant ({kind}): {args.profile}/")
            if not args.py_spy and "worker" in args.variants:
                pstats.Stats(str(Path(args.profile) / "worker")).sort_stats("tottime").print_stats(25)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
