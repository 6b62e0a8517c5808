"""The Kafka ACLs of the trust boundaries (docs/design.md), and applying them to a cluster.

One principal per party of the trust table:

* toolgate (the worker): reads requests and intake, writes agent, quarantine and audit,
  reads and writes its state changelog (accepted attempts of live requests), reads
  quarantine; its consumer group (prefix
  ``group_id``), its transactional ids (prefix ``toolgate``: one per intake partition)
  and idempotent writes on the cluster;
* the agent platform: writes requests;
* tool adapters: write intake, nothing else;
* agents: read the agent topic, in their own consumer groups (prefix, ``agent``);
* operators (``toolgate quarantine tail``, ``top``, ``replay``): read quarantine, audit,
  requests and state; ``replay --apply`` writes the original bytes back to intake.

Topics, consumer groups and ACLs are created by an administrator (a super user, or a
principal allowed to ``Create`` and ``Alter`` the cluster), never by these principals.
With ``allow.everyone.if.no.acl.found=false`` anything not granted here is refused.

aiokafka's admin client has no ``create_acls``, so the CreateAcls and DescribeAcls
requests (protocol v1, which Kafka 4 still serves) are sent as raw requests through the
Kafka seam's admin (:meth:`toolgate.service._kafka.Admin.send`).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.admin import CreateAclsRequest, DescribeAclsRequest

from toolgate._config import Config
from toolgate._errors import BrokerError
from toolgate.service._kafka import Admin, AiokafkaClients, KafkaClients

# Kafka's wire codes (org.apache.kafka.common.resource / .acl).
_RESOURCE = {"topic": 2, "group": 3, "cluster": 4, "transactional-id": 5}
_PATTERN = {"literal": 3, "prefixed": 4}
_OPERATION = {"read": 3, "write": 4, "describe": 8, "idempotent-write": 12}
_ANY, _ALLOW = 1, 3
_CLUSTER_NAME = "kafka-cluster"
# kafka-acls.sh spellings of the operations.
_CLI_OPERATION = {
    "read": "Read",
    "write": "Write",
    "describe": "Describe",
    "idempotent-write": "IdempotentWrite",
}
_CLI_RESOURCE = {"topic": "--topic", "group": "--group", "transactional-id": "--transactional-id"}

# The worker's transactional ids are ``<prefix>.<intake topic>.<partition>``
# (WorkerOptions.transactional_prefix).
TRANSACTIONAL_PREFIX = "toolgate"
AGENT_GROUP_PREFIX = "agent"


@dataclass(frozen=True)
class Principals:
    """Who each party of the trust table is (``User:<SASL user name>`` for SCRAM)."""

    toolgate: str = "User:toolgate"
    platform: str = "User:platform"
    adapter: str = "User:adapter"
    agent: str = "User:agent"
    operator: str = "User:operator"


@dataclass(frozen=True, order=True)
class Acl:
    """One ALLOW binding: ``principal`` may ``operation`` the resource, from any host."""

    principal: str
    resource: str  # topic, group, transactional-id, cluster
    name: str
    pattern: str  # literal, prefixed
    operation: str  # read, write, describe, idempotent-write


def acl_plan(
    config: Config,
    principals: Principals | None = None,
    *,
    transactional_prefix: str = TRANSACTIONAL_PREFIX,
    agent_group_prefix: str = AGENT_GROUP_PREFIX,
) -> list[Acl]:
    """Every ACL of the trust table for the configured topic names, sorted."""
    p = principals or Principals()
    t = config.topics
    acls: list[Acl] = []

    def topic(principal: str, name: str, *operations: str) -> None:
        acls.extend(Acl(principal, "topic", name, "literal", op) for op in operations)

    def prefixed(principal: str, resource: str, name: str, *operations: str) -> None:
        acls.extend(Acl(principal, resource, name, "prefixed", op) for op in operations)

    # toolgate: Read and Write each imply Describe; Describe is granted as well so the
    # plan reads the same as the table in docs/security.md.
    for name in (t.requests, t.intake):
        topic(p.toolgate, name, "read", "describe")
    for name in (t.agent, t.quarantine, t.audit, t.state):
        topic(p.toolgate, name, "write", "describe")
    for name in (t.state, t.quarantine):
        topic(p.toolgate, name, "read")
    # Workers and proxies read the published contracts, and say what each decides with.
    topic(p.toolgate, t.contracts, "read", "describe")
    topic(p.toolgate, t.members, "read", "write", "describe")
    prefixed(p.toolgate, "group", config.group_id, "read", "describe")
    prefixed(p.toolgate, "transactional-id", transactional_prefix, "write", "describe")
    acls.append(Acl(p.toolgate, "cluster", _CLUSTER_NAME, "literal", "idempotent-write"))
    # The agent platform writes the request records.
    topic(p.platform, t.requests, "write", "describe")
    # Adapters write intake, and nothing else.
    topic(p.adapter, t.intake, "write", "describe")
    # Agents read their envelopes in their own groups.
    topic(p.agent, t.agent, "read", "describe")
    prefixed(p.agent, "group", agent_group_prefix, "read", "describe")
    # Operators: quarantine tail, top, replay (dry run reads; --apply writes intake).
    for name in (t.quarantine, t.audit, t.requests, t.state, t.members, t.contracts):
        topic(p.operator, name, "read", "describe")
    topic(p.operator, t.intake, "write", "describe")
    # Operators publish contracts (toolgate contracts publish --to topic); readers verify
    # every version against the keyring's publishers, so the write grants no trust.
    topic(p.operator, t.contracts, "write")
    return sorted(set(acls))


def kafka_acls_commands(
    acls: list[Acl], bootstrap: str, command_config: str = "admin.properties"
) -> list[str]:
    """The same ACLs as ``kafka-acls.sh --add`` command lines (one per principal and resource)."""
    grouped: dict[tuple[str, str, str, str], list[str]] = {}
    for acl in acls:
        grouped.setdefault((acl.principal, acl.resource, acl.name, acl.pattern), []).append(acl.operation)
    lines = []
    for (principal, resource, name, pattern), operations in grouped.items():
        words = [
            "kafka-acls.sh",
            "--bootstrap-server",
            bootstrap,
            "--command-config",
            command_config,
            "--add",
            "--allow-principal",
            principal,
        ]
        for op in operations:
            words += ["--operation", _CLI_OPERATION[op]]
        words += ["--cluster"] if resource == "cluster" else [_CLI_RESOURCE[resource], name]
        if pattern == "prefixed":
            words += ["--resource-pattern-type", "prefixed"]
        lines.append(" ".join(words))
    return lines


async def _admin(config: Config, timeout_ms: int, clients: KafkaClients | None) -> Admin:
    admin = (clients or AiokafkaClients(config)).admin(timeout_ms=timeout_ms)
    try:
        await admin.start()
    except BaseException:
        await admin.close()
        raise
    return admin


async def apply_acls(
    config: Config, acls: list[Acl], *, timeout_ms: int = 30000, clients: KafkaClients | None = None
) -> int:
    """Create every ACL (creating an existing one is a no-op); return how many were sent.

    ``config.security`` must name an administrator.

    Raises:
        BrokerError: the cluster could not be reached or refused an ACL (the first refusal).
    """
    try:
        admin = await _admin(config, timeout_ms, clients)
        try:
            for acl in acls:
                request = CreateAclsRequest(
                    resource_type=_RESOURCE[acl.resource],
                    resource_name=acl.name,
                    resource_pattern_type_filter=_PATTERN[acl.pattern],
                    principal=acl.principal,
                    host="*",
                    operation=_OPERATION[acl.operation],
                    permission_type=_ALLOW,
                )
                response = await admin.send(request)
                for code, message in response.creation_responses:
                    if code:
                        error = for_code(code)
                        raise BrokerError(
                            f"creating ACL {acl}: {error.__name__}: {(message or '')[:300]}",
                            retriable=error.retriable,
                        )
        finally:
            await admin.close()
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    return len(acls)


async def describe_acls(
    config: Config, *, timeout_ms: int = 30000, clients: KafkaClients | None = None
) -> list[Acl]:
    """Every ALLOW ACL on the cluster that this module's vocabulary can name, sorted.

    Raises:
        BrokerError: the cluster could not be reached or refused the request.
    """
    resources = {code: name for name, code in _RESOURCE.items()}
    patterns = {code: name for name, code in _PATTERN.items()}
    operations = {code: name for name, code in _OPERATION.items()}
    out: list[Acl] = []
    try:
        admin = await _admin(config, timeout_ms, clients)
        try:
            request = DescribeAclsRequest(
                resource_type=_ANY,
                resource_name=None,
                resource_pattern_type_filter=_ANY,
                principal=None,
                host=None,
                operation=_ANY,
                permission_type=_ANY,
            )
            response = await admin.send(request)
        finally:
            await admin.close()
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    if response.error_code:
        error = for_code(response.error_code)
        raise BrokerError(
            f"describing ACLs: {response.error_message or error.__name__}", retriable=error.retriable
        )
    for resource_type, name, pattern, entries in response.resources:
        for principal, _host, operation, permission in entries:
            if (
                permission == _ALLOW
                and resource_type in resources
                and pattern in patterns
                and operation in operations
            ):
                out.append(
                    Acl(principal, resources[resource_type], name, patterns[pattern], operations[operation])
                )
    return sorted(out)
