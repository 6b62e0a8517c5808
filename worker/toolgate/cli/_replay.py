"""``toolgate replay``: send quarantined results through the pipeline again."""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import UTC, datetime

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli._common import (
    Command,
    build_gate,
    check_broker,
    gate_stage,
    keyring_path,
    non_negative_int,
    parse_time,
    rejection_code,
    warn_unknown_tools,
)


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="ISO", help="rejected at or after this time")
    p.add_argument("--until", metavar="ISO", help="rejected before this time")
    p.add_argument("--tool", action="append", default=[], help="tool (repeatable)")
    p.add_argument(
        "--stage",
        action="append",
        default=[],
        type=gate_stage,
        help="rejection stage, e.g. schema (repeatable)",
    )
    p.add_argument(
        "--code",
        action="append",
        default=[],
        type=rejection_code,
        help="rejection code, e.g. SCHEMA_VIOLATION (repeatable; docs/design.md, Stages and codes)",
    )
    p.add_argument(
        "--adapter-version", action="append", default=[], metavar="V", help="tg-adapter-version (repeatable)"
    )
    p.add_argument(
        "--origin", metavar="P[:FIRST-LAST]", help="intake partition, optionally an inclusive offset range"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="re-evaluate, write nothing (default)")
    mode.add_argument("--apply", action="store_true", help="re-publish the selection to intake")
    p.add_argument(
        "--max-replays",
        type=non_negative_int,
        default=3,
        metavar="N",
        help="refuse records already replayed N times (default 3)",
    )
    p.add_argument(
        "--workers",
        nargs="+",
        metavar="URL",
        help="--apply: the live workers' metrics URLs whose contracts must equal the local ones "
        "(default: TOOLGATE_WORKERS, comma-separated, else the local worker at TOOLGATE_METRICS_PORT)",
    )
    p.add_argument("--force", action="store_true", help="--apply even when the workers run other contracts")
    p.add_argument(
        "--wait",
        type=float,
        metavar="S",
        help="--apply: wait up to S seconds for the worker's decisions and print them (exit 1 if any "
        "is missing)",
    )


def _replay(args: argparse.Namespace, config: Config) -> int:
    from toolgate.operations._replay import Selection, run_replay

    partition, offsets = None, None
    if args.origin:
        head, _, span = args.origin.partition(":")
        try:
            partition = int(head)
            if span:
                first, _, last = span.partition("-")
                offsets = (int(first), int(last or first))
        except ValueError as exc:
            raise ConfigError(f"--origin {args.origin!r}: expected P or P:FIRST-LAST") from exc
    selection = Selection(
        since=parse_time("--since", args.since),
        until=parse_time("--until", args.until),
        tools=frozenset(args.tool),
        stages=frozenset(args.stage),
        codes=frozenset(args.code),
        adapter_versions=frozenset(args.adapter_version),
        origin_partition=partition,
        origin_offsets=offsets,
    )
    now = parse_time("--now", args.now) or datetime.now(UTC)
    gate = build_gate(config, keyring_path(args, config))
    warn_unknown_tools(args.tool, gate.contracts.tools, config)
    workers = None
    workers_named = False
    if args.apply:
        from toolgate.operations._top import default_url

        listed = [u for u in os.environ.get("TOOLGATE_WORKERS", "").replace(",", " ").split() if u]
        workers_named = bool(args.workers or listed)
        workers = args.workers or listed or [default_url(config.metrics_host, config.metrics_port)]
    if args.wait is not None and not 0 < args.wait <= 3600:
        raise ConfigError("--wait must be above 0 and at most 3600 seconds")
    check_broker(config)
    return asyncio.run(
        run_replay(
            config,
            gate,
            selection,
            apply_it=args.apply,
            max_replays=args.max_replays,
            now=now,
            workers=workers,
            workers_named=workers_named,
            force=args.force,
            wait_seconds=args.wait,
        )
    )


COMMANDS: tuple[Command, ...] = (
    Command(
        ("replay",),
        "send quarantined results through the pipeline again",
        "Select quarantined results and, after a connector or contract fix, send them\n"
        "through the pipeline again. Prints the selection (by tool and code) first.\n"
        "--dry-run (the default) re-evaluates each with today's contracts, its request\n"
        "record and the real clock, and writes nothing. --apply re-publishes the\n"
        "original bytes and headers to intake (tg-replay-count + 1); the worker decides\n"
        "again, and a result already accepted for its request attempt is a duplicate.\n"
        "--apply first compares the local contracts with the set the group's live\n"
        "workers decide with (the members topic, as toolgate contracts status shows it)\n"
        "and refuses when the workers disagree or run another set; it also asks the\n"
        "workers' metrics (toolgate_contract_info digests) you name with --workers, and\n"
        "the local worker's when no member is live there.\n"
        "--force overrides; it skips records whose earlier replay was accepted.\n"
        "--wait S follows the replayed records to their decisions and prints the table.",
        (
            "toolgate replay --tool deploy_status --code SCHEMA_VIOLATION",
            "toolgate replay --tool deploy_status --code SCHEMA_VIOLATION --apply --wait 60",
            "toolgate replay --since 2026-05-01T09:00:00Z --origin 2:1000-1999",
        ),
        _replay,
        ("contracts", "keyring", "bootstrap", "now"),
        _replay_arguments,
    ),
)
