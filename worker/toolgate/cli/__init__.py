"""The ``toolgate`` command line: parse arguments, configure, call one handler.

Every subcommand is a row of :data:`COMMANDS`: its words, its handler, its help,
its example and the shared option groups it takes (declared once, here, as argparse
parent parsers). Each command group is a module that owns its rows, arguments and
handlers (``_check``, ``_contracts``, ``_mcp``, ``_run``, ``_demo``, ``_replay``,
``_topics``, ``_acls``, ``_top``, ``_quarantine``); ``_common`` holds the row type,
the argument types and the helpers several handlers use. :func:`main` parses, builds
the configuration (defaults, TOML file, ``TOOLGATE_*`` variables, then command-line
flags), calls the handler and turns every expected failure into one line on stderr.

Exit codes, for every command: 0 success, 1 the command ran and found a problem
(a rejected result, a failing fixture, a lint finding, a breaking change), 2 a
usage, configuration or connection error (bad arguments, unreadable file, bad
contract, unreachable broker or worker).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import msgspec

from toolgate._config import Config, load_config
from toolgate._errors import BrokerError, ConfigError
from toolgate._version import __version__
from toolgate.cli import _acls, _check, _contracts, _demo, _mcp, _quarantine, _replay, _run, _top, _topics
from toolgate.cli._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_USAGE,
    Command,
    Handler,
    gate_stage,
    rejection_code,
)

__all__ = ["COMMANDS", "EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "Command", "build_parser", "main"]

_DESCRIPTION = """\
toolgate validates AI-agent tool results before an agent may act on them.

Raw results from tool adapters land on an intake topic; toolgate applies byte and
depth limits, parses strictly, validates against the tool's contract (JSON Schema
2020-12), binds the result to its request record, and publishes a minimal closed
object to the agent topic. Rejections go to a quarantine topic for operators.
"""

_EPILOG = """\
examples:
  toolgate topics ensure                      create the eight topics on the broker
  toolgate check --request req.json --header tg-tool=review_status result.json
  toolgate contracts test                     run every contract fixture
  toolgate contracts lint                     hold every schema to the contract rules
  toolgate contracts diff contracts/job_status/v1 contracts/job_status/v2
  toolgate top                                live view of a running worker's metrics
  toolgate quarantine tail --code BAD_SIGNATURE -n 5   why the latest results were rejected
  toolgate quarantine summary                 rejections by tool, code, adapter version

Every command has --help with an example. Exit codes: 0 success, 1 the command
found a problem, 2 a usage, configuration or connection error.

environment: TOOLGATE_BOOTSTRAP (default 127.0.0.1:19092), TOOLGATE_CONTRACTS_DIR,
TOOLGATE_KEYRING, TOOLGATE_CONFIG (a TOML file); see docs/configuration.md for all settings.
"""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _shared_options() -> dict[str, _Parser]:
    def group() -> _Parser:
        return _Parser(add_help=False)

    config = group()
    # SUPPRESS: a subcommand's default must not overwrite `toolgate --config FILE COMMAND`.
    config.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="TOML configuration file (TOOLGATE_CONFIG)",
    )
    contracts = group()
    contracts.add_argument(
        "--contracts", metavar="DIR", help="contracts folder (TOOLGATE_CONTRACTS_DIR, default ./contracts)"
    )
    keyring = group()
    keyring.add_argument(
        "--keyring",
        metavar="FILE",
        help="adapter keys (signed results), publisher keys (signed contracts) and quarantine keys "
        "(the quarantine sealed at rest), TOML (TOOLGATE_KEYRING)",
    )
    bootstrap = group()
    bootstrap.add_argument(
        "--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers (TOOLGATE_BOOTSTRAP)"
    )
    now = group()
    now.add_argument("--now", metavar="ISO", help="the clock, RFC 3339 with an offset (default: now)")
    filters = group()
    filters.add_argument(
        "--tool",
        metavar="TOOL",
        help="only this tool (the contract's, else the tg-tool header; as toolgate replay --tool)",
    )
    filters.add_argument(
        "--code", metavar="CODE", type=rejection_code, help="only this code, e.g. SCHEMA_VIOLATION"
    )
    filters.add_argument("--stage", metavar="STAGE", type=gate_stage, help="only this stage, e.g. semantic")
    return {
        "config": config,
        "contracts": contracts,
        "keyring": keyring,
        "bootstrap": bootstrap,
        "now": now,
        "filters": filters,
    }


# The table, in the order toolgate --help lists it: each module owns its rows.
COMMANDS: tuple[Command, ...] = (
    *_check.COMMANDS,
    *_contracts.COMMANDS,
    *_mcp.COMMANDS,
    *_run.COMMANDS,
    *_demo.COMMANDS,
    *_replay.COMMANDS,
    *_topics.COMMANDS,
    *_acls.COMMANDS,
    *_top.COMMANDS,
    *_quarantine.COMMANDS,
)


def _epilog(examples: Sequence[str]) -> str:
    return ("example:\n" if len(examples) == 1 else "examples:\n") + "".join(f"  {e}\n" for e in examples)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, built from :data:`COMMANDS`."""
    fmt = argparse.RawDescriptionHelpFormatter
    shared = _shared_options()
    parser = _Parser(prog="toolgate", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"toolgate {__version__}")
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file (TOOLGATE_CONFIG)")
    actions: dict[tuple[str, ...], argparse._SubParsersAction[_Parser]] = {
        (): parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    }
    for command in COMMANDS:
        sub = actions[command.words[:-1]].add_parser(
            command.words[-1],
            help=command.help,
            description=command.description,
            epilog=_epilog(command.examples),
            formatter_class=fmt,
            parents=[shared["config"], *(shared[name] for name in command.shared)],
        )
        if command.arguments is not None:
            command.arguments(sub)
        if command.handler is None:
            actions[command.words] = sub.add_subparsers(
                dest="_".join(command.words) + "_command", metavar="ACTION", required=True
            )
        else:
            sub.set_defaults(handler=command.handler)
    return parser


