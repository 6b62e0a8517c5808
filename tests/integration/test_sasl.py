"""Kafka security on a real broker: SASL/SCRAM logins and the ACLs of the trust table.

A broker instance of its own (``ops/kafka/kafka.sh`` with ``TOOLGATE_KAFKA_SASL_PORT`` and
``TOOLGATE_KAFKA_SCRAM_USERS``, its own ports and data directory; never the shared
broker) enforces ACLs on its SASL_PLAINTEXT listener with
``allow.everyone.if.no.acl.found=false``. As ``admin`` the test creates the topics and
applies ``toolgate.operations._acls.acl_plan``; then the real worker runs as ``toolgate`` on sample
traffic written by ``platform`` (requests) and ``adapter`` (intake), and decides every
result. The negative proofs show the ACLs mean what the trust table of docs/design.md says: adapters
and agents cannot write where only toolgate or the platform may, agents cannot read
intake or join another group, an adapter cannot take toolgate's transactional ids (and
so fence its producers), and a wrong password does not log in.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import Iterator

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from toolgate._config import Config, Partitions, Security, Topics
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.operations._acls import TRANSACTIONAL_PREFIX, acl_plan, apply_acls, describe_acls
from toolgate.service._kafka import client_settings, ensure_topics
from toolgate.service._service import Worker, WorkerOptions

from tests.integration.broker_kit import HOST, Instance, free_ports, started
from tests.integration.worker_kit import (
    CLEAN,
    CONTRACTS,
    KEYRING,
    check_exactly_once,
    expected_rejections,
    publish,
    read_all,
    samples,
)

USERS = ("admin", "toolgate", "platform", "adapter", "agent", "operator")
MECHANISM = "SCRAM-SHA-256"
SAMPLES = 60


class SaslBroker(Instance):
    """A ``kafka.sh`` instance with a SCRAM listener; one password per user of ``USERS``."""

    @property
    def sasl_port(self) -> int:
        return self.ports["SASL_PORT"]

    def security(self, user: str, password: str | None = None) -> Security:
        return Security(
            protocol="SASL_PLAINTEXT",
            sasl_mechanism=MECHANISM,
            sasl_username=user,
            sasl_password=self.passwords[user] if password is None else password,
        )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    """The SASL instance, started for this module and stopped after it; its ports from 39092 on,
    away from the shared broker (19092/19093) and the chaos test's instance (29092 on)."""
    ports = dict(zip(("PORT", "CONTROLLER_PORT", "SASL_PORT"), free_ports(3, 39092, 39990), strict=True))
    # token_hex: the characters kafka.sh accepts in TOOLGATE_KAFKA_SCRAM_USERS.
    passwords = {user: secrets.token_hex(12) for user in USERS}
    broker = SaslBroker(tmp_path_factory.mktemp("sasl-broker"), ports, passwords)
    with started(broker, "the SASL broker instance"):
        yield broker


@pytest.fixture(scope="module")
def secured(sasl_broker: SaslBroker) -> Config:
    """Private topic names on the SASL instance, created by admin, with the plan's ACLs.

    The returned configuration is admin's; ``as_user`` turns it into another principal's.
    """
    tag = uuid.uuid4().hex[:8]
    topics = Topics.under(f"tg-s-{tag}")
    config = Config(
        bootstrap=f"{HOST}:{sasl_broker.sasl_port}",
        group_id=f"toolgate.s-{tag}",
        topics=topics,
        partitions=Partitions(quarantine=1),
        contracts_dir=str(CONTRACTS),
        keyring=str(KEYRING),
        security=sasl_broker.security("admin"),
    )

    async def prepare() -> None:
        await ensure_topics(config)
        await apply_acls(config, acl_plan(config))

    asyncio.run(prepare())
    return config


def as_user(config: Config, broker: SaslBroker, user: str) -> Config:
    """The same configuration, logging in as ``user``."""
    return msgspec.structs.replace(config, security=broker.security(user))


async def _produce(config: Config, topic: str, **options: object) -> None:
    producer = AIOKafkaProducer(**client_settings(config), request_timeout_ms=10000, **options)
    try:
        await producer.start()
        await producer.send_and_wait(topic, b"{}", key=b"tg-forged")
    finally:
        await producer.stop()


async def _subscribe(config: Config, topic: str, group: str) -> None:
    consumer = AIOKafkaConsumer(
        topic,
        **client_settings(config),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=10000,
    )
    try:
        await consumer.start()
        await consumer.getmany(timeout_ms=5000)
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------- logins


