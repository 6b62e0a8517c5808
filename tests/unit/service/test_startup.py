"""Readiness of a standby, static membership, the metrics port in use, the contracts watch."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from pathlib import Path

import msgspec
import pytest
from toolgate._config import Config, load_config
from toolgate._errors import ConfigError
from toolgate._secrets import check_private
from toolgate.cli import main
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.operations._grow import GrowRefused, _offset_settled_past, grow_topics
from toolgate.operations._top import parse, render
from toolgate.service._kafka import TopicPartition, ensure_topics, partition_of
from toolgate.service._metrics import HealthServer, Metrics
from toolgate.service._service import Worker, WorkerOptions
from toolgate.service._startup import (
    STANDBY,
    ContractWatch,
    at_home,
    check_signature_keys,
    fingerprint,
    readiness_text,
    start_health,
)
from toolgate.service._store import reading

from tests.fakes.kafka import FakeBroker, FakeClients
from tests.unit.builders import CONTRACTS, NOW
from tests.unit.worker_kit import World, get, until


def one_partition(gate: Gate) -> World:
    world = World(partitions=1)
    world.gate = gate
    return world


class TestStandby:
    async def test_a_worker_owning_no_partition_is_ready_and_says_standby(self, gate: Gate) -> None:
        """Two workers over one intake partition: both ready, the one owning nothing says standby
        in /readyz (200) and exports toolgate_owned_partitions 0."""
        world = one_partition(gate)
        first, second = world.worker(), world.worker()
        tasks = [asyncio.create_task(w.run()) for w in (first, second)]
        await until(lambda: first.ready() and second.ready() and world.broker.rebalances >= 2)
        owner, standby = (first, second) if first._producers else (second, first)
        assert len(owner._producers) == 1
        assert not standby._producers
        assert standby.status() == STANDBY
        assert owner.status() == "ready"
        assert standby.metrics.owned_partitions._value.get() == 0
        assert owner.metrics.owned_partitions._value.get() == 1
        assert standby.metrics.intake_partitions._value.get() == 1
        assert standby.metrics.ready._value.get() == 1
        assert standby.metrics_port is not None
        status, body = await get(standby.metrics_port, "/readyz")
        assert (status, body) == (200, f"{STANDBY}\n{standby.readyz().splitlines()[1]}\n".encode())
        assert standby.gate.contracts.label in body.decode()
        for w in (first, second):
            w.request_stop()
        await asyncio.gather(*tasks)

    def test_a_worker_that_has_not_joined_is_not_ready(self, gate: Gate) -> None:
        """Before the group's first assignment a worker owns nothing and is not ready."""
        worker = one_partition(gate).worker()
        assert not worker.ready()
        assert worker.status() == "joining the consumer group"

    def test_readiness_text_orders_the_reasons(self) -> None:
        """Restoring comes first, then joining, then a failing transaction, then standby or ready."""
        assert readiness_text(joined=False, owned=0, restoring=True, failing=True) == "restoring"
        assert readiness_text(joined=False, owned=0, restoring=False, failing=True).startswith("joining")
        assert readiness_text(joined=True, owned=2, restoring=False, failing=True).startswith("not ready")
        assert readiness_text(joined=True, owned=0, restoring=False, failing=False) == STANDBY
        assert readiness_text(joined=True, owned=2, restoring=False, failing=False) == "ready"

    def test_top_says_standby(self) -> None:
        """toolgate top shows a ready worker that owns nothing as a standby, not as waiting."""
        text = render(parse("toolgate_ready 1.0\ntoolgate_owned_partitions 0.0\n", 1.0), None, url="u")
        assert "ready (standby)" in text.splitlines()[0]
        assert "standby: owns no partition" in text
        waiting = render(parse("toolgate_ready 0.0\ntoolgate_owned_partitions 0.0\n", 1.0), None, url="u")
        assert "no partition assigned yet" in waiting


