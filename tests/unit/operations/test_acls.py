"""The ACL plan is the trust table of docs/design.md: who may write and read which topic, and nothing more.

The broker's enforcement of the same plan is proven in tests/integration/test_sasl.py.
"""

from __future__ import annotations

import shlex

import pytest
from toolgate._config import Config, Topics
from toolgate.cli import main
from toolgate.operations._acls import (
    AGENT_GROUP_PREFIX,
    TRANSACTIONAL_PREFIX,
    Acl,
    Principals,
    acl_plan,
    kafka_acls_commands,
)
from toolgate.service._service import WorkerOptions

TOPICS = Topics.under("p")
CONFIG = Config(topics=TOPICS, group_id="toolgate-prod")
P = Principals()


def _topic_ops(plan: list[Acl], principal: str, operation: str) -> set[str]:
    return {
        a.name
        for a in plan
        if a.principal == principal and a.resource == "topic" and a.operation == operation
    }


def _who(plan: list[Acl], topic: str, operation: str) -> set[str]:
    return {
        a.principal for a in plan if a.resource == "topic" and a.name == topic and a.operation == operation
    }


@pytest.fixture(scope="module")
def plan() -> list[Acl]:
    return acl_plan(CONFIG)


class TestTrustTable:
    """Writers and readers of each topic, as the trust table lists them."""

    def test_writers(self, plan: list[Acl]) -> None:
        """Requests: the platform; intake: adapters (and operators replaying); agent,
        quarantine, audit and the state changelog: toolgate only."""
        assert _who(plan, TOPICS.requests, "write") == {P.platform}
        assert _who(plan, TOPICS.intake, "write") == {P.adapter, P.operator}
        for topic in (TOPICS.agent, TOPICS.quarantine, TOPICS.audit, TOPICS.state):
            assert _who(plan, topic, "write") == {P.toolgate}, topic

    def test_readers(self, plan: list[Acl]) -> None:
        """Only toolgate reads intake; agents read the agent topic and nothing else."""
        assert _who(plan, TOPICS.intake, "read") == {P.toolgate}
        assert _who(plan, TOPICS.agent, "read") == {P.agent}
        assert _who(plan, TOPICS.requests, "read") == {P.toolgate, P.operator}
        assert _who(plan, TOPICS.audit, "read") == {P.operator}
        assert _who(plan, TOPICS.state, "read") == {P.toolgate, P.operator}
        assert _who(plan, TOPICS.quarantine, "read") == {P.toolgate, P.operator}

    def test_adapters_and_agents_get_nothing_else(self, plan: list[Acl]) -> None:
        """An adapter can only write intake; an agent can only read its topic in its groups."""
        adapter = {(a.resource, a.name, a.operation) for a in plan if a.principal == P.adapter}
        assert adapter == {("topic", TOPICS.intake, "write"), ("topic", TOPICS.intake, "describe")}
        agent = {(a.resource, a.name, a.pattern, a.operation) for a in plan if a.principal == P.agent}
        assert agent == {
            ("topic", TOPICS.agent, "literal", "read"),
            ("topic", TOPICS.agent, "literal", "describe"),
            ("group", AGENT_GROUP_PREFIX, "prefixed", "read"),
            ("group", AGENT_GROUP_PREFIX, "prefixed", "describe"),
        }

    def test_toolgate_topics(self, plan: list[Acl]) -> None:
        """toolgate reads requests and intake, writes the three outputs and its state
        changelog, reads back the changelog (restore) and quarantine (replay), reads the
        published contracts and reads and writes the members topic (the group's view)."""
        assert _topic_ops(plan, P.toolgate, "read") == {
            TOPICS.requests,
            TOPICS.intake,
            TOPICS.state,
            TOPICS.quarantine,
            TOPICS.contracts,
            TOPICS.members,
        }
        assert _topic_ops(plan, P.toolgate, "write") == {
            TOPICS.agent,
            TOPICS.quarantine,
            TOPICS.audit,
            TOPICS.state,
            TOPICS.members,
        }

    def test_contracts_are_published_by_operators_only(self, plan: list[Acl]) -> None:
        """Only operators write the contracts topic; workers and operators read it."""
        assert _who(plan, TOPICS.contracts, "write") == {P.operator}
        assert _who(plan, TOPICS.contracts, "read") == {P.toolgate, P.operator}

    def test_toolgate_group_transactions_and_idempotence(self, plan: list[Acl]) -> None:
        """Its consumer group (the configured id, as a prefix), the transactional ids the worker
        uses (one per intake partition) and idempotent writes."""
        own = {
            (a.resource, a.name, a.pattern, a.operation)
            for a in plan
            if a.principal == P.toolgate and a.resource != "topic"
        }
        assert own == {
            ("group", "toolgate-prod", "prefixed", "read"),
            ("group", "toolgate-prod", "prefixed", "describe"),
            ("transactional-id", TRANSACTIONAL_PREFIX, "prefixed", "write"),
            ("transactional-id", TRANSACTIONAL_PREFIX, "prefixed", "describe"),
            ("cluster", "kafka-cluster", "literal", "idempotent-write"),
        }
        assert WorkerOptions().transactional_prefix == TRANSACTIONAL_PREFIX

    def test_only_allow_and_no_wildcards(self, plan: list[Acl]) -> None:
        """No ACL names every topic or every group, and the plan has no duplicates."""
        assert all(a.name not in {"*", ""} for a in plan)
        assert len(plan) == len(set(plan))
        assert plan == sorted(plan)

    def test_principals_are_configurable(self) -> None:
        """Other principal names and an agent group prefix replace the defaults."""
        principals = Principals(adapter="User:connector-7", agent="User:assistant")
        plan = acl_plan(CONFIG, principals, agent_group_prefix="assistant-")
        assert _who(plan, TOPICS.intake, "write") == {"User:connector-7", P.operator}
        assert ("group", "assistant-") in {
            (a.resource, a.name) for a in plan if a.principal == "User:assistant"
        }
        assert not any(a.principal in {P.adapter, P.agent} for a in plan)


