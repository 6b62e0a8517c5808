"""Kafka plumbing shared by the worker and the CLI: client settings and topic creation.

Everything that talks to a broker goes through here so security settings
(SASL PLAIN/SCRAM, TLS) are passed the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from toolgate._config import Config
from toolgate._errors import BrokerError
from toolgate.service._transport import tls_context


def client_settings(config: Config) -> dict[str, Any]:
    """Keyword arguments common to every aiokafka client."""
    sec = config.security
    settings: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap,
        "client_id": config.client_id,
        "security_protocol": sec.protocol,
    }
    if sec.sasl_mechanism:
        settings["sasl_mechanism"] = sec.sasl_mechanism
        settings["sasl_plain_username"] = sec.sasl_username
        settings["sasl_plain_password"] = sec.sasl_password
    if sec.protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = tls_context(sec)
    return settings


@dataclass
class TopicReport:
    """What ``ensure_topics`` did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def topic_plan(config: Config) -> list[NewTopic]:
    """The five topics (docs/design.md, Topics and trust boundaries) with partition counts and configs."""
    t, p, rf = config.topics, config.partitions, config.replication_factor
    # Requests are keyed by request id and ended by tombstones: compaction keeps
    # the latest record per outstanding request and drops finished ones.
    compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
    return [
        NewTopic(t.requests, p.requests, rf, topic_configs=compacted),
        NewTopic(t.intake, p.intake, rf),
        NewTopic(t.agent, p.agent, rf),
        NewTopic(t.quarantine, p.quarantine, rf),
        NewTopic(t.audit, p.audit, rf),
    ]


async def ensure_topics(config: Config, *, timeout_ms: int = 30000) -> TopicReport:
    """Create the missing topics; report those that already exist. Idempotent.

    Raises:
        BrokerError: the cluster could not be reached or refused a creation.
    """
    report = TopicReport()
    admin = AIOKafkaAdminClient(**client_settings(config), request_timeout_ms=timeout_ms)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        plan = topic_plan(config)
        missing = [topic for topic in plan if topic.name not in existing]
        report.existing = [topic.name for topic in plan if topic.name in existing]
        for topic in missing:
            # aiokafka's admin client reports per-topic failures in the response, not by raising.
            response = await admin.create_topics([topic], timeout_ms=timeout_ms)
            for name, code, *rest in response.topic_errors:
                if code == 0:
                    report.created.append(name)
                elif code == TopicAlreadyExistsError.errno:  # another process won the race
                    report.existing.append(name)
                else:
                    error = for_code(code)
                    message = rest[0] if rest and rest[0] else error.__name__
                    raise BrokerError(f"creating topic {name!r}: {message}", retriable=error.retriable)
        if report.existing:
            described = await admin.describe_topics(report.existing)
            wanted = {topic.name: topic.num_partitions for topic in plan}
            for info in described:
                count = len(info.get("partitions", []))
                if count != wanted[info["topic"]]:
                    report.warnings.append(
                        f"{info['topic']} has {count} partitions, configuration says "
                        f"{wanted[info['topic']]} (left as it is)"
                    )
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    finally:
        await admin.close()
    return report
