"""One simulated schedule: workers on the in-memory Kafka, faults, and the invariants.

A schedule is a seed. Its traffic (requests, results, tombstones, late, duplicated and
reordered records) comes from its seed number; everything else comes from the schedule's
:class:`~tests.simulation.loop.Choices`: the order of ready callbacks, the latency of
every client call, and each fault at each call (producer fenced by a zombie's
successor, transaction aborted by the broker, a commit timing out done or not done,
fetch, offset and metadata errors, rebalances at any call, slow and failing restores,
a crash at any call followed by a restart, a paused worker resumed later, duplicate
deliveries of intake records).

The invariants are checked as the run goes (at every commit and before every decision)
and at its end; the first one broken ends the schedule with :class:`Violation`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import json
import logging
import random
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn
from unittest import mock

import msgspec
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, RequestTimedOutError
from toolgate._config import Config
from toolgate.gate._batch import Batch
from toolgate.gate._gate import Gate
from toolgate.gate._records import CONTRACT_SET_HEADER
from toolgate.service import _service
from toolgate.service._contract_source import ContractSource
from toolgate.service._kafka import Producer, partition_of
from toolgate.service._metrics import Metrics
from toolgate.service._partition import OpenTransaction, OwnedPartition
from toolgate.service._service import Worker, WorkerOptions
from toolgate.service._store import TopicReader, reading

from tests.fakes.kafka import FakeBroker, FakeClients, FakeConsumer, FakeProducer
from tests.simulation.contracts import (
    ADAPTER_VERSION,
    GENERATION,
    SET_KEY,
    VERSION_KEY,
    SimContractSource,
    contracts_wait,
    marker_record,
    version_record,
)
from tests.simulation.loop import Choices, SimLoop, Stuck
from tests.simulation.oracle import Oracle, catching_up, failed_wait, wait_failures
from tests.unit.builders import NOW, message, review_request, review_value

CONFIG = Config()
T = CONFIG.topics
PARTITIONS = 3
NODES = 2  # workers running at once
GROUP = CONFIG.group_id


class Violation(BaseException):
    """An invariant does not hold (a BaseException: no ``except Exception`` in the worker
    takes it for a client error)."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


class Crashed(BaseException):
    """Raised into every call of a killed node: it does nothing more."""

    expected = True


# --- faults ---------------------------------------------------------------------------

# Per client call: (fault, probability). Each is drawn at every call of its operation.
FAULTS: dict[str, list[tuple[str, float]]] = {
    "init": [("init_error", 0.04)],
    "send": [("send_error", 0.02)],
    "send_offsets": [("send_offsets_error", 0.02)],
    "commit": [
        ("commit_timeout_not_done", 0.03),
        ("commit_timeout_done", 0.03),
        ("broker_abort", 0.02),
    ],
    "fetch": [("fetch_error", 0.005), ("redeliver", 0.03), ("rewind_queued", 0.1)],
    "read": [("read_error", 0.01)],
    "committed": [("offsets_error", 0.02)],
    "end_offsets": [("end_offsets_error", 0.02)],
}
P_LATENCY = 0.3  # a call that takes virtual time (up to LATENCY_MS)
LATENCY_MS = 20
P_REBALANCE = 0.004  # at any call of a live node
P_CRASH = 0.0015
P_PAUSE = 0.0015
MAX_CRASHES = 2
MAX_PAUSES = 1
FAULT_PHASE_S = 4.0  # faults are drawn during this much virtual time; then the world heals
SETTLE_S = 120.0  # after healing, every record must be decided within this much virtual time


P_OUTAGE = 0.0002  # the broker refuses every call for minutes, then serves (once at most)
OUTAGE_S = (20.0, 180.0)  # how long an outage lasts, virtual seconds
REQUEST_TIMEOUT_S = 5.0  # a call the refusing broker fails takes this long to fail
TRANSACTION_TIMEOUT_S = 60.0  # an outage longer than this aborts the open transactions
RESUME_S = 30.0  # after healing, while records are undecided, some decision comes this often
# Calls that raise when the broker refuses them; the others (fetches, positions, seeks,
# metadata) wait until it serves again, as the client library's do.
REFUSED = {"init", "begin", "send", "send_offsets", "commit", "abort", "committed", "end_offsets", "read"}
CLOSING = {"producer_stop", "consumer_stop"}  # closing a client needs no broker: goes through

_NODE = [("crash", P_CRASH), ("pause", P_PAUSE), ("rebalance", P_REBALANCE), ("outage", P_OUTAGE)]
# Calls a profile may aim at apart from their operation: ``catch_up`` is the end-offsets
# lookup of a request catch-up (a result waiting for its request), drawn as that operation's
# faults unless the profile names it.
_AS = {"catch_up": "end_offsets", "contracts": "end_offsets", "contracts_read": "read"}
# A contracts source's calls (``rollout``): its catch-up's end-offsets lookup and its polls.
_CONTRACTS_AIMS = {"end_offsets": "contracts", "read": "contracts_read"}
CONTRACTS_CATCH_UP_S = 1.0  # the workers' bound on a contracts catch-up
CONTRACTS_FAILING_S = 5.0  # a failed call of a contracts source: it may lag this long (its backoff)
# The client whose call the hook is deciding (the broker's injected failures are noted by it).
calling: contextvars.ContextVar[Any] = contextvars.ContextVar("calling", default=None)

Events = tuple[tuple[str, ...], tuple[float, ...]]


@dataclass(frozen=True)
class Profile:
    """What a schedule aims at. Most schedules draw every fault at a low rate anywhere
    (``mixed``); the others reach rare states on purpose, raising the faults at one
    boundary of the exactly-once scheme (targeted fault injection):

    - ``take-over``: rebalances, pauses and crashes at the commit, at the offsets sent to
      the transaction and at the producer's start (a take-over racing a commit), commits
      timing out done or not;
    - ``restore``: slow and failing restores, failing reads and end offsets, rebalances
      at any call (a partition moving while its state is read);
    - ``requests-race``: each result written just after its request record, most
      requests retried (a second attempt written just before its result): the request
      reader's catch-up and the accepted ledger's attempts at their boundary; a wait's
      end-offsets lookup and sends fail more often (a failed wait must raise; a batch
      decided again after an abort must write its state again);
    - ``outage``: the broker refuses every call for 20 s to 3 min, then serves; it starts
      at a commit, a send, or a result's wait for its request (``catch_up``);
    - ``rollout``: the faults of ``mixed``, and a contract version published to the
      contracts topic while results for it flow: the topic's reads lag, fail or are cut
      off, and the workers' contracts catch-up meets them (tests/simulation/contracts.py);
    - ``retry``: what follows a failure, with the retries meeting a take-over or a revoke:
      half the producer starts fail (a take-over retried by the partition's task), a node
      pauses at its commit with its transaction open and resumes just as such a retried
      take-over starts (not at the assignment's), and a failed transaction's backoff ends
      just as the group revokes the partition (``revoked_at_backoff``).
    """

    name: str
    boost: dict[str, dict[str, float]] = field(default_factory=dict)  # op -> fault -> probability
    traffic: str = "mixed"
    outage: bool = False
    slow_restore: float = 0.15
    failing_restore: float = 0.1
    # A node paused with a transaction open resumes, with this probability, just as another
    # node starts a producer with the same transactional id (a take-over): the zombie's
    # commit races its successor's fence.
    wake_zombie: float = 0.0
    # The same at a take-over the partition's own task retries (after the assignment's take-over
    # failed, or after an abort), with ``wake_zombie`` at the assignment's; None: ``wake_zombie``
    # at both.
    wake_zombie_retried: float | None = None
    # A partition's abort backs off, with this probability, until the group revokes the
    # partition: the backoff ends just as the revoke has taken it from the worker, before its
    # release began (what the abort then does with its failed producer decides).
    revoked_at_backoff: float = 0.0
    # operation -> (probability, most milliseconds) of its latency, instead of the default
    latency: dict[str, tuple[float, int]] = field(default_factory=dict)
    # A contract version is published while results for it are written; when the set marker
    # is written, the contracts topic's reads stall for a while (lag) or until healed (cut).
    publish: bool = False
    contracts_lag: float = 0.0
    contracts_cut: float = 0.0

    def events(self) -> dict[str, Events]:
        """operation -> (event names, their probabilities) drawn at each call of it."""
        out: dict[str, Events] = {}
        for op in set(FAULTS) | set(self.boost) | {""}:
            drawn = dict(_NODE + FAULTS.get(_AS.get(op, op), []))
            drawn.update(self.boost.get("*", {}))
            if op in _AS:
                drawn.update(self.boost.get(_AS[op], {}))
            drawn.update(self.boost.get(op, {}))
            out[op] = (tuple(drawn), tuple(drawn.values()))
        return out