class TestScram:
    """SCRAM logins on the SASL_PLAINTEXT listener."""

    async def test_every_user_logs_in(self, sasl_broker: SaslBroker, secured: Config) -> None:
        """Each principal of the trust table authenticates with SCRAM-SHA-256; admin also with
        SCRAM-SHA-512 (both mechanisms are enabled, each user has both credentials)."""
        logins = [as_user(secured, sasl_broker, user) for user in USERS]
        logins.append(
            msgspec.structs.replace(
                secured, security=msgspec.structs.replace(secured.security, sasl_mechanism="SCRAM-SHA-512")
            )
        )
        for config in logins:
            admin = AIOKafkaAdminClient(**client_settings(config), request_timeout_ms=10000)
            try:
                await admin.start()
                await admin.list_topics()
            finally:
                await admin.close()

    @pytest.mark.parametrize(("user", "password"), [("toolgate", "not-the-password"), ("nobody", "whatever")])
    async def test_bad_credentials_do_not_log_in(
        self,
        sasl_broker: SaslBroker,
        secured: Config,
        user: str,
        password: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """A wrong password, or a user without SCRAM credentials, fails to authenticate (the
        client cannot bootstrap; the broker's answer, which aiokafka logs, says why)."""
        # The client's own level: an in-process CLI run earlier in the session quiets it.
        caplog.set_level(logging.INFO, logger="aiokafka")
        config = msgspec.structs.replace(
            secured,
            security=msgspec.structs.replace(secured.security, sasl_username=user, sasl_password=password),
        )
        admin = AIOKafkaAdminClient(**client_settings(config), request_timeout_ms=10000)
        try:
            with pytest.raises(KafkaConnectionError, match="Unable to bootstrap"):
                await admin.start()
        finally:
            await admin.close()
        reasons = [r.getMessage() for r in caplog.records if r.name == "aiokafka"]
        assert any(
            "SaslAuthenticationFailed" in reason and "invalid credentials" in reason for reason in reasons
        ), reasons


# --------------------------------------------------------------------------- the worker


class TestWorkerUnderAcls:
    """The real worker, as ``toolgate``, needs nothing beyond the plan."""

    async def test_the_plan_is_what_the_cluster_holds(self, secured: Config) -> None:
        """describe_acls reads back exactly the ACLs acl_plan asked for."""
        assert await describe_acls(secured) == acl_plan(secured)

    async def test_every_result_is_decided(self, sasl_broker: SaslBroker, secured: Config) -> None:
        """Requests written by the platform and results by an adapter are all decided: one
        agent envelope (read as ``agent``) and one audit event (read as admin) per result, a
        quarantine record (read as ``operator``) for exactly the rejected ones."""
        items = samples(SAMPLES, seed=23)
        await publish(as_user(secured, sasl_broker, "platform"), items, results=False)
        await publish(as_user(secured, sasl_broker, "adapter"), items, requests=False)

        toolgate = as_user(secured, sasl_broker, "toolgate")
        gate = Gate(ContractSet.load(toolgate.contracts_dir), Keyring.load(KEYRING, environ={}))
        options = WorkerOptions(handle_signals=False, metrics_port=0)
        assert options.transactional_prefix == TRANSACTIONAL_PREFIX
        worker = Worker(toolgate, gate, options=options)
        task = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(90):
                while worker.stats.decided < len(items):
                    if task.done():
                        break  # failed: its exception is raised below
                    await asyncio.sleep(0.1)  # polling the worker's counters
        finally:
            worker.request_stop()
            stats = await asyncio.wait_for(task, 60)
        assert stats.decided == len(items)
        assert stats.rejected == len(expected_rejections(items))
        assert stats.aborted == 0

        t = secured.topics
        agent = await read_all(as_user(secured, sasl_broker, "agent"), t.agent)
        quarantine = await read_all(as_user(secured, sasl_broker, "operator"), t.quarantine)
        audit = await read_all(secured, t.audit)
        counts = check_exactly_once(items, agent, quarantine, audit)
        assert counts == {"results": len(items), **CLEAN}


# --------------------------------------------------------------------------- refusals


class TestAclsRefuse:
    """What the trust table forbids, the broker refuses."""

    @pytest.mark.parametrize(
        ("user", "topic"),
        [
            ("adapter", "agent"),  # an adapter cannot speak to agents directly
            ("adapter", "requests"),  # nor vouch for its own result
            ("adapter", "audit"),
            ("agent", "agent"),  # agents only read
            ("agent", "intake"),
            ("toolgate", "intake"),  # only adapters write intake
            ("toolgate", "requests"),  # only the platform writes requests
            ("platform", "agent"),
        ],
    )
    async def test_write_refused(
        self, sasl_broker: SaslBroker, secured: Config, user: str, topic: str
    ) -> None:
        """Producing to a topic the principal may not write fails with TopicAuthorizationFailed."""
        config = as_user(secured, sasl_broker, user)
        with pytest.raises(TopicAuthorizationFailedError):
            await _produce(config, getattr(secured.topics, topic))

    async def test_agent_cannot_read_intake(self, sasl_broker: SaslBroker, secured: Config) -> None:
        """An agent, in a group of its own prefix, is refused the intake topic."""
        config = as_user(secured, sasl_broker, "agent")
        with pytest.raises(TopicAuthorizationFailedError):
            await _subscribe(config, secured.topics.intake, f"agent-{uuid.uuid4().hex[:6]}")

    async def test_agent_reads_only_in_its_own_groups(self, sasl_broker: SaslBroker, secured: Config) -> None:
        """The agent topic in toolgate's group (or any other outside ``agent*``) is refused."""
        config = as_user(secured, sasl_broker, "agent")
        with pytest.raises(GroupAuthorizationFailedError):
            await _subscribe(config, secured.topics.agent, secured.group_id)

    async def test_adapter_cannot_take_toolgates_transactional_ids(
        self, sasl_broker: SaslBroker, secured: Config
    ) -> None:
        """An adapter cannot start a producer with a worker's transactional id: it could
        otherwise fence the worker's producer for that intake partition."""
        config = as_user(secured, sasl_broker, "adapter")
        with pytest.raises(TransactionalIdAuthorizationFailed):
            await _produce(
                config,
                secured.topics.intake,
                enable_idempotence=True,
                transactional_id=f"{TRANSACTIONAL_PREFIX}.{secured.topics.intake}.0",
            )

    async def test_refusals_leave_nothing_behind(self, sasl_broker: SaslBroker, secured: Config) -> None:
        """No refused write reached a topic: every agent record is a worker's decision."""
        admin_reads = {
            name: await read_all(secured, getattr(secured.topics, name))
            for name in ("agent", "requests", "audit")
        }
        for name, records in admin_reads.items():
            assert all(r.key != "tg-forged" for r in records), name
