"""The group's view: what each live worker decides with.

See docs/design.md, One contract set for the group.

Each worker writes a :class:`MemberRecord` to the compacted members topic
(TOOLGATE_TOPIC_MEMBERS), keyed by its member id, when it loads a contract set and every
``members_refresh_seconds``; it writes a tombstone when it stops. Every worker (and
``toolgate contracts status``, ``replay --apply``, the proxy) reads the topic: a member not
heard from for three refresh periods is no longer live. A member of the same group that decides
with another set than this one is a disagreement: said in
``toolgate_contracts_group_disagreement``, in a log line (a warning only once it has lasted longer
than a rollout takes, :data:`ROLLOUT_SECONDS`) and to the gate (:class:`~toolgate.gate._gate.GroupHint`),
which then answers CONTRACTS_BEHIND instead of a final UNKNOWN_* for what the others serve.

Any client with write access can put a record on the topic, and compaction keeps it: every
record is decoded strictly (:class:`MemberRecord`: bounded numbers and strings, a time with
its UTC offset), and one that does not decode is one log line (topic, partition, offset, the
field) and is ignored. A member counts for the gate's hint only with a generation its source
verified (:func:`hint`'s ``published``): a member claiming an absurd generation, or decoding
another set under the generation this worker loaded, makes nobody answer CONTRACTS_BEHIND.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Annotated, Final

import msgspec

from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import GroupHint
from toolgate.service._control import MAX_GENERATION, Refusals, decode_control
from toolgate.service._kafka import KafkaClients, Producer, partitions_of
from toolgate.service._store import TopicReader, restore_partitions

log = logging.getLogger("toolgate.members")

LIVE_PERIODS = 3  # a member not heard from for this many refresh periods is gone
# A rollout moves the members from one set to the next within this: a split that lasts longer
# is a misconfiguration, logged as a warning (the ToolgateContractSetsDisagree alert's `for`).
ROLLOUT_SECONDS = 300.0
MAX_MEMBERS: Final = 10_000  # records held; the oldest go first beyond it

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class MemberRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's contract set, as the members topic holds it.

    Decoded strictly but not closed: a newer worker's record with a field this one does not
    know stays readable during a rollout. ``refused`` is what the member's source refuses of
    the newest set published there (empty: nothing), so ``contracts status`` can say why a
    member stays on an older set; ``publishers`` the key ids of its keyring's
    ``[publishers]`` (None: not said), so ``contracts publish`` refuses a key they do not trust.
    """

    group: _Name
    member: _Name
    generation: Annotated[int, msgspec.Meta(ge=0, le=MAX_GENERATION)]
    digest: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    label: Annotated[str, msgspec.Meta(max_length=100)]
    tools: Annotated[list[_Name], msgspec.Meta(max_length=10_000)]
    at: Annotated[datetime, msgspec.Meta(tz=True)]
    refresh_seconds: Annotated[float, msgspec.Meta(ge=1, le=3600)]
    refused: Annotated[str, msgspec.Meta(max_length=500)] = ""
    publishers: Annotated[list[_Name], msgspec.Meta(max_length=1000)] | None = None

    def live(self, now: datetime) -> bool:
        """Heard from within three refresh periods of ``now`` (a time as far ahead of ``now``
        is a clock gone wrong, not a member heard from in the future)."""
        return abs(now - self.at) <= timedelta(seconds=LIVE_PERIODS * self.refresh_seconds)


_decoder = msgspec.json.Decoder(MemberRecord)


def member_id(config: Config) -> str:
    """This process's member id: the static group instance id, else host, pid and a nonce."""
    if config.group_instance_id:
        return config.group_instance_id
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def live_members(records: Iterable[MemberRecord], group: str, now: datetime) -> list[MemberRecord]:
    """The live members of ``group``, by member id."""
    return sorted((r for r in records if r.group == group and r.live(now)), key=lambda r: r.member)


def disagreeing(members: list[MemberRecord]) -> bool:
    """Whether the members decide with more than one set."""
    return len({m.digest for m in members}) > 1


