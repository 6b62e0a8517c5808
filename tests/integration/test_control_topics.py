"""One record on a control topic cannot stop the group, on the real broker: a members record
without a UTC offset, and contracts-topic records written by hand and kept by compaction."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaProducer
from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.authoring._publish import signed_versions
from toolgate.cli import main
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._published import PublishedVersion
from toolgate.gate._signing import Keyring
from toolgate.operations._publish_topic import publish_to_topic
from toolgate.service._contract_source import ContractSource, TopicContractSource
from toolgate.service._kafka import AiokafkaClients
from toolgate.service._members import read_members
from toolgate.service._service import Worker, WorkerOptions

from tests.integration.conftest import TopicFactory
from tests.integration.test_contract_rollout import until
from tests.integration.worker_kit import CONTRACTS, KEYRING, read_all

OTHER_PRIVATE = "WJsp0uZd5BBD71OEtr017uIfGJdt9MElRow8lK0Y7R8="


async def put(config: Config, topic: str, key: bytes, value: bytes) -> None:
    """One record written by hand, as anyone with write access to the topic can."""
    producer = AIOKafkaProducer(bootstrap_servers=config.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


@asynccontextmanager
async def running(config: Config, source: ContractSource, load: Any) -> AsyncIterator[Worker]:
    """One in-process worker of the group, ready."""
    worker = Worker(
        msgspec.structs.replace(config, group_instance_id=f"member-{uuid.uuid4().hex[:6]}"),
        load(),
        options=WorkerOptions(handle_signals=False, metrics_port=0, contract_source=source),
        gate_factory=load,
    )
    task = asyncio.create_task(worker.run())
    try:
        await until(lambda: worker.ready() or task.done(), 90)
        assert not task.done(), task.exception()
        yield worker
    finally:
        worker.request_stop()
        await task


def command(config: Config, argv: list[str], **env: str) -> int:
    """``toolgate <argv>`` against the private topics (run in a thread: it runs its own loop)."""
    saved = dict(os.environ)
    client_logs = logging.getLogger("aiokafka")
    level = client_logs.level
    os.environ.update(
        {
            **config.topics.env(),
            "TOOLGATE_BOOTSTRAP": config.bootstrap,
            "TOOLGATE_GROUP_ID": config.group_id,
            **env,
        }
    )
    try:
        return main(argv)
    finally:  # the command quiets the Kafka client's logger: the tests after this one keep theirs
        client_logs.setLevel(level)
        os.environ.clear()
        os.environ.update(saved)


async def member_refuses(config: Config, seconds: float = 30) -> None:
    """Wait until a member record on the members topic says its source refuses something."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not any(m.refused for m in await read_members(config, AiokafkaClients(config), 10)):
        assert asyncio.get_running_loop().time() < deadline, "no member record says a refusal"
        await asyncio.sleep(0.2)  # polling the members topic until the worker's record is there


