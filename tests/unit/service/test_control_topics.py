"""One record on a control topic (members, contracts) cannot stop the group: each is decoded
strictly at the edge, refused with a log line that names where it is, and what a hostile or
buggy writer claims counts only when the source verified it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from toolgate._errors import ConfigError
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._published import PublishedVersion, canonical_bytes, sign_marker, sign_version
from toolgate.gate._signing import Key, Keyring
from toolgate.operations._publish_topic import publish_to_topic, read_published
from toolgate.service._contract_source import SET_KEY, ContractSource, TopicContractSource, version_key
from toolgate.service._control import Refusals
from toolgate.service._members import MemberRecord, hint, live_members, read_members

from tests.unit.builders import CONTRACTS, NOW, message, review_value
from tests.unit.service.test_contracts_catch_up import folder_worker
from tests.unit.service.test_contracts_topic import versions
from tests.unit.worker_kit import CONFIG, T, World, rid

DIGEST = "a" * 64
OTHER = "b" * 64


def member(name: str, **changes: Any) -> dict[str, Any]:
    """A members-topic record as JSON, as a worker writes it (``changes`` replace fields)."""
    record: dict[str, Any] = {
        "group": CONFIG.group_id,
        "member": name,
        "generation": 0,
        "digest": DIGEST,
        "label": f"g0-{DIGEST[:12]}",
        "tools": ["review_status"],
        "at": NOW.isoformat(),
        "refresh_seconds": 10,
    }
    record.update(changes)
    return record


def put_member(world: World, name: str, **changes: Any) -> None:
    world.broker.append(T.members, json.dumps(member(name, **changes)).encode(), key=name.encode())


def refused_lines(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == message]


class Ticks:
    """A monotonic clock that moves by ``step`` at each reading (and by the seconds slept)."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class TestMembersDecodedStrictly:
    """A members record that does not decode into bounded, timezone-aware values is one log line
    naming topic, partition, offset and field, and is ignored."""

    @pytest.mark.parametrize(
        ("changes", "field"),
        [
            ({"at": "2030-01-01T00:00:00"}, "$.at"),
            ({"refresh_seconds": 1e15}, "$.refresh_seconds"),
            ({"generation": 10**19}, "$.generation"),
            ({"digest": "not hex"}, "$.digest"),
            ({"member": "someone-else"}, "not of its key"),
            ({"extra": "x"} | {"tools": "review_status"}, "$.tools"),
        ],
    )
    async def test_a_bad_record_is_said_and_left_out(
        self, changes: dict[str, Any], field: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """read_members (contracts status, replay --apply) keeps the good record and names the bad one."""
        caplog.set_level(logging.WARNING, logger="toolgate.members")
        world = World()
        put_member(world, "good")
        put_member(world, "bad", **changes)
        records = await read_members(CONFIG, world.clients, wait_seconds=5)
        assert [m.member for m in live_members(records, CONFIG.group_id, NOW)] == ["good"]
        (line,) = refused_lines(caplog, "members topic record refused")
        assert (line.topic, line.partition, line.offset, line.key) == (T.members, 0, 1, "bad")  # type: ignore[attr-defined]
        assert field in line.reason  # type: ignore[attr-defined]

    def test_a_time_far_ahead_is_not_live(self) -> None:
        """A record stamped a year ahead is a clock gone wrong, not a member live until then."""
        ahead = msgspec.json.decode(
            json.dumps(member("w", at=(NOW + timedelta(days=365)).isoformat())), type=MemberRecord
        )
        assert not ahead.live(NOW)
        assert ahead.live(ahead.at)

    async def test_a_worker_reading_a_naive_time_keeps_deciding(self, tmp_path: Path, gate: Gate) -> None:
        """A worker whose members topic holds "at" without a UTC offset decides its results."""
        world = World()
        put_member(world, "w", at="2030-01-01T00:00:00")
        root = tmp_path / "contracts"
        shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md"))
        worker = folder_worker(world, root, gate.keyring)
        world.request(1)
        world.result(1)
        stats = await asyncio.wait_for(worker.run(), 30)
        assert (stats.decided, stats.accepted) == (1, 1)


class TestOnlyVerifiedGenerationsCount:
    """A member claiming a generation the source never published, or another set under this
    worker's generation, does not make this worker answer CONTRACTS_BEHIND."""

    def _record(self, name: str, generation: int, digest: str, tools: list[str]) -> MemberRecord:
        return msgspec.json.decode(
            json.dumps(member(name, generation=generation, digest=digest, tools=tools)), type=MemberRecord
        )

    def test_the_hint_leaves_out_what_nobody_published(self, contracts: ContractSet) -> None:
        """Above the published generation, the same generation with another digest, or an older
        generation: no hint; a newer published one: a hint naming its tools."""
        mine = ContractSet(list(contracts), generation=3)
        absurd = self._record("absurd", 99_999_999, OTHER, ["x"])
        twin = self._record("twin", 3, OTHER, ["y"])
        older = self._record("older", 2, OTHER, ["z"])
        assert hint([absurd, twin, older], mine, "me", published=4) is None
        newer = self._record("newer", 4, OTHER, ["w"])
        got = hint([absurd, twin, older, newer], mine, "me", published=4)
        assert got is not None
        assert (got.generation, got.tools) == (4, frozenset({"w"}))

    async def test_an_absurd_member_makes_no_tool_behind(self, tmp_path: Path, gate: Gate) -> None:
        """A folder worker (it publishes no generation) lacking review_status, beside a member
        claiming generation 99999999 that serves it: UNKNOWN_TOOL at once, not CONTRACTS_BEHIND."""
        world = World()
        put_member(world, "absurd", generation=99_999_999, digest=OTHER)
        root = tmp_path / "contracts"
        shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md", "review_status"))
        worker = folder_worker(world, root, gate.keyring, contracts_catch_up_seconds=300)
        world.request(1)
        world.result(1)
        stats = await asyncio.wait_for(worker.run(), 30)
        assert stats.by_code == {"UNKNOWN_TOOL": 1}


class TestRefusalsLoggedByTime:
    """Each refused record leaves a trace: lines are rate-limited per key and reason by time,
    not silenced for good after the first."""

    def test_a_second_refusal_is_said_after_the_interval(self, caplog: pytest.LogCaptureFixture) -> None:
        """Within the interval a refusal is counted; after it, one line says it and the count left out."""
        caplog.set_level(logging.WARNING, logger="test.refusals")
        clock = Ticks()
        refusals = Refusals(logging.getLogger("test.refusals"), "t", "refused", clock=clock, interval_s=60)
        for at in (0, 10, 20, 61):
            clock.now = at
            refusals.refuse(b"set", "bad signature")
        lines = refused_lines(caplog, "refused")
        assert len(lines) == 2
        assert lines[1].refused_since_last_line == 2  # type: ignore[attr-defined]
        assert refusals.count == 4

    async def test_the_contracts_reader_says_a_second_forged_record(
        self, tmp_path: Path, keyring: Keyring, key: Key, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Two forged records of one key, a minute apart: two log lines."""
        caplog.set_level(logging.WARNING, logger="toolgate.contracts")
        broker, clients = topic_world()
        await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients)
        clock = Ticks()
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets", monotonic=clock)
        await source.start(5)
        try:
            forged = forged_version(key)
            for at in (0.0, 120.0):
                clock.now = at
                broker.append(TOPIC, msgspec.json.encode(forged), key=b"version/review_status/1")
                await source.refresh(5)
            assert len(refused_lines(caplog, "contracts topic record refused")) == 2
        finally:
            await source.stop()


CONTRACTS_CONFIG = CONFIG
TOPIC = CONFIG.topics.contracts


def topic_world() -> tuple[Any, Any]:
    world = World()
    return world.broker, world.clients


def forged_version(key: Key) -> PublishedVersion:
    """review_status v1 with its bind rule dropped and the digest recomputed (the old signature)."""
    signed = next(pv for pv in versions(key) if pv.key == "review_status/1")
    loose = signed.files["contract.yaml"].replace("  - kind: bind", "  - kind: bind_dropped")
    files = {**signed.files, "contract.yaml": loose}
    digest = hashlib.sha256(canonical_bytes(signed.tool, signed.version, files)).hexdigest()
    return msgspec.structs.replace(signed, files=files, digest=digest)


class TestNewestVerifiedSet:
    """A reader starts on the newest set it can verify completely, whatever was written after it."""

    async def test_an_old_version_record_written_again_leaves_the_newest_set(
        self, tmp_path: Path, keyring: Keyring, key: Key
    ) -> None:
        """Generation 2 changes a version; generation 1's record of it written again afterwards, and
        a hand-written set record: a restarted reader still loads generation 2."""
        broker, clients = topic_world()
        signed = versions(key)
        await publish_to_topic(CONTRACTS_CONFIG, signed, key, clients=clients)
        first = next(pv for pv in signed if pv.key == "review_status/1")
        files = {**first.files, "README.txt": "generation 2\n"}
        second = sign_version(first.tool, first.version, files, key)
        changed = [second if pv.key == first.key else pv for pv in signed]
        assert (await publish_to_topic(CONTRACTS_CONFIG, changed, key, clients=clients)).generation == 2
        broker.append(TOPIC, msgspec.json.encode(first), key=version_key(first.tool, first.version))
        broker.append(TOPIC, b'{"generation": 7, "versions": {}}', key=SET_KEY)
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets")
        await source.start(5)
        try:
            assert source.load().generation == 2
            assert "set" in source.refused
        finally:
            await source.stop()

    async def test_nothing_verifiable_names_the_refused_records(
        self, tmp_path: Path, keyring: Keyring, key: Key
    ) -> None:
        """A topic holding only hand-written records: the start-up error names each refused key."""
        broker, clients = topic_world()
        broker.append(TOPIC, msgspec.json.encode(forged_version(key)), key=b"version/review_status/1")
        broker.append(TOPIC, b'{"generation": "2"}', key=SET_KEY)
        source = TopicContractSource(TOPIC, clients, keyring, tmp_path / "sets")
        with pytest.raises(
            ConfigError, match=r"records refused: set: .*version/review_status/1: .*bad signature"
        ):
            await source.start(5)
        await source.stop()


class TestPublishRewritesWhatIsNotItsOwn:
    """publish --to topic compares whole records, counts only verified markers and never writes a
    generation the group's workers would take for an older one."""

    async def test_a_tampered_record_with_its_digest_kept_is_written_again(self, key: Key) -> None:
        """A record whose files were changed by hand but whose digest field was kept is not 'unchanged'."""
        broker, clients = topic_world()
        signed = versions(key)
        await publish_to_topic(CONTRACTS_CONFIG, signed, key, clients=clients)
        first = next(pv for pv in signed if pv.key == "review_status/1")
        tampered = msgspec.structs.replace(first, files={**first.files, "README.txt": "by hand\n"})
        broker.append(TOPIC, msgspec.json.encode(tampered), key=version_key(first.tool, first.version))
        done = await publish_to_topic(CONTRACTS_CONFIG, signed, key, clients=clients)
        assert done.written == ["review_status/1"]
        state = await read_published(CONTRACTS_CONFIG, clients, Keyring(publishers={key.key_id: key}))
        assert state.versions["review_status/1"] == first

    async def test_forged_markers_do_not_count(self, key: Key, tmp_path: Path) -> None:
        """Markers of generations 4 and 5 signed by another key: the next publish writes 2, not 6."""
        broker, clients = topic_world()
        await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients)
        mallory = tmp_path / "mallory.toml"
        mallory.write_text(f'[publishers.sample-publisher]\nprivate_key = "{OTHER_PRIVATE}"\n')
        mallory.chmod(0o600)
        other = Keyring.load(mallory).publisher("sample-publisher")
        assert other is not None
        for generation in (4, 5):
            forged = sign_marker(generation, {}, other)
            broker.append(TOPIC, msgspec.json.encode(forged), key=SET_KEY)
        done = await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients)
        assert done.generation == 2

    async def test_the_generation_goes_above_the_live_members(self, key: Key) -> None:
        """Compaction lost the marker of generation 2 the workers run: publish writes 3 and refuses
        --generation 2."""
        broker, clients = topic_world()
        await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients)
        broker.append(TOPIC, b"hand-written", key=SET_KEY)
        world_members = {"w1": 2, "w2": 2}
        for name, generation in world_members.items():
            record = member(name, generation=generation, at=_now_iso(), publishers=["sample-publisher"])
            broker.append(T.members, json.dumps(record).encode(), key=name.encode())
        with pytest.raises(
            ConfigError, match=r"--generation 2: member w\d .* generation 2 .* --generation 3"
        ):
            await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients, generation=2)
        done = await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients)
        assert (done.generation, done.members) == (3, 2)

    async def test_a_key_the_members_do_not_trust_fails_before_writing(self, key: Key) -> None:
        """Live members whose keyrings lack the publisher: an error naming them, and nothing written."""
        broker, clients = topic_world()
        record = member("w1", at=_now_iso(), publishers=["contracts-team"])
        broker.append(T.members, json.dumps(record).encode(), key=b"w1")
        before = len(list(broker.committed_values(TOPIC)))
        with pytest.raises(ConfigError, match=r"w1 \(contracts-team\).*\[publishers\.sample-publisher\]"):
            await publish_to_topic(CONTRACTS_CONFIG, versions(key), key, clients=clients)
        assert len(list(broker.committed_values(TOPIC))) == before


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