class TestKafkaAclsCommands:
    """The same plan as kafka-acls.sh command lines, for clusters run without toolgate's CLI."""

    def test_every_acl_once(self, plan: list[Acl]) -> None:
        """Each command line adds the operations of one principal on one resource pattern."""
        covered = []
        for line in kafka_acls_commands(plan, "broker:9094"):
            words = shlex.split(line)
            assert words[:6] == [
                "kafka-acls.sh",
                "--bootstrap-server",
                "broker:9094",
                "--command-config",
                "admin.properties",
                "--add",
            ]
            principal = words[words.index("--allow-principal") + 1]
            ops = [words[i + 1] for i, w in enumerate(words) if w == "--operation"]
            pattern = "prefixed" if "--resource-pattern-type" in words else "literal"
            if "--cluster" in words:
                resource, name = "cluster", "kafka-cluster"
            else:
                flag = next(w for w in words if w in {"--topic", "--group", "--transactional-id"})
                resource, name = flag[2:], words[words.index(flag) + 1]
            for op in ops:
                covered.append(
                    Acl(
                        principal,
                        resource,
                        name,
                        pattern,
                        {
                            "Read": "read",
                            "Write": "write",
                            "Describe": "describe",
                            "IdempotentWrite": "idempotent-write",
                        }[op],
                    )
                )
        assert sorted(covered) == plan


class TestCli:
    """`toolgate acls plan` prints the plan for the configured topics."""

    def test_plan_lines(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        for name, value in {"TOOLGATE_TOPIC_INTAKE": "p.intake", "TOOLGATE_GROUP_ID": "tg"}.items():
            monkeypatch.setenv(name, value)
        assert main(["acls", "plan", "--adapter", "User:connector-7"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "User:connector-7\twrite\ttopic\tp.intake\tliteral" in lines
        assert "User:toolgate\tread\tgroup\ttg\tprefixed" in lines
        assert len(lines) == len(acl_plan(Config()))

    def test_plan_as_kafka_acls(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["acls", "plan", "--format", "kafka-acls", "--bootstrap", "b:1"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out
        assert all(line.startswith("kafka-acls.sh --bootstrap-server b:1 ") for line in out)
