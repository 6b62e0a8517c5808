"""One contract set for the group, on the real broker: three workers of one group with valid
traffic flowing while a new tool and a new version for a new adapter version roll out, through
the contracts topic and through three folder copies updated one at a time."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from toolgate._config import Config
from toolgate.authoring._publish import signed_versions
from toolgate.cli import main
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import CONTRACT_SET_HEADER
from toolgate.gate._signing import Keyring
from toolgate.operations._publish_topic import publish_to_topic
from toolgate.operations._traffic import Sample, TrafficGenerator
from toolgate.service._contract_source import ContractSource, TopicContractSource
from toolgate.service._kafka import AiokafkaClients
from toolgate.service._service import Worker, WorkerOptions

from tests.integration.worker_kit import CONTRACTS, KEYRING, Record, is_decision, publish, read_all, retry

NEW_TOOL = "review_status"


def base_folder(root: Path) -> Path:
    """The bundled contracts without review_status."""
    shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md", "*.toml", NEW_TOOL))
    return root


def add_new_contracts(root: Path) -> None:
    """review_status v1 (adapters 1.*) and v2 for the new adapter version (2.*), copied in."""
    shutil.copytree(CONTRACTS / NEW_TOOL, root / NEW_TOOL)
    v2 = root / NEW_TOOL / "v2"
    shutil.copytree(root / NEW_TOOL / "v1", v2)
    spec = (v2 / "contract.yaml").read_text()
    (v2 / "contract.yaml").write_text(spec.replace("version: 1", "version: 2").replace('["1.*"]', '["2.*"]'))


def valid_samples(traffic: TrafficGenerator, count: int, *, new_tool: bool) -> list[Sample]:
    """``count`` samples the gate accepts; with ``new_tool``, a third are review_status (half of
    them from the new adapter version 2.0.0)."""
    out: list[Sample] = []
    while len(out) < count:
        for sample in traffic.mix(50, datetime.now(UTC), hostile_share=0.0):
            if sample.expect is not None or (sample.tool == NEW_TOOL) != (new_tool and len(out) % 3 == 0):
                continue
            if sample.tool == NEW_TOOL and len(out) % 2 == 0:
                sample = _adapter_version(sample, "2.0.0")
            out.append(sample)
            if len(out) == count:
                break
    return out


def _adapter_version(sample: Sample, version: str) -> Sample:
    headers = [(n, version.encode() if n == "tg-adapter-version" else v) for n, v in sample.message.headers]
    return dataclasses.replace(sample, message=msgspec.structs.replace(sample.message, headers=headers))


def folder_load(folder: Path, keyring: Keyring) -> Callable[[], Gate]:
    """A worker's gate factory over a folder."""
    return lambda: Gate(ContractSet.load(folder), keyring)


def topic_load(source: TopicContractSource, keyring: Keyring) -> Callable[[], Gate]:
    """A worker's gate factory over the contracts topic's newest complete set."""
    return lambda: Gate(source.load(), keyring)


def rolled_out(group: Group, label: str, count: int) -> Callable[[], bool]:
    """True once ``count`` workers decide with the set ``label``."""
    return lambda: sum(w.gate.contracts.label == label for w in group.workers) == count


