"""``toolgate run``: the worker."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

import msgspec

from toolgate._config import Config
from toolgate.cli._common import (
    EXIT_OK,
    Command,
    build_gate,
    keyring_path,
    non_negative_int,
    positive_int,
)

if TYPE_CHECKING:
    from toolgate.gate._gate import Gate
    from toolgate.service._service import WorkerOptions, WorkerStats


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-messages", type=positive_int, metavar="N", help="stop after deciding N results")
    p.add_argument(
        "--burst",
        action="store_true",
        help="stop once this worker owns every intake partition and has read each to "
        "its end (one-shot runs and tests; one worker)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=500,
        metavar="N",
        help="records per transaction and partition (default 500)",
    )
    p.add_argument(
        "--linger-ms",
        type=non_negative_int,
        default=20,
        metavar="MS",
        help="how long an empty poll waits before the loop's timers run; no record waits for it (default 20)",
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


def _run(args: argparse.Namespace, config: Config) -> int:
    from toolgate.service._service import Worker

    config = msgspec.structs.replace(
        config,
        keyring=keyring_path(args, config),
        metrics_host=args.metrics_host or config.metrics_host,
    )

    from toolgate.service._contract_source import is_topic_source
    from toolgate.service._startup import check_signature_keys

    if is_topic_source(config.contracts_dir):
        return asyncio.run(_run_from_topic(args, config))

    def load_gate() -> Gate:
        gate = build_gate(config, config.keyring)
        check_signature_keys(gate, config.keyring)  # a reload that drops a needed key is refused too
        return gate

    gate = load_gate()
    options = _options(args, config)
    _log_configuration(args, config, options, gate)
    stats = asyncio.run(Worker(config, gate, options=options, gate_factory=load_gate).run())
    _log_decisions(stats)
    return EXIT_OK


async def _run_from_topic(args: argparse.Namespace, config: Config) -> int:
    """``--contracts kafka:``: the contracts topic read to its end, then the worker."""
    from toolgate.gate._gate import Gate
    from toolgate.registry._connect import publishers_keyring
    from toolgate.service._contract_source import TopicContractSource, topic_of
    from toolgate.service._kafka import AiokafkaClients
    from toolgate.service._service import Worker
    from toolgate.service._startup import check_signature_keys

    keyring = publishers_keyring(config, f"--contracts {config.contracts_dir}")
    topic = topic_of(config.contracts_dir, config.topics.contracts)
    source = TopicContractSource(topic, AiokafkaClients(config), keyring)
    await source.start(config.contracts_catch_up_seconds * 6)
    try:

        def load_gate() -> Gate:
            gate = Gate(source.load(), keyring)
            check_signature_keys(gate, config.keyring)
            return gate

        gate = load_gate()
        options = dataclasses.replace(_options(args, config), contract_source=source)
        _log_configuration(args, config, options, gate)
        stats = await Worker(config, gate, options=options, gate_factory=load_gate).run()
    finally:
        await source.stop()
    _log_decisions(stats)
    return EXIT_OK


def _options(args: argparse.Namespace, config: Config) -> WorkerOptions:
    from toolgate.service._service import WorkerOptions

    return WorkerOptions(
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        max_messages=args.max_messages,
        burst=args.burst,
        metrics_host=config.metrics_host,
    )


def _log_configuration(args: argparse.Namespace, config: Config, options: WorkerOptions, gate: Gate) -> None:
    logging.getLogger("toolgate").info(
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
            "contract_set": gate.contracts.label,
            # Where each adapter key came from: a file's name, an environment variable's name.
            "keys": gate.keyring.sources(),
        },
    )


def _log_decisions(stats: WorkerStats) -> None:
    logging.getLogger("toolgate").info(
        "decisions", extra={"decided": stats.decided, "accepted": stats.accepted, "rejected": stats.rejected}
    )


COMMANDS: tuple[Command, ...] = (
    Command(
        ("run",),
        "run the worker: consume intake, decide, publish",
        "Consume the intake topic, decide every result with the gate and publish the\n"
        "agent envelope, quarantine record and audit event with the consumer offset in\n"
        "one Kafka transaction. SIGTERM/SIGINT finish the batch in hand and leave the\n"
        "group; SIGHUP, or a change to the contracts folder or keyring (checked every\n"
        "TOOLGATE_CONTRACTS_WATCH_SECONDS, default 2), reloads the contracts (a set that\n"
        "fails to load is refused and the running one kept). Metrics, /healthz and\n"
        "/readyz are served on "
        "TOOLGATE_METRICS_PORT. Every log line is a JSON object on stderr.",
        (
            "TOOLGATE_BOOTSTRAP=127.0.0.1:19092 toolgate run --contracts contracts",
            "toolgate run --burst --bootstrap 127.0.0.1:19092",
        ),
        _run,
        ("contracts", "keyring", "bootstrap"),
        _run_arguments,
    ),
)