class TestStaticMembership:
    async def test_the_instance_id_reaches_the_group_consumer(self, gate: Gate) -> None:
        """TOOLGATE_GROUP_INSTANCE_ID is passed to the group consumer as group_instance_id."""
        world = one_partition(gate)
        config = load_config(environ={"TOOLGATE_GROUP_INSTANCE_ID": "toolgate-2"})
        worker = Worker(
            config,
            gate,
            clock=lambda: NOW,
            options=WorkerOptions(handle_signals=False, metrics_port=0, linger_ms=5),
            clients=world.clients,
            sleep=world.sleep,
        )
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        group = [c for c in world.clients.consumers if c.group]
        assert [c.options.get("group_instance_id") for c in group] == ["toolgate-2"]
        worker.request_stop()
        await task

    async def test_a_dynamic_member_sends_no_instance_id(self, gate: Gate) -> None:
        """Without the setting the consumer is a dynamic member (no group_instance_id option)."""
        world = one_partition(gate)
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        assert all("group_instance_id" not in c.options for c in world.clients.consumers if c.group)
        worker.request_stop()
        await task


class TestMetricsPort:
    async def test_a_port_in_use_names_the_setting(self) -> None:
        """A metrics port another process holds fails with one line naming TOOLGATE_METRICS_PORT."""
        holder = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = holder.sockets[0].getsockname()[1]
        try:
            server = HealthServer(Metrics(), "127.0.0.1", port, lambda: True)
            with pytest.raises(
                ConfigError, match=rf"127.0.0.1:{port}: address already in use.*TOOLGATE_METRICS_PORT"
            ):
                await start_health(server, from_config=True)
        finally:
            holder.close()
            await holder.wait_closed()


class TestContractWatch:
    def test_a_changed_file_is_seen_once_after_the_interval(self, tmp_path: Path) -> None:
        """A change is reported at the first check after the interval, and only once."""
        (tmp_path / "a.yaml").write_text("1")
        now = [0.0]
        watch = ContractWatch([tmp_path], 10, clock=lambda: now[0])
        (tmp_path / "a.yaml").write_text("22")
        now[0] = 5
        assert not watch.changed()  # within the interval: not looked at yet
        now[0] = 10
        assert watch.changed()
        now[0] = 20
        assert not watch.changed()

    def test_a_configmap_update_swaps_the_data_link(self, tmp_path: Path) -> None:
        """A Kubernetes-style mount (files linked through ..data) changes when ..data is relinked,
        even when the new copy has the same sizes and times."""
        for stamp in ("..v1", "..v2"):
            (tmp_path / stamp / "tool" / "v1").mkdir(parents=True)
            (tmp_path / stamp / "tool" / "v1" / "contract.yaml").write_text("x")
            os.utime(tmp_path / stamp / "tool" / "v1" / "contract.yaml", ns=(1, 1))
        (tmp_path / "..data").symlink_to("..v1")
        (tmp_path / "tool").symlink_to("..data/tool")
        before = fingerprint([tmp_path])
        assert [Path(p).name for p, _, _ in before] == ["contract.yaml"]
        (tmp_path / "..data").unlink()
        (tmp_path / "..data").symlink_to("..v2")
        assert fingerprint([tmp_path]) != before

    def test_on_by_default_and_off_with_zero(self, tmp_path: Path) -> None:
        """The default configuration watches the contracts folder and the keyring every 2 s;
        contracts_watch_seconds 0 builds no watch (SIGHUP only)."""
        config = msgspec.structs.replace(
            Config(), contracts_dir=str(tmp_path), keyring=str(tmp_path / "k.toml")
        )
        watch = ContractWatch.of(config)
        assert watch is not None
        assert watch.paths == [tmp_path, tmp_path / "k.toml"]
        assert watch.interval == 2
        assert ContractWatch.of(msgspec.structs.replace(config, contracts_watch_seconds=0)) is None

    @pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e9"])
    def test_a_watch_interval_out_of_range_is_refused(self, value: str) -> None:
        """Not a finite number of seconds from 0 to a day: refused, naming the setting."""
        with pytest.raises(ConfigError, match="contracts_watch_seconds"):
            load_config(environ={"TOOLGATE_CONTRACTS_WATCH_SECONDS": value})

    async def test_a_contract_activated_after_start_is_decided(self, gate: Gate, tmp_path: Path) -> None:
        """With the default configuration, a draft set to ``status: active`` while the worker
        runs decides the results that follow, once the watch's (injected) clock passes its
        interval: no signal, no restart."""
        contracts = tmp_path / "contracts"
        shutil.copytree(CONTRACTS / "review_status", contracts / "review_status")
        spec = contracts / "review_status" / "v1" / "contract.yaml"
        active = spec.read_text()
        assert "\nstatus: active\n" in active
        spec.write_text(active.replace("\nstatus: active\n", "\nstatus: draft\n"))
        world = one_partition(gate)
        now = [0.0]
        config = msgspec.structs.replace(Config(), contracts_dir=str(contracts))
        worker = Worker(
            config,
            Gate(ContractSet.load(contracts)),
            options=WorkerOptions(
                handle_signals=False, metrics_port=0, linger_ms=5, watch_clock=lambda: now[0]
            ),
            clock=lambda: NOW,
            gate_factory=lambda: Gate(ContractSet.load(contracts)),
            clients=world.clients,
            sleep=world.sleep,
        )
        task = asyncio.create_task(worker.run())
        try:
            await until(worker.ready)
            world.request(1)
            world.result(1)
            await until(lambda: len(world.audit()) == 1)
            assert world.codes() == ["UNKNOWN_CONTRACT_VERSION"]  # a draft decides nothing
            spec.write_text(active)
            now[0] += 1
            polls = world.broker.calls["fetch"]
            await until(lambda: world.broker.calls["fetch"] >= polls + 3)
            # Within the interval the files are not looked at.
            assert worker.gate.contracts.versions("review_status")[0].spec.status == "draft"
            now[0] += 1
            await until(lambda: worker.gate.contracts.versions("review_status")[0].spec.status == "active")
            world.request(2)
            world.result(2)
            await until(lambda: len(world.audit()) == 2)
            assert world.codes() == ["-", "UNKNOWN_CONTRACT_VERSION"]
        finally:
            worker.request_stop()
            await task

    async def test_the_worker_reloads_when_the_files_change(self, gate: Gate, tmp_path: Path) -> None:
        """A running worker with a watch reloads its contracts after their files change."""
        world = one_partition(gate)
        (tmp_path / "c.yaml").write_text("1")
        worker = world.worker()
        worker.gate_factory = lambda: gate
        now = [0.0]
        worker._watch = ContractWatch([tmp_path], 1, clock=lambda: now[0])
        reloads: list[bool] = []
        original = worker.reload_contracts

        def counted() -> bool:
            reloads.append(original())
            return reloads[-1]

        worker.reload_contracts = counted  # type: ignore[method-assign]
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        (tmp_path / "c.yaml").write_text("22")
        now[0] = 2
        await until(lambda: bool(reloads))
        assert reloads == [True]
        worker.request_stop()
        await task