def counted(member: MemberRecord, mine: ContractSet, published: int | None) -> bool:
    """Whether a member's set may make this one behind.

    ``published`` is the highest generation this worker's source has verified (None: not
    known, every member counts). A member counts when its generation is at most that, and,
    for an ordered set (generation 1 or more), when it is newer than this worker's: an older
    member is behind this one, and one claiming this worker's generation with another digest
    decides with a set nobody published under it.
    """
    if published is not None and member.generation > published:
        return False
    if mine.generation >= 1 and member.generation >= 1:
        return member.generation > mine.generation
    return True


def hint(
    members: Iterable[MemberRecord], mine: ContractSet, me: str, published: int | None = None
) -> GroupHint | None:
    """What the gate needs from the others' sets (None: no other member that counts,
    :func:`counted`)."""
    others = [m for m in members if m.member != me and counted(m, mine, published)]
    if not others:
        return None
    differing = [m for m in others if m.digest != mine.digest]
    return GroupHint(
        generation=max(m.generation for m in others),
        tools=frozenset(t for m in differing for t in m.tools),
        differs=bool(differing),
    )


class GroupView:
    """This worker's record on the members topic, and every member's, tailed.

    Args:
        config: the group id, the members topic and the refresh period.
        clients: builds the reader's consumers and the producer.
        me: this worker's member id.
        clock: the injected UTC clock (liveness and the records' ``at``).
        on_change: called after each record read (the worker recomputes its view).
        published: the highest generation this member's source verified (None: not known);
            members claiming more do not count for the gate's hint.
        monotonic: the refusal log's clock.
    """

    def __init__(
        self,
        config: Config,
        clients: KafkaClients,
        me: str,
        clock: Callable[[], datetime],
        on_change: Callable[[], None] = lambda: None,
        published: Callable[[], int | None] = lambda: None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.config = config
        self.topic = config.topics.members
        self.me = me
        self.clock = clock
        self.published = published
        self.records: dict[str, MemberRecord] = {}
        self._clients = clients
        self._on_change = on_change
        self.refusals = (
            Refusals(log, self.topic, "members topic record refused")
            if monotonic is None
            else Refusals(log, self.topic, "members topic record refused", clock=monotonic)
        )
        self._reader = TopicReader(self.topic, self._apply, clients)
        self._producer: Producer | None = None
        self._split_since: datetime | None = None  # when the live members began to disagree
        self._warned = False  # the split outlasted a rollout and was logged as a warning

    @classmethod
    async def open(
        cls,
        config: Config,
        clients: KafkaClients,
        me: str,
        clock: Callable[[], datetime],
        on_change: Callable[[], None] = lambda: None,
        published: Callable[[], int | None] = lambda: None,
    ) -> GroupView | None:
        """The view, started; None (one warning) when the members topic is missing."""
        if not await partitions_of(clients, config.topics.members):
            log.warning(
                "members topic missing: this worker cannot see what the rest of its group decides with",
                extra={"topic": config.topics.members, "hint": "run: toolgate topics ensure"},
            )
            return None
        view = cls(config, clients, me, clock, on_change, published)
        await view._reader.start()
        producer = clients.producer(acks="all", enable_idempotence=True, linger_ms=0)
        await producer.start()
        view._producer = producer
        await view._reader.catch_up(10.0)
        return view

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if apply_member(self.records, key, value, self.refusals):
            self._on_change()

    def live(self) -> list[MemberRecord]:
        """The live members of this worker's group."""
        return live_members(self.records.values(), self.config.group_id, self.clock())

    async def publish(
        self, contracts: ContractSet, refused: str = "", publishers: list[str] | None = None
    ) -> None:
        """Say what this worker decides with now, what its source refuses of a newer set and
        the publishers its keyring trusts."""
        if self._producer is None:
            return
        record = MemberRecord(
            group=self.config.group_id,
            member=self.me,
            generation=contracts.generation,
            digest=contracts.digest,
            label=contracts.label,
            tools=contracts.tools,
            at=self.clock(),
            refresh_seconds=self.config.members_refresh_seconds,
            refused=refused[:500],
            publishers=None if publishers is None else sorted(publishers)[:1000],
        )
        await self._producer.send(self.topic, msgspec.json.encode(record), key=self.me.encode())

    def check(self, mine: ContractSet) -> tuple[GroupHint | None, bool]:
        """The gate's hint and whether the live members disagree.

        Members disagree while a rollout moves them from one set to the next: the start and the
        end of a split are info lines. A split that lasts past :data:`ROLLOUT_SECONDS` (by the
        injected clock, checked at each record read and each refresh) is not a rollout: one
        warning names every member's set."""
        members = self.live()
        split = disagreeing(members)
        now = self.clock()
        sets = {m.member: m.label for m in members}
        if split and self._split_since is None:
            self._split_since = now
            log.info(
                "the workers of this group disagree on the contract set (as while a rollout moves them); "
                "a warning follows if they still do after %g s",
                ROLLOUT_SECONDS,
                extra={"group": self.config.group_id, "members": sets, "this_member": self.me},
            )
        elif not split and self._split_since is not None:
            self._split_since, self._warned = None, False
            log.info(
                "the workers of this group decide with one contract set again", extra={"set": mine.label}
            )
        since = self._split_since
        if since is not None and not self._warned and now - since >= timedelta(seconds=ROLLOUT_SECONDS):
            self._warned = True
            log.warning(
                "the workers of this group decide with different contract sets",
                extra={
                    "group": self.config.group_id,
                    "members": sets,
                    "this_member": self.me,
                    "for_seconds": round((now - since).total_seconds()),
                    "hint": "longer than a rollout takes: give every worker of a group the same contracts "
                    "(docs/operations.md, Contract sets)",
                },
            )
        return hint(members, mine, self.me, self.published()), split

    async def stop(self) -> None:
        """Say this worker is gone (a tombstone), stop reading."""
        if self._producer is not None:
            try:
                await self._producer.send(self.topic, None, key=self.me.encode())
                await self._producer.flush()
            finally:
                await self._producer.stop()
                self._producer = None
        await self._reader.stop()


async def read_members(
    config: Config, clients: KafkaClients, wait_seconds: float = 30.0
) -> list[MemberRecord]:
    """Every record of the members topic, read to its end now (tombstoned members left out).

    Raises:
        ConfigError: the topic is missing.
    """
    from toolgate._errors import BrokerError, ConfigError

    topic = config.topics.members
    if not await partitions_of(clients, topic):
        raise ConfigError(f"topic {topic!r} does not exist (run: toolgate topics ensure)")
    records: dict[str, MemberRecord] = {}
    refusals = Refusals(log, topic, "members topic record refused")

    def apply(key: bytes | None, value: bytes | None) -> None:
        apply_member(records, key, value, refusals)

    if not await restore_partitions(clients, topic, {0}, apply, wait_seconds):
        raise BrokerError(f"topic {topic!r}: not read to its end within {wait_seconds} s", retriable=True)
    return list(records.values())


def apply_member(
    records: dict[str, MemberRecord], key: bytes | None, value: bytes | None, refusals: Refusals
) -> bool:
    """One members-topic record into ``records`` (by member id); False when it was refused
    (one log line) and changed nothing."""
    if key is None:
        refusals.refuse(None, "a record without a key")
        return False
    name = key.decode("utf-8", "replace")
    if value is None:
        records.pop(name, None)
        return True
    record = decode_control(_decoder, value, key, refusals)
    if record is None:
        return False
    if record.member != name:
        refusals.refuse(key, f"the record is of member {record.member[:100]!r}, not of its key")
        return False
    records[name] = record
    if len(records) > MAX_MEMBERS:  # bounded: the oldest records go first
        for stale in sorted(records, key=lambda k: records[k].at)[: MAX_MEMBERS // 10]:
            del records[stale]
    return True
