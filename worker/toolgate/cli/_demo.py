"""``toolgate demo``: sample traffic to a running worker, and its decisions."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolgate._config import Config
from toolgate.cli._common import (
    Command,
    check_broker,
    positive_float,
    positive_int,
)


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--count", type=positive_int, default=200, metavar="N", help="results to send (200)")
    p.add_argument(
        "--wait",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="seconds to wait for the decisions (60)",
    )
    p.add_argument("--seed", type=int, default=7, help="random seed of the traffic mix (7)")
    p.add_argument(
        "--keyring", metavar="FILE", help="keys to sign samples (default: CONTRACTS/fixtures-keyring.toml)"
    )


def _demo(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._signing import Keyring
    from toolgate.operations._demo import main_demo

    keyring = Keyring.load(args.keyring or Path(config.contracts_dir) / "fixtures-keyring.toml")
    check_broker(config)
    return main_demo(config, keyring, args.count, args.wait, args.seed)


COMMANDS: tuple[Command, ...] = (
    Command(
        ("demo",),
        "send sample traffic to a running worker, show decisions",
        "Publish request records and a mix of good and hostile results (injected\n"
        "approvals, duplicate keys, HTML error pages, a state turned into an object with\n"
        "a banner, wrong project, stale and unsigned results, ...), wait for the\n"
        "worker's decisions on the audit topic and print them by tool, outcome and\n"
        "code. Exit 1 if any was not decided as the sample expected.",
        ("toolgate demo", "toolgate demo --count 50 --wait 30"),
        _demo,
        ("contracts", "bootstrap"),
        _demo_arguments,
    ),
)