_AT_BOUNDARY = {"rebalance": 0.08, "crash": 0.03}
TAKE_OVER = Profile(
    "take-over",
    boost={
        "*": {"pause": 0.0},  # a node pauses with its transaction open, nowhere else
        "commit": {**_AT_BOUNDARY, "pause": 0.2, "commit_timeout_done": 0.08, "broker_abort": 0.04},
        "send_offsets": {**_AT_BOUNDARY, "pause": 0.06},
        "init": {**_AT_BOUNDARY, "pause": 0.0, "init_error": 0.08},
        "committed": {"rebalance": 0.05},
    },
    wake_zombie=0.9,
)
ROLLOUT = Profile(
    "rollout",
    # The source's catch-up lookup fails (the batch is decided again later), its polls are
    # slow (a result of the new version is often fetched before the source read the marker).
    boost={"contracts": {"end_offsets_error": 0.1}},
    latency={"contracts_read": (0.9, 500)},
    publish=True,
    contracts_lag=0.5,
    contracts_cut=0.5,
)
RETRY = Profile(
    "retry",
    boost={
        "*": {"pause": 0.0},  # a node pauses with its transaction open, nowhere else
        "commit": {"pause": 0.3},
        "send": {"send_error": 0.05},
        "init": {"init_error": 0.5, "pause": 0.0},
    },
    wake_zombie=0.0,
    wake_zombie_retried=0.9,
    revoked_at_backoff=0.8,
)
PROFILES: tuple[Profile, ...] = (
    Profile("mixed"),
    TAKE_OVER,
    ROLLOUT,
    Profile(
        "restore",
        boost={
            "*": {"rebalance": 0.02},
            "read": {"read_error": 0.05},
            "end_offsets": {"end_offsets_error": 0.05},
        },
        slow_restore=0.4,
        failing_restore=0.3,
    ),
    RETRY,
    # The request reader's polls lag behind the intake fetches: a result's request is often
    # the one record its catch-up still has to read.
    Profile(
        "requests-race",
        boost={"catch_up": {"end_offsets_error": 0.3}, "send": {"send_error": 0.1}},
        traffic="races",
        latency={"read": (0.8, 100)},
    ),
    Profile(
        "outage",
        boost={"commit": {"outage": 0.3}, "send": {"outage": 0.1}, "catch_up": {"outage": 0.5}},
        outage=True,
    ),
)


# Every schedule of this process runs this profile instead (``--profile``: to measure what
# the targeted profiles add).
FORCED_PROFILE: str | None = None


def profile_of(seed: int) -> Profile:
    """The profile of a seed: consecutive seeds go round :data:`PROFILES` (seven, one of
    each)."""
    if FORCED_PROFILE is not None:
        return next(p for p in PROFILES if p.name == FORCED_PROFILE)
    return PROFILES[seed % len(PROFILES)]


@dataclass
class Node:
    """One worker process: its clients, its worker and what it applied since assignment."""

    index: int
    clients: SimClients
    worker: SimWorker
    task: asyncio.Task[Any] | None = None
    state: str = "live"  # live, paused, crashed, exited
    stale: bool = False  # paused once: its view of ownership may be old until its next revoke
    resume: asyncio.Future[None] | None = None
    applied: dict[tuple[str, int], set[int]] = field(default_factory=lambda: collections.defaultdict(set))
    # (topic, partition) -> committed offsets visible at its assignment's restore
    required: dict[int, dict[str, set[int]]] = field(default_factory=dict)
    # intake partition -> requests offsets below this it must have applied (its restore's
    # end offsets, its last catch-up that said it caught up): the oracle's floor
    must: dict[int, int] = field(default_factory=dict)
    # A partition's backoff that ends as this node's next revoke starts (``revoked_at_backoff``).
    revoking: list[asyncio.Future[None]] = field(default_factory=list)

    def group_consumer(self) -> FakeConsumer | None:
        """Its group consumer: the latest (a worker that rebuilt its clients has a new one)."""
        for consumer in reversed(self.clients.consumers):
            if isinstance(consumer, FakeConsumer) and consumer.group is not None:
                return consumer
        return None


class SimClients(FakeClients):
    """One node's clients: the hook knows whose call it is by them."""

    def __init__(self, broker: FakeBroker, node_index: int) -> None:
        super().__init__(broker)
        self.node_index = node_index


class SimWorker(Worker):
    """The worker, recording what it applies for the restore invariant."""

    node: Node
    world: World

    def _apply_request(self, key: bytes | None, value: bytes | None) -> None:
        where = reading.get()
        if where is not None:
            self.node.applied[(where[0], where[1])].add(where[2])
        super()._apply_request(key, value)

    def _apply_state(self, key: bytes | None, value: bytes | None) -> None:
        where = reading.get()
        if where is not None:
            self.node.applied[(where[0], where[1])].add(where[2])
        super()._apply_state(key, value)

    # A planted bug's request reader (tests/simulation/bugs.py); None: the worker's own.
    reader_class: type[TopicReader] | None = None
    # A planted bug's contracts topic reader; None: the worker's own.
    contracts_reader_class: type[TopicReader] | None = None

    async def _start_readers(self) -> None:
        await super()._start_readers()
        reader = self._request_reader
        assert reader is not None
        if self.reader_class is not None:
            reader.__class__ = self.reader_class
        catching_up(reader, self.world.oracle.request_ends, self._caught_up)
        source = self.contracts_catch_up.source
        if isinstance(source, SimContractSource):
            await source.start(CONTRACTS_CATCH_UP_S)
            self._watch_contracts_catch_up()

    def _watch_contracts_catch_up(self) -> None:
        """Note in the deciding task when its contracts catch-up began and ended."""
        seam = self.contracts_catch_up
        original = seam.catch_up
        loop = self.world.loop

        async def catch_up(deadline: float, *, behind: Callable[[Any], bool] | None = None) -> Any:
            began = loop.time()
            try:
                return await original(deadline, behind=behind)
            finally:
                contracts_wait.set((began, loop.time()))

        seam.catch_up = catch_up  # type: ignore[method-assign]

    def _caught_up(self, ends: dict[int, int]) -> None:
        for partition, end in ends.items():
            self.node.must[partition] = max(self.node.must.get(partition, 0), end)

    async def _restore(self, partitions: set[int]) -> None:
        for partition in partitions:
            self.node.required[partition] = self.world.visible_state(partition)
        await super()._restore(partitions)

    async def _rebuild(self) -> None:
        self.world.faults["stall_recovery"] += 1  # the stall watchdog rebuilt the clients
        await super()._rebuild()

    def _own(self, tp: TopicPartition) -> OwnedPartition:
        owned = super()._own(tp)
        assert isinstance(owned, SimPartition)
        owned.node = self.node
        return owned

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        revoking, self.node.revoking = self.node.revoking, []
        for backoff in revoking:
            _settle(backoff)  # a backoff that ends as the revoke starts (``revoked_at_backoff``)
        given_up = [p for p in (self._partitions.get(tp) for tp in partitions) if isinstance(p, SimPartition)]
        if any(owned.task is not None for owned in given_up):
            self.world.faults["revoke_in_flight"] += 1  # a state the pipelined loop must handle
        await super()._revoke(partitions)
        for owned in given_up:
            owned.released = True  # from now on it decides and commits nothing
        for tp in partitions:
            self.node.applied.pop((T.requests, tp.partition), None)
            self.node.applied.pop((T.state, tp.partition), None)
            self.node.required.pop(tp.partition, None)
            self.node.must.pop(tp.partition, None)
        self.node.stale = False


