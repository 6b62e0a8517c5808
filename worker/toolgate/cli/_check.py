"""``toolgate check``: evaluate result files offline through the worker's gate."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    Command,
    build_gate,
    keyring_path,
    parse_time,
)


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


def _check(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._check import intake_envelope
    from toolgate.gate._records import Message, RequestRecord, decode_request

    gate = build_gate(config, keyring_path(args, config))
    request: RequestRecord | None = None
    if args.request:
        try:
            request = decode_request(Path(args.request).read_bytes())
        except OSError as exc:
            raise ConfigError(f"{args.request}: cannot read: {exc.strerror}") from exc
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ConfigError(f"{args.request}: not a valid request record: {exc}") from exc
    envelope = intake_envelope(args.header, request, args.key)
    now = parse_time("--now", args.now) or datetime.now(UTC)
    raws = []
    for name in args.files:  # read them all first: a missing file is a usage error, not half a run
        try:
            raws.append((name, Path(name).read_bytes()))
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read: {exc.strerror}") from exc
    rejected = 0
    for name, raw in raws:
        message = Message(key=envelope.key, value=raw, headers=envelope.headers, origin=name)
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
)
