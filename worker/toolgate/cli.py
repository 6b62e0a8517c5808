"""The ``toolgate`` command line: parse arguments, configure, call one handler.

Every subcommand is a row of :data:`COMMANDS`: its words, its handler, its help,
its example and the shared option groups it takes (declared once, as argparse
parent parsers). :func:`main` parses, builds the configuration (defaults, TOML
file, ``TOOLGATE_*`` variables, then command-line flags), calls the handler and
turns every expected failure into one line on stderr.

Exit codes, for every command: 0 success, 1 the command ran and found a problem
(a rejected result, a failing fixture, a lint finding, a breaking change), 2 a
usage, configuration or connection error (bad arguments, unreadable file, bad
contract, unreachable broker or worker).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from toolgate._codes import CODES, STAGES, Code, Stage
from toolgate._config import Config, load_config
from toolgate._errors import BrokerError, ConfigError
from toolgate._version import __version__

if TYPE_CHECKING:
    from toolgate.gate._gate import Gate

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace, Config], int]

_DESCRIPTION = """\
toolgate validates AI-agent tool results before an agent may act on them.

Raw results from tool adapters land on an intake topic; toolgate applies byte and
depth limits, parses strictly, validates against the tool's contract (JSON Schema
2020-12), binds the result to its request record, and publishes a minimal closed
object to the agent topic. Rejections go to a quarantine topic for operators.
"""

_EPILOG = """\
examples:
  toolgate topics ensure                      create the six topics on the broker
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds above 0")
    return value


def _code(text: str) -> Code:
    """A rejection code, any case; an unknown one is refused with the list of valid codes."""
    for code in CODES:
        if code == text.upper():
            return code
    raise argparse.ArgumentTypeError(f"{text!r} is not a rejection code; valid codes: {', '.join(CODES)}")


def _stage(text: str) -> Stage:
    """A stage of the gate, any case; an unknown one is refused with the list of stages."""
    for stage in STAGES:
        if stage == text.lower():
            return stage
    raise argparse.ArgumentTypeError(f"{text!r} is not a stage; valid stages: {', '.join(STAGES)}")


# --- shared option groups (argparse parents), each declared once ---------------------------


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
        "--keyring", metavar="FILE", help="adapter keys for signed contracts, TOML (TOOLGATE_KEYRING)"
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
    filters.add_argument("--code", metavar="CODE", type=_code, help="only this code, e.g. SCHEMA_VIOLATION")
    filters.add_argument("--stage", metavar="STAGE", type=_stage, help="only this stage, e.g. semantic")
    return {
        "config": config,
        "contracts": contracts,
        "keyring": keyring,
        "bootstrap": bootstrap,
        "now": now,
        "filters": filters,
    }


# --- the command table ---------------------------------------------------------------------


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


def _check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="raw result bytes, one result per file")
    p.add_argument("--request", metavar="FILE", help="the request record (JSON) results answer")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K=V",
        help="an intake header, e.g. tg-tool=review_status (repeatable)",
    )
    p.add_argument("--key", metavar="KEY", help="the Kafka key (default: tg-request-id)")


def _contracts_test_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true", help="print passing fixtures too")


def _contracts_diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD", help="the older version folder (or schema file)")
    p.add_argument("new", metavar="NEW", help="the newer version folder (or schema file)")