OTHER_PRIVATE = "WJsp0uZd5BBD71OEtr017uIfGJdt9MElRow8lK0Y7R8="


class _Published(ContractSource):
    """A source that has published generation ``published`` but never completes it here."""

    def __init__(self, root: Path, published: int, clock: Ticks) -> None:
        super().__init__([root])
        self.published = published
        self.refreshes = 0
        self.clock = clock

    async def refresh(self, wait_seconds: float) -> bool:
        """Each refresh takes 0.1 s of the worker's monotonic clock."""
        self.refreshes += 1
        self.clock.now += 0.1
        return False

    def published_generation(self) -> int | None:
        return self.published


def stamped(world: World, i: int, generation: str) -> None:
    """A result of request ``i`` whose issuer says it saw contract set ``generation``."""
    world.request(i)
    value = dict(review_value(), request_id=rid(i))
    msg = message(value, key=rid(i).encode(), tg_request_id=rid(i), tg_contract_generation=generation)
    world.broker.append(T.intake, msg.value, key=msg.key, headers=msg.headers)


class TestGenerationStampsDoNotStall:
    """A tg-contract-generation the source never published is answered at once, and the wait for a
    published one that does not load is paid once, not per batch."""

    async def test_a_generation_nobody_published_is_answered_at_once(
        self, tmp_path: Path, gate: Gate
    ) -> None:
        """Results stamped 99999999 (a bound of 300 s) are CONTRACTS_BEHIND at once; the valid result
        after them is accepted."""
        world = World()
        root = tmp_path / "contracts"
        shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md"))
        worker = folder_worker(world, root, gate.keyring, contracts_catch_up_seconds=300, batch_size=2)
        for i in range(6):
            stamped(world, i, "99999999")
        world.request(6)
        world.result(6)
        stats = await asyncio.wait_for(worker.run(), 30)
        assert stats.by_code == {"CONTRACTS_BEHIND": 6}
        assert stats.accepted == 1

    async def test_the_wait_for_a_published_generation_is_shared(self, tmp_path: Path, gate: Gate) -> None:
        """Twelve results naming generation 2, published but not loadable, in batches of two over
        three partitions: the waits take one bound of the worker's clock in all, not one per batch."""
        world = World()
        root = tmp_path / "contracts"
        shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.md"))
        clock = Ticks()
        source = _Published(root, 2, clock)
        worker = folder_worker(
            world,
            root,
            gate.keyring,
            contract_source=source,
            batch_size=2,
            contracts_catch_up_seconds=2.0,
            monotonic=clock,
        )
        for i in range(12):
            stamped(world, i, "2")
        stats = await asyncio.wait_for(worker.run(), 30)
        assert stats.by_code == {"CONTRACTS_BEHIND": 12}
        assert worker.metrics.contract_catch_ups.labels("behind")._value.get() >= 6
        assert clock.now < 2 * 2.0