class Group:
    """Three in-process workers of one group on the real broker."""

    def __init__(
        self, config: Config, sources: list[ContractSource], loads: list[Callable[[], Gate]]
    ) -> None:
        self.workers = [
            Worker(
                msgspec.structs.replace(
                    config,
                    group_instance_id=f"member-{i}-{uuid.uuid4().hex[:4]}",
                    contracts_dir=str(source.paths[0]) if source.paths else config.contracts_dir,
                ),
                load(),
                options=WorkerOptions(
                    handle_signals=False,
                    metrics_port=0,
                    contract_source=source,
                    contracts_catch_up_seconds=2.0,
                ),
                gate_factory=load,
            )
            for i, (source, load) in enumerate(zip(sources, loads, strict=True))
        ]
        self.tasks: list[asyncio.Task[Any]] = []

    async def __aenter__(self) -> Group:
        self.tasks = [asyncio.create_task(w.run()) for w in self.workers]
        await until(
            lambda: all(w.ready() and len(w._partitions) == 1 for w in self.workers),
            90,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self.workers:
            w.request_stop()
        await asyncio.gather(*self.tasks)


async def until(condition: Callable[[], bool], seconds: float) -> None:
    """Wait for ``condition`` (checked every 50 ms), failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)  # polling worker state until the condition holds


async def decisions(config: Config, count: int, seconds: float = 90) -> list[Record]:
    """The audit topic's decision events once there are ``count`` of them."""
    deadline = time.monotonic() + seconds
    while True:
        found = [r for r in await read_all(config, config.topics.audit) if is_decision(r)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)  # polling the topic until the worker has decided them


def outcomes(records: list[Record]) -> dict[str, dict[str, Any]]:
    """The last decision of each (request id, attempt): its event and tg-contract-set header."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        event = json.loads(r.value or b"{}")
        event["set"] = r.headers.get(CONTRACT_SET_HEADER, b"").decode()
        out[f"{event['request_id']}#{event['attempt'] or 1}"] = event  # None: rejected before correlate
    return out


class TestTopicRollout:
    """A set published to the contracts topic while valid traffic flows: no valid result rejected."""

    async def test_new_tool_and_new_adapter_version(self, config: Config, tmp_path: Path) -> None:
        """Generation 2 adds review_status v1 and v2 (adapters 2.*): every valid result produced after
        the publish is accepted by whichever of the three workers owns it, and names generation 2."""
        keyring = Keyring.load(KEYRING, environ={})
        key = keyring.publisher("sample-publisher")
        assert key is not None
        base = base_folder(tmp_path / "base")
        full = base_folder(tmp_path / "full")
        add_new_contracts(full)
        first = await publish_to_topic(
            config, list(signed_versions(ContractSet.load(base), key).values()), key
        )
        sources = [
            TopicContractSource(config.topics.contracts, AiokafkaClients(config), keyring) for _ in range(3)
        ]
        for source in sources:
            await source.start(30)
        loads = [topic_load(s, keyring) for s in sources]
        traffic = TrafficGenerator(keyring, seed=37, run_id=uuid.uuid4().hex[:8])
        labels = {
            1: ContractSet.load(base, generation=1).label,
            2: ContractSet.load(full, generation=2).label,
        }
        try:
            async with Group(config, list(sources), loads) as group:
                before = valid_samples(traffic, 60, new_tool=False)
                await publish(config, before)
                second = await publish_to_topic(
                    config, list(signed_versions(ContractSet.load(full), key).values()), key
                )
                after = valid_samples(traffic, 90, new_tool=True)
                await publish(config, after)
                found = outcomes(await decisions(config, 150))
                sets = {w.gate.contracts.label for w in group.workers}
        finally:
            for source in sources:
                await source.stop()
        assert (first.generation, second.generation) == (1, 2)
        assert sets == {labels[2]}
        assert len(found) == 150  # 0 undecided
        rejected = [e for e in found.values() if e["outcome"] == "rejected"]
        assert rejected == []  # 0 valid results rejected
        assert {e["set"] for e in found.values()} <= {labels[1], labels[2]}
        for sample in after:
            assert found[f"{sample.request_id}#1"]["set"] == labels[2]
        new_version = [s for s in after if dict(s.message.headers)["tg-adapter-version"] == b"2.0.0"]
        assert new_version
        assert {found[f"{s.request_id}#1"]["contract"] for s in new_version} == {f"{NEW_TOOL}@v2"}


class TestFolderRollout:
    """The same change rolled to three folder copies one at a time: no final rejection of a valid result."""

    async def test_one_copy_at_a_time(self, config: Config, tmp_path: Path) -> None:
        """While a copy lags, its worker answers CONTRACTS_BEHIND (retryable) for what the others
        serve; the retry once every copy is updated is accepted; each decision names its set."""
        keyring = Keyring.load(KEYRING, environ={})
        copies = [base_folder(tmp_path / f"copy{i}") for i in range(3)]
        config = msgspec.structs.replace(config, contracts_watch_seconds=0.2)
        sources = [ContractSource([copy]) for copy in copies]
        loads = [folder_load(c, keyring) for c in copies]
        traffic = TrafficGenerator(keyring, seed=41, run_id=uuid.uuid4().hex[:8])
        old = ContractSet.load(copies[0]).label
        staged = base_folder(tmp_path / "staged")
        add_new_contracts(staged)
        new = ContractSet.load(staged).label
        sent: list[Sample] = []
        started = time.monotonic()
        async with Group(config, list(sources), loads) as group:
            await publish(config, valid_samples(traffic, 30, new_tool=False))
            sent_before = 30
            for step, copy in enumerate(copies):
                shutil.rmtree(copy)
                shutil.copytree(staged, copy)  # the kubelet's update of this pod's copy
                await until(rolled_out(group, new, step + 1), 30)
                if step < 2:  # the others see that the group is split before the new results come
                    await until(
                        lambda: all(w.metrics.group_disagreement._value.get() == 1 for w in group.workers), 30
                    )
                batch = valid_samples(traffic, 30, new_tool=True)
                await publish(config, batch)
                sent += batch
                # The next copy lags longer than the catch-up bound: its worker answers first.
                await decisions(config, sent_before + len(sent))
            await until(
                lambda: all(w.metrics.group_disagreement._value.get() == 0 for w in group.workers), 30
            )
            rolled_s = time.monotonic() - started
            first = outcomes(await decisions(config, sent_before + len(sent)))
            behind = [s for s in sent if first[f"{s.request_id}#1"]["code"] == "CONTRACTS_BEHIND"]
            await publish(config, [retry(s) for s in behind])
            found = outcomes(await decisions(config, sent_before + len(sent) + len(behind)))
            envelopes = [json.loads(r.value or b"{}") for r in await read_all(config, config.topics.agent)]
        finally_rejected = [
            s.request_id
            for s in sent
            if found[f"{s.request_id}#1"]["outcome"] == "rejected"
            and found.get(f"{s.request_id}#2", {}).get("outcome", "rejected") == "rejected"
        ]
        assert finally_rejected == [], [
            (r, found[f"{r}#1"].get("code"), found.get(f"{r}#2", {}).get("code", "undecided"))
            for r in finally_rejected
        ]
        codes = {e["code"] for e in found.values() if e["outcome"] == "rejected"}
        assert codes <= {"CONTRACTS_BEHIND"}
        assert behind  # the lagging copies answered while they lagged
        for s in behind:
            assert found[f"{s.request_id}#2"]["set"] == new
        assert {e["set"] for e in found.values()} <= {old, new}
        accepted_new = [e for e in found.values() if e["tool"] == NEW_TOOL and e["outcome"] != "rejected"]
        assert {e["set"] for e in accepted_new} == {new}
        lagged = {s.request_id for s in behind}
        answers = [e.get("error") for e in envelopes if e.get("request_id") in lagged]
        assert answers.count({"code": "CONTRACTS_BEHIND", "retryable": True}) == len(lagged)
        assert {"code": "INVALID_RESPONSE", "retryable": False} not in answers
        print(
            f"rolled 3 copies in {rolled_s:.1f} s; {len(behind)} of {len(sent)} answered "
            "CONTRACTS_BEHIND, all retried OK"
        )


class TestTwoFolders:
    """Two workers of one group started with different folders: the group view says so."""

    async def test_status_and_metric_say_the_group_is_split(self, config: Config, tmp_path: Path) -> None:
        """Both workers' disagreement metric is 1, and contracts status lists both sets and exits 1."""
        keyring = Keyring.load(KEYRING, environ={})
        lacking = base_folder(tmp_path / "lacking")
        full = tmp_path / "full"
        shutil.copytree(CONTRACTS, full, ignore=shutil.ignore_patterns("wire", "*.md", "*.toml"))
        folders = [lacking, full, full]
        loads = [folder_load(f, keyring) for f in folders]
        async with Group(config, [ContractSource([f]) for f in folders], loads) as group:
            await until(
                lambda: all(w.metrics.group_disagreement._value.get() == 1 for w in group.workers), 30
            )
            env = {
                **config.topics.env(),
                "TOOLGATE_BOOTSTRAP": config.bootstrap,
                "TOOLGATE_GROUP_ID": config.group_id,
            }
            code = await asyncio.to_thread(_status, env)
        assert code == 1


def _status(env: dict[str, str]) -> int:
    import logging
    import os

    saved = dict(os.environ)
    client_logs = logging.getLogger("aiokafka")
    level = client_logs.level
    os.environ.update(env)
    try:
        return main(["contracts", "status"])
    finally:  # the command quiets the Kafka client's logger: the tests after this one keep theirs
        client_logs.setLevel(level)
        os.environ.clear()
        os.environ.update(saved)