class TestKubernetesSecretMount:
    def _mount(self, root: Path, mode: int) -> Path:
        """A secret volume as the kubelet writes it: the file in ..<stamp>, linked via ..data."""
        (root / "..2026_12_01_21_00_00.1").mkdir()
        secret = root / "..2026_12_01_21_00_00.1" / "sasl-password"
        secret.write_text("s3cret\n")
        secret.chmod(mode)
        (root / "..data").symlink_to("..2026_12_01_21_00_00.1")
        (root / "sasl-password").symlink_to("..data/sasl-password")
        return root / "sasl-password"

    def test_group_readable_for_the_pods_fsgroup_is_not_warned(self, tmp_path: Path) -> None:
        """A kubelet-mounted secret readable by the pod's group (fsGroup) is private enough."""
        assert check_private(self._mount(tmp_path, 0o440), "X") is None

    def test_readable_by_others_still_warns(self, tmp_path: Path) -> None:
        """A kubelet-mounted secret readable by every account still gets the warning."""
        assert "others" in (check_private(self._mount(tmp_path, 0o444), "X") or "")

    def test_a_plain_group_readable_file_warns(self, tmp_path: Path) -> None:
        """Outside a secret volume a group-readable file warns as before."""
        plain = tmp_path / "pw"
        plain.write_text("x")
        plain.chmod(0o640)
        assert "group" in (check_private(plain, "X") or "")


