"""``toolgate topics``: ensure, grow and plan the eight Kafka topics."""

from __future__ import annotations

import argparse
import asyncio
import sys

from toolgate._config import Config
from toolgate.cli._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    Command,
    check_broker,
    positive_int,
    strimzi_cluster_argument,
)


def _topics_grow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--partitions",
        type=positive_int,
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
    strimzi_cluster_argument(p)


def _topics_ensure(args: argparse.Namespace, config: Config) -> int:
    from toolgate.service._kafka import ensure_topics

    check_broker(config)
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
    from toolgate.operations._grow import GrowRefused, describe, grow_topics

    check_broker(config)
    try:
        report = asyncio.run(grow_topics(config, args.partitions, wait_s=args.wait))
    except GrowRefused as exc:
        print(f"toolgate: not grown: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    for line in describe(report):
        print(line)
    return EXIT_OK


def _topics_plan(args: argparse.Namespace, config: Config) -> int:
    from toolgate.operations._strimzi import dump, kafka_topics
    from toolgate.service._kafka import topic_plan

    if args.format == "strimzi":
        header = (
            "toolgate's eight topics as Strimzi KafkaTopics (toolgate topics plan --format strimzi).\n"
            "Requests and state must keep intake's partition count: grow them together\n"
            "(ops/RUNBOOK.md, Growing the intake partitions)."
        )
        print(dump(kafka_topics(config, args.strimzi_cluster), header), end="")
        return EXIT_OK
    for topic in topic_plan(config):
        configs = ",".join(f"{k}={v}" for k, v in sorted((topic.topic_configs or {}).items())) or "-"
        print(f"{topic.name}\t{topic.num_partitions}\t{topic.replication_factor}\t{configs}")
    return EXIT_OK


COMMANDS: tuple[Command, ...] = (
    Command(
        ("topics",),
        "manage the Kafka topics",
        "Manage toolgate's eight Kafka topics.",
        ("toolgate topics ensure",),
    ),
    Command(
        ("topics", "ensure"),
        "create missing topics (idempotent)",
        "Create the eight topics (docs/design.md, Topics and trust boundaries) where\n"
        "missing and report those that exist. Names and partition counts come from\n"
        "the configuration:\n"
        "  TOOLGATE_TOPIC_{REQUESTS,INTAKE,AGENT,QUARANTINE,AUDIT,STATE,CONTRACTS,MEMBERS}\n"
        "  TOOLGATE_PARTITIONS_{INTAKE,AGENT,QUARANTINE,AUDIT}\n"
        "Requests and state (the worker's changelog of accepted attempts) are\n"
        "compacted and get intake's partition count (the existing intake topic's,\n"
        "when it exists): a worker restores only its intake partitions' state.\n"
        "Contracts (published contract sets) and members (what each worker decides\n"
        "with) are compacted, with one partition each.",
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
        "print the eight topics as ensure creates them (nothing is sent)",
        "Print the eight topics with the partition counts, replication factor and\n"
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
)
