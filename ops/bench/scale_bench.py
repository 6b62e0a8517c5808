"""The scale-out run (tests/integration/scale_kit.py) in full, with and without static membership.

Usage::

    python ops/bench/scale_bench.py [--bootstrap 127.0.0.1:19092] [--results 6000] [--runs 1]

Each run: 12 intake partitions on private topics, ``toolgate run`` processes started and
stopped by an autoscaler that computes the intake lag as KEDA's Kafka scaler does (1 -> 4 -> 1
workers under a load burst), one worker restarted (SIGTERM, start) while four run. Printed per
membership kind: the pause of every scale event (until the group settled: the last "partitions
assigned" line of any worker), lost, duplicated, the workers that rebalanced while one
restarted, KEDA's lag of the drained intake; then the restart's pause side by side (median over
the runs) and whether the target "a restart moves no other worker's partitions" is met.
Exit 1 when a run lost or duplicated a result.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))  # this checkout's package, not the editable install's

from tests.integration.scale_kit import ScaleReport, ScaleRun, clean  # noqa: E402
from tests.integration.worker_kit import CLEAN, drop_topics, private_config  # noqa: E402


async def one(bootstrap: str, static: bool, results: int) -> ScaleReport:
    config = await private_config(bootstrap, partitions=12)
    try:
        with tempfile.TemporaryDirectory(prefix="toolgate-scale-") as folder:
            return await ScaleRun(config, Path(folder), static=static, results=results).run()
    finally:
        await drop_topics(config)


def restart_pause(report: ScaleReport) -> float | None:
    return next((e.settled_s for e in report.events if e.what.startswith("restart")), None)


async def main_async(args: argparse.Namespace) -> int:
    reports: dict[bool, list[ScaleReport]] = {True: [], False: []}
    for _ in range(args.runs):
        for static in (True, False):
            report = await one(args.bootstrap, static, args.results)
            print("\n".join(report.lines()), flush=True)
            reports[static].append(report)
    print()
    print(f"{'restart of one worker of four':<36}{'static':>10}{'dynamic':>10}")
    pauses = {
        static: [p for r in runs if (p := restart_pause(r)) is not None] for static, runs in reports.items()
    }
    medians = {k: statistics.median(v) if v else float("nan") for k, v in pauses.items()}
    print(f"{'pause until settled, median (s)':<36}{medians[True]:>10.2f}{medians[False]:>10.2f}")
    moved = {k: sum(len(r.restart_rebalanced) for r in v) for k, v in reports.items()}
    print(f"{'other workers that rebalanced':<36}{moved[True]:>10}{moved[False]:>10}")
    met = moved[True] == 0
    print(
        f"target: a static member's restart moves no other worker's partitions: {'met' if met else 'not met'}"
    )
    broken = [r for runs in reports.values() for r in runs if clean(r) != CLEAN]
    return 1 if broken else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap", default="127.0.0.1:19092", help="the Kafka broker (default the local one)"
    )
    parser.add_argument("--results", type=int, default=6000, help="results published per run (default 6000)")
    parser.add_argument("--runs", type=int, default=1, help="runs per membership kind (default 1)")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
