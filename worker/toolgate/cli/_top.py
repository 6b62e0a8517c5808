"""``toolgate top``: a live terminal view of a worker's metrics."""

from __future__ import annotations

import argparse
import sys

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli._common import (
    EXIT_OK,
    Command,
    positive_int,
)


def _top_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        metavar="URL",
        help="the worker's metrics endpoint (default http://127.0.0.1:9464/metrics, "
        "the port from TOOLGATE_METRICS_PORT)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between scrapes (default 2); with --once, 0 = totals only",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot and exit 0 (two scrapes --interval apart for rates)",
    )
    p.add_argument("--top", type=positive_int, default=10, metavar="N", help="rejection codes shown (10)")


def _top(args: argparse.Namespace, config: Config) -> int:
    from toolgate.operations._top import default_url, run

    if args.interval < 0 or (args.interval == 0 and not args.once):
        raise ConfigError("--interval must be above 0 (0 only with --once: one scrape, totals only)")
    url = args.url or default_url(config.metrics_host, config.metrics_port)
    try:
        return run(url, interval=args.interval, once=args.once, top=args.top, out=sys.stdout)
    except KeyboardInterrupt:
        return EXIT_OK


COMMANDS: tuple[Command, ...] = (
    Command(
        ("top",),
        "live terminal view of a worker's metrics (no Grafana needed)",
        "Read a worker's /metrics and show, refreshed in place until Ctrl-C:\n"
        "  RESULTS             decided results by tool and outcome (success, failure =\n"
        "                      a valid upstream failure, rejected), total and per second\n"
        "  REJECTION RATIO     per tool: rejected share and its top codes, each with the\n"
        "                      time the worker first saw it for that tool\n"
        "  REJECTIONS BY CODE  the top codes, with the stages and tools they came from\n"
        "  CONSUMER LAG        intake records not yet decided, per partition and total\n"
        "  GATE LATENCY        p50/p99 gate time per result, by the stage it ended at\n"
        "  TRANSACTIONS        committed and aborted (aborts mean the batch is redone)\n"
        "  SHADOW              shadow contract versions whose verdict differed\n"
        "  REPLAYED            results replayed from the quarantine, by outcome now\n"
        "  REQUESTS            request records held, evictions, waits for the reader\n\n"
        "Rates are the change between two scrapes; the first screen shows totals since\n"
        "the worker started. Every line fits 80 columns. Exit 2 when the endpoint cannot\n"
        "be reached.",
        (
            "toolgate top                                  the local worker, every 2 s",
            "toolgate top --once                           one snapshot with rates, for scripts",
            "toolgate top --once --interval 0              totals only, one scrape",
            "toolgate top --url http://worker-2.example:9464/metrics --top 5",
        ),
        _top,
        (),
        _top_arguments,
    ),
)