class SimPartition(OwnedPartition):
    """An owned partition that checks, before each decision, what it decides on."""

    node: Node  # the node whose worker owns it (set as it is made)
    released = False  # revoked: its release returned
    in_flight = 0  # its transactions begun and not ended

    def _decide(self, records: list[Any], keys: list[str]) -> Batch:
        self.node.worker.world.before_decision(self.node, self, records, keys)
        return super()._decide(records, keys)

    async def decide_and_commit(self, records: list[Any]) -> None:
        contracts_wait.set(None)  # this batch's contracts catch-up, if it has one
        await super().decide_and_commit(records)

    async def _start_producer(self) -> Producer:
        producer = await super()._start_producer()
        assert isinstance(producer, FakeProducer)
        self.node.worker.world.txn_owner[(self.transactional_id, producer.epoch)] = self
        return producer

    async def _commit(self, producer: Producer, batch: Batch, txn: OpenTransaction) -> None:
        self._begin_transaction()
        try:
            await super()._commit(producer, batch, txn)
        finally:
            self.in_flight -= 1

    async def write_tombstones(self) -> None:
        self._begin_transaction()
        try:
            await super().write_tombstones()
        finally:
            self.in_flight -= 1

    def _pause(self, paused: bool) -> None:
        if paused:
            self.node.worker.world.faults["queue_full"] += 1  # paused in the consumer
        super()._pause(paused)

    def _begin_transaction(self) -> None:
        self.in_flight += 1
        if self.in_flight > 1 and not self.node.stale:
            self.node.worker.world.fail(
                "one transaction at a time per partition",
                f"node {self.node.index} partition {self.tp.partition}: a transaction begins while "
                "the previous one is in flight",
            )


SimWorker.partition_class = SimPartition


class _NoHealth:
    """The health server, without a socket (the simulation does no real I/O)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.port = 0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


# --- the world ------------------------------------------------------------------------


class SimBroker(FakeBroker):
    """The fake broker, checking the committed-state invariants at every commit."""

    world: World

    def check(self, operation: str) -> None:
        try:
            super().check(operation)
        except BaseException:
            note_failure(operation)
            if getattr(calling.get(), "sim_contracts", False):
                self.world.contracts_failed()
            raise

    def _end(self, txn_id: int, state: str) -> None:
        txn = self.txns[txn_id]
        was_open = txn.state == "open"
        if was_open and state == "committed":
            self.world.before_commit(txn)
        super()._end(txn_id, state)
        if was_open and state == "committed":
            self.world.after_commit(txn_id)


@dataclass
class Traffic:
    """What the platform and the adapters write, drawn from the schedule's seed number."""

    events: list[tuple[float, str, int, int]]  # (virtual time, kind, request index, attempt)


def traffic(seed: int, requests: int = 6, kind: str = "mixed") -> Traffic:
    """Requests and their results with late, duplicated, tombstoned and reordered records;
    ``races``: each result just after its request record, most requests retried."""
    rnd = random.Random(seed ^ 0x5EED)
    events: list[tuple[float, str, int, int]] = []
    if kind == "races":
        for i in range(requests):
            t = rnd.uniform(0.0, 2.0)
            events.append((t, "request", i, 1))
            events.append((t, "result", i, 1))  # written just after its request (same instant)
            if rnd.random() < 0.3:
                events.append((t + rnd.uniform(0.0, 0.3), "result", i, 1))
            if rnd.random() < 0.7:
                second = t + rnd.uniform(0.0, 1.0)
                events.append((second, "request", i, 2))
                events.append((second, "result", i, 2))
        events.sort(key=lambda e: e[0])
        return Traffic(events)
    for i in range(requests):
        t = rnd.uniform(0.0, 2.0)
        late = rnd.random() < 0.15  # the request record after its result
        events.append((t + (rnd.uniform(0.0, 0.6) if late else 0.0), "request", i, 1))
        if rnd.random() < 0.15:
            events.append((t + rnd.uniform(0.0, 1.0), "request", i, 1))  # written twice
        first = t + rnd.uniform(0.0, 0.5)
        events.append((first, "result", i, 1))
        if rnd.random() < 0.3:  # a duplicate delivery of the same result
            events.append((first + rnd.uniform(0.0, 1.5), "result", i, 1))
        if rnd.random() < 0.15:
            events.append((first + rnd.uniform(0.0, 0.5), "bad", i, 1))
        if rnd.random() < 0.2:  # a retry: attempt 2, its result possibly before attempt 1's
            second = t + rnd.uniform(0.0, 1.0)
            events.append((second, "request", i, 2))
            events.append((second + rnd.uniform(-0.3, 0.5), "result", i, 2))
        if rnd.random() < 0.15:  # the request ends, racing its results
            end = first + rnd.uniform(-0.2, 1.0)
            # A tombstone is final (docs/design.md, The state changelog): the platform writes
            # no request record after it. A request rewritten after its tombstone is alive
            # again, and its answered attempt can be answered again.
            mine = [e for e in events if e[2] == i and e[1] == "request" and e[0] >= end]
            events = [e for e in events if e not in mine]
            events += [(max(0.0, end - 0.01), kind, n, attempt) for _, kind, n, attempt in mine]
            events.append((end, "tombstone", i, 1))
    events.sort(key=lambda e: e[0])
    return Traffic(events)


def rollout(plan: Traffic, seed: int) -> Traffic:
    """``plan`` with a contract version published to the contracts topic (its version
    record, then the set marker), while adapters move to the version only it decides: most
    results written from a little before the marker to a little after it are of the new
    adapter version, and most of those written after it name the published generation
    (``tg-contract-generation``), as an issuer that saw it does."""
    rnd = random.Random(seed ^ 0xC0417AC7)
    at = rnd.uniform(0.3, 2.0)
    events = [(at - rnd.uniform(0.0, 0.3), "version", 0, 0), (at, "marker", 0, 0)]
    for t, kind, i, attempt in plan.events:
        if kind == "result" and at - 0.4 <= t <= at + 0.8 and rnd.random() < 0.8:
            kind = "v2g" if t > at and rnd.random() < 0.7 else "v2"
        events.append((t, kind, i, attempt))
    events.sort(key=lambda e: e[0])
    return Traffic(events)


def rid(i: int) -> str:
    return f"req.sim{i:04d}"


