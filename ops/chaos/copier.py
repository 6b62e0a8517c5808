"""The full-size copier-style crash run (Kafka's TransactionsBounceTest / transactions_test.py).

Usage::

    .venv/bin/python ops/chaos/copier.py [--messages 100000] [--seed S] [--kills 3]

Starts its own broker (a second ``ops/kafka/kafka.sh`` instance on the first free port
pair from 29092/29093 on, data in a temporary directory; the shared broker on 19092 is
never touched), publishes ``--messages`` sample results of the realistic mix over 3
intake partitions (some results before their request records) while worker
subprocesses (``python -m toolgate.cli run``) decide them, and meanwhile: SIGKILLs a
worker ``--kills`` times at random points (a replacement joins each time), has a
second worker join and leave (SIGTERM), restarts the broker once (down for
``--broker-down`` seconds, longer than the clients' 40 s request timeout, so the
workers' failed-transaction retry path runs, not only aiokafka's reconnects; or
SIGKILLed with ``--hard-broker-restart``), and finally crashes
every worker still running and drains the rest with a ``--burst`` worker. A
``read_committed`` reader of the outputs runs throughout.

Then it reads everything back and prints the figures: messages, kills, rebalances,
broker restarts, duplicates, losses, aborted reads (records of aborted transactions
handed to the concurrent ``read_committed`` reader), elapsed time and throughput. Exit
status 0 when every invariant held (one agent envelope and one decision audit event per
intake offset, a quarantine record exactly for the rejected ones, no aborted record
ever read committed, every decision the one its sample expects), 1 otherwise, 2 when
the broker could not be started. The scenario itself is
``tests/integration/chaos_kit.py``; ``tests/integration/test_chaos.py`` runs it at CI size.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.chaos_kit import BrokerScriptError, Plan, PrivateBroker, run_chaos  # noqa: E402


def _print(line: str) -> None:
    print(line, flush=True)


async def main_async(args: argparse.Namespace, workdir: Path) -> int:
    broker = PrivateBroker.pick(workdir / "kafka")
    _print(f"copier: broker instance on {broker.bootstrap} (data {broker.data}), logs in {workdir}")
    started = time.monotonic()
    try:
        await broker.start()
    except BrokerScriptError as exc:
        _print(f"copier: could not start the broker: {exc}")
        return 2
    _print(f"copier: broker up in {time.monotonic() - started:.1f}s")
    plan = Plan(
        messages=args.messages,
        seed=args.seed,
        kills=args.kills,
        batch_size=args.batch_size,
        max_ahead=args.max_ahead,
        hard_broker_restart=args.hard_broker_restart,
        broker_down_seconds=args.broker_down,
    )
    try:
        report = await run_chaos(plan, broker, workdir, out=_print)
    finally:
        try:
            await broker.stop()
        except BrokerScriptError as exc:
            _print(f"copier: stopping the broker failed: {exc}")
    _print("")
    _print(f"copier: {' '.join(sys.argv)}")
    _print(report.figures())
    return 1 if report.violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--messages", type=int, default=100_000, metavar="N", help="intake messages (default 100000)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="random seed of the traffic and the schedule (default: random, printed)",
    )
    parser.add_argument(
        "--kills",
        type=int,
        default=3,
        metavar="K",
        help="SIGKILLs at random points mid-run, besides the final crash (default 3)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=100,
        metavar="N",
        help="the workers' records per transaction and partition (default 100)",
    )
    parser.add_argument(
        "--max-ahead",
        type=int,
        default=5000,
        metavar="N",
        help="published but undecided messages, at most (default 5000)",
    )
    parser.add_argument(
        "--hard-broker-restart",
        action="store_true",
        help="SIGKILL the broker instead of stopping it cleanly (kafka.sh stop)",
    )
    parser.add_argument(
        "--broker-down",
        type=float,
        default=45.0,
        metavar="S",
        help="seconds the broker stays down during the restart (default 45: "
        "longer than the clients' 40 s request timeout)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the broker data and worker logs (default: kept only on failure)",
    )
    args = parser.parse_args(argv)
    if args.messages < 1000 or args.kills < 1:
        parser.error("--messages must be at least 1000 and --kills at least 1")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    # The run's own clients reconnect through the broker restart: their connection errors
    # are expected, the workers' logs (kept on failure) hold what matters.
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    workdir = Path(tempfile.mkdtemp(prefix="toolgate-copier-"))
    rc = 2
    try:
        rc = asyncio.run(main_async(args, workdir))
    finally:
        if rc == 0 and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            _print(f"copier: broker data and worker logs kept in {workdir}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