def _contracts_import_mcp(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._mcp_import import run

    return run(args, config.contracts_dir)


def _contracts_import_mcp_arguments(p: argparse.ArgumentParser) -> None:
    from toolgate.tools._mcp_import import add_arguments

    add_arguments(p)


def _mcp_proxy(args: argparse.Namespace, config: Config) -> int:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError("mcp-proxy needs the MCP SDK: pip install 'toolgate[mcp]'") from None
    from toolgate.gate._signing import Keyring
    from toolgate.tools._mcp_proxy import options_from, parse_listen, serve, upstream_target

    options_from(args)  # every option checked before anything connects
    parse_listen(args.listen, allow_remote=args.allow_remote)
    upstream_target(args)
    keyring_file = _keyring_file(args, config)
    keyring = Keyring.load(keyring_file) if keyring_file else None
    _check_broker(config)
    asyncio.run(serve(args, config, keyring))
    return EXIT_OK


def _mcp_proxy_arguments(p: argparse.ArgumentParser) -> None:
    from toolgate.tools._mcp_proxy import add_arguments

    add_arguments(p)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-messages", type=_positive_int, metavar="N", help="stop after deciding N results")
    p.add_argument(
        "--burst",
        action="store_true",
        help="stop once this worker owns every intake partition and has read each to "
        "its end (one-shot runs and tests; one worker)",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=500,
        metavar="N",
        help="records per transaction and partition (default 500)",
    )
    p.add_argument(
        "--linger-ms",
        type=_non_negative_int,
        default=20,
        metavar="MS",
        help="longest wait for a batch to fill (default 20)",
    )
    p.add_argument(
        "--metrics-host",
        default=None,
        metavar="HOST",
        help="address for the metrics port (TOOLGATE_METRICS_HOST, default 127.0.0.1)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="DEBUG, INFO, WARNING or ERROR (default INFO)",
    )
    p.set_defaults(json_logs=True)


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--count", type=_positive_int, default=200, metavar="N", help="results to send (200)")
    p.add_argument(
        "--wait",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="seconds to wait for the decisions (60)",
    )
    p.add_argument("--seed", type=int, default=7, help="random seed of the traffic mix (7)")
    p.add_argument(
        "--keyring", metavar="FILE", help="keys to sign samples (default: CONTRACTS/fixtures-keyring.toml)"
    )


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", metavar="ISO", help="rejected at or after this time")
    p.add_argument("--until", metavar="ISO", help="rejected before this time")
    p.add_argument("--tool", action="append", default=[], help="tool (repeatable)")
    p.add_argument(
        "--stage", action="append", default=[], type=_stage, help="rejection stage, e.g. schema (repeatable)"
    )
    p.add_argument(
        "--code",
        action="append",
        default=[],
        type=_code,
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
        type=_non_negative_int,
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


def _acls_principal_arguments(p: argparse.ArgumentParser) -> None:
    for role in ("toolgate", "platform", "adapter", "agent", "operator"):
        p.add_argument(
            f"--{role}",
            metavar="PRINCIPAL",
            default=f"User:{role}",
            help=f"the {role} principal (default User:{role})",
        )
    p.add_argument(
        "--agent-group",
        metavar="PREFIX",
        default="agent",
        help="prefix of the agents' consumer groups (default agent)",
    )


def _strimzi_cluster_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--strimzi-cluster",
        metavar="NAME",
        default="my-cluster",
        help="--format strimzi: the Kafka resource's name (label strimzi.io/cluster; default my-cluster)",
    )


def _acls_plan_arguments(p: argparse.ArgumentParser) -> None:
    _acls_principal_arguments(p)
    p.add_argument(
        "--format",
        choices=("lines", "kafka-acls", "strimzi"),
        default="lines",
        help="lines (default), kafka-acls.sh command lines, or Strimzi KafkaUser resources",
    )
    _strimzi_cluster_argument(p)


def _topics_grow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--partitions",
        type=_positive_int,
        required=True,
        metavar="N",
        help="the new partition count of intake, requests and state",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="S",
        help="read each topic to its end within S seconds (default 30)",
    )


def _topics_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format",
        choices=("lines", "strimzi"),
        default="lines",
        help="lines (default: name, partitions, replicas, configs) or Strimzi KafkaTopic resources",
    )
    _strimzi_cluster_argument(p)


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
    p.add_argument("--top", type=_positive_int, default=10, metavar="N", help="rejection codes shown (10)")


def _quarantine_summary_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-scan",
        type=_positive_int,
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
        "-n", "--lines", type=_positive_int, default=10, metavar="N", help="records to print (default 10)"
    )
    p.add_argument(
        "--max-scan",
        type=_positive_int,
        default=100_000,
        metavar="N",
        help="look at most at the last N records of each partition (100000)",
    )
    p.add_argument(
        "--value",
        action="store_true",
        help="include the rejected value as JSON text (first 4096 characters; "
        "hostile input: never paste it into an agent)",
    )


# --- handlers ------------------------------------------------------------------------------


def _check_broker(config: Config) -> None:
    """Connect once, bounded in time, before a command talks to Kafka: a TLS, protocol or login
    mistake is one line naming the address and the setting (a TransportError, a ConfigError), a
    broker that cannot be reached a BrokerError."""
    from toolgate.service._kafka import client_settings
    from toolgate.service._transport import check_connection

    asyncio.run(check_connection(config, client_settings(config)))


def _keyring_file(args: argparse.Namespace, config: Config) -> str | None:
    return getattr(args, "keyring", None) or config.keyring


def _load_gate(config: Config, keyring_file: str | None) -> Gate:
    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._gate import Gate
    from toolgate.gate._signing import Keyring

    return Gate(ContractSet.load(config.contracts_dir), Keyring.load(keyring_file) if keyring_file else None)