class World:
    """A broker, the nodes, the fault schedule and the invariants of one schedule."""

    def __init__(
        self,
        seed: int,
        gate: Gate,
        choices: Choices,
        loop: SimLoop,
        *,
        worker_class: type[SimWorker] = SimWorker,
    ) -> None:
        self.seed = seed
        self.gate = gate
        self.choices = choices
        self.loop = loop
        self.worker_class = worker_class
        broker = SimBroker(now_ms=int(NOW.timestamp() * 1000))
        broker.world = self
        self.broker = broker
        for name in (T.requests, T.intake, T.agent, T.audit, T.state):
            broker.create_topic(name, PARTITIONS)
        broker.create_topic(T.quarantine, 1)
        broker.create_topic(T.contracts, 1)
        broker.hook = self._hook
        broker.own_listeners = True
        self.nodes: list[Node] = []
        self.profile = profile_of(seed)
        self.events = self.profile.events()
        self.faults: collections.Counter[str] = collections.Counter()
        self.outage_until = 0.0  # the broker refuses every call until then (virtual time)
        self.outage_from = 0.0
        self.cut: list[float] | None = None  # the contracts topic cut off until healed
        self.outages = 0
        self.served: asyncio.Future[None] | None = None  # set when an outage ends
        self.healed_at = 0.0
        self.healed = False
        self.crashes = 0
        self.pauses = 0
        self.restarts: list[asyncio.Task[None]] = []
        # committed-state bookkeeping, kept at each commit
        self.decisions: collections.Counter[str] = collections.Counter()  # origin -> decisions
        self.rejected: set[str] = set()
        self.quarantined: collections.Counter[str] = collections.Counter()
        self.answered: set[tuple[str, int]] = set()
        self.acceptances: dict[str, set[int]] = collections.defaultdict(set)
        self.offsets: dict[TopicPartition, int] = {}
        self.violation: Violation | None = None
        # (transactional id, producer epoch) -> the owned partition that started the producer
        self.txn_owner: dict[tuple[str, int], SimPartition] = {}
        self.oracle = Oracle(broker, gate, T, WorkerOptions().max_record_bytes)
        self.txn_node: dict[int, int] = {}  # transaction -> the node whose producer committed it
        self.successes: collections.Counter[tuple[str, int]] = collections.Counter()
        self.outcome_of: dict[str, str] = {}  # intake origin -> its committed decision's outcome
        self.excused = 0  # fresh attempts their deciding node could not see (check_progress)
        self.changelogs_checked = 0  # partitions whose changelog (not empty) equalled the owner's ledger
        # contract publication (``rollout``): the write sequence of the set marker; the
        # results that name the published generation (tg-contract-generation); virtual time
        # spans in which the contracts topic could not be read to its end (stalled, failing,
        # or the broker refusing); results whose rejection as behind or unknown those excuse
        self.published: int | None = None
        self.names_generation: set[str] = set()
        self.named_attempt: dict[str, int] = {}  # result -> the attempt its tg-attempt names
        self.contracts_unreadable: list[list[float]] = []
        self.contracts_excused: set[str] = set()
        self.contracts_checked = 0  # committed decisions of results published before them
        # intake origin -> (kind, request index, write sequence); requests records' sequences
        self.written: dict[str, tuple[str, int, int]] = {}
        self.requests_written: dict[tuple[int, int], int] = {}  # (partition, offset) -> sequence

    def halt(self) -> None:
        """The schedule is over: every node is killed, so its tasks end at their next call."""
        self.healed = True
        for node in self.nodes:
            if node.resume is not None and not node.resume.done():
                node.resume.set_exception(Crashed())
            node.state = "crashed"

    def fail(self, invariant: str, detail: str) -> NoReturn:
        """Record the first violation and raise it into the caller."""
        violation = Violation(invariant, detail)
        if self.violation is None:
            self.violation = violation
        raise violation

    async def _wait(self, seconds: float) -> None:
        """Sleep ``seconds`` of virtual time; end the schedule at the first violation."""
        deadline = self.loop.time() + seconds
        while self.loop.time() < deadline:
            if self.violation is not None:
                raise self.violation
            await asyncio.sleep(min(0.05, deadline - self.loop.time()))
        if self.violation is not None:
            raise self.violation

    # --- nodes ---------------------------------------------------------------------

    def start_node(self) -> Node:
        clients = SimClients(self.broker, len(self.nodes))
        options = WorkerOptions(
            handle_signals=False,
            metrics_port=0,
            linger_ms=50,
            # 1 to 3 records: the queue bound (twice the batch) is reached, and the partition
            # paused and resumed, in most schedules.
            batch_size=1 + self.choices.draw(3, 0.6, "batch size"),
            request_wait_seconds=0.5,
            restore_wait_seconds=2.0,
            connect_check_s=None,
            restore_hook=self._restore_hook,
            # The sweep's and the stall watchdog's clock: virtual time, as every other wait.
            monotonic=self.loop.time,
            # No contract source but the published one's (``rollout``): the folder's is not
            # read (no file system in a schedule), and reloads come from the topic only.
            contract_source=_NO_SOURCE,
            contracts_catch_up_seconds=CONTRACTS_CATCH_UP_S,
        )
        gate_factory = None
        if self.profile.publish:
            source = SimContractSource(
                T.contracts,
                clients,
                self.gate,
                reader_class=self.worker_class.contracts_reader_class,
                ends=lambda: {p: len(log) for p, log in enumerate(self.broker.logs[T.contracts])},
                fail=functools.partial(self._contracts_not_read, len(self.nodes)),
            )
            options.contract_source = source
            gate_factory = source.gate
        loop = self.loop
        worker = self.worker_class(
            CONFIG,
            self.gate,
            clock=lambda: NOW + timedelta(seconds=loop.time()),
            options=options,
            metrics=_metrics(),
            clients=clients,
            gate_factory=gate_factory,
            sleep=functools.partial(self._backoff, len(self.nodes)),
        )
        node = Node(len(self.nodes), clients, worker)
        worker.node = node
        worker.world = self
        self.nodes.append(node)
        node.task = asyncio.ensure_future(self._run(node))
        return node

    async def _run(self, node: Node) -> None:
        try:
            await node.worker.run()
        except Crashed:
            return
        except KafkaError:
            # The process exits on an error the client library raises (a fetch error):
            # its supervisor starts it again.
            node.state = "exited"
            self.restarts.append(asyncio.ensure_future(self._restart_later(0.2)))
            return
        except Violation:
            raise
        except Exception as exc:
            node.state = "exited"
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.fail(
                "the worker raises only client errors",
                f"node {node.index}: {exc!r} at {where.filename.rpartition('/')[2]}:{where.lineno} "
                f"({where.line})",
            )
        if node.state == "live":
            node.state = "exited"

    async def _restart_later(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.start_node()

    def _expire_member(self, node: Node) -> None:
        """The group's session timeout: the node's consumer leaves, the others rebalance."""
        consumer = node.group_consumer()
        if consumer is None or consumer not in self.broker.members[GROUP]:
            return
        self.broker.members[GROUP].remove(consumer)
        for other in self.broker.members[GROUP]:
            other.rebalance_pending = True

    def _crash(self, node: Node) -> None:
        self.crashes += 1
        self.faults["crash"] += 1
        node.state = "crashed"
        if node.resume is not None and not node.resume.done():
            node.resume.set_exception(Crashed())
        session = 0.1 + 0.1 * self.choices.draw(10, 0.9, "session timeout")
        self.loop.call_later(session, self._expire_member, node)
        restart = 0.2 + 0.1 * self.choices.draw(20, 0.9, "restart delay")
        self.restarts.append(asyncio.ensure_future(self._restart_later(restart)))

    def _pause(self, node: Node) -> None:
        self.pauses += 1
        self.faults["pause"] += 1
        node.state = "paused"
        node.stale = True
        node.resume = self.loop.create_future()
        session = 0.1 + 0.1 * self.choices.draw(5, 0.9, "session timeout")
        self.loop.call_later(session, self._expire_member, node)
        paused = session + 0.1 + 0.1 * self.choices.draw(30, 0.9, "paused for")
        self.loop.call_later(paused, self._resume, node)

    def _resume(self, node: Node, rejoin_after: float = 0.0) -> None:
        if node.state != "paused":
            return
        node.state = "live"
        if rejoin_after:
            self.loop.call_later(rejoin_after, self._rejoin, node)
        else:
            self._rejoin(node)
        assert node.resume is not None
        if not node.resume.done():
            node.resume.set_result(None)

    def _rejoin(self, node: Node) -> None:
        """Its next heartbeat finds a resumed node out of the group: it joins again."""
        consumer = node.group_consumer()
        if (
            node.state == "live"
            and consumer is not None
            and consumer.started
            and consumer not in self.broker.members[GROUP]
        ):
            self.broker.members[GROUP].append(consumer)
            for member in self.broker.members[GROUP]:
                member.rebalance_pending = True

    # --- the hook: every client call -----------------------------------------------

    async def _hook(self, operation: str, clients: Any, client: Any) -> None:
        node = self.nodes[clients.node_index]
        if operation == "commit" and isinstance(client, FakeProducer) and client.txn is not None:
            self.txn_node[client.txn] = node.index
        while node.state == "paused":
            assert node.resume is not None
            await asyncio.shield(node.resume)
        if node.state == "crashed":
            raise Crashed()
        if self.served is not None and not self.served.done() and operation not in CLOSING:
            await self._refused(operation)
            await self._hook(operation, clients, client)
            return
        choices = self.choices
        aim = self._aim(operation, client)
        calling.set(client)
        wakes = self.profile.wake_zombie or self.profile.wake_zombie_retried
        if wakes and operation == "init" and not self.healed and self._wake_zombie(client):
            # The take-over's start reaches the broker a moment later: the zombie's commit,
            # on its way, comes first or not.
            await asyncio.sleep(0.001 * choices.draw(30, 0.9, "take-over delayed"))
        if not self.healed:
            events = self.events.get(aim) or self.events.get(operation) or self.events[""]
            event = choices.pick(
                events[1], lambda i: f"{events[0][i - 1]} at {operation} of node {node.index}"
            )
            if event:
                kind = events[0][event - 1]
                if kind == "crash" and self.crashes < MAX_CRASHES:
                    self._crash(node)
                    raise Crashed()
                if kind == "pause" and self.pauses < MAX_PAUSES:
                    self._pause(node)
                    await self._hook(operation, clients, client)
                    return
                if kind == "outage":
                    if not self.outages:
                        self._outage()
                elif kind == "rebalance":
                    self.faults["rebalance"] += 1
                    for member in self.broker.members[GROUP]:
                        member.rebalance_pending = True
                elif kind not in ("crash", "pause", "outage") and self._inject(kind, client, node):
                    self.faults[kind] += 1
        p_latency, top = self.profile.latency.get(aim) or self.profile.latency.get(
            operation, (P_LATENCY, LATENCY_MS)
        )
        latency = choices.draw(top + 1, p_latency, "latency")
        if latency:
            await asyncio.sleep(latency / 1000)
        else:
            await asyncio.sleep(0)
        if node.state != "live":  # paused or killed while the call was on its way
            await self._hook(operation, clients, client)

    def _aim(self, operation: str, client: Any) -> str:
        """What a profile may aim faults and latencies at: a result's wait for its request
        (``catch_up``), a contracts source's lookups and polls (``contracts``,
        ``contracts_read``), else the operation itself."""
        if operation == "end_offsets" and wait_failures.get() is not None:
            return "catch_up"
        if getattr(client, "sim_contracts", False):
            return _CONTRACTS_AIMS.get(operation, operation)
        return operation

    def _contracts_not_read(self, node: int, detail: str) -> None:
        self.fail("a contracts catch-up that says it caught up read to its end", f"node {node}: {detail}")

    def contracts_failed(self) -> None:
        """A call of a contracts source failed: it may lag while it backs off."""
        now = self.loop.time()
        self.contracts_unreadable.append([now, now + CONTRACTS_FAILING_S])

    def contracts_unread(self, began: float, ended: float) -> bool:
        """Whether the contracts topic could not be read to its end at some time between
        ``began`` and ``ended`` (stalled, failing, or the broker refusing)."""
        spans = list(self.contracts_unreadable)
        if self.outages:  # its refused reads back off up to that long after it
            spans.append([self.outage_from, self.outage_until + CONTRACTS_FAILING_S])
        return any(start <= ended and (end < 0 or end >= began) for start, end in spans)

    def _publish(self, sequence: int) -> None:
        """The set marker is written: from now on its version decides. Its readers may lag
        (the topic's reads stall a while) or be cut off (until the world heals)."""
        self.published = sequence
        lag = self.choices.draw(30, self.profile.contracts_lag, "contracts lag")
        cut = not lag and self.choices.chance(self.profile.contracts_cut, "contracts cut off")
        if not (lag or cut):
            return
        self.faults["contracts_lag" if lag else "contracts_cut"] += 1
        span = [self.loop.time(), -1.0]
        self.contracts_unreadable.append(span)
        self.broker.stall(T.contracts)
        if lag:
            self.loop.call_later(0.1 * lag, self._serve_contracts, span)
        else:
            self.cut = span

    def _serve_contracts(self, span: list[float]) -> None:
        span[1] = self.loop.time()
        self.broker.unstall(T.contracts)

    async def _backoff(self, node_index: int, seconds: float) -> None:
        """A worker's backoff; a partition's abort's after a failed transaction (its task's,
        the failed producer still held) may end, with the profile's probability, just as the
        group revokes the partition (``revoked_at_backoff``): every
        member is made to rebalance, and the backoff lasts until this node's revoke starts
        (at its next poll), at most a second more."""
        task = asyncio.current_task()
        node = self.nodes[node_index]
        name = "" if task is None else task.get_name()
        owned = name.startswith("partition:") and node.worker._owned(int(name.partition(":")[2]))
        if (
            not self.profile.revoked_at_backoff
            or self.healed
            or not owned
            or owned.producer is None  # a take-over failed: no failed transaction's producer
            or not self.choices.chance(
                self.profile.revoked_at_backoff, f"node {node_index} revoked as its backoff ends"
            )
        ):
            await asyncio.sleep(seconds)
            return
        self.faults["revoked_at_backoff"] += 1
        for member in self.broker.members[GROUP]:
            member.rebalance_pending = True
        revoking = self.loop.create_future()
        node.revoking.append(revoking)
        self.loop.call_later(max(seconds, 1.0), _settle, revoking)
        await revoking  # woken as the revoke starts: ahead of the releases it begins

    def _wake_zombie(self, producer: Any) -> bool:
        """A node paused with a transaction open on the transactional id ``producer`` is
        about to fence resumes now, with the profile's probability: its commit races the
        take-over. True when one did."""
        chance = self.profile.wake_zombie
        task = asyncio.current_task()
        if self.profile.wake_zombie_retried is not None and task is not None:
            if task.get_name().startswith("partition:"):  # not the assignment's take-over
                chance = self.profile.wake_zombie_retried
            if not chance:
                return False
        for other in self.nodes:
            if other.state != "paused":
                continue
            held = [
                p
                for p in other.clients.producers
                if p.transactional_id == producer.transactional_id and p.txn is not None
            ]
            if held and self.choices.chance(chance, f"node {other.index} resumes at a take-over"):
                # Its heartbeat finds it out of the group a little later: the successor may
                # decide a batch meanwhile.
                self._resume(other, rejoin_after=0.05 * self.choices.draw(10, 0.9, "rejoins after"))
                return True
        return False

    def _outage(self) -> None:
        """The broker refuses every call for 20 s to 3 min, then serves again: its group
        coordinator comes back with every member to rejoin, and an outage longer than the
        transaction timeout aborts the transactions left open."""
        self.outages += 1
        self.faults["outage"] += 1
        low, high = OUTAGE_S
        seconds = low + (high - low) * self.choices.draw(101, 1.0, "outage for") / 100
        self.outage_from = self.loop.time()
        self.outage_until = self.loop.time() + seconds
        served = self.served = self.loop.create_future()

        def serve() -> None:
            served.set_result(None)
            if seconds > TRANSACTION_TIMEOUT_S:
                for transactional_id in list(self.broker.open_txn):
                    self.broker.expire(transactional_id)
            for member in self.broker.members[GROUP]:
                member.rebalance_pending = True
            self.broker.changed()

        self.loop.call_later(seconds, serve)

    async def _refused(self, operation: str) -> None:
        """A call while the broker refuses: one that fails on a refused connection fails
        after the request timeout; any other waits until the broker serves again."""
        served = self.served
        assert served is not None
        if operation in CLOSING:
            return
        if operation in REFUSED:
            await asyncio.wait([served], timeout=REQUEST_TIMEOUT_S)
            if not served.done():
                note_failure(operation)
                raise KafkaConnectionError("injected: the broker refuses connections")
            return
        await asyncio.shield(served)

    def _inject(self, fault: str, client: Any, node: Node) -> bool:
        """Inject ``fault`` at ``client``'s call; False when it had nothing to act on."""
        broker = self.broker
        if fault == "rewind_queued":
            # A fetch that returns again records the node holds queued, not yet decided (the
            # pipelined loop's queue): only those past the last one queued may join it.
            assert isinstance(client, FakeConsumer)
            queued = [p for p in node.worker._partitions.values() if p.queue and p.tp in client._positions]
            for owned in queued:
                client._positions[owned.tp] = owned.queue[0].offset
            return bool(queued)
        if fault == "commit_timeout_not_done":
            broker.fail("commit", RequestTimedOutError("injected: commit timed out, not committed"))
        elif fault == "commit_timeout_done":
            broker.fail("commit", KafkaTimeoutError("injected: committed, answer lost"), after=True)
        elif fault == "broker_abort":
            assert isinstance(client, FakeProducer)
            assert client.transactional_id is not None
            broker.expire(client.transactional_id)
        elif fault == "fetch_error":
            # The client library retries a failed fetch: its records come later.
            broker.stall(T.intake)
            self.loop.call_later(
                0.05 * self.choices.draw(10, 0.9, "fetch error for"), broker.unstall, T.intake
            )
        elif fault == "redeliver":
            assert isinstance(client, FakeConsumer)
            for tp in sorted(client._positions):
                client._positions[tp] = max(0, client._positions[tp] - 3)  # a re-fetch
        else:
            operation = {
                "init_error": "init",
                "send_error": "send",
                "send_offsets_error": "send_offsets",
                "read_error": "read",
                "offsets_error": "committed",
                "end_offsets_error": "end_offsets",
            }[fault]
            broker.fail(operation, KafkaError(f"injected {fault}"))
        return True

    async def _restore_hook(self, partitions: set[int]) -> None:
        if self.healed:
            return
        slow = self.choices.draw(30, self.profile.slow_restore, "slow restore")
        if slow:
            self.faults["slow_restore"] += 1
            await asyncio.sleep(slow * 0.1)
        if self.choices.chance(self.profile.failing_restore, "failing restore"):
            self.faults["failing_restore"] += 1
            raise KafkaError("injected: restore failed")

    # --- traffic ---------------------------------------------------------------------

    async def write_traffic(self, plan: Traffic) -> None:
        attempt_of: dict[int, int] = {}
        for at, kind, i, attempt in plan.events:
            delay = at - self.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            key = rid(i).encode()
            sequence = len(self.written) + len(self.requests_written)
            if kind == "request":
                attempt_of[i] = max(attempt_of.get(i, 1), attempt)
                record = review_request(request_id=rid(i), attempt=attempt, max_attempts=3)
                written = self.broker.append(T.requests, msgspec.json.encode(record), key=key)
                self.requests_written[(written.partition, written.offset)] = sequence
            elif kind == "tombstone":
                written = self.broker.append(T.requests, None, key=key)
                self.requests_written[(written.partition, written.offset)] = sequence
            elif kind == "version":
                self.broker.append(T.contracts, version_record(), key=VERSION_KEY)
            elif kind == "marker":
                self.broker.append(T.contracts, marker_record(), key=SET_KEY)
                self._publish(sequence)
            else:
                data = {"decision": "rejected"} if kind == "bad" else {}
                value = dict(review_value(**data), request_id=rid(i))
                if kind == "bad":
                    value["data"]["reviewed_by"] = 7  # the schema refuses it
                msg = message(
                    value,
                    key=key,
                    tg_request_id=rid(i),
                    # a result of the adapter only the published version decides; "v2g": its
                    # issuer saw the published generation
                    tg_adapter_version=ADAPTER_VERSION if kind in ("v2", "v2g") else "1.0.0",
                    tg_contract_generation=str(GENERATION) if kind == "v2g" else None,
                    # a retry's result names its attempt, as an adapter that knows it does
                    tg_attempt=str(attempt) if kind == "result" and attempt > 1 else None,
                )
                written = self.broker.append(T.intake, msg.value, key=msg.key, headers=msg.headers)
                origin = f"{T.intake}/{written.partition}/{written.offset}"
                self.written[origin] = ("v2" if kind == "v2g" else kind, i, sequence)
                if kind == "v2g":
                    self.names_generation.add(origin)
                if kind == "result" and attempt > 1:
                    self.named_attempt[origin] = attempt

    # --- invariants ------------------------------------------------------------------

    def visible_state(self, partition: int) -> dict[str, set[int]]:
        """The committed records of requests and state in ``partition`` now."""
        out: dict[str, set[int]] = {}
        for topic in (T.requests, T.state):
            entries = self.broker.logs[topic][partition]
            end = self.broker.stable_end(TopicPartition(topic, partition))
            out[topic] = {r.offset for r in entries[:end] if self.broker.visible(r, "read_committed")}
        return out

    def _ended(self) -> set[str]:
        return {
            (r.key or b"").decode() for part in self.broker.logs[T.requests] for r in part if r.value is None
        }

    def before_decision(self, node: Node, owned: OwnedPartition, records: list[Any], keys: list[str]) -> None:
        """No decision before the partition's restore reached the end offsets at its
        assignment; the ledger it decides with equals what is committed. The oracle
        notes the requests the node must decide ``records`` with."""
        if isinstance(owned, SimPartition) and owned.released:
            self.fail(
                "nothing decided or committed by a released partition",
                f"node {node.index} decides partition {owned.tp.partition} after its revoke returned",
            )
        partition = owned.tp.partition
        failed = failed_wait.get()
        if failed:
            self.fail(
                "a wait that failed decides nothing",
                f"node {node.index} decides partition {partition} after its wait for requests "
                f"returned although its {', '.join(failed)} call failed",
            )
        owed = node.required.get(partition, {}).get(T.requests, set())
        wait = contracts_wait.get()
        self.oracle.capture(
            node.index,
            owned.tp,
            records,
            keys,
            node.applied.get((T.requests, partition), set()) | owed,
            node.must.get(partition, 0),
            owned.uses.gate(),
            # Its source could not be read to its end during its catch-up, or it was paused.
            node.stale or (wait is not None and self.contracts_unread(*wait)),
        )
        if node.stale or node.state != "live" or self._fenced(owned):
            return
        if owned.restoring:
            self.fail(
                "restore before decisions", f"node {node.index} decides partition {partition} while restoring"
            )
        required = node.required.get(partition)
        if required is None:
            self.fail(
                "restore before decisions", f"node {node.index} decides partition {partition} never restored"
            )
        for topic, offsets in required.items():
            missing = offsets - node.applied.get((topic, partition), set())
            if missing:
                self.fail(
                    "restore before decisions",
                    f"node {node.index} decides partition {partition} before applying {topic} offsets "
                    f"{sorted(missing)[:5]} (below the end offsets at its assignment)",
                )
        producer = owned.producer
        if (
            isinstance(producer, FakeProducer)
            and producer.transactional_id is not None
            and self.broker.epochs.get(producer.transactional_id) != producer.epoch
        ):
            # Fenced since its take-over (a resumed zombie's late take-over fenced it): it
            # cannot commit what it decides, and what it holds may be behind the commits of
            # the producer that fenced it.
            return
        self.check_ledger(node, partition)

    def check_ledger(self, node: Node, partition: int) -> None:
        """The accepted ledger ``node`` decides ``partition`` with equals the acceptances
        committed in it (invariant 6, before a decision)."""
        ended = self._ended()
        held = self._ledger(node, partition, ended)
        committed = {
            r: set(a)
            for r, a in self.acceptances.items()
            if a and r not in ended and _partition_of(r, PARTITIONS) == partition
        }
        if held != committed:
            self.fail(
                "accepted ledger equals committed acceptances",
                f"node {node.index} decides partition {partition} with ledger {_entries(held)} "
                f"but committed {_entries(committed)}",
            )

    def _ledger(
        self, node: Node, partition: int, ended: set[str], now: float | None = None
    ) -> dict[str, set[int]]:
        """The accepted attempts ``node`` holds for the live requests of ``partition`` (not
        ended; not expired by ``now``, POSIX seconds, when given)."""
        return {
            r: set(attempts)
            for r, (expires, attempts) in node.worker.ledger._live.items()
            if r not in ended and _partition_of(r, PARTITIONS) == partition and (now is None or expires > now)
        }

    def _changelog(self, ended: set[str], now: float) -> dict[int, dict[str, set[int]]]:
        """The state changelog as compaction leaves it (the latest committed record per key,
        a tombstone removing it), per partition: the live, unexpired requests' attempts."""
        latest: dict[int, dict[str, tuple[float, set[int]]]] = collections.defaultdict(dict)
        for r in self.broker.committed_values(T.state):
            key = (r.key or b"").decode()
            if r.value is None:
                latest[r.partition].pop(key, None)
                continue
            entry = json.loads(r.value)
            expires = datetime.fromisoformat(entry["expires_at"]).timestamp()
            latest[r.partition][key] = (expires, set(entry["accepted_attempts"]))
        return {
            p: {k: attempts for k, (expires, attempts) in held.items() if k not in ended and expires > now}
            for p, held in latest.items()
        }

    async def check_changelog(self) -> None:
        """After healing, once every owned partition is idle: the state changelog of each
        partition (compacted) equals the accepted ledger its live owner decides with. A
        transaction that aborted took its state records with it; the batch decided again
        must write them again, and its acceptances join the ledger only with them."""

        def busy() -> bool:
            return any(
                not owned.idle or owned.open is not None or owned.restoring
                for node in self.nodes
                if node.state == "live"
                for owned in node.worker._partitions.values()
            )

        deadline = self.loop.time() + 10.0
        while busy() and self.loop.time() < deadline:
            await self._wait(0.05)
        ended = self._ended()
        now = (NOW + timedelta(seconds=self.loop.time())).timestamp()
        changelog = self._changelog(ended, now)
        for node in self.nodes:
            if node.state != "live" or node.stale:
                continue
            for tp, owned in node.worker._partitions.items():
                if (
                    owned.producer is None
                    or owned.closing
                    or owned.restoring
                    or owned.open is not None
                    or not owned.idle
                    or self._fenced(owned)
                ):
                    continue
                held = self._ledger(node, tp.partition, ended, now)
                logged = changelog.get(tp.partition, {})
                if held != logged:
                    self.fail(
                        "the state changelog equals the owners' ledger",
                        f"partition {tp.partition}: changelog {_entries(logged)} but node {node.index} "
                        f"decides with {_entries(held)}",
                    )
                self.changelogs_checked += bool(logged)

    def _fenced(self, owned: OwnedPartition) -> bool:
        """Another node started a producer for the partition since this one's: the node
        decides as a zombie until its next revoke, and its commit is refused (invariant 5)."""
        producer = owned.producer
        if not isinstance(producer, FakeProducer) or producer.transactional_id is None:
            return False
        return self.broker.epochs.get(producer.transactional_id) != producer.epoch

    def before_commit(self, txn: Any) -> None:
        """No record committed by a fenced producer; committed offsets never move back."""
        if self.broker.fenced(txn.id):
            self.fail("no commit by a fenced producer", f"transaction {txn.id} of {txn.transactional_id}")
        owner = self.txn_owner.get((txn.transactional_id, txn.epoch))
        if owner is not None and owner.released:
            self.fail(
                "nothing decided or committed by a released partition",
                f"node {owner.node.index} commits partition {owner.tp.partition} after its revoke returned",
            )
        for tp, offset in txn.offsets.items():
            before = self.broker.group_offsets.get((GROUP, tp))
            if before is not None and offset < before:
                self.fail("committed offsets never move backwards", f"{tp.partition}: {before} -> {offset}")

    def after_commit(self, txn_id: int) -> None:
        """At most one decision per intake record, one answer per attempt and nothing after
        it, a rejection quarantined once; a committed offset passes no undecided record;
        every decision the gate's verdict (the oracle)."""
        decisions = [
            json.loads(r.value or b"{}")
            for part in self.broker.logs[T.audit]
            for r in part
            if r.txn == txn_id and not r.control
        ]
        decisions = [e for e in decisions if e.get("kind") == "decision"]
        node = self.txn_node.get(txn_id)
        self.check_contract_sets(txn_id, node, decisions)
        acceptances = self.acceptances
        self.oracle.verdicts(
            self.txn_node.get(txn_id),
            decisions,
            lambda request_id, attempt: attempt in acceptances.get(request_id, ()),
            self.fail,
        )
        self._count_decisions(txn_id)
        txn = self.broker.txns[txn_id]
        for tp, offset in txn.offsets.items():
            undecided = [
                r.offset
                for r in self.broker.logs[tp.topic][tp.partition][:offset]
                if not r.control and self.decisions[f"{tp.topic}/{tp.partition}/{r.offset}"] == 0
            ]
            if undecided:
                self.fail(
                    "a committed offset passes no undecided record",
                    f"partition {tp.partition} committed to {offset} with {undecided[:5]} undecided "
                    f"(transaction {txn_id} of {txn.transactional_id})",
                )

    def check_contract_sets(self, txn_id: int, node: int | None, decisions: list[dict[str, Any]]) -> None:
        """Each decision names the contract set that made it (invariant 18: every agent,
        quarantine and audit record of the transaction carries the label of the set the
        node decided its batch with), and no valid result is rejected as unknown once its
        contract was published before it (invariant 17: a result of the published version,
        written after the set marker, is rejected ``UNKNOWN_*`` or ``CONTRACTS_BEHIND`` only
        when its node's source could not be read to its end during its catch-up, and then,
        when the result named the published generation, only ``CONTRACTS_BEHIND``)."""
        if not decisions or node is None:
            return
        seen = [self.oracle.seen.get((node, event["origin"])) for event in decisions]
        labels = {s.gate.contracts.label for s in seen if s is not None and s.gate is not None}
        if len(labels) == 1:
            (label,) = labels
            for topic in (T.agent, T.quarantine, T.audit):
                for part in self.broker.logs[topic]:
                    for r in part:
                        if r.txn != txn_id or r.control:
                            continue
                        named = dict(r.headers).get(CONTRACT_SET_HEADER, b"").decode()
                        if named != label:
                            self.fail(
                                "each decision names the set that made it",
                                f"a {topic} record of node {node}'s transaction names {named or 'no set'} "
                                f"but its batch was decided with {label}",
                            )
        published = self.published
        if published is None:
            return
        for event, view in zip(decisions, seen, strict=True):
            origin = event["origin"]
            kind, _, sequence = self.written.get(origin, ("", 0, -1))
            if kind != "v2" or sequence < published:
                continue
            self.contracts_checked += 1
            code = event.get("code")
            if event["outcome"] != "rejected" or code not in _BEHIND_CODES:
                continue
            names = origin in self.names_generation
            if view is not None and view.behind:
                if names and code != "CONTRACTS_BEHIND":
                    self.fail(
                        "a set that knows it is behind answers retryable",
                        f"{origin} named generation {GENERATION}, and node {node}'s source could not "
                        f"catch up: rejected {code} (final) instead of CONTRACTS_BEHIND",
                    )
                self.contracts_excused.add(origin)
                continue
            self.fail(
                "no valid result is rejected as unknown once its contract was published before it",
                f"{origin} (written after the set marker{', naming its generation' if names else ''}) "
                f"rejected {code} by node {node}, whose contracts source could be read to its end",
            )

    def _count_decisions(self, txn_id: int) -> None:
        for topic in (T.audit, T.quarantine):
            for part in self.broker.logs[topic]:
                for r in part:
                    if r.txn != txn_id or r.control:
                        continue
                    if topic == T.quarantine:
                        origin = dict(r.headers).get("tg-origin", b"").decode()
                        self.quarantined[origin] += 1
                        if self.quarantined[origin] > 1:
                            self.fail("a rejection is quarantined once", origin)
                        continue
                    event = json.loads(r.value or b"{}")
                    if event.get("kind") != "decision":
                        continue
                    origin = event["origin"]
                    self.outcome_of[origin] = event["outcome"]
                    self.decisions[origin] += 1
                    if self.decisions[origin] > 1:
                        self.fail("every intake record has exactly one decision", f"{origin} decided twice")
                    if event["outcome"] == "rejected":
                        self.rejected.add(origin)
                    rid_, attempt = event.get("request_id"), event.get("attempt")
                    if rid_ is None or attempt is None:
                        continue
                    answer = (rid_, attempt)
                    if answer in self.answered and event.get("envelope", True):
                        self.fail(
                            "one answer per request attempt, nothing after it",
                            f"{rid_} attempt {attempt}: {event['outcome']} envelope ({origin}) "
                            "after its answer",
                        )
                    if event["outcome"] != "rejected":
                        self.successes[answer] += 1
                        self.answered.add(answer)
                        self.acceptances[rid_].add(attempt)

    def intake_origins(self) -> list[str]:
        return [
            f"{T.intake}/{r.partition}/{r.offset}"
            for part in self.broker.logs[T.intake]
            for r in part
            if not r.control
        ]

    def undecided(self) -> list[str]:
        return [o for o in self.intake_origins() if self.decisions[o] == 0]

    def check_end(self) -> None:
        """Every intake record decided once, every rejection quarantined, the changelog
        equal to the committed acceptances."""
        missing = self.undecided()
        if missing:
            self.fail(
                "every intake record has exactly one decision",
                f"{len(missing)} never decided within {SETTLE_S:g} s after healing: {missing[:4]}",
            )
        unquarantined = sorted(o for o in self.rejected if self.quarantined[o] != 1)
        if unquarantined:
            self.fail("a rejection is quarantined once", f"not quarantined: {unquarantined[:4]}")
        ended = self._ended()
        latest: dict[str, set[int] | None] = {}
        for r in self.broker.committed_values(T.state):
            key = (r.key or b"").decode()
            latest[key] = None if r.value is None else set(json.loads(r.value)["accepted_attempts"])
        for request_id, attempts in self.acceptances.items():
            if request_id in ended:
                continue
            if latest.get(request_id) != attempts:
                self.fail(
                    "accepted ledger equals committed acceptances",
                    f"{request_id}: changelog {latest.get(request_id)} but accepted attempts "
                    f"{sorted(attempts)}",
                )
        self.check_progress()

    def check_progress(self) -> None:
        """At the end of a healed schedule: every attempt with a valid, fresh result (a
        result written after its request's last record, which is that attempt's and no
        tombstone) is answered exactly once with a success; every result the schema
        refuses has its rejection; every success answers a valid result.

        An attempt is excused only when the oracle sanctioned each fresh result's
        rejection by what the deciding node could see: its wait for the request timed
        out (unknown request), or its reader had not yet applied the request's last
        record while it held an earlier one (the reader is read ahead of, not waited
        for, when the request is known and the result does not name its attempt; one
        that does makes the node read on, and only a read that ran out excuses it); or
        when a contract's cel rule refused it, a verdict the oracle checked against the
        gate's (``RULE_FAILED``: the contract's answer, with no success to give).
        """
        for origin, (kind, _, _) in self.written.items():
            outcome = self.outcome_of.get(origin)
            if kind == "bad" and outcome != "rejected":
                self.fail("every invalid result has its rejection", f"{origin}: {outcome}")
            if kind not in ("result", "v2") and outcome not in (None, "rejected"):
                self.fail("a success answers a valid result", f"{origin} ({kind}): {outcome}")
        for p, log in enumerate(self.broker.logs[T.requests]):
            last: dict[bytes, Any] = {}
            for record in log:
                if record.key is not None:
                    last[record.key] = record
            for key, record in last.items():
                if record.value is None:
                    continue  # the request ended
                request_id = key.decode()
                attempt = int(json.loads(record.value)["attempt"])
                since = self.requests_written[(p, record.offset)]
                # A result of the published version is valid once its set marker came first.
                published = -1 if self.published is None else self.published
                fresh = [
                    origin
                    for origin, (kind, i, sequence) in self.written.items()
                    if rid(i) == request_id
                    and sequence > since
                    and (kind == "result" or (kind == "v2" and 0 <= published <= sequence))
                    # a result naming another attempt answers that one, never this one
                    and self.named_attempt.get(origin, attempt) == attempt
                ]
                if not fresh or self.successes[(request_id, attempt)] == 1:
                    continue
                if self.successes[(request_id, attempt)] == 0 and all(
                    self.oracle.sanctioned(origin, attempt, named=origin in self.named_attempt)
                    or origin in self.contracts_excused
                    or origin in self.oracle.ruled
                    for origin in fresh
                ):
                    self.excused += 1
                    continue
                self.fail(
                    "every valid, fresh result's attempt is answered once",
                    f"{request_id} attempt {attempt}: {self.successes[(request_id, attempt)]} successes; "
                    f"its fresh results {', '.join(f'{o} {self.outcome_of.get(o)}' for o in fresh[:4])}",
                )

    # --- one schedule ------------------------------------------------------------------

    async def main(self) -> None:
        for _ in range(NODES):
            self.start_node()
        plan = traffic(self.seed, kind=self.profile.traffic)
        if self.profile.publish:
            plan = rollout(plan, self.seed)
        writer = asyncio.ensure_future(self.write_traffic(plan))
        if self.profile.outage:  # at a commit or a send (drawn there), else at the end of the faults
            self.loop.call_later(FAULT_PHASE_S - 0.1, lambda: None if self.outages else self._outage())
        await self._wait(FAULT_PHASE_S)
        await writer
        while self.served is not None and not self.served.done():
            await self._wait(1.0)
        self.healed = True
        self.healed_at = self.loop.time()
        if self.cut is not None:
            self._serve_contracts(self.cut)
        for node in self.nodes:
            if node.state == "paused":
                self._resume(node)
        deadline = self.loop.time() + SETTLE_S
        decided, last = sum(self.decisions.values()), self.loop.time()
        while self.undecided() and self.loop.time() < deadline:
            await self._wait(0.05)
            if sum(self.decisions.values()) != decided:
                decided, last = sum(self.decisions.values()), self.loop.time()
            elif self.loop.time() - last >= RESUME_S:
                self.fail(
                    "decisions go on after healing",
                    f"{len(self.undecided())} records undecided and no decision for {RESUME_S:g} s "
                    f"(the last {last - self.healed_at:.1f} s after healing)"
                    + (" after a broker outage" if self.outages else ""),
                )
        for task in self.restarts:
            await task
        if not self.undecided():
            await self.check_changelog()
        for node in self.nodes:
            if node.state == "live":
                node.worker.request_stop()
        for node in list(self.nodes):
            if node.state == "live" and node.task is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(30):
                        await node.task
        if self.violation is not None:
            raise self.violation
        self.check_end()


_METRICS: list[Metrics] = []
_NO_SOURCE = ContractSource([])


def _metrics() -> Metrics:
    """One set of metrics for every simulated worker of the process: no invariant reads them,
    and a registry of its own per worker was a third of a schedule's time."""
    if not _METRICS:
        _METRICS.append(Metrics())
    return _METRICS[0]


_BEHIND_CODES = frozenset({"UNKNOWN_TOOL", "UNKNOWN_CONTRACT_VERSION", "CONTRACTS_BEHIND"})


def note_failure(operation: str) -> None:
    """A client call of the current task failed: noted when the task is in a request
    catch-up (it must then raise, not return: ``oracle.failed_wait``)."""
    failures = wait_failures.get()
    if failures is not None:
        failures.append(operation)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _partition_of(request_id: str, count: int) -> int:
    return partition_of(request_id.encode(), count)


def _entries(ledger: dict[str, set[int]]) -> list[tuple[str, list[int]]]:
    return sorted((k, sorted(v)) for k, v in ledger.items())


@dataclass
class Outcome:
    """What one schedule did."""

    seed: int
    violation: Violation | None
    choices: Choices
    faults: collections.Counter[str]
    virtual_seconds: float
    checked: int = 0  # committed decisions the oracle compared with the gate's verdict
    excused: int = 0  # fresh attempts their deciding node could not see (World.check_progress)
    changelogs: int = 0  # partitions whose changelog, not empty, equalled their owner's ledger at the end
    contracts: int = 0  # committed decisions of results whose contract was published before them
    codes: collections.Counter[str] = field(default_factory=collections.Counter)  # rejections checked


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    logger = logging.getLogger("toolgate")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_schedule(
    seed: int,
    gate: Gate,
    *,
    replay: dict[int, int] | None = None,
    worker_class: type[SimWorker] = SimWorker,
) -> Outcome:
    """Run the schedule of ``seed`` (its recorded choices when ``replay`` is given)."""
    choices = Choices(seed, replay)
    loop = SimLoop(choices)
    world = World(seed, gate, choices, loop, worker_class=worker_class)
    violation: Violation | None = None
    # No health server (no sockets), and no gc.freeze(): frozen per schedule, every worker's
    # objects would outlive it.
    with _quiet_logs(), mock.patch.object(_service, "HealthServer", _NoHealth), mock.patch("gc.freeze"):
        try:
            loop.run_until_complete(world.main())
        except Violation as exc:
            violation = exc
        except Stuck as exc:
            violation = Violation("no deadlock", str(exc))
        finally:
            world.halt()
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                with contextlib.suppress(BaseException):
                    loop.run_until_complete(asyncio.wait(pending, timeout=3600))
            loop.close()
    violation = world.violation or violation
    if violation is None and loop.errors:
        error = loop.errors[0]
        violation = Violation("no task fails unseen", repr(error)[:300])
    return Outcome(
        seed,
        violation,
        choices,
        world.faults,
        loop.now,
        world.oracle.checked,
        world.excused,
        world.changelogs_checked,
        world.contracts_checked,
        world.oracle.codes,
    )
