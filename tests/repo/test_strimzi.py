"""Strimzi KafkaTopics and KafkaUsers come from the code that creates topics and plans ACLs."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from toolgate._config import load_config
from toolgate.cli import main
from toolgate.operations._acls import Acl, Principals, acl_plan
from toolgate.operations._strimzi import kafka_topics, kafka_users
from toolgate.service._kafka import topic_plan

from tests import ROOT

STRIMZI = ROOT / "deploy" / "strimzi"
# The environment of `make strimzi` (Makefile, STRIMZI_ENV).
ENV = {
    "TOOLGATE_PARTITIONS_INTAKE": "12",
    "TOOLGATE_PARTITIONS_AGENT": "12",
    "TOOLGATE_PARTITIONS_AUDIT": "12",
    "TOOLGATE_REPLICATION_FACTOR": "3",
}
_OPERATION = {"Read": "read", "Write": "write", "Describe": "describe", "IdempotentWrite": "idempotent-write"}
_RESOURCE = {"topic": "topic", "group": "group", "transactionalId": "transactional-id", "cluster": "cluster"}


def _acls_of(users: list[dict[str, Any]]) -> list[Acl]:
    """The ACL bindings a list of KafkaUsers grants, in toolgate's terms."""
    out = []
    for user in users:
        for rule in user["spec"]["authorization"]["acls"]:
            resource = rule["resource"]
            name = resource.get("name", "kafka-cluster")
            pattern = {"prefix": "prefixed"}.get(resource.get("patternType", "literal"), "literal")
            for op in rule["operations"]:
                out.append(
                    Acl(
                        f"User:{user['metadata']['name']}",
                        _RESOURCE[resource["type"]],
                        name,
                        pattern,
                        _OPERATION[op],
                    )
                )
    return sorted(out)


def _committed(name: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((STRIMZI / name).read_text(encoding="utf-8")))


class TestCommittedFiles:
    """deploy/strimzi/ is what `make strimzi` writes from the code today."""

    def test_topics_file_is_current(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """deploy/strimzi/topics.yaml equals `toolgate topics plan --format strimzi` (run make strimzi)."""
        for name, value in ENV.items():
            monkeypatch.setenv(name, value)
        assert main(["topics", "plan", "--format", "strimzi", "--strimzi-cluster", "events"]) == 0
        assert capsys.readouterr().out == (STRIMZI / "topics.yaml").read_text(encoding="utf-8")

    def test_users_file_is_current(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """deploy/strimzi/users.yaml equals `toolgate acls plan --format strimzi` (run make strimzi)."""
        for name, value in ENV.items():
            monkeypatch.setenv(name, value)
        assert main(["acls", "plan", "--format", "strimzi", "--strimzi-cluster", "events"]) == 0
        assert capsys.readouterr().out == (STRIMZI / "users.yaml").read_text(encoding="utf-8")


class TestSameAsTheCode:
    """The resources grant and create exactly what acls plan and topics ensure do."""

    def test_users_grant_the_acl_plan(self) -> None:
        """The committed KafkaUsers' rules are the ACL plan, binding for binding."""
        assert _acls_of(_committed("users.yaml")) == acl_plan(load_config(environ=ENV))

    def test_topics_are_the_topic_plan(self) -> None:
        """The committed KafkaTopics have the names, partitions, replicas and configs of topic_plan."""
        topics = {t["spec"]["topicName"]: t["spec"] for t in _committed("topics.yaml")}
        plan = topic_plan(load_config(environ=ENV))
        assert sorted(topics) == sorted(t.name for t in plan)
        for topic in plan:
            spec = topics[topic.name]
            assert spec["partitions"] == topic.num_partitions
            assert spec["replicas"] == topic.replication_factor
            assert spec.get("config", {}) == dict(topic.topic_configs or {})

    def test_copartitioned_topics_share_intakes_count(self) -> None:
        """Requests and state get intake's partition count, as the worker requires."""
        topics = {t["spec"]["topicName"]: t["spec"]["partitions"] for t in _committed("topics.yaml")}
        assert topics["toolgate.requests"] == topics["toolgate.state"] == topics["toolgate.intake"] == 12

    def test_every_principal_is_a_user(self) -> None:
        """One KafkaUser per principal of the trust table, labelled for its cluster."""
        users = kafka_users(acl_plan(load_config(environ={})), "c1")
        assert [u["metadata"]["name"] for u in users] == [
            "adapter",
            "agent",
            "operator",
            "platform",
            "toolgate",
        ]
        assert {u["metadata"]["labels"]["strimzi.io/cluster"] for u in users} == {"c1"}
        assert (
            kafka_topics(load_config(environ={}), "c1")[0]["metadata"]["labels"]["strimzi.io/cluster"] == "c1"
        )

    def test_a_principal_kubernetes_cannot_name_is_refused(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A principal that is no valid KafkaUser name fails with one line naming it (exit 2)."""
        with pytest.raises(ValueError, match="User:Connector_7"):
            kafka_users(acl_plan(load_config(environ={}), Principals(adapter="User:Connector_7")), "c1")
        assert main(["acls", "plan", "--format", "strimzi", "--adapter", "User:CN=x"]) == 2
        assert "User:CN=x" in capsys.readouterr().err
