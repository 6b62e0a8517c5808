"""What every command module shares: the table row, argument types and handler helpers.

A command module (``_check``, ``_contracts``, ...) owns its commands' rows of the table:
words, help, examples, arguments and handler. Here are the row itself, the argument types
(numbers, rejection codes, stages) and the helpers more than one command uses: load the
gate, check the broker, read a time, warn about a tool filter no contract names.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from toolgate._codes import CODES, STAGES, Code, Stage
from toolgate._config import Config
from toolgate._errors import ConfigError

if TYPE_CHECKING:
    from toolgate.gate._gate import Gate

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace, Config], int]


@dataclass(frozen=True)
class Command:
    """One row of the command table: a (sub)command's words, handler, help and options.

    A row without a handler is a group (``contracts``, ``topics``, ...) whose actions are
    the rows that extend its words.
    """

    words: tuple[str, ...]
    help: str
    description: str
    examples: tuple[str, ...]
    handler: Handler | None = None
    shared: tuple[str, ...] = ()
    arguments: Callable[[argparse.ArgumentParser], None] | None = None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds above 0")
    return value


def rejection_code(text: str) -> Code:
    """A rejection code, any case; an unknown one is refused with the list of valid codes."""
    for code in CODES:
        if code == text.upper():
            return code
    raise argparse.ArgumentTypeError(f"{text!r} is not a rejection code; valid codes: {', '.join(CODES)}")


def gate_stage(text: str) -> Stage:
    """A stage of the gate, any case; an unknown one is refused with the list of stages."""
    for stage in STAGES:
        if stage == text.lower():
            return stage
    raise argparse.ArgumentTypeError(f"{text!r} is not a stage; valid stages: {', '.join(STAGES)}")


def strimzi_cluster_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strimzi-cluster",
        metavar="NAME",
        default="my-cluster",
        help="--format strimzi: the Kafka resource's name (label strimzi.io/cluster; default my-cluster)",
    )


def check_broker(config: Config) -> None:
    """Connect once, bounded in time, before a command talks to Kafka: a TLS, protocol or login
    mistake is one line naming the address and the setting (a TransportError, a ConfigError), a
    broker that cannot be reached a BrokerError."""
    from toolgate.service._kafka import client_settings
    from toolgate.service._transport import check_connection

    asyncio.run(check_connection(config, client_settings(config)))


def keyring_path(args: argparse.Namespace, config: Config) -> str | None:
    return getattr(args, "keyring", None) or config.keyring


def build_gate(config: Config, keyring_file: str | None) -> Gate:
    from toolgate.gate._gate import Gate
    from toolgate.gate._signing import Keyring
    from toolgate.registry._snapshot import load_contracts  # a folder, or a registry set's generation

    return Gate(load_contracts(config.contracts_dir), Keyring.load(keyring_file) if keyring_file else None)


def parse_time(flag: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: not an RFC 3339 date-time") from exc
    if value.tzinfo is None:
        raise ConfigError(f"{flag} {text!r}: needs a UTC offset, e.g. Z")
    return value


def tools_of(contracts_dir: str) -> list[str]:
    """Tool names of a contracts folder, from its layout alone (nothing is loaded)."""
    return sorted({p.parent.parent.name for p in Path(contracts_dir).glob("*/v*/contract.yaml")})


def warn_unknown_tools(tools: Sequence[str], known: Sequence[str], config: Config) -> None:
    """A --tool that no contract names still filters (a header an adapter made up may be worth
    finding), but it is more often a typo: say so on stderr."""
    if not known:
        return
    for tool in tools:
        if tool not in known:
            print(
                f"toolgate: warning: --tool {tool!r} is not a tool of {config.contracts_dir} "
                f"(tools: {', '.join(known)}); filtering on it anyway",
                file=sys.stderr,
            )