def _parse_time(flag: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: not an RFC 3339 date-time") from exc
    if value.tzinfo is None:
        raise ConfigError(f"{flag} {text!r}: needs a UTC offset, e.g. Z")
    return value


def _tools_of(contracts_dir: str) -> list[str]:
    """Tool names of a contracts folder, from its layout alone (nothing is loaded)."""
    return sorted({p.parent.parent.name for p in Path(contracts_dir).glob("*/v*/contract.yaml")})


def _warn_unknown_tools(tools: Sequence[str], known: Sequence[str], config: Config) -> None:
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


def _check(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._records import Message, RequestRecord, decode_request

    gate = _load_gate(config, _keyring_file(args, config))
    request: RequestRecord | None = None
    if args.request:
        try:
            request = decode_request(Path(args.request).read_bytes())
        except OSError as exc:
            raise ConfigError(f"{args.request}: cannot read: {exc.strerror}") from exc
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ConfigError(f"{args.request}: not a valid request record: {exc}") from exc
    # Pairs, as Kafka carries them: a repeated --header sends every value, so the offline
    # check sees a duplicated header exactly as the worker does (HEADER_MISMATCH).
    given: list[tuple[str, bytes]] = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--header {item!r}: expected K=V, e.g. tg-tool=review_status")
        given.append((name, _utf8(value, f"--header {name}")))
    headers: list[tuple[str, bytes]] = []
    if request is not None:
        # Defaults from the request record, unless given (in any case, as the gate reads them).
        named = {name.lower() for name, _ in given}
        for name, text in (("tg-tool", request.tool), ("tg-request-id", request.request_id)):
            if name not in named:
                headers.append((name, text.encode()))
    headers += given
    now = _parse_time("--now", args.now) or datetime.now(UTC)
    if args.key is not None:
        key: bytes | None = _utf8(args.key, "--key")
    else:
        key = next((v for n, v in headers if n.lower() == "tg-request-id"), None)
    raws = []
    for name in args.files:  # read them all first: a missing file is a usage error, not half a run
        try:
            raws.append((name, Path(name).read_bytes()))
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read: {exc.strerror}") from exc
    rejected = 0
    for name, raw in raws:
        message = Message(key=key, value=raw, headers=headers, origin=name)
        verdict = gate.evaluate(message, request, now)
        line: dict[str, Any] = {
            "file": name,
            "outcome": "accepted" if verdict.accepted else "rejected",
            "stage": verdict.stage,
            "code": verdict.code,
            "agent": json.loads(verdict.agent),
        }
        if verdict.diagnostics is not None:
            line["diagnostics"] = msgspec.to_builtins(verdict.diagnostics)
        print(json.dumps(line, ensure_ascii=False))
        rejected += not verdict.accepted
    return EXIT_PROBLEM if rejected else EXIT_OK


def _utf8(text: str, what: str) -> bytes:
    """A command-line value as UTF-8 (arguments that are not UTF-8 arrive surrogate-escaped)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{what}: the value is not UTF-8") from None


def _contracts_test(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._signing import Keyring
    from toolgate.tools._fixtures import fixtures_keyring, iter_outcomes, without_fixtures

    root = config.contracts_dir
    contracts = ContractSet.load(root)
    keyring = Keyring.load(args.keyring) if args.keyring else fixtures_keyring(root)
    passed = failed = 0
    for outcome in iter_outcomes(contracts, keyring):
        if outcome.ok:
            passed += 1
            if args.verbose:
                print(f"ok   {outcome.case.name}")
        else:
            failed += 1
            print(f"FAIL {outcome.case.name} ({outcome.case.path}): {outcome.problem}")
    for contract in without_fixtures(contracts):
        failed += 1
        print(
            f"FAIL {contract.key} ({contract.folder}): no fixtures; add at least one "
            "fixtures/accept/*.json or fixtures/reject/*.json"
        )
    print(f"{len(contracts)} contract versions: {passed} passed, {failed} failed")
    return EXIT_PROBLEM if failed else EXIT_OK


def _contracts_lint(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._contracts import ContractSet
    from toolgate.tools._lint import lint_contracts

    contracts = ContractSet.load(config.contracts_dir)
    findings = lint_contracts(contracts)
    for finding in findings:
        print(f"{finding.file}: {finding.pointer or '/'}: {finding.rule}: {finding.message}")
    print(f"{len(contracts)} contract versions: {len(findings)} findings")
    return EXIT_PROBLEM if findings else EXIT_OK


def _contracts_diff(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._contracts import load_contract
    from toolgate.tools._contract_diff import diff_contracts
    from toolgate.tools._schema_diff import diff_schemas

    old, new = Path(args.old), Path(args.new)
    if old.is_dir() and new.is_dir():
        changes = diff_contracts(load_contract(old), load_contract(new))
    elif old.is_file() and new.is_file():
        changes = diff_schemas(_read_schema(old), _read_schema(new))
    else:
        raise ConfigError(f"{old} and {new}: give two contract version folders or two schema files")
    for change in changes:
        label = "BREAKING" if change.breaking else "widens  " if change.widens else "change  "
        print(f"{label} {change.pointer or '/'}: {change.kind}: {change.message}")
    breaking = sum(c.breaking for c in changes)
    widening = sum(c.widens and not c.breaking for c in changes)
    print(
        f"{len(changes)} changes, {breaking} breaking, {widening} widening what reaches the agent "
        "(review them)"
    )
    return EXIT_PROBLEM if breaking else EXIT_OK


def _contracts_history(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._contracts import ContractSet
    from toolgate.tools._contract_diff import contract_history

    steps = contract_history(ContractSet.load(config.contracts_dir))
    for step in steps:
        breaking = sum(c.breaking for c in step.changes)
        verdict = "ok" if step.ok else "FAIL: breaking change without a new major version"
        print(f"{step.old} -> {step.new}: {len(step.changes)} changes, {breaking} breaking: {verdict}")
        for change in step.changes:
            label = "BREAKING" if change.breaking else "widens  " if change.widens else "change  "
            print(f"    {label} {change.pointer or '/'}: {change.kind}")
    failed = sum(not step.ok for step in steps)
    print(f"{len(steps)} version steps, {failed} failed")
    return EXIT_PROBLEM if failed else EXIT_OK


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ConfigError(f"{path}: a schema must be a JSON object")
    return schema


def _run(args: argparse.Namespace, config: Config) -> int:
    from toolgate.service._service import Worker, WorkerOptions

    log = logging.getLogger("toolgate")
    config = msgspec.structs.replace(
        config,
        keyring=_keyring_file(args, config),
        metrics_host=args.metrics_host or config.metrics_host,
    )

    from toolgate.service._startup import check_signature_keys

    def load_gate() -> Gate:
        gate = _load_gate(config, config.keyring)
        check_signature_keys(gate, config.keyring)  # a reload that drops a needed key is refused too
        return gate

    gate = load_gate()
    options = WorkerOptions(
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        max_messages=args.max_messages,
        burst=args.burst,
        metrics_host=config.metrics_host,
    )
    log.info(
        "configuration",
        extra={
            # The values in force: defaults, file, environment and flags merged.
            # The configured partition counts are what topics ensure creates; the topics'
            # real counts follow in the worker's "topics" line.
            "config": {k: v for k, v in config.masked().items() if k != "partitions"},
            "options": {
                "batch_size": options.batch_size,
                "linger_ms": options.linger_ms,
                "max_messages": options.max_messages,
                "burst": options.burst,
                "log_level": args.log_level,
            },
            "contracts": [c.key for c in gate.contracts],
            # Where each adapter key came from: a file's name, an environment variable's name.
            "keys": gate.keyring.sources(),
        },
    )
    stats = asyncio.run(Worker(config, gate, options=options, gate_factory=load_gate).run())
    log.info(
        "decisions", extra={"decided": stats.decided, "accepted": stats.accepted, "rejected": stats.rejected}
    )
    return EXIT_OK


def _demo(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._signing import Keyring
    from toolgate.tools._demo import main_demo

    keyring = Keyring.load(args.keyring or Path(config.contracts_dir) / "fixtures-keyring.toml")
    _check_broker(config)
    return main_demo(config, keyring, args.count, args.wait, args.seed)


def _top(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._top import default_url, run

    if args.interval < 0 or (args.interval == 0 and not args.once):
        raise ConfigError("--interval must be above 0 (0 only with --once: one scrape, totals only)")
    url = args.url or default_url(config.metrics_host, config.metrics_port)
    try:
        return run(url, interval=args.interval, once=args.once, top=args.top, out=sys.stdout)
    except KeyboardInterrupt:
        return EXIT_OK


def _quarantine_tail(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._quarantine import Filters, tail

    _warn_unknown_tools([args.tool] if args.tool else [], _tools_of(config.contracts_dir), config)
    filters = Filters(tool=args.tool, code=args.code, stage=args.stage)
    _check_broker(config)
    lines = asyncio.run(
        tail(config, count=args.lines, filters=filters, max_scan=args.max_scan, with_value=args.value)
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

    from toolgate.tools._quarantine import REPLAY_WINDOW_HOURS, Filters, format_summary, summary

    _warn_unknown_tools([args.tool] if args.tool else [], _tools_of(config.contracts_dir), config)
    filters = Filters(tool=args.tool, code=args.code, stage=args.stage, unreplayed=args.unreplayed)
    _check_broker(config)
    since = datetime.now(UTC) - timedelta(hours=REPLAY_WINDOW_HOURS)
    rows, read = asyncio.run(summary(config, filters=filters, max_scan=args.max_scan, replays_since=since))
    print("\n".join(format_summary(rows, read, config.topics.quarantine)))
    return EXIT_OK


def _replay(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._replay import Selection, run_replay

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
        since=_parse_time("--since", args.since),
        until=_parse_time("--until", args.until),
        tools=frozenset(args.tool),
        stages=frozenset(args.stage),
        codes=frozenset(args.code),
        adapter_versions=frozenset(args.adapter_version),
        origin_partition=partition,
        origin_offsets=offsets,
    )
    now = _parse_time("--now", args.now) or datetime.now(UTC)
    gate = _load_gate(config, _keyring_file(args, config))
    _warn_unknown_tools(args.tool, gate.contracts.tools, config)
    workers = None
    if args.apply:
        from toolgate.tools._top import default_url

        listed = [u for u in os.environ.get("TOOLGATE_WORKERS", "").replace(",", " ").split() if u]
        workers = args.workers or listed or [default_url(config.metrics_host, config.metrics_port)]
    if args.wait is not None and not 0 < args.wait <= 3600:
        raise ConfigError("--wait must be above 0 and at most 3600 seconds")
    _check_broker(config)
    return asyncio.run(
        run_replay(
            config,
            gate,
            selection,
            apply_it=args.apply,
            max_replays=args.max_replays,
            now=now,
            workers=workers,
            force=args.force,
            wait_seconds=args.wait,
        )
    )


def _topics_ensure(args: argparse.Namespace, config: Config) -> int:
    from toolgate.service._kafka import ensure_topics

    _check_broker(config)
    report = asyncio.run(ensure_topics(config))
    for name in report.created:
        print(f"created  {name}")
    for name in report.existing:
        print(f"exists   {name}")
    for warning in report.warnings:
        print(f"warning  {warning}")
    for problem in report.problems:
        print(f"error    {problem}")
    print(f"{config.bootstrap}: {len(report.created)} created, {len(report.existing)} already existed")
    return EXIT_PROBLEM if report.problems else EXIT_OK


def _topics_grow(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._grow import GrowRefused, describe, grow_topics

    _check_broker(config)
    try:
        report = asyncio.run(grow_topics(config, args.partitions, wait_s=args.wait))
    except GrowRefused as exc:
        print(f"toolgate: not grown: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    for line in describe(report):
        print(line)
    return EXIT_OK


def _topics_plan(args: argparse.Namespace, config: Config) -> int:
    from toolgate.service._kafka import topic_plan
    from toolgate.tools._strimzi import dump, kafka_topics

    if args.format == "strimzi":
        header = (
            "toolgate's six topics as Strimzi KafkaTopics (toolgate topics plan --format strimzi).\n"
            "Requests and state must keep intake's partition count: grow them together\n"
            "(ops/RUNBOOK.md, Growing the intake partitions)."
        )
        print(dump(kafka_topics(config, args.strimzi_cluster), header), end="")
        return EXIT_OK
    for topic in topic_plan(config):
        configs = ",".join(f"{k}={v}" for k, v in sorted((topic.topic_configs or {}).items())) or "-"
        print(f"{topic.name}\t{topic.num_partitions}\t{topic.replication_factor}\t{configs}")
    return EXIT_OK


def _print_acls(acls: Sequence[Any]) -> None:
    for acl in acls:
        print(f"{acl.principal}\t{acl.operation}\t{acl.resource}\t{acl.name}\t{acl.pattern}")


def _acl_plan(args: argparse.Namespace, config: Config) -> list[Any]:
    from toolgate.tools._acls import Principals, acl_plan

    principals = Principals(
        toolgate=args.toolgate,
        platform=args.platform,
        adapter=args.adapter,
        agent=args.agent,
        operator=args.operator,
    )
    return acl_plan(config, principals, agent_group_prefix=args.agent_group)


def _acls_plan(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._acls import kafka_acls_commands

    plan = _acl_plan(args, config)
    if args.format == "kafka-acls":
        print("\n".join(kafka_acls_commands(plan, config.bootstrap)))
    elif args.format == "strimzi":
        from toolgate.tools._strimzi import dump, kafka_users

        try:
            users = kafka_users(plan, args.strimzi_cluster)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        header = "The ACLs of toolgate acls plan as Strimzi KafkaUsers (toolgate acls plan --format strimzi)."
        print(dump(users, header), end="")
    else:
        _print_acls(plan)
    return EXIT_OK


def _acls_apply(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._acls import apply_acls

    plan = _acl_plan(args, config)
    _check_broker(config)
    count = asyncio.run(apply_acls(config, plan))
    print(f"{config.bootstrap}: {count} ACLs applied (existing ones unchanged)")
    return EXIT_OK


def _acls_list(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._acls import describe_acls

    _check_broker(config)
    _print_acls(asyncio.run(describe_acls(config)))
    return EXIT_OK


_ACLS_TABLE = (
    "  toolgate  read requests, intake, audit, quarantine; write agent,\n"
    "            quarantine, audit; its group, transactional ids, idempotent writes\n"
    "  platform  write requests        adapter   write intake\n"
    "  agent     read agent, in groups of its own prefix\n"
    "  operator  read quarantine, audit, requests; write intake (replay --apply)\n"
)

COMMANDS: tuple[Command, ...] = (
    Command(
        ("check",),
        "evaluate result files offline, one JSON line per file",
        "Evaluate result files offline through the same gate the worker runs.\n\n"
        "Prints one JSON line per file: file, outcome (accepted|rejected), stage, code,\n"
        "the agent envelope, and for rejections the operator diagnostics.\n"
        "Exit 0 when every file was accepted, 1 when any was rejected, 2 on a usage error.\n\n"
        "When --request is given, tg-tool and tg-request-id default to the request's tool\n"
        "and request_id, and the Kafka key to tg-request-id.",
        (
            "toolgate check --request req.json --now 2026-05-01T12:00:00Z result.json",
            "toolgate check --header tg-tool=service_state --header tg-content-type=text/plain out.txt",
        ),
        _check,
        ("contracts", "keyring", "now"),
        _check_arguments,
    ),
    Command(
        ("contracts",),
        "test, lint and diff contracts",
        "Keep contracts honest: fixtures, rules, changes.",
        (
            "toolgate contracts test",
            "toolgate contracts diff contracts/deploy_status/v1 contracts/deploy_status/v2",
        ),
    ),
    Command(
        ("contracts", "test"),
        "run every fixture; each reject must hit its stage and code",
        "Run every fixture of every contract version through the real gate: an accept\n"
        "fixture must be accepted, a reject fixture must end at the stage and code it\n"
        "names. Exit 1 when any fixture fails.",
        ("toolgate contracts test", "toolgate contracts test --contracts ./contracts -v"),
        _contracts_test,
        ("contracts", "keyring"),
        _contracts_test_arguments,
    ),
    Command(
        ("contracts", "lint"),
        "closed objects, bounded strings and arrays, no free maps",
        "Hold every contract schema to the schema rules (docs/design.md, Contracts):\n"
        "closed objects, bounded strings and arrays, no free-form maps, anchored\n"
        "patterns, format only where asserted. Exit 1 on any finding.",
        ("toolgate contracts lint", "toolgate contracts lint --contracts ./contracts"),
        _contracts_lint,
        ("contracts",),
    ),
    Command(
        ("contracts", "diff"),
        "class each change between two versions as breaking or not",
        "Compare two contract versions (folders holding contract.yaml) or two schema\n"
        "files. Exit 1 when a change is breaking.",
        (
            "toolgate contracts diff contracts/deploy_status/v1 contracts/deploy_status/v2",
            "toolgate contracts diff old/schema.json new/schema.json",
        ),
        _contracts_diff,
        (),
        _contracts_diff_arguments,
    ),
    Command(
        ("contracts", "history"),
        "diff every version with its predecessor; breaking needs a new major",
        "For every tool, diff each version (v1, v1.1, v2, ...) with its predecessor.\n"
        "Exit 1 when a breaking change comes without a new major version (v1 -> v1.1).",
        ("toolgate contracts history",),
        _contracts_history,
        ("contracts",),
    ),
    Command(
        ("contracts", "import-mcp"),
        "draft contract versions from an MCP server's tools (closed, text-only)",
        "Write a draft contract version per tool of an MCP server, whole or not at all. A\n"
        "tool with an outputSchema: the schema is allOf [outputSchema, closure], the closure\n"
        "rejecting undeclared members and bounding strings and arrays everywhere, so it\n"
        "accepts only what the outputSchema accepts; a shape that cannot be closed soundly\n"
        "is refused. A tool without one: a text-only contract (no data, its text as bounded\n"
        "untrusted_text). Then a projection of every scalar field and fixtures. A draft\n"
        "never decides: review it, settle `toolgate contracts lint`, set status: active.\n"
        "A version is never overwritten: the next major version is written and the diff\n"
        "printed. Refused tools print one line each. Exit 1 while drafts are left to\n"
        "review or a tool was refused, 2 when the listing cannot be read. --url must be on\n"
        "the loopback.",
        (
            'toolgate contracts import-mcp --server deployer --command "python -m deployer_mcp"',
            "toolgate contracts import-mcp --server deployer --url http://127.0.0.1:8000/mcp",
            "toolgate contracts import-mcp --server deployer --tools-list tools.json --tool deploy_status",
        ),
        _contracts_import_mcp,
        ("contracts",),
        _contracts_import_mcp_arguments,
    ),
    Command(
        ("mcp-proxy",),
        "an MCP server in front of an MCP server: hosts read only validated results",
        "Serve an MCP host (stdio, or streamable HTTP on the loopback) in front of an\n"
        "upstream MCP server. tools/list lists the upstream tools that have an active\n"
        "contract <server>.<tool>, with the contract's projected, closed output schema.\n"
        "tools/call issues a request record, calls the upstream, publishes its\n"
        "CallToolResult to intake and answers with what toolgate decided: the projected\n"
        "data, or isError with a fixed code and retryable flag (INVALID_RESPONSE for a\n"
        "rejected result). An upstream error, a timeout or a broker outage is isError\n"
        "with a fixed code (UPSTREAM_ERROR, UPSTREAM_TIMEOUT, GATE_TIMEOUT,\n"
        "BROKER_UNAVAILABLE, PROXY_BUSY, UNKNOWN_TOOL). Needs a running worker\n"
        "(toolgate run) and pip install 'toolgate[mcp]'.",
        (
            'toolgate mcp-proxy --server deployer --upstream-command "python -m deployer_mcp"',
            "toolgate mcp-proxy --server deployer --upstream-url http://127.0.0.1:8000/mcp "
            "--listen http://127.0.0.1:8100/mcp",
        ),
        _mcp_proxy,
        ("contracts", "keyring", "bootstrap"),
        _mcp_proxy_arguments,
    ),
    Command(
        ("run",),
        "run the worker: consume intake, decide, publish",
        "Consume the intake topic, decide every result with the gate and publish the\n"
        "agent envelope, quarantine record and audit event with the consumer offset in\n"
        "one Kafka transaction. SIGTERM/SIGINT finish the batch in hand and leave the\n"
        "group; SIGHUP reloads the contracts (a set that fails to load is refused and\n"
        "the running one kept). Metrics, /healthz and /readyz are served on\n"
        "TOOLGATE_METRICS_PORT. Every log line is a JSON object on stderr.",
        (
            "TOOLGATE_BOOTSTRAP=127.0.0.1:19092 toolgate run --contracts contracts",
            "toolgate run --burst --bootstrap 127.0.0.1:19092",
        ),
        _run,
        ("contracts", "keyring", "bootstrap"),
        _run_arguments,
    ),
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
    Command(
        ("replay",),
        "send quarantined results through the pipeline again",
        "Select quarantined results and, after a connector or contract fix, send them\n"
        "through the pipeline again. Prints the selection (by tool and code) first.\n"
        "--dry-run (the default) re-evaluates each with today's contracts, its request\n"
        "record and the real clock, and writes nothing. --apply re-publishes the\n"
        "original bytes and headers to intake (tg-replay-count + 1); the worker decides\n"
        "again, and a result already accepted for its request attempt is a duplicate.\n"
        "--apply first compares the local contracts with the ones the live workers report\n"
        "(toolgate_contract_info digests) and refuses, with the difference, when they\n"
        "differ (--force overrides); it skips records whose earlier replay was accepted.\n"
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
    Command(
        ("topics",),
        "manage the Kafka topics",
        "Manage toolgate's six Kafka topics.",
        ("toolgate topics ensure",),
    ),
    Command(
        ("topics", "ensure"),
        "create missing topics (idempotent)",
        "Create the six topics (docs/design.md, Topics and trust boundaries) where\n"
        "missing and report those that exist. Names and partition counts come from\n"
        "the configuration:\n"
        "  TOOLGATE_TOPIC_{REQUESTS,INTAKE,AGENT,QUARANTINE,AUDIT,STATE}\n"
        "  TOOLGATE_PARTITIONS_{INTAKE,AGENT,QUARANTINE,AUDIT}\n"
        "Requests and state (the worker's changelog of accepted attempts) are\n"
        "compacted and get intake's partition count (the existing intake topic's,\n"
        "when it exists): a worker restores only its intake partitions' state.",
        (
            "toolgate topics ensure",
            "TOOLGATE_PARTITIONS_INTAKE=6 toolgate topics ensure --bootstrap kafka:9092",
        ),
        _topics_ensure,
        ("bootstrap",),
    ),
    Command(
        ("topics", "grow"),
        "grow intake, requests and state together (drain first)",
        "Grow the co-partitioned topics (intake, requests, state) to N partitions and\n"
        "move every live request record and accepted-attempts entry to the partition\n"
        "its key belongs to under N, so no live request is looked up in the wrong place.\n"
        "Refused (exit 1) while the worker group has members or intake holds a record\n"
        "no worker decided: pause the adapters and the platform, let the workers drain\n"
        "intake, stop them, grow, start them, resume (ops/RUNBOOK.md, Growing the\n"
        "intake partitions). Idempotent: run it again after an interruption.",
        (
            "toolgate topics grow --partitions 6",
            "toolgate topics grow --partitions 24 --bootstrap kafka:9092 --wait 120",
        ),
        _topics_grow,
        ("bootstrap",),
        _topics_grow_arguments,
    ),
    Command(
        ("topics", "plan"),
        "print the six topics as ensure creates them (nothing is sent)",
        "Print the six topics with the partition counts, replication factor and\n"
        "configs that toolgate topics ensure creates them with, one per line, or as\n"
        "Strimzi KafkaTopic resources (--format strimzi) for a cluster run by the\n"
        "Strimzi operator. Nothing is sent to the cluster.",
        (
            "toolgate topics plan",
            "TOOLGATE_PARTITIONS_INTAKE=12 toolgate topics plan --format strimzi --strimzi-cluster events",
        ),
        _topics_plan,
        (),
        _topics_plan_arguments,
    ),
    Command(
        ("acls",),
        "the Kafka ACLs of the trust boundaries",
        "The ACLs of the trust boundaries (docs/design.md, Topics and trust boundaries)\n"
        "for the configured topic names (TOOLGATE_TOPIC_*) and consumer group\n"
        "(TOOLGATE_GROUP_ID, as a prefix):\n"
        + _ACLS_TABLE
        + "apply and list log in as TOOLGATE_SECURITY_* says: an administrator.",
        (
            "toolgate acls plan                                the ACLs, one per line",
            "toolgate acls plan --format kafka-acls            as kafka-acls.sh commands",
            "toolgate acls apply --adapter User:connector-7    create them (idempotent)",
            "toolgate acls list                                what the cluster holds",
        ),
    ),
    Command(
        ("acls", "plan"),
        "print the ACLs (nothing is sent)",
        "Print the ACLs of the trust boundaries, one per line (principal, operation,\n"
        "resource type, name, pattern), or as kafka-acls.sh command lines. Nothing is\n"
        "sent to the cluster.",
        (
            "toolgate acls plan",
            "toolgate acls plan --format kafka-acls --adapter User:connector-7",
            "toolgate acls plan --format strimzi --strimzi-cluster events",
        ),
        _acls_plan,
        ("bootstrap",),
        _acls_plan_arguments,
    ),
    Command(
        ("acls", "apply"),
        "create the ACLs on the cluster (idempotent)",
        "Create the ACLs of the trust boundaries on the cluster; ones that exist are\n"
        "left unchanged. Logs in as TOOLGATE_SECURITY_* says: an administrator.",
        ("toolgate acls apply", "toolgate acls apply --adapter User:connector-7 --agent-group agents."),
        _acls_apply,
        ("bootstrap",),
        _acls_principal_arguments,
    ),
    Command(
        ("acls", "list"),
        "print the ALLOW ACLs the cluster holds",
        "Print the ALLOW ACLs the cluster holds, one per line, in the format of\n"
        "toolgate acls plan. Logs in as TOOLGATE_SECURITY_* says: an administrator.",
        ("toolgate acls list", "toolgate acls list --bootstrap kafka:9092"),
        _acls_list,
        ("bootstrap",),
    ),
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
        "TOOLGATE_TOPIC_QUARANTINE (default toolgate.quarantine).",
        (
            "toolgate quarantine tail                          the last 10 rejections",
            "toolgate quarantine tail --tool job_status --code BAD_SIGNATURE -n 5",
            "toolgate quarantine tail --stage schema --value -n 1   with the raw bytes as text",
        ),
        _quarantine_tail,
        ("bootstrap", "filters", "contracts"),
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


_parser = build_parser  # the name the runbook and compose tests import


def _with_flags(args: argparse.Namespace, config: Config) -> Config:
    """The configuration with the command-line flags that override it applied."""
    changes: dict[str, Any] = {}
    if getattr(args, "bootstrap", None):
        changes["bootstrap"] = args.bootstrap
    if getattr(args, "contracts", None):
        changes["contracts_dir"] = args.contracts
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


if __name__ == "__main__":
    raise SystemExit(main())
