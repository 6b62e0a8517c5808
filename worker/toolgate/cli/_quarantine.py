"""``toolgate quarantine``: tail and summary of the quarantine topic."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

from toolgate._config import Config
from toolgate.cli._common import (
    EXIT_OK,
    Command,
    check_broker,
    keyring_path,
    positive_int,
    tools_of,
    warn_unknown_tools,
)


def _quarantine_summary_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-scan",
        type=positive_int,
        default=1_000_000,
        metavar="N",
        help="count at most the last N records of each partition (1000000)",
    )
    p.add_argument(
        "--unreplayed",
        action="store_true",
        help="count only records no replay has decided or resolved yet: what is left to do",
    )


def _quarantine_tail_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-n", "--lines", type=positive_int, default=10, metavar="N", help="records to print (default 10)"
    )
    p.add_argument(
        "--max-scan",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="look at most at the last N records of each partition (100000)",
    )
    p.add_argument(
        "--value",
        action="store_true",
        help="include the rejected value as JSON text (first 4096 characters; "
        "hostile input: never paste it into an agent); a sealed record needs its quarantine key "
        "in the keyring (--keyring or TOOLGATE_KEYRING), else the line says which key is missing",
    )


def _quarantine_tail(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._sealing import sealer_for
    from toolgate.gate._signing import Keyring
    from toolgate.operations._quarantine import Filters, tail

    warn_unknown_tools([args.tool] if args.tool else [], tools_of(config.contracts_dir), config)
    filters = Filters(tool=args.tool, code=args.code, stage=args.stage)
    check_broker(config)
    keyring = keyring_path(args, config)
    sealer = sealer_for(Keyring.load(keyring)) if keyring else None  # opens sealed records
    lines = asyncio.run(
        tail(
            config,
            count=args.lines,
            filters=filters,
            max_scan=args.max_scan,
            with_value=args.value,
            sealer=sealer,
        )
    )
    for line in lines:
        print(json.dumps(line, ensure_ascii=True, sort_keys=False))
    if not lines:  # stdout stays JSON lines only; say so where a person looks
        print(
            f"toolgate: no records matched in the last {args.max_scan} of each partition of "
            f"{config.topics.quarantine}",
            file=sys.stderr,
        )
    return EXIT_OK


def _quarantine_summary(args: argparse.Namespace, config: Config) -> int:
    from datetime import timedelta

    from toolgate.operations._quarantine import REPLAY_WINDOW_HOURS, Filters, format_summary, summary

    warn_unknown_tools([args.tool] if args.tool else [], tools_of(config.contracts_dir), config)
    filters = Filters(tool=args.tool, code=args.code, stage=args.stage, unreplayed=args.unreplayed)
    check_broker(config)
    since = datetime.now(UTC) - timedelta(hours=REPLAY_WINDOW_HOURS)
    rows, read = asyncio.run(summary(config, filters=filters, max_scan=args.max_scan, replays_since=since))
    print("\n".join(format_summary(rows, read, config.topics.quarantine)))
    return EXIT_OK


COMMANDS: tuple[Command, ...] = (
    Command(
        ("quarantine",),
        "read the quarantine topic",
        "Read rejected results and their diagnostics.",
        ("toolgate quarantine tail -n 5",),
    ),
    Command(
        ("quarantine", "tail"),
        "the latest quarantine records' diagnostics as JSON lines",
        "Print the last N quarantine records (read_committed, in log order) as JSON\n"
        "lines: topic, partition, offset, timestamp, key, tool (the contract's tool,\n"
        "else the adapter's tg-tool), stage, code, size, and every header: the\n"
        "adapter's originals and toolgate's tg-error-* diagnostics (tg-error-detail\n"
        "decoded: schema path, keyword, masked message). Reads without a consumer\n"
        "group: commits nothing, moves no offsets. The quarantine topic is\n"
        "TOOLGATE_TOPIC_QUARANTINE (default toolgate.quarantine). A record sealed at\n"
        "rest is opened with its quarantine key from the keyring; without it, the\n"
        "line's 'sealed' says which key is missing (docs/security.md).",
        (
            "toolgate quarantine tail                          the last 10 rejections",
            "toolgate quarantine tail --tool job_status --code BAD_SIGNATURE -n 5",
            "toolgate quarantine tail --stage schema --value -n 1   with the raw bytes as text",
        ),
        _quarantine_tail,
        ("bootstrap", "filters", "contracts", "keyring"),
        _quarantine_tail_arguments,
    ),
    Command(
        ("quarantine", "summary"),
        "counts by tool, code, adapter version and schema path, first and last seen",
        "Count the quarantine records (read_committed, no consumer group) by tool,\n"
        "code, adapter version (tg-adapter-version) and schema path (from\n"
        "tg-error-detail), with the first and last time each was rejected (UTC),\n"
        "most records first: which connector drifts, since when, and from which\n"
        "adapter version on. From the audit topic's last 24 hours, 'replayed' counts\n"
        "the records a replay of which the worker decided, 'resolved' those whose\n"
        "result a replay got accepted; --unreplayed leaves both out.",
        (
            "toolgate quarantine summary",
            "toolgate quarantine summary --tool deploy_status --code SCHEMA_VIOLATION",
            "toolgate quarantine summary --unreplayed       what no replay has settled",
        ),
        _quarantine_summary,
        ("bootstrap", "filters", "contracts"),
        _quarantine_summary_arguments,
    ),
)
