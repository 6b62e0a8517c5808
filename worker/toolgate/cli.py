"""The ``toolgate`` command line: parse arguments, configure, call one function.

Exit codes, for every command: 0 success, 1 the command ran and found a problem
(a rejected result, a failing fixture, a lint finding, a breaking change), 2 a
usage or configuration error (bad arguments, unreadable file, bad contract).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from toolgate._config import Config, load_config
from toolgate._errors import BrokerError, ConfigError
from toolgate._version import __version__
from toolgate.gate._contracts import ContractSet, load_contract

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2

_DESCRIPTION = """\
toolgate validates AI-agent tool results before an agent may act on them.

Raw results from tool adapters land on an intake topic; toolgate applies byte and
depth limits, parses strictly, validates against the tool's contract (JSON Schema
2020-12), binds the result to its request record, and publishes a minimal closed
object to the agent topic. Rejections go to a quarantine topic for operators.
"""

_EPILOG = """\
examples:
  toolgate topics ensure                      create the five topics on the broker
  toolgate check --request req.json --header tg-tool=review_status result.json
  toolgate contracts test                     run every contract fixture
  toolgate contracts lint                     hold every schema to the contract rules
  toolgate contracts diff contracts/job_status/v1 contracts/job_status/v2
  toolgate top                                live view of a running worker's metrics
  toolgate quarantine tail --code BAD_SIGNATURE -n 5   why the latest results were rejected
  toolgate quarantine summary                 rejections by tool, code, adapter version