class TestSignatureKeys:
    def test_a_signed_contract_without_its_key_refuses_to_start(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """toolgate run without the key a signed contract names: exit 2, one error naming the
        contract, the key id and TOOLGATE_KEYRING."""
        monkeypatch.delenv("TOOLGATE_KEYRING", raising=False)
        assert main(["run", "--burst", "--contracts", str(CONTRACTS)]) == 2
        (error,) = [json.loads(line) for line in capsys.readouterr().err.splitlines() if '"error"' in line]
        assert error["event"].startswith("contract deploy_status@v1 (")
        assert "requires signature key 'deploy-adapter-2026', which the keyring lacks" in error["event"]
        assert "TOOLGATE_KEYRING is not set" in error["event"]
        # ... and says where a keyring comes from: the option, the variable, the sample file.
        assert "--keyring FILE or TOOLGATE_KEYRING" in error["event"]
        assert f"--keyring {(CONTRACTS / 'fixtures-keyring.toml').absolute()}" in error["event"]

    def test_a_draft_or_disabled_signed_version_needs_no_key(self, tmp_path: Path) -> None:
        """Only versions that decide verify signatures: a draft or disabled one starts without its key."""
        import shutil

        for status in ("draft", "disabled"):
            root = tmp_path / status
            shutil.copytree(CONTRACTS / "deploy_status", root / "deploy_status")
            for path in (root / "deploy_status").glob("v*/contract.yaml"):
                text = path.read_text()
                for live in ("active", "shadow"):
                    text = text.replace(f"\nstatus: {live}", f"\nstatus: {status}")
                path.write_text(text)
            gate = Gate(ContractSet.load(root), Keyring())
            assert {c.spec.signature is not None for c in gate.contracts} == {True}
            check_signature_keys(gate, None)

    def test_the_missing_key_error_says_how_to_give_one(self) -> None:
        """Without a keyring, the error names both ways to give one and, since the bundled
        contracts' sample keyring holds the key, that keyring by its whole path."""
        with pytest.raises(ConfigError) as caught:
            check_signature_keys(Gate(ContractSet.load(CONTRACTS)), None)
        text = str(caught.value)
        assert "--keyring FILE or TOOLGATE_KEYRING" in text
        assert f"--keyring {(CONTRACTS / 'fixtures-keyring.toml').absolute()}" in text
        assert "\n" not in text

    def test_no_sample_hint_when_the_sample_keyring_lacks_the_key(self, tmp_path: Path) -> None:
        """A contracts folder whose sample keyring does not hold the key gets no such hint."""
        shutil.copytree(CONTRACTS / "deploy_status", tmp_path / "deploy_status")
        (tmp_path / "fixtures-keyring.toml").write_text("[keys]\n")
        with pytest.raises(ConfigError, match=r"--keyring FILE or TOOLGATE_KEYRING$"):
            check_signature_keys(Gate(ContractSet.load(tmp_path)), None)

    def test_a_keyring_without_the_key_is_named(self, tmp_path: Path) -> None:
        """A keyring that lacks a contract's key is named with the key id."""
        keyring = tmp_path / "keyring.toml"
        keyring.write_text(
            '[keys.other]\nalgorithm = "hmac-sha256"\nadapter = "a"\n'
            'secret = "lpB8cjyRnnxVykTmaZcGkiKIIwWTSK2Ewp4xBHm+jwc="\n'
        )
        gate = Gate(ContractSet.load(CONTRACTS), Keyring.load(keyring))
        with pytest.raises(ConfigError, match=rf"TOOLGATE_KEYRING={keyring}"):
            check_signature_keys(gate, str(keyring))

    def test_a_key_of_another_algorithm_is_refused(self, tmp_path: Path) -> None:
        """A key under the right id but of another algorithm is refused too."""
        keyring = tmp_path / "keyring.toml"
        text = (CONTRACTS / "fixtures-keyring.toml").read_text()
        keyring.write_text(
            text.replace(
                '[keys.deploy-adapter-2026]\nalgorithm = "hmac-sha256"',
                '[keys.deploy-adapter-2026]\nalgorithm = "ed25519"\n'
                'public_key = "AW23o8+rkQ/bWWurcgU9i92doW2+f3jv77zNBtVnyik="',
            )
        )
        gate = Gate(ContractSet.load(CONTRACTS), Keyring.load(keyring, environ={}))
        with pytest.raises(
            ConfigError, match="requires a hmac-sha256 key 'deploy-adapter-2026'; the keyring's is ed25519"
        ):
            check_signature_keys(gate, str(keyring))

    def test_the_fixture_keyring_has_every_key(self) -> None:
        """The bundled contracts with their fixture keyring pass the check."""
        keyring = CONTRACTS / "fixtures-keyring.toml"
        check_signature_keys(
            Gate(ContractSet.load(CONTRACTS), Keyring.load(keyring, environ={})), str(keyring)
        )


class TestTopicCounts:
    async def test_the_worker_logs_the_topics_real_counts(
        self, gate: Gate, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The start-up "topics" line has each topic's partition count as the cluster has it."""
        caplog.set_level(logging.INFO, logger="toolgate.worker")
        world = one_partition(gate)
        worker = world.worker(burst=True)
        await worker.run()
        (line,) = [r for r in caplog.records if r.getMessage() == "topics"]
        topics = Config().topics
        assert line.partitions == {**dict.fromkeys(topics.names(), 1), topics.quarantine: 1}  # type: ignore[attr-defined]

    async def test_topics_ensure_exits_1_on_copartition_mismatch(self) -> None:
        """topics ensure on requests with another count than intake: an error naming both counts
        and the grow command, like the worker's refusal."""
        broker = FakeBroker()
        broker.create_topic("toolgate.intake", 6)
        broker.create_topic("toolgate.requests", 3)
        report = await ensure_topics(Config(), clients=FakeClients(broker))
        assert report.problems == [
            "toolgate.requests has 3 partitions and toolgate.intake has 6: they must be equal (state is "
            "restored per intake partition); grow them together: toolgate topics grow --partitions 6"
        ]
        assert len(broker.logs["toolgate.state"]) == 6  # created with intake's count


class TestAtHome:
    def test_a_record_outside_its_keys_partition_is_skipped(self) -> None:
        """A record read from another partition than its key's (left there by a growth) is not
        applied; one at home, one with no key, or one read outside a reader is."""
        key = b"req.home0001"
        home = partition_of(key, 6)
        token = reading.set(("t", home, 0))
        try:
            assert at_home(key, 6)
            assert at_home(None, 6)
        finally:
            reading.reset(token)
        token = reading.set(("t", (home + 1) % 6, 0))
        try:
            assert not at_home(key, 6)
            assert at_home(key, 0)  # the count is not known yet
        finally:
            reading.reset(token)
        assert at_home(key, 6)


class TestGrowRefusals:
    async def test_fewer_partitions_than_the_topics_have(self) -> None:
        """Kafka cannot shrink a topic: a smaller count is a configuration error naming the topic."""
        broker = FakeBroker()
        await ensure_topics(Config(), clients=FakeClients(broker))
        with pytest.raises(ConfigError, match=r"--partitions 2: toolgate\.requests already has 3 partitions"):
            await grow_topics(Config(), 2, clients=FakeClients(broker))

    async def test_a_missing_topic(self) -> None:
        """A missing co-partitioned topic names topics ensure."""
        with pytest.raises(ConfigError, match="does not exist"):
            await grow_topics(Config(), 6, clients=FakeClients(FakeBroker()))

    async def test_a_group_with_members_is_refused(self, gate: Gate) -> None:
        """While a worker is a member of the group nothing is grown."""
        world = one_partition(gate)
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        await until(worker.ready)
        with pytest.raises(GrowRefused, match="has 1 members"):
            await grow_topics(Config(), 6, clients=world.clients)
        assert len(world.broker.logs[Config().topics.intake]) == 1
        worker.request_stop()
        await task


class _ShownLate:
    """A consumer whose group offset for a partition is shown only after a few asks, as the
    coordinator shows a transaction's offset once its markers are written."""

    def __init__(self, answers: list[int | None]) -> None:
        self.answers = answers
        self.asked = 0

    async def committed(self, partition: TopicPartition) -> int | None:
        self.asked += 1
        return self.answers[min(self.asked, len(self.answers)) - 1]


class TestGrowDrainCheck:
    async def test_an_offset_shown_late_counts_as_decided(self) -> None:
        """A record found past a stale group offset is decided once the offset moves past it."""
        consumer = _ShownLate([None, 0, 7])
        ticks = iter(range(100))
        settled = await _offset_settled_past(
            consumer,  # type: ignore[arg-type]
            TopicPartition("toolgate.intake", 2),
            offset=0,
            deadline=30.0,
            clock=lambda: float(next(ticks)) / 10,
        )
        assert settled
        assert consumer.asked == 3

    async def test_an_offset_that_never_moves_refuses(self) -> None:
        """An offset still short of the record when the settle time is over: not decided."""
        consumer = _ShownLate([4])
        ticks = iter(range(100))
        settled = await _offset_settled_past(
            consumer,  # type: ignore[arg-type]
            TopicPartition("toolgate.intake", 0),
            offset=4,
            deadline=30.0,
            clock=lambda: float(next(ticks)) * 2,
        )
        assert not settled
        assert consumer.asked == 2
