"""The topics and ACLs as Strimzi resources: a ``KafkaTopic`` per topic, a ``KafkaUser`` per principal.

Both come from the same code as ``toolgate topics ensure`` (:func:`topic_plan`: partitions,
replication, compaction and retention) and ``toolgate acls plan`` (:func:`acl_plan`), so a
cluster run by the Strimzi operator gets the topics and ACLs the worker expects.
``make strimzi`` writes them to ``deploy/strimzi/``; a test compares those files with this code.
"""

from __future__ import annotations

from typing import Any

import yaml

from toolgate._config import Config
from toolgate.operations._acls import Acl
from toolgate.service._kafka import topic_plan

API_VERSION = "kafka.strimzi.io/v1"
# Strimzi's spellings: resource types, pattern types and operations of a KafkaUser's ACL rule.
_RESOURCE = {"topic": "topic", "group": "group", "transactional-id": "transactionalId", "cluster": "cluster"}
_PATTERN = {"literal": "literal", "prefixed": "prefix"}
_OPERATION = {"read": "Read", "write": "Write", "describe": "Describe", "idempotent-write": "IdempotentWrite"}


def _meta(name: str, cluster: str) -> dict[str, Any]:
    return {"name": name, "labels": {"strimzi.io/cluster": cluster, "app.kubernetes.io/part-of": "toolgate"}}


def resource_name(name: str) -> str:
    """A Kubernetes name for a topic or principal (lower case; ``_`` and ``:`` become ``-``)."""
    return name.lower().replace("_", "-").replace(":", "-")


def kafka_topics(config: Config, cluster: str) -> list[dict[str, Any]]:
    """One KafkaTopic per topic of :func:`topic_plan` (what ``topics ensure`` creates)."""
    topics = []
    for topic in topic_plan(config):
        spec: dict[str, Any] = {
            "topicName": topic.name,
            "partitions": topic.num_partitions,
            "replicas": topic.replication_factor,
        }
        if topic.topic_configs:
            spec["config"] = dict(topic.topic_configs)
        topics.append(
            {
                "apiVersion": API_VERSION,
                "kind": "KafkaTopic",
                "metadata": _meta(resource_name(topic.name), cluster),
                "spec": spec,
            }
        )
    return topics


def kafka_users(acls: list[Acl], cluster: str, authentication: str = "scram-sha-512") -> list[dict[str, Any]]:
    """One KafkaUser per principal of ``acls`` (``User:<name>``), with its ALLOW rules.

    The principal's name is the KafkaUser's name (Strimzi authenticates it as ``User:<name>``),
    so the principals must be ``User:`` names Kubernetes accepts.
    """
    by_principal: dict[str, dict[tuple[str, str, str], list[str]]] = {}
    for acl in acls:
        kind, _, user = acl.principal.partition(":")
        if kind != "User" or not user or resource_name(user) != user:
            raise ValueError(
                f"principal {acl.principal!r}: a KafkaUser needs User:<name> with a lower-case "
                "Kubernetes name (letters, digits, -, .)"
            )
        rules = by_principal.setdefault(user, {})
        rules.setdefault((acl.resource, acl.name, acl.pattern), []).append(_OPERATION[acl.operation])
    users = []
    for user, rules in sorted(by_principal.items()):
        acl_rules = []
        for (resource, name, pattern), operations in rules.items():
            target: dict[str, Any] = {"type": _RESOURCE[resource]}
            if resource != "cluster":
                target.update(name=name, patternType=_PATTERN[pattern])
            acl_rules.append({"resource": target, "operations": sorted(operations), "host": "*"})
        users.append(
            {
                "apiVersion": API_VERSION,
                "kind": "KafkaUser",
                "metadata": _meta(user, cluster),
                "spec": {
                    "authentication": {"type": authentication},
                    "authorization": {"type": "simple", "acls": acl_rules},
                },
            }
        )
    return users


def dump(resources: list[dict[str, Any]], header: str) -> str:
    """The resources as one YAML stream, after a comment header (one ``#`` line per line)."""
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + yaml.safe_dump_all(resources, sort_keys=False, explicit_start=True)