environment: TOOLGATE_BOOTSTRAP (default 127.0.0.1:19092), TOOLGATE_CONTRACTS_DIR,
TOOLGATE_KEYRING, TOOLGATE_CONFIG (a TOML file); see README.md for all settings.
"""


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="toolgate", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=fmt
    )
    parser.add_argument("--version", action="version", version=f"toolgate {__version__}")
    parser.add_argument("--config", metavar="FILE", help="TOML configuration file (TOOLGATE_CONFIG)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = commands.add_parser(
        "check",
        formatter_class=fmt,
        help="evaluate result files offline, one JSON line per file",
        description="Evaluate result files offline through the same gate the worker runs.\n\n"
        "Prints one JSON line per file: file, outcome (accepted|rejected), stage, code,\n"
        "the agent envelope, and for rejections the operator diagnostics.\n"
        "Exit 0 when every file was accepted, 1 when any was rejected, 2 on a usage error.",
        epilog="When --request is given, tg-tool and tg-request-id default to the request's tool\n"
        "and request_id, and the Kafka key to tg-request-id.\n\n"
        "example:\n  toolgate check --request req.json --now 2026-05-01T12:00:00Z result.json",
    )
    check.add_argument("files", nargs="+", metavar="FILE", help="raw result bytes, one result per file")
    check.add_argument("--contracts", metavar="DIR", help="contracts folder (default: ./contracts)")
    check.add_argument("--request", metavar="FILE", help="the request record (JSON) results answer")
    check.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="K=V",
        help="an intake header, e.g. tg-tool=review_status (repeatable)",
    )
    check.add_argument("--key", metavar="KEY", help="the Kafka key (default: tg-request-id)")
    check.add_argument("--now", metavar="ISO", help="the clock, RFC 3339 (default: now)")
    check.add_argument("--keyring", metavar="FILE", help="adapter keys for signed contracts")

    contracts = commands.add_parser(
        "contracts",
        help="test, lint and diff contracts",
        description="Keep contracts honest: fixtures, rules, changes.",
    )
    sub = contracts.add_subparsers(dest="contracts_command", metavar="ACTION", required=True)
    test = sub.add_parser("test", help="run every fixture; each reject must hit its stage and code")
    test.add_argument("--contracts", metavar="DIR", help="contracts folder (default: ./contracts)")
    test.add_argument(
        "--keyring", metavar="FILE", help="keys for signed fixtures (default: DIR/fixtures-keyring.toml)"
    )
    test.add_argument("-v", "--verbose", action="store_true", help="print passing fixtures too")
    lint = sub.add_parser("lint", help="closed objects, bounded strings and arrays, no free maps")
    lint.add_argument("--contracts", metavar="DIR", help="contracts folder (default: ./contracts)")
    diff = sub.add_parser(
        "diff",
        help="class each change between two versions as breaking or not",
        description="Compare two contract versions (folders holding contract.yaml)"
        " or two schema files. Exit 1 when a change is breaking.",
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    history = sub.add_parser(
        "history",
        help="diff every version with its predecessor; breaking needs a new major",
        description="For every tool, diff each version (v1, v1.1, v2, ...) with its predecessor.\n"
        "Exit 1 when a breaking change comes without a new major version (v1 -> v1.1).",
    )
    history.add_argument("--contracts", metavar="DIR", help="contracts folder (default: ./contracts)")

    run = commands.add_parser(
        "run",
        formatter_class=fmt,
        help="run the worker: consume intake, decide, publish",
        description="Consume the intake topic, decide every result with the gate and publish the\n"
        "agent envelope, quarantine record and audit event with the consumer offset in\n"
        "one Kafka transaction. SIGTERM/SIGINT finish the batch in hand and leave the\n"
        "group; SIGHUP reloads the contracts (a set that fails to load is refused and\n"
        "the running one kept). Metrics, /healthz and /readyz are served on\n"
        "TOOLGATE_METRICS_PORT.",
        epilog="example:\n  TOOLGATE_BOOTSTRAP=127.0.0.1:19092 toolgate run --contracts contracts",
    )
    run.add_argument("--contracts", metavar="DIR", help="contracts folder (TOOLGATE_CONTRACTS_DIR)")
    run.add_argument("--keyring", metavar="FILE", help="adapter keys (TOOLGATE_KEYRING)")
    run.add_argument("--max-messages", type=int, metavar="N", help="stop after deciding N results")
    run.add_argument(
        "--burst",
        action="store_true",
        help="stop once this worker owns every intake partition and has read each to "
        "its end (one-shot runs and tests; one worker)",
    )
    run.add_argument(
        "--batch-size",
        type=int,
        default=500,
        metavar="N",
        help="records per transaction and partition (default 500)",
    )
    run.add_argument(
        "--linger-ms",
        type=int,
        default=20,
        metavar="MS",
        help="longest wait for a batch to fill (default 20)",
    )
    run.add_argument(
        "--metrics-host",
        default=None,
        metavar="HOST",
        help="address for the metrics port (TOOLGATE_METRICS_HOST, default 127.0.0.1)",
    )
    run.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")

    demo = commands.add_parser(
        "demo",
        formatter_class=fmt,
        help="send sample traffic to a running worker, show decisions",
        description="Publish request records and a mix of good and hostile results (the seed's\n"
        "hazards: injected approvals, duplicate keys, banners, wrong project, stale\n"
        "and unsigned results, ...), wait for the worker's decisions on the audit topic\n"
        "and print them by tool, outcome and code. Exit 1 if any was not decided as\n"
        "the sample expected.",
    )
    demo.add_argument("--count", type=int, default=200, metavar="N", help="results to send (200)")
    demo.add_argument(
        "--wait", type=float, default=60.0, metavar="S", help="seconds to wait for the decisions (60)"
    )
    demo.add_argument("--seed", type=int, default=7, help="seed of the traffic mix")
    demo.add_argument(
        "--keyring", metavar="FILE", help="keys to sign samples (default: contracts/fixtures-keyring.toml)"
    )

    replay = commands.add_parser(
        "replay",
        formatter_class=fmt,
        help="send quarantined results through the pipeline again",
        description="Select quarantined results and, after a connector or contract fix, send them\n"
        "through the pipeline again. Prints the selection (by tool and code) first.\n"
        "--dry-run (the default) re-evaluates each with today's contracts, its request\n"
        "record and the real clock, and writes nothing. --apply re-publishes the\n"
        "original bytes and headers to intake (tg-replay-count + 1); the worker decides\n"
        "again, and a result already accepted for its request attempt is a duplicate.",
        epilog="examples:\n"
        "  toolgate replay --tool deploy_status --code SCHEMA_VIOLATION\n"
        "  toolgate replay --tool deploy_status --code SCHEMA_VIOLATION --apply\n"
        "  toolgate replay --since 2026-05-01T09:00:00Z --origin 2:1000-1999",
    )
    replay.add_argument("--since", metavar="ISO", help="rejected at or after this time")
    replay.add_argument("--until", metavar="ISO", help="rejected before this time")
    replay.add_argument("--tool", action="append", default=[], help="tool (repeatable)")
    replay.add_argument("--stage", action="append", default=[], help="rejection stage (repeatable)")
    replay.add_argument("--code", action="append", default=[], help="rejection code (repeatable)")
    replay.add_argument(
        "--adapter-version", action="append", default=[], metavar="V", help="tg-adapter-version (repeatable)"
    )
    replay.add_argument(
        "--origin", metavar="P[:FIRST-LAST]", help="intake partition, optionally an inclusive offset range"
    )
    mode = replay.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="re-evaluate, write nothing (default)")
    mode.add_argument("--apply", action="store_true", help="re-publish the selection to intake")
    replay.add_argument(
        "--max-replays",
        type=int,
        default=3,
        metavar="N",
        help="refuse records already replayed N times (default 3)",
    )
    replay.add_argument("--contracts", metavar="DIR", help="contracts folder for the dry run")
    replay.add_argument("--keyring", metavar="FILE", help="adapter keys for the dry run")
    replay.add_argument("--now", metavar="ISO", help="the clock of the dry run (default: now)")

    topics = commands.add_parser(
        "topics", help="manage the Kafka topics", description="Manage toolgate's five Kafka topics."
    )
    tsub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    ensure = tsub.add_parser(
        "ensure",
        formatter_class=fmt,
        help="create missing topics (idempotent)",
        description="Create the topics of DESIGN.md where missing and report those that exist.\n"
        "Names and partition counts come from the configuration:\n"
        "  TOOLGATE_TOPIC_{REQUESTS,INTAKE,AGENT,QUARANTINE,AUDIT}\n"
        "  TOOLGATE_PARTITIONS_{REQUESTS,INTAKE,AGENT,QUARANTINE,AUDIT}\n"
        "The requests topic is compacted (latest record per request id).",
    )
    ensure.add_argument("--bootstrap", metavar="HOST:PORT", help="broker (TOOLGATE_BOOTSTRAP)")

    acls = commands.add_parser(
        "acls",
        formatter_class=fmt,
        help="the Kafka ACLs of the trust boundaries",
        description="The ACLs of DESIGN.md's trust table for the configured topic names\n"
        "(TOOLGATE_TOPIC_*) and consumer group (TOOLGATE_GROUP_ID, as a prefix):\n"
        "  toolgate  read requests, intake, audit, quarantine; write agent,\n"
        "            quarantine, audit; its group, transactional ids, idempotent writes\n"
        "  platform  write requests        adapter   write intake\n"
        "  agent     read agent, in groups of its own prefix\n"
        "  operator  read quarantine, audit, requests; write intake (replay --apply)\n"
        "apply and list log in as TOOLGATE_SECURITY_* says: an administrator.",
        epilog="examples:\n"
        "  toolgate acls plan                                the ACLs, one per line\n"
        "  toolgate acls plan --format kafka-acls            as kafka-acls.sh commands\n"
        "  toolgate acls apply --adapter User:connector-7    create them (idempotent)\n"
        "  toolgate acls list                                what the cluster holds",
    )
    asub = acls.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    for name, text in (
        ("plan", "print the ACLs (nothing is sent)"),
        ("apply", "create the ACLs on the cluster (idempotent)"),
        ("list", "print the ALLOW ACLs the cluster holds"),
    ):
        action = asub.add_parser(name, help=text, description=text)
        action.add_argument("--bootstrap", metavar="HOST:PORT", help="broker (TOOLGATE_BOOTSTRAP)")
        if name == "list":
            continue
        for role in ("toolgate", "platform", "adapter", "agent", "operator"):
            action.add_argument(
                f"--{role}",
                metavar="PRINCIPAL",
                default=f"User:{role}",
                help=f"the {role} principal (default User:{role})",
            )
        action.add_argument(
            "--agent-group",
            metavar="PREFIX",
            default="agent",
            help="prefix of the agents' consumer groups (default agent)",
        )
        if name == "plan":
            action.add_argument(
                "--format",
                choices=("lines", "kafka-acls"),
                default="lines",
                help="lines (default) or kafka-acls.sh command lines",
            )

    top = commands.add_parser(
        "top",
        formatter_class=fmt,
        help="live terminal view of a worker's metrics (no Grafana needed)",
        description="Read a worker's /metrics and show, refreshed in place until Ctrl-C:\n"
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
        epilog="examples:\n"
        "  toolgate top                                  the local worker, every 2 s\n"
        "  toolgate top --once                           one snapshot with rates, for scripts\n"
        "  toolgate top --once --interval 0              totals only, one scrape\n"
        "  toolgate top --url http://worker-2.example:9464/metrics --top 5",
    )
    top.add_argument(
        "--url",
        metavar="URL",
        help="the worker's metrics endpoint (default http://127.0.0.1:9464/metrics, "
        "the port from TOOLGATE_METRICS_PORT)",
    )
    top.add_argument(
        "--interval",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between scrapes (default 2); with --once, 0 = totals only",
    )
    top.add_argument(
        "--once",
        action="store_true",
        help="print one snapshot and exit 0 (two scrapes --interval apart for rates)",
    )
    top.add_argument("--top", type=int, default=10, metavar="N", help="rejection codes shown (10)")

    quarantine = commands.add_parser(
        "quarantine",
        help="read the quarantine topic",
        description="Read rejected results and their diagnostics.",
    )
    qsub = quarantine.add_subparsers(dest="quarantine_command", metavar="ACTION", required=True)
    qtail = qsub.add_parser(
        "tail",
        formatter_class=fmt,
        help="the latest quarantine records' diagnostics as JSON lines",
        description="Print the last N quarantine records (read_committed, in log order) as JSON\n"
        "lines: topic, partition, offset, timestamp, key, tool (the contract's tool,\n"
        "else the adapter's tg-tool), stage, code, size, and every header: the\n"
        "adapter's originals and toolgate's tg-error-* diagnostics (tg-error-detail\n"
        "decoded: schema path, keyword, masked message). Reads without a consumer\n"
        "group: commits nothing, moves no offsets. The quarantine topic is\n"
        "TOOLGATE_TOPIC_QUARANTINE (default toolgate.quarantine).",
        epilog="examples:\n"
        "  toolgate quarantine tail                          the last 10 rejections\n"
        "  toolgate quarantine tail --tool job_status --code BAD_SIGNATURE -n 5\n"
        "  toolgate quarantine tail --stage schema --value -n 1   with the raw bytes as text",
    )
    qtail.add_argument(
        "-n", "--lines", type=int, default=10, metavar="N", help="records to print (default 10)"
    )
    qtail.add_argument(
        "--tool",
        metavar="TOOL",
        help="only this tool (the contract's, else the tg-tool header; as toolgate replay --tool)",
    )
    qtail.add_argument("--code", metavar="CODE", help="only this code, e.g. SCHEMA_VIOLATION")
    qtail.add_argument("--stage", metavar="STAGE", help="only this stage, e.g. semantic")
    qtail.add_argument(
        "--max-scan",
        type=int,
        default=100_000,
        metavar="N",
        help="look at most at the last N records of each partition (100000)",
    )
    qtail.add_argument(
        "--value",
        action="store_true",
        help="include the rejected value as JSON text (first 4096 characters; "
        "hostile input: never paste it into an agent)",
    )
    qtail.add_argument("--bootstrap", metavar="HOST:PORT", help="broker (TOOLGATE_BOOTSTRAP)")
    qsummary = qsub.add_parser(
        "summary",
        formatter_class=fmt,
        help="counts by tool, code, adapter version and schema path, first and last seen",
        description="Count the quarantine records (read_committed, no consumer group) by tool,\n"
        "code, adapter version (tg-adapter-version) and schema path (from\n"
        "tg-error-detail), with the first and last time each was rejected (UTC),\n"
        "most records first: which connector drifts, since when, and from which\n"
        "adapter version on.",
        epilog="examples:\n"
        "  toolgate quarantine summary\n"
        "  toolgate quarantine summary --tool deploy_status --code SCHEMA_VIOLATION",
    )
    qsummary.add_argument("--tool", metavar="TOOL", help="only this tool (as quarantine tail --tool)")
    qsummary.add_argument("--code", metavar="CODE", help="only this code, e.g. SCHEMA_VIOLATION")
    qsummary.add_argument("--stage", metavar="STAGE", help="only this stage, e.g. schema")
    qsummary.add_argument(
        "--max-scan",
        type=int,
        default=1_000_000,
        metavar="N",
        help="count at most the last N records of each partition (1000000)",
    )
    qsummary.add_argument("--bootstrap", metavar="HOST:PORT", help="broker (TOOLGATE_BOOTSTRAP)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``toolgate`` console script."""
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config)
        if getattr(args, "bootstrap", None):
            config = msgspec.structs.replace(config, bootstrap=args.bootstrap)
        return _dispatch(args, config)
    except ConfigError as exc:
        print(f"toolgate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokerError as exc:
        print(f"toolgate: broker: {exc}", file=sys.stderr)
        return EXIT_PROBLEM


def _dispatch(args: argparse.Namespace, config: Config) -> int:
    if args.command == "check":
        return _check(args, config)
    if args.command == "contracts":
        if args.contracts_command == "test":
            return _contracts_test(args, config)
        if args.contracts_command == "lint":
            return _contracts_lint(args, config)
        if args.contracts_command == "history":
            return _contracts_history(args, config)
        return _contracts_diff(args)
    if args.command == "topics":
        return _topics_ensure(config)
    if args.command == "acls":
        return _acls(args, config)
    if args.command == "run":
        return _run(args, config)
    if args.command == "top":
        return _top(args, config)
    if args.command == "quarantine":
        if args.quarantine_command == "summary":
            return _quarantine_summary(args, config)
        return _quarantine_tail(args, config)
    if args.command == "replay":
        return _replay(args, config)
    if args.command == "demo":
        from toolgate.gate._signing import Keyring
        from toolgate.tools._demo import main_demo

        keyring = Keyring.load(args.keyring or Path(config.contracts_dir) / "fixtures-keyring.toml")
        return main_demo(config, keyring, args.count, args.wait, args.seed)
    raise AssertionError(args.command)  # argparse only lets known commands through


def _contracts_dir(args: argparse.Namespace, config: Config) -> str:
    return str(getattr(args, "contracts", None) or config.contracts_dir)


def _check(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._gate import Gate
    from toolgate.gate._records import Message, RequestRecord, decode_request
    from toolgate.gate._signing import Keyring

    contracts = ContractSet.load(_contracts_dir(args, config))
    keyring_file = args.keyring or config.keyring
    gate = Gate(contracts, Keyring.load(keyring_file) if keyring_file else None)
    request: RequestRecord | None = None
    if args.request:
        try:
            request = decode_request(Path(args.request).read_bytes())
        except OSError as exc:
            raise ConfigError(f"{args.request}: cannot read: {exc.strerror}") from exc
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ConfigError(f"{args.request}: not a valid request record: {exc}") from exc
    headers: dict[str, str] = {}
    if request is not None:
        headers = {"tg-tool": request.tool, "tg-request-id": request.request_id}
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--header {item!r}: expected K=V, e.g. tg-tool=review_status")
        headers[name] = value
    now = datetime.now(UTC)
    if args.now:
        try:
            now = datetime.fromisoformat(args.now)
        except ValueError as exc:
            raise ConfigError(f"--now {args.now!r}: not an RFC 3339 date-time") from exc
        if now.tzinfo is None:
            raise ConfigError(f"--now {args.now!r}: needs a UTC offset, e.g. Z")
    key = args.key if args.key is not None else headers.get("tg-request-id")
    rejected = 0
    for name in args.files:
        try:
            raw = Path(name).read_bytes()
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read: {exc.strerror}") from exc
        message = Message(
            key=None if key is None else key.encode(),
            value=raw,
            headers=[(k, v.encode()) for k, v in headers.items()],
            origin=name,
        )
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


def _contracts_test(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._signing import Keyring
    from toolgate.tools._fixtures import fixtures_keyring, iter_outcomes

    root = _contracts_dir(args, config)
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
    print(f"{len(contracts)} contract versions: {passed} passed, {failed} failed")
    return EXIT_PROBLEM if failed else EXIT_OK


def _contracts_lint(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._lint import lint_contracts

    contracts = ContractSet.load(_contracts_dir(args, config))
    findings = lint_contracts(contracts)
    for finding in findings:
        print(f"{finding.file}: {finding.pointer or '/'}: {finding.rule}: {finding.message}")
    print(f"{len(contracts)} contract versions: {len(findings)} findings")
    return EXIT_PROBLEM if findings else EXIT_OK


def _contracts_diff(args: argparse.Namespace) -> int:
    from toolgate.tools._diff import diff_contracts, diff_schemas

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
    from toolgate.tools._diff import contract_history

    steps = contract_history(ContractSet.load(_contracts_dir(args, config)))
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
    from toolgate import _logs
    from toolgate.gate._gate import Gate
    from toolgate.gate._signing import Keyring
    from toolgate.service._service import Worker, WorkerOptions

    _logs.configure(args.log_level)
    log = logging.getLogger("toolgate")
    contracts_dir = _contracts_dir(args, config)
    keyring_file = args.keyring or config.keyring

    def load_gate() -> Gate:
        return Gate(ContractSet.load(contracts_dir), Keyring.load(keyring_file) if keyring_file else None)

    gate = load_gate()
    contracts = gate.contracts
    log.info(
        "configuration",
        extra={"config": json.dumps(config.masked()), "contracts": ",".join(c.key for c in contracts)},
    )
    options = WorkerOptions(
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        max_messages=args.max_messages,
        burst=args.burst,
        metrics_host=args.metrics_host or config.metrics_host,
    )
    stats = asyncio.run(Worker(config, gate, options=options, gate_factory=load_gate).run())
    log.info(
        "decisions", extra={"decided": stats.decided, "accepted": stats.accepted, "rejected": stats.rejected}
    )
    return EXIT_OK


def _top(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._top import default_url, run

    if args.interval < 0 or (args.interval == 0 and not args.once):
        raise ConfigError("--interval must be above 0 (0 only with --once: one scrape, totals only)")
    if args.top < 1:
        raise ConfigError("--top must be at least 1")
    url = args.url or default_url(config.metrics_host, config.metrics_port)
    try:
        return run(url, interval=args.interval, once=args.once, top=args.top, out=sys.stdout)
    except KeyboardInterrupt:
        return EXIT_OK


def _quarantine_tail(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._quarantine import Filters, tail

    if args.lines < 1 or args.max_scan < 1:
        raise ConfigError("-n and --max-scan must be at least 1")
    filters = Filters(tool=args.tool, code=args.code, stage=args.stage)
    lines = asyncio.run(
        tail(config, count=args.lines, filters=filters, max_scan=args.max_scan, with_value=args.value)
    )
    for line in lines:
        print(json.dumps(line, ensure_ascii=True, sort_keys=False))
    return EXIT_OK


def _quarantine_summary(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._quarantine import Filters, format_summary, summary

    if args.max_scan < 1:
        raise ConfigError("--max-scan must be at least 1")
    filters = Filters(tool=args.tool, code=args.code, stage=args.stage)
    rows, read = asyncio.run(summary(config, filters=filters, max_scan=args.max_scan))
    print("\n".join(format_summary(rows, read, config.topics.quarantine)))
    return EXIT_OK


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


def _replay(args: argparse.Namespace, config: Config) -> int:
    from toolgate.gate._gate import Gate
    from toolgate.gate._signing import Keyring
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
    keyring_file = args.keyring or config.keyring
    gate = Gate(
        ContractSet.load(_contracts_dir(args, config)), Keyring.load(keyring_file) if keyring_file else None
    )
    now = _parse_time("--now", args.now) or datetime.now(UTC)
    return asyncio.run(
        run_replay(config, gate, selection, apply_it=args.apply, max_replays=args.max_replays, now=now)
    )


def _topics_ensure(config: Config) -> int:
    from toolgate.service._kafka import ensure_topics

    report = asyncio.run(ensure_topics(config))
    for name in report.created:
        print(f"created  {name}")
    for name in report.existing:
        print(f"exists   {name}")
    for warning in report.warnings:
        print(f"warning  {warning}")
    print(f"{config.bootstrap}: {len(report.created)} created, {len(report.existing)} already existed")
    return EXIT_OK


def _acls(args: argparse.Namespace, config: Config) -> int:
    from toolgate.tools._acls import Acl, Principals, acl_plan, apply_acls, describe_acls, kafka_acls_commands

    def show(acls: list[Acl]) -> None:
        for acl in acls:
            print(f"{acl.principal}\t{acl.operation}\t{acl.resource}\t{acl.name}\t{acl.pattern}")

    if args.acls_command == "list":
        show(asyncio.run(describe_acls(config)))
        return EXIT_OK
    principals = Principals(
        toolgate=args.toolgate,
        platform=args.platform,
        adapter=args.adapter,
        agent=args.agent,
        operator=args.operator,
    )
    plan = acl_plan(config, principals, agent_group_prefix=args.agent_group)
    if args.acls_command == "plan":
        if args.format == "kafka-acls":
            print("\n".join(kafka_acls_commands(plan, config.bootstrap)))
        else:
            show(plan)
        return EXIT_OK
    count = asyncio.run(apply_acls(config, plan))
    print(f"{config.bootstrap}: {count} ACLs applied (existing ones unchanged)")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