def _with_flags(args: argparse.Namespace, config: Config) -> Config:
    """The configuration with the command-line flags that override it applied."""
    changes: dict[str, Any] = {}
    if getattr(args, "bootstrap", None):
        changes["bootstrap"] = args.bootstrap
    if getattr(args, "contracts", None):
        changes["contracts_dir"] = args.contracts
    if getattr(args, "keyring", None):  # the flag wins over TOOLGATE_KEYRING, as every flag does
        changes["keyring"] = args.keyring
    return msgspec.structs.replace(config, **changes) if changes else config


def _broker_message(exc: BaseException, bootstrap: str) -> str:
    """One line for an error of the Kafka client."""
    cause = exc.__cause__ if isinstance(exc, BrokerError) and exc.__cause__ is not None else exc
    if type(cause).__name__ == "KafkaConnectionError":
        return (
            f"cannot reach the Kafka broker at {bootstrap} (is it running? "
            "--bootstrap or TOOLGATE_BOOTSTRAP names it)"
        )
    text = str(exc)
    if text.startswith(f"{bootstrap}: "):
        text = text[len(bootstrap) + 2 :]
    return f"Kafka broker at {bootstrap}: {text}"


def _is_kafka_error(exc: BaseException) -> bool:
    if "aiokafka" not in sys.modules:
        return False
    from aiokafka.errors import KafkaError

    return isinstance(exc, KafkaError)


def _quiet_client_logs() -> None:
    """Commands other than ``run`` print their own one-line errors: the Kafka client's
    warnings (a refused connection, retried) would repeat them, and with no handler
    configured Python would print them bare on stderr."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolgate`` console script; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    json_logs = bool(getattr(args, "json_logs", False))
    if json_logs:
        from toolgate import _logs

        _logs.configure(args.log_level)
    else:
        _quiet_client_logs()
    config: Config | None = None

    def fail(message: str, code: int = EXIT_USAGE, *, exc_info: BaseException | None = None) -> int:
        message = " ".join(part.strip() for part in message.splitlines())  # one line, always
        if json_logs:
            logging.getLogger("toolgate").error(message, exc_info=exc_info)
        else:
            print(f"toolgate: {message}", file=sys.stderr)
        return code

    try:
        config = _with_flags(args, load_config(args.config))
        if config.contracts_dir.startswith("registry+"):  # --contracts registry+https://...
            from toolgate.registry._connect import attach

            config = attach(config)
        handler: Handler = args.handler
        return handler(args, config)
    except ConfigError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        bootstrap = config.bootstrap if config is not None else "?"
        if isinstance(exc, BrokerError) or _is_kafka_error(exc):
            return fail(_broker_message(exc, bootstrap))
        if isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            return fail(f"{where}{exc.strerror or exc}")
        # A bug, not bad input: still one line (the run command's JSON log holds the traceback).
        return fail(
            f"unexpected error: {type(exc).__name__}: {exc} (please report it)", EXIT_PROBLEM, exc_info=exc
        )
