"""The worker bench's floor (ops/bench/floor.py) on the real broker: what it measures is only
worth a ratio if it relays every record once, in committed transactions, with its offsets."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from aiokafka import TopicPartition
from toolgate._config import Config
from toolgate.service._kafka import AiokafkaClients

from tests import ROOT

ENTRY = ROOT / "ops" / "bench" / "worker_bench.py"
RECORDS = 30
WAIT_S = 60.0


async def _events(proc: asyncio.subprocess.Process, until: str) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        assert line, f"the floor exited before {until!r}"
        event: dict[str, Any] = json.loads(line)
        if event["event"] == until:
            return event


class TestFloor:
    """Each intake record comes back once on the agent topic, committed, under its key, in its
    partition; the group's committed offsets reach the intake's end (offsets in the transactions)."""

    async def test_every_record_relayed_once_and_its_offset_committed(self, config: Config) -> None:
        clients = AiokafkaClients(config)
        group = f"{config.group_id}.floor"
        spec = {
            "settings": clients.settings,
            "group_id": group,
            "topics": {"intake": config.topics.intake, "agent": config.topics.agent},
            "value": '{"envelope":1}',
            "headers": [["tg-tool", "bench"]],
            "transactional_prefix": config.group_id,
            "linger_ms": 20,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ENTRY),
            "--floor",
            json.dumps(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=str(ROOT),
        )
        producer = clients.producer(acks="all", linger_ms=0)
        reader = clients.consumer(
            group_id=None,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        watcher = clients.consumer(group_id=group, enable_auto_commit=False)
        sent: dict[bytes, int] = {}
        got: list[tuple[bytes, int, bytes]] = []
        try:
            assigned = await _events(proc, "assigned")
            while len(assigned["partitions"]) < config.partitions.intake:
                assigned = await _events(proc, "assigned")
            await producer.start()
            for i in range(RECORDS):
                key = f"req.floor.{i:04d}".encode()
                meta = await (await producer.send(config.topics.intake, b"{}", key=key))
                sent[key] = meta.partition
            await reader.start()
            tps = [TopicPartition(config.topics.agent, p) for p in range(config.partitions.agent)]
            reader.assign(tps)
            async with asyncio.timeout(WAIT_S):
                while len(got) < RECORDS:
                    for tp, records in (await reader.getmany(timeout_ms=200)).items():
                        got.extend((r.key or b"", tp.partition, r.value or b"") for r in records)
            # Nothing more arrives: no record was relayed twice.
            extra = await reader.getmany(timeout_ms=500)
            assert sum(len(v) for v in extra.values()) == 0
            await watcher.start()
            intake = [TopicPartition(config.topics.intake, p) for p in range(config.partitions.intake)]
            ends = await watcher.end_offsets(intake)
            committed = {tp: await watcher.committed(tp) for tp in intake}
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            exit_event = await _events(proc, "exit")
            await proc.wait()
            await producer.stop()
            await reader.stop()
            await watcher.stop()
        assert sorted(key for key, _, _ in got) == sorted(sent)
        assert all(partition == sent[key] for key, partition, _ in got)
        assert {value for _, _, value in got} == {b'{"envelope":1}'}
        assert {tp: committed[tp] or 0 for tp in intake} == ends
        assert 1 <= exit_event["transactions"] <= RECORDS
        assert exit_event["batch_mean"] * exit_event["transactions"] == pytest.approx(RECORDS)