class TestMembersTopicBadRecord:
    """A members record with a naive time and one with an absurd refresh period stop nobody."""

    async def test_a_worker_and_contracts_status_read_past_them(
        self, config: Config, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A worker starts and is live beside them; contracts status lists it and exits 0."""
        good: dict[str, Any] = {
            "group": config.group_id,
            "member": "hand",
            "generation": 0,
            "digest": "a" * 64,
            "label": "g0-aaaaaaaaaaaa",
            "tools": ["review_status"],
            "refresh_seconds": 10,
        }
        naive = {**good, "at": "2030-01-01T00:00:00"}
        huge = {**good, "member": "huge", "at": datetime.now(UTC).isoformat(), "refresh_seconds": 1e15}
        await put(config, config.topics.members, b"hand", json.dumps(naive).encode())
        await put(config, config.topics.members, b"huge", json.dumps(huge).encode())
        keyring = Keyring.load(KEYRING, environ={})

        def load() -> Gate:
            return Gate(ContractSet.load(CONTRACTS), keyring)

        async with running(config, ContractSource([CONTRACTS]), load) as worker:
            assert worker.group_view is not None
            await until(lambda: [m.member for m in worker.group_view.live()] == [worker.member], 30)  # type: ignore[union-attr]
            capsys.readouterr()
            code = await asyncio.to_thread(command, config, ["contracts", "status"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert "1 live members, one contract set" in out


def tampered(pv: PublishedVersion) -> PublishedVersion:
    """The version with a file changed by hand and its digest field kept."""
    return msgspec.structs.replace(pv, files={**pv.files, "NOTES.txt": "edited by hand\n"})


class TestContractsTopicTamperedAndCompacted:
    """Records written into the contracts topic by hand: status says so, a restarted reader names
    them, and publish rewrites them above the running workers' generation."""

    async def test_status_restart_and_publish(
        self,
        config: Config,
        topic_factory: TopicFactory,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """The worker runs generation 2; a tampered version and a hand-written set record follow.
        Status exits 1 naming the refusal; on what compaction keeps (the newest record per key) a
        restarted reader names the refused records; publish writes 1 version and generation 3
        (not 1), and the reader loads it; a key the worker does not trust is refused, exit 2."""
        keyring = Keyring.load(KEYRING, environ={})
        key = keyring.publisher("sample-publisher")
        assert key is not None
        folder = tmp_path / "contracts"
        shutil.copytree(CONTRACTS, folder, ignore=shutil.ignore_patterns("wire", "*.md", "*.toml"))
        signed = list(signed_versions(ContractSet.load(folder), key).values())
        await publish_to_topic(config, signed, key)
        await publish_to_topic(config, signed, key)
        source = TopicContractSource(config.topics.contracts, AiokafkaClients(config), keyring)
        await source.start(30)
        first = signed[0]
        try:
            async with running(config, source, lambda: Gate(source.load(), keyring)) as worker:
                assert worker.gate.contracts.generation == 2
                await put(
                    config,
                    config.topics.contracts,
                    f"version/{first.key}".encode(),
                    msgspec.json.encode(tampered(first)),
                )
                await put(config, config.topics.contracts, b"set", b'{"generation": 9}')
                await until(lambda: bool(source.refusal()), 30)
                await member_refuses(config)
                capsys.readouterr()
                code = await asyncio.to_thread(command, config, ["contracts", "status"])
                out = capsys.readouterr().out
                assert code == 1, out
                assert "refuses: contracts topic record 'set' refused" in out

                # What compaction keeps: the newest record of each key.
                compacted = await topic_factory("contracts")
                newest = {r.key: r.value for r in await read_all(config, config.topics.contracts)}
                for name, value in newest.items():
                    await put(config, compacted, name.encode(), value or b"")
                restarted = TopicContractSource(compacted, AiokafkaClients(config), keyring)
                with pytest.raises(ConfigError, match=f"records refused: set: .*version/{first.key}: "):
                    await restarted.start(30)
                await restarted.stop()

                env = {
                    "TOOLGATE_TOPIC_CONTRACTS": compacted,
                    "TOOLGATE_KEYRING": str(KEYRING),
                    "TOOLGATE_CONTRACTS_DIR": str(folder),
                }
                argv = ["contracts", "publish", "--to", "topic", "--publisher-key", "sample-publisher"]
                capsys.readouterr()
                code = await asyncio.to_thread(command, config, argv, **env)
                out = capsys.readouterr().out
                assert code == 0, out
                assert f"{len(signed)} contract versions: 1 written" in out
                assert "set generation 3 written last" in out
                again = TopicContractSource(compacted, AiokafkaClients(config), keyring)
                await again.start(30)
                assert again.load().generation == 3
                await again.stop()

                mallory = tmp_path / "mallory.toml"
                mallory.write_text(f'[publishers.mallory]\nprivate_key = "{OTHER_PRIVATE}"\n')
                mallory.chmod(0o600)
                argv = ["contracts", "publish", "--to", "topic", "--publisher-key", "mallory"]
                code = await asyncio.to_thread(
                    command, config, argv, **{**env, "TOOLGATE_KEYRING": str(mallory)}
                )
                err = capsys.readouterr().err
                assert code == 2
                assert "do not trust this publisher" in err
        finally:
            await source.stop()
