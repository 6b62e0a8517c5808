"""``toolgate acls``: plan, apply and list the ACLs of the trust boundaries."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli._common import (
    EXIT_OK,
    Command,
    check_broker,
    strimzi_cluster_argument,
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


def _acls_plan_arguments(p: argparse.ArgumentParser) -> None:
    _acls_principal_arguments(p)
    p.add_argument(
        "--format",
        choices=("lines", "kafka-acls", "strimzi"),
        default="lines",
        help="lines (default), kafka-acls.sh command lines, or Strimzi KafkaUser resources",
    )
    strimzi_cluster_argument(p)


def _print_acls(acls: Sequence[Any]) -> None:
    for acl in acls:
        print(f"{acl.principal}\t{acl.operation}\t{acl.resource}\t{acl.name}\t{acl.pattern}")


def _acl_plan(args: argparse.Namespace, config: Config) -> list[Any]:
    from toolgate.operations._acls import Principals, acl_plan

    principals = Principals(
        toolgate=args.toolgate,
        platform=args.platform,
        adapter=args.adapter,
        agent=args.agent,
        operator=args.operator,
    )
    return acl_plan(config, principals, agent_group_prefix=args.agent_group)


def _acls_plan(args: argparse.Namespace, config: Config) -> int:
    from toolgate.operations._acls import kafka_acls_commands

    plan = _acl_plan(args, config)
    if args.format == "kafka-acls":
        print("\n".join(kafka_acls_commands(plan, config.bootstrap)))
    elif args.format == "strimzi":
        from toolgate.operations._strimzi import dump, kafka_users

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
    from toolgate.operations._acls import apply_acls

    plan = _acl_plan(args, config)
    check_broker(config)
    count = asyncio.run(apply_acls(config, plan))
    print(f"{config.bootstrap}: {count} ACLs applied (existing ones unchanged)")
    return EXIT_OK


def _acls_list(args: argparse.Namespace, config: Config) -> int:
    from toolgate.operations._acls import describe_acls

    check_broker(config)
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
)
