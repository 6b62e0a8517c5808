"""The Kafka service: a thin loop around the gate, exactly once per intake message.

Per batch of one intake partition, in one Kafka transaction: the agent envelope
of every message, the quarantine record of every rejected one, one audit event
each, and the partition's consumer offset. A crash anywhere aborts the open
transaction; the next owner re-reads from the committed offset and decides again,
so a ``read_committed`` reader sees each decision exactly once.

aiokafka speaks the transaction APIs at version 0 (no KIP-447 group fencing), so
each assigned intake partition gets its own transactional producer with the id
``<prefix>.<topic>.<partition>``. When a partition moves, the new owner's
``init_transactions`` fences the previous owner's producer and completes or
aborts its open transaction *before* the new owner reads the committed offset.
A zombie can then neither commit output nor move the offset.

Results whose request record has not been read yet wait, per batch and bounded
(``request_wait_seconds``), until the request reader has caught up to the
requests topic's end offsets; only then is a missing request ``UNKNOWN_REQUEST``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka.errors import KafkaError

from toolgate._config import Config
from toolgate.gate._batch import Batch, ShadowSampler
from toolgate.gate._contracts import version_label
from toolgate.gate._gate import Gate, GroupHint
from toolgate.gate._outputs import OutRecord
from toolgate.registry._connect import attached as attached_registry
from toolgate.registry._connect import from_snapshot_on_disk
from toolgate.service._contract_source import (
    CatchUp,
    ContractSource,
    RegistryContractSource,
    TopicContractSource,
    published_or_hinted,
)
from toolgate.service._kafka import (
    AiokafkaClients,
    Consumer,
    KafkaClients,
    Outgoing,
    Producer,
    RebalanceListener,
    TopicPartition,
    partition_for,
    partition_of,
    partitions_of,
)
from toolgate.service._members import GroupView, member_id
from toolgate.service._metrics import HealthServer, Metrics, rule_series
from toolgate.service._otel_spans import DecisionTracer, tracer_from_env
from toolgate.service._partition import Collaborators, OwnedPartition, PartitionSettings
from toolgate.service._phases import LOOP, NO_PHASES, POLL, Phases
from toolgate.service._startup import (
    ContractWatch,
    at_home,
    check_copartitioned,
    log_topics,
    readiness_text,
    start_health,
    static_membership,
)
from toolgate.service._store import (
    AcceptedLedger,
    RequestTable,
    StateUpdate,
    TopicReader,
    reading,
    restore_partitions,
    start_reader_consumer,
)
from toolgate.service._transport import CONNECT_TIMEOUT_S

log = logging.getLogger("toolgate.worker")
Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]


def utc_now() -> datetime:
    """The real clock."""
    return datetime.now(UTC)


@dataclass
class WorkerOptions:
    """Tuning and test knobs; defaults suit production."""

    # 500 records x ~1 KB keeps one transaction well under the 1 MiB default request
    # size per partition while amortising the commit round trips.
    batch_size: int = 500
    # How long an empty poll waits before the loop looks at its timers (sweep, reload, stop,
    # burst end). No record waits for it: a poll returns as soon as one is fetched, and a
    # partition's batch is whatever queued while its previous transaction was in flight.
    linger_ms: int = 20
    request_wait_seconds: float = 5.0
    max_requests: int | None = None  # None: from the configuration (TOOLGATE_MAX_REQUESTS)
    # How often expired requests are evicted and the state tombstones of ended requests
    # are written (also written with the next batch of their partition).
    sweep_seconds: float = 30.0
    max_messages: int | None = None  # stop after deciding this many (tests)
    burst: bool = False  # stop when the intake is drained (tests, one-shot runs)
    handle_signals: bool = True
    transactional_prefix: str = "toolgate"
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # None: from the configuration; 0: any free port
    max_record_bytes: int = 1024 * 1024
    # A transaction's records go out in batches of up to this many bytes per partition (a
    # produce request carries one batch per partition): 500 results of ~1 KB take one or
    # two per topic, where aiokafka's default of 16 KB would take dozens.
    producer_batch_bytes: int = 512 * 1024
    restore_wait_seconds: float = 30.0  # one restore attempt; retried with backoff after it
    # Test knob: awaited before each restore attempt with the partitions (a slow restore).
    restore_hook: Callable[[set[int]], Awaitable[None]] | None = None
    shadow_audit_per_minute: int = 60  # sampled shadow disagreements per contract version
    # Decision spans (toolgate.service._otel_spans); None: from the OTEL_* variables (off by default).
    tracer: DecisionTracer | None = None
    # Connect once before starting, within this bound: TLS, protocol and login mistakes and a
    # silent port end the run with one line (None: skip the check).
    connect_check_s: float | None = CONNECT_TIMEOUT_S
    # Where the loop's CPU time goes (toolgate.service._phases.PhaseClock; the worker bench).
    phase_clock: Phases | None = None
    # Monotonic seconds of the contracts watch (TOOLGATE_CONTRACTS_WATCH_SECONDS); tests inject one.
    watch_clock: Callable[[], float] | None = None
    # Where the contracts come from, to catch up on before deciding a result of an unknown tool
    # or version or one naming a newer set (None: the folder or registry of the configuration).
    contract_source: ContractSource | None = None
    # The catch-up's bound (None: TOOLGATE_CONTRACTS_CATCH_UP_SECONDS).
    contracts_catch_up_seconds: float | None = None
    # No transaction committed for this long while records are pending in the owned partitions
    # and a fresh client's offset lookup answers: the worker's clients are stuck (seen after a
    # broker was killed and restarted under load), so it rebuilds them and rejoins its group.
    stall_seconds: float = 60.0
    # The clock of the sweep and the stall watchdog (tests inject one).
    monotonic: Callable[[], float] = time.monotonic


@dataclass
class WorkerStats:
    """Counters a test or the CLI can read after a run."""

    decided: int = 0
    accepted: int = 0
    rejected: int = 0
    committed: int = 0
    aborted: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


class _Stalled(Exception):
    """The worker made no progress while the cluster answered: rebuild the clients."""


class Worker:
    """Consumes intake, decides with the gate, publishes in transactions.

    The loop polls, follows the group's assignment and hands each partition's batch to
    its :class:`~toolgate.service._partition.OwnedPartition`.

    Args:
        config: where the cluster and topics are.
        gate: the gate over the loaded contracts.
        clock: the injected clock (``now`` for every decision and eviction).
        options: tuning and test knobs.
        clients: builds the Kafka clients (default: aiokafka's, from ``config``).
        sleep: the backoff wait (tests pass one that does not wait).
    """

    # What an assigned partition is made of (a subclass in tests only).
    partition_class: type[OwnedPartition] = OwnedPartition
    # The catch-up on the contracts before deciding an unknown tool or version (a subclass
    # in the simulation, which plants bugs in it).
    catch_up_class: type[CatchUp] = CatchUp

    def __init__(
        self,
        config: Config,
        gate: Gate,
        *,
        clock: Clock = utc_now,
        options: WorkerOptions | None = None,
        metrics: Metrics | None = None,
        gate_factory: Callable[[], Gate] | None = None,
        clients: KafkaClients | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.config = config
        self.gate = gate
        self.gate_factory = gate_factory
        self.clock = clock
        self.options = options or WorkerOptions()
        self._phases: Phases = self.options.phase_clock or NO_PHASES
        self._tracer = self.options.tracer or tracer_from_env(group=config.group_id)
        self.metrics = metrics or Metrics()
        self.stats = WorkerStats()
        cap = self.options.max_requests
        self.requests = RequestTable(
            config.max_requests if cap is None else cap,
            on_full=self._store_full,
            on_invalid=self.metrics.invalid_request_records.inc,
            on_evict=self.metrics.request_store_evictions.inc,
        )
        self.ledger = AcceptedLedger()
        self._clients: KafkaClients = clients or AiokafkaClients(config)
        self._sleep = sleep
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        # The owned intake partitions, each with its producer, offset, restore state and
        # transaction (toolgate.service._partition).
        self._partitions: dict[TopicPartition, OwnedPartition] = {}
        self._consumer: Consumer | None = None
        self._lag_partitions: set[str] = set()  # the partition labels of the lag gauge
        self._intake_count = 0
        self._request_reader: TopicReader | None = None
        self._health: HealthServer | None = None
        self._txn_failing = False
        self._backoff = 0.0
        self._sampler = ShadowSampler(self.options.shadow_audit_per_minute)
        self._copartitioned: frozenset[str] = frozenset()
        self._partition_counts: dict[str, int] = {}  # output topic -> its partition count
        self._reload_requested = False
        self._joined = False  # the group's first assignment (possibly empty) has arrived
        self._watch = ContractWatch.of(config, clock=self.options.watch_clock)
        self._last_sweep = 0.0
        self._failure: BaseException | None = None  # a partition task's error, raised by the loop
        # The stall watchdog: when a transaction last committed (or nothing was pending), and
        # when the cluster was last asked.
        self._progress_at = 0.0
        self._probed_at = 0.0
        self._export_contracts(gate)
        self.contracts_catch_up = self.catch_up_class(
            self.options.contract_source or self._configured_source(),
            self.reload_contracts,
            lambda: self.gate.contracts,
            clock=self.options.monotonic,
        )
        self.member = member_id(config)
        self.group_view: GroupView | None = None
        self._member_due = True  # publish what this worker decides with at the next turn
        self._member_at = 0.0
        self._member_refused = ""  # what the last member record said the source refuses
        # (set label, published generation, group hint) when a contracts wait last ran out
        self._gave_up: tuple[str, int | None, GroupHint | None] | None = None
        self._wait_until = 0.0  # the monotonic deadline of the contracts wait in progress
        self._uses = self._collaborators()

    def _collaborators(self) -> Collaborators:
        """What each owned partition uses of this worker (toolgate.service._partition)."""
        options = self.options

        def consumer() -> Consumer:
            assert self._consumer is not None
            return self._consumer

        return Collaborators(
            settings=PartitionSettings(
                group_id=self.config.group_id,
                topics=self.config.topics,
                transactional_prefix=options.transactional_prefix,
                max_record_bytes=options.max_record_bytes,
                producer_batch_bytes=options.producer_batch_bytes,
                request_wait_seconds=options.request_wait_seconds,
                batch_size=options.batch_size,
                queue_bound=2 * options.batch_size,
            ),
            clients=self._clients,
            consumer=consumer,
            held=self.requests.__contains__,
            lookup=self._lookup_without_misrouted,
            catch_up=self._catch_up,
            gate=lambda: self.gate,
            contracts_behind=self._contracts_behind,
            ledger=self.ledger,
            clock=lambda: self.clock(),
            expires_of=self._expires_of,
            outputs=self._outputs,
            prepare=self._prepare,
            restore=self._restore_again,
            committed=self._committed,
            aborted=self._aborted,
            fenced=self._fenced,
            owns=lambda owned: self._partitions.get(owned.tp) is owned,
            crashed=self._crashed,
            sleep=lambda seconds: self._sleep(seconds),
            metrics=self.metrics,
            phases=self._phases,
            sampler=self._sampler,
            tracer=self._tracer,
        )

    def _contracts_changed(self) -> bool:
        """The folder or keyring changed (the watch), or the contracts topic holds a newer set."""
        if self._watch is not None and self._watch.changed():
            return True
        source = self.contracts_catch_up.source
        return isinstance(source, TopicContractSource) and source.changed()

    def _configured_source(self) -> ContractSource:
        """The folder (or the registry's snapshots) the configuration names, with the keyring."""
        paths = [Path(self.config.contracts_dir)]
        if self.config.keyring:
            paths.append(Path(self.config.keyring))
        registry = attached_registry()
        if registry is not None:
            return RegistryContractSource(registry.poll, paths, registry.published_generation)
        return ContractSource(paths)

    async def _contracts_behind(self, batch: Batch, decide: Callable[[], Batch]) -> Batch:
        """Catch up on the contracts for the batch's unknown or behind results, then decide
        the batch again (docs/design.md, One contract set for the group).

        A source that is not behind (nothing newer published, nobody in the group decides
        with a newer verified set) is refreshed once; one that is, until the bound
        (``contracts_catch_up_seconds``): what is still behind then is CONTRACTS_BEHIND
        (retryable), never a final UNKNOWN_*. A ``tg-contract-generation`` above the highest
        generation the source has published is not waited for, and a wait that ran out is
        not waited again, by any batch, until the source, the loaded set or the group's
        hint moves: one stamped record costs no partition the bound, and partitions waiting
        at once share one deadline.
        """
        if self.gate_factory is None:
            return batch
        flagged = batch.behind
        now = self.clock()
        source = self.contracts_catch_up.source

        def waiting() -> bool:
            self._group_changed()  # the hint counts only generations the source verified
            gate = self.gate
            published = source.published_generation()
            if (gate.contracts.label, published, gate.group) == self._gave_up:
                return False
            return any(
                gate.evaluate(m, None, now).code == "CONTRACTS_BEHIND" and published_or_hinted(m, published)
                for m in flagged
            )

        bound = self.options.contracts_catch_up_seconds
        bound = self.config.contracts_catch_up_seconds if bound is None else bound
        before = self.gate.contracts
        start = self.options.monotonic()
        if self._wait_until <= start:  # a wait in progress is joined, not started again
            self._wait_until = start + bound
        after = await self.contracts_catch_up.catch_up(self._wait_until, behind=lambda _contracts: waiting())
        result = "caught_up" if after is not before else "unchanged"
        if waiting():  # the bound ran out: later batches do not wait for this state again
            self._gave_up = (self.gate.contracts.label, source.published_generation(), self.gate.group)
        else:  # caught up: the next wait has a bound of its own
            self._wait_until = 0.0
        redecided = decide()
        if any(d.verdict.code == "CONTRACTS_BEHIND" for d in redecided.decisions):
            result = "behind"
            log.warning(
                "contracts behind the group: answered CONTRACTS_BEHIND (retryable)",
                extra={"contract_set": after.label, "bound_s": bound},
            )
        self.metrics.contract_catch_ups.labels(result).inc()
        return redecided

    def _export_contracts(self, gate: Gate) -> None:
        self.metrics.contract_info.clear()  # a reload may have retired or removed versions
        self.metrics.contracts_from_snapshot.set(1 if from_snapshot_on_disk() else 0)
        self.metrics.initialise(
            [(c.spec.tool, version_label(c.spec), c.spec.status, c.digest) for c in gate.contracts],
            rule_series(gate.contracts),
        )
        contracts = gate.contracts
        self.metrics.contract_set(contracts.generation, contracts.label, contracts.digest)

    def request_reload(self) -> None:
        """Reload the contracts between two batches (SIGHUP)."""
        self._reload_requested = True

    def reload_contracts(self) -> bool:
        """Swap in a freshly loaded gate; a set that fails to load leaves the running one in place."""
        self._reload_requested = False
        if self.gate_factory is None:
            log.warning("contract reload requested, but this worker has no contract source")
            return False
        try:
            gate = self.gate_factory()
        except Exception as exc:  # any failure keeps the running contracts
            log.error(
                "contract reload failed; keeping the running contracts", extra={"error": str(exc)[:500]}
            )
            return False
        gate.group = self.gate.group
        self.gate = gate
        gate.home_partition = self._home_partition
        self._export_contracts(gate)
        self._member_due = True
        self._group_changed()
        log.info(
            "contracts reloaded",
            extra={
                "contracts": ",".join(c.key for c in gate.contracts),
                "contract_set": gate.contracts.label,
            },
        )
        return True

    @property
    def _producers(self) -> dict[TopicPartition, Producer | None]:
        """Each owned partition's producer (None: taking it over is to be retried)."""
        return {tp: owned.producer for tp, owned in self._partitions.items()}

    @property
    def _restoring(self) -> set[int]:
        """The owned intake partitions whose state is being restored."""
        return {tp.partition for tp, owned in self._partitions.items() if owned.restoring}

    def _owned(self, partition: int) -> OwnedPartition | None:
        return self._partitions.get(TopicPartition(self.config.topics.intake, partition))

    def _tombstone_due(self, partition: int, request_id: str) -> None:
        """A request of ``partition`` ended with an entry in the changelog: its tombstone is
        due (with the partition's next transaction; an unowned one's next owner finds it at
        restore)."""
        owned = self._owned(partition)
        if owned is not None:
            owned.tombstones.add(request_id)

    @property
    def metrics_port(self) -> int | None:
        """The port the health server listens on, once started."""
        return self._health.port if self._health else None

    def ready(self) -> bool:
        """Joined the group, every owned partition taken over and restored, and the last
        transaction did not fail. A worker the group gave no partition (more workers than
        intake partitions) is ready: a hot standby that takes partitions over on the next
        rebalance."""
        return (
            self._joined
            and None not in self._producers.values()
            and not self._txn_failing
            and not self._restoring
        )

    def status(self) -> str:
        """What ``/readyz`` says (ready or not)."""
        return readiness_text(
            joined=self._joined,
            owned=len(self._producers),
            restoring=bool(self._restoring),
            failing=self._txn_failing or None in self._producers.values(),
        )

    def readyz(self) -> str:
        """The body of ``/readyz``: :meth:`status`, then the contract set it decides with."""
        contracts = self.gate.contracts
        return (
            f"{self.status()}\ncontracts {contracts.label} "
            f"(generation {contracts.generation}, digest {contracts.digest})"
        )

    def request_stop(self) -> None:
        """Finish the transactions in flight, leave the group and return from :meth:`run`;
        records not yet in a transaction are left for the next owner."""
        self._stop.set()
        for owned in self._partitions.values():
            owned.closing = True

    def _store_full(self, cap: int) -> None:
        log.warning(
            "request store full: dropping the oldest requests",
            extra={
                "max_requests": cap,
                "hint": "raise TOOLGATE_MAX_REQUESTS (max_requests in the configuration file) "
                "or check that the platform writes tombstones",
            },
        )

    async def run(self) -> WorkerStats:
        """Run until stopped (signal, :meth:`request_stop`, max messages or burst end)."""
        loop = asyncio.get_running_loop()
        if self.options.handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
            loop.add_signal_handler(signal.SIGHUP, self.request_reload)
        port = self.options.metrics_port
        self._health = HealthServer(
            self.metrics,
            self.options.metrics_host,
            self.config.metrics_port if port is None else port,
            self.ready,
            self.readyz,
        )
        await start_health(self._health, port is None)
        try:
            if self.options.connect_check_s is not None:
                await self._clients.check_connection(self.options.connect_check_s)
            await self._start_readers()
            while True:
                try:
                    await self._consume()
                    break
                except _Stalled as stalled:
                    self.metrics.stall_recoveries.inc()
                    log.warning(
                        "no progress while the cluster answers: rebuilding the Kafka clients and "
                        "rejoining the group",
                        extra={"stalled_s": self.options.stall_seconds, "pending": str(stalled)},
                    )
                    await self._rebuild()
        finally:
            await self._shutdown()
            if self.options.handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    loop.remove_signal_handler(sig)
        return self.stats

    async def _start_readers(self) -> None:
        await self._check_copartitioned()
        self._request_reader = TopicReader(
            self.config.topics.requests, self._apply_request, self._clients, owned=True
        )
        await self._request_reader.start()
        source = self.contracts_catch_up.source
        self.group_view = await GroupView.open(
            self.config,
            self._clients,
            self.member,
            self.clock,
            self._group_changed,
            source.published_generation,
        )
        await self._refresh_member()
        # Everything alive now (contracts, compiled schemas) lives as long as the process:
        # keep it out of the collector's generations and its pauses.
        gc.freeze()

    def _group_changed(self) -> None:
        """The members topic moved (or this worker's set did): the gate's hint and the metrics."""
        view = self.group_view
        if view is None:
            return
        self.gate.group, split = view.check(self.gate.contracts)
        self.metrics.group_disagreement.set(1 if split else 0)
        self.metrics.group_members.set(len(view.live()))

    async def _refresh_member(self) -> None:
        """Publish this worker's record when its set changed or its refresh period passed."""
        view = self.group_view
        if view is None:
            return
        now = self.options.monotonic()
        source = self.contracts_catch_up.source
        refused = source.refusal()
        if refused != self._member_refused:
            self._member_due = True
        if not self._member_due and now - self._member_at < self.config.members_refresh_seconds:
            return
        self._member_due = False
        self._member_at = now
        self._member_refused = refused
        # the publishers a reader of signed sets trusts (a folder's worker says none)
        signed = isinstance(source, (TopicContractSource, RegistryContractSource))
        publishers = sorted(self.gate.keyring.publishers) if signed else None
        try:
            await view.publish(self.gate.contracts, refused, publishers)
        except KafkaError as exc:
            log.warning("members topic write failed; retried next period", extra={"error": repr(exc)[:300]})
        self._group_changed()  # members whose records aged out are no longer live

    def _apply_request(self, key: bytes | None, value: bytes | None) -> None:
        """A requests-topic record; a tombstone also ends the request's accepted attempts."""
        count = self._intake_count
        if not at_home(key, count):
            return
        # at_home checked that the partition read is the key's (murmur2): the request's home,
        # kept with it so that no result's lookup hashes its key again.
        where = reading.get()
        home = where[1] if key is not None and where is not None and count else -1
        self.requests.apply(key, value, home)
        if value is None and key is not None and self.ledger.end(key.decode("utf-8", "replace")):
            self._tombstone_due(partition_of(key, self._intake_count), key.decode("utf-8", "replace"))

    def _apply_state(self, key: bytes | None, value: bytes | None) -> None:
        """A state-changelog record read at restore; an ended request's entry is not held
        and its tombstone is due."""
        if not at_home(key, self._intake_count):
            return
        if not self.ledger.apply(key, value, self.clock()) and key is not None:
            self._tombstone_due(partition_of(key, self._intake_count), key.decode("utf-8", "replace"))

    def _home_partition(self, key: bytes) -> int:
        """The intake partition of ``key`` by murmur2 (where its request is)."""
        return partition_of(key, self._intake_count)

    def _lookup_without_misrouted(
        self, tp: TopicPartition, records: list[Any], keys: list[str]
    ) -> Callable[[str], Any]:
        """The request lookup for a batch of ``tp`` (``keys``: the request key of each record):
        a result in another intake partition than the default (murmur2) partitioner puts its
        key has no request here, whichever worker holds it (an adapter whose client
        partitions differently): it fails closed as ``UNKNOWN_REQUEST`` on every worker
        alike, and is counted. A held request's home partition answers that without a hash
        (:meth:`RequestTable.in_partition`)."""
        found, misrouted = self.requests.in_partition(
            tp.partition, keys, [r.key for r in records], self._intake_count
        )
        if misrouted:
            self.metrics.misrouted.inc(len(misrouted))
        return found.get

    async def _check_copartitioned(self) -> None:
        """Requests and the state changelog must have intake's partition count (a request
        id's request, accepted attempts and results then sit in the same partition number)."""
        topics = self.config.topics
        counts = await self._topic_counts()
        log_topics(counts)
        check_copartitioned(topics, counts)
        self._intake_count = counts[topics.intake]
        self.gate.home_partition = self._home_partition

    async def _topic_counts(self) -> dict[str, int]:
        """Each topic's partition count; a co-partitioned topic missing from the metadata is
        asked again for a few seconds (topics created just before the worker started)."""
        topics = self.config.topics
        backoff = 0.1
        for _ in range(7):  # about 7 s of backoff in all
            counts = {name: len(await partitions_of(self._clients, name)) for name in topics.names()}
            if all(counts[name] for name in (topics.intake, topics.requests, topics.state)):
                break
            await self._sleep(backoff)
            backoff = min(backoff * 2, 2.0)
        return counts

    async def _restore(self, partitions: set[int]) -> None:
        """Read the owned partitions' requests up to the end offsets read now, before deciding
        them; retried with backoff while the cluster does not answer (logged once per change)."""
        owned = [p for p in (self._owned(n) for n in sorted(partitions)) if p is not None]
        if not partitions or self._request_reader is None:
            self._set_restoring(owned, False)
            return
        self._set_restoring(owned, True)
        self.metrics.ready.set(0)
        started = time.perf_counter()
        failing = False
        backoff = 0.0
        # Not for partitions given up meanwhile (a restore again runs outside the assignment,
        # so a revoke waits for it).
        while not self._stop.is_set() and not (owned and all(p.closing for p in owned)):
            error = await self._restore_once(partitions)
            if error is None:
                break
            if not failing:
                failing = True
                log.warning(
                    "state restore did not finish; retrying",
                    extra={"partitions": sorted(partitions), "error": error},
                )
            backoff = min(max(backoff * 2, 0.1), 5.0)
            await self._sleep(backoff)
        seconds = time.perf_counter() - started
        for partition in partitions:
            self.metrics.restore_seconds.observe(seconds)
            self.metrics.restore_last.labels(str(partition)).set(seconds)
        self._set_restoring(owned, False)
        log.info(
            "state restored",
            extra={
                "partitions": sorted(partitions),
                "requests": len(self.requests),
                "accepted": len(self.ledger),
                "seconds": round(seconds, 3),
                "recovered": failing,
            },
        )

    async def _restore_again(self, owned: OwnedPartition) -> None:
        """``owned`` was taken over again after another owner committed it, or taken over
        after its state was read before any fence: its accepted ledger may miss what that
        owner accepted. Read it again from the state changelog, and
        the partition's requests up to their end, as at assignment."""
        partition = owned.tp.partition
        self.ledger.drop_partitions({partition}, self._intake_count)
        await self._restore({partition})

    async def _restore_once(self, partitions: set[int]) -> str | None:
        """One restore attempt; None when both reached the end offsets read now, else why not."""
        reader = self._request_reader
        assert reader is not None
        try:
            if self.options.restore_hook is not None:
                await self.options.restore_hook(partitions)
            await reader.own(partitions)
            wait = self.options.restore_wait_seconds
            # The requests of these partitions, and their accepted attempts (what the
            # previous owners accepted), both up to the end offsets read now.
            if await reader.restore(partitions, wait) and await restore_partitions(
                self._clients, self.config.topics.state, partitions, self._apply_state, wait
            ):
                return None
            return f"not restored within {wait:g} s"
        except KafkaError as exc:
            return repr(exc)[:300]

    def _set_restoring(self, partitions: list[OwnedPartition], restoring: bool) -> None:
        for owned in partitions:
            owned.restoring = restoring
            if not restoring and owned.producer is not None:
                # What was fetched for it while it was taken over and restored (a take-over
                # that failed is retried by the loop, before its next poll).
                owned.kick()
        self.metrics.restoring.set(len(self._restoring))

    async def _consume(self) -> None:
        consumer = self._clients.consumer(
            group_id=self.config.group_id,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            session_timeout_ms=self.config.session_timeout_ms,
            heartbeat_interval_ms=max(100, self.config.session_timeout_ms // 3),
            # A fetch is answered as soon as one record is readable (fetch_min_bytes 1), so
            # the long poll adds nothing to a result's wait. Its bound matters where aiokafka
            # keeps one fetch in flight per broker: a partition resumed (its queue drained)
            # while a fetch without it is held waits for that fetch's answer. 100 ms bounds
            # that at ten empty fetches a second when idle (the default, 500 ms, would not).
            fetch_max_wait_ms=100,
            fetch_min_bytes=1,
            **static_membership(self.config),
        )
        self._consumer = consumer
        self.metrics.intake_partitions.set(self._intake_count)
        await consumer.start()
        consumer.subscribe([self.config.topics.intake], listener=_Listener(self))
        log.info(
            "worker started",
            extra={
                "group": self.config.group_id,
                "intake": self.config.topics.intake,
                "group_instance_id": self.config.group_instance_id,
                "metrics_port": self.metrics_port,
            },
        )
        idle_polls = 0
        phases = self._phases
        partitions = self._partitions
        limit = self.options.max_messages
        self._progress_at = self._probed_at = self.options.monotonic()
        # The loop never waits for a commit: it hands each partition its records and polls
        # again. Each partition decides and commits in its own task, one transaction after
        # the other, while the loop polls and the other partitions decide (docs/design.md,
        # Exactly once).
        while not self._stop.is_set():
            if self._failure is not None:
                raise self._failure
            await self._check_progress()
            if self._reload_requested or self._contracts_changed():
                self.reload_contracts()
            await self._refresh_member()
            for owned in partitions.values():
                if owned.producer is None:
                    owned.kick()  # taken over again (its take-over failed)
            phases.enter(POLL)
            batches = await consumer.getmany(
                timeout_ms=self.options.linger_ms, max_records=self.options.batch_size
            )
            phases.enter(LOOP)
            if not batches:
                idle_polls += 1
                if self.options.burst and partitions and idle_polls >= 3 and await self._drained():
                    break
                if self._sweep():
                    for owned in partitions.values():
                        owned.request_tombstones()
                self._update_lag()  # the batches in flight when records last came committed since
                continue
            idle_polls = 0
            for tp, records in batches.items():
                taker = partitions.get(tp)
                if taker is not None:
                    taker.offer(records)
            self._sweep()
            self._update_lag()
            if limit is not None and self.stats.decided >= limit:
                break
        if self._failure is not None:
            raise self._failure

    async def _check_progress(self) -> None:
        """Raise :class:`_Stalled` when no transaction committed for ``stall_seconds`` while
        records are pending in the owned partitions and the cluster answers (asked at most
        every quarter of the bound, by a client of its own: the worker's may be the stuck ones)."""
        bound = self.options.stall_seconds
        now = self.options.monotonic()
        if now - self._progress_at < bound or now - self._probed_at < bound / 4:
            return
        self._probed_at = now
        pending = await self._pending()
        if pending is None:
            return  # the cluster does not answer: a rebuild would change nothing
        if not pending:
            self._progress_at = now  # nothing to do is no stall
            return
        raise _Stalled(", ".join(pending))

    async def _pending(self) -> list[str] | None:
        """The owned partitions with records pending (fetched and undecided, or not fetched
        though readable, or not taken over); None when the cluster did not answer."""
        consumer = self._consumer
        if consumer is None or not self._partitions:
            return []
        tps = sorted(self._partitions)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                probe = await start_reader_consumer(self._clients)
                try:
                    ends = await probe.end_offsets(tps)
                finally:
                    await probe.stop()
        except (KafkaError, TimeoutError):
            return None
        positions: dict[TopicPartition, int] = {}
        for tp in tps:
            # The stuck consumer's own position may not answer either: then it is pending.
            with contextlib.suppress(KafkaError, TimeoutError):
                async with asyncio.timeout(1.0):
                    positions[tp] = await consumer.position(tp)
        pending = []
        for tp in tps:
            owned = self._partitions.get(tp)
            if owned is None:
                continue
            position = positions.get(tp)
            if owned.producer is None or owned.queue or position is None or position < ends[tp]:
                pending.append(str(tp.partition))
        return pending

    async def _rebuild(self) -> None:
        """Give every partition up (their transactions in flight ended or cancelled, each step
        bounded: the clients may hang), stop the consumer and the request reader, and start the
        readers again; :meth:`_consume` then joins the group with a new consumer."""
        bound = CONNECT_TIMEOUT_S
        owned = list(self._partitions.values())
        for partition in owned:
            partition.closing = True
        tasks = [p.task for p in owned if p.task is not None]
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=bound)
            for task in stuck:
                task.cancel()  # the next owner's producer fences what it left open
            if stuck:
                await asyncio.wait(stuck, timeout=bound)
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout(bound):
                await self._revoke(set(self._partitions))
        self._partitions.clear()
        for partition in owned:
            producer, partition.producer = partition.producer, None
            if producer is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(bound):
                        await producer.stop()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(bound):
                    await consumer.stop()
        reader, self._request_reader = self._request_reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(bound):
                    await reader.stop()
        self.requests.drop_partitions({tp.partition for tp in (p.tp for p in owned)}, self._intake_count)
        self.ledger.drop_partitions({p.tp.partition for p in owned}, self._intake_count)
        await self._start_readers()

    def _crashed(self, error: BaseException) -> None:
        """A partition's task failed with an error that is not the cluster's: the loop raises it."""
        if self._failure is None:
            self._failure = error

    async def _drained(self) -> bool:
        """This worker owns every intake partition and has read each to its last stable offset.

        Burst mode is for one worker: while another member (even a killed one, until its
        session times out) holds a partition, the intake is not drained for us.
        """
        assert self._consumer is not None
        if any(owned.producer is None or not owned.idle for owned in self._partitions.values()):
            return False  # a partition still to take over, or with records queued or in flight
        every = self._consumer.partitions_for_topic(self.config.topics.intake) or set()
        if {tp.partition for tp in self._consumer.assignment()} != set(every):
            return False
        for tp in self._consumer.assignment():
            stable = self._consumer.last_stable_offset(tp)
            if stable is None or tp not in self._partitions:
                return False
            # position() moves past transaction markers, which the decided offsets never reach.
            if await self._consumer.position(tp) < stable:
                return False
        return True

    def _committed(self, batch: Batch, updates: list[StateUpdate], size: int, seconds: float) -> None:
        """A batch's transaction committed: its acceptances join the ledger; count it."""
        self.metrics.transaction_seconds.observe(seconds)
        self.metrics.transactions.labels("committed").inc()
        self.metrics.batch_size.observe(size)
        self.stats.committed += 1
        self._progress_at = self.options.monotonic()
        self._backoff = 0.0
        if self._txn_failing:
            self._txn_failing = False
            log.info("transactions recovered")
        self.ledger.commit(updates)
        for disagreement in batch.disagreements:
            self.metrics.shadow_disagreements.labels(disagreement.tool, disagreement.version).inc()
            if disagreement.rule is not None:
                self.metrics.shadow_rule_failures.labels(
                    disagreement.tool, disagreement.version, disagreement.rule
                ).inc()
        self.metrics.decided_batch(batch.decisions)
        for decision in batch.decisions:
            verdict = decision.verdict
            self.stats.decided += 1
            if verdict.accepted:
                self.stats.accepted += 1
            else:
                self.stats.rejected += 1
                self.stats.by_code[verdict.code or ""] = self.stats.by_code.get(verdict.code or "", 0) + 1
        self._phases.enter(LOOP)

    def _expires_of(self, request_id: str) -> datetime | None:
        return self.requests.expires_at(request_id)

    def _state_records(self, partition: int, updates: list[StateUpdate], ended: set[str]) -> list[Outgoing]:
        """The changelog records and tombstones of ``partition``, for its open transaction."""
        topic = self.config.topics.state
        records: list[Outgoing] = [(topic, partition, u.key, u.value(), []) for u in updates]
        records += [(topic, partition, rid.encode(), None, []) for rid in sorted(ended)]
        return records

    async def _outgoing(
        self, producer: Producer, tp: TopicPartition, records: Sequence[OutRecord]
    ) -> list[Outgoing]:
        """The batch's records with their partitions: the intake record's partition number in
        a topic co-partitioned with intake (where murmur2 puts a correctly routed key), else
        the one the default partitioner picks for the key."""
        counts = self._partition_counts
        for topic in {out.topic for out in records} - counts.keys():
            # A topic the batch writes that is none of the three outputs: the same rule.
            counts[topic] = len(await producer.partitions_for(topic))
            assert self._consumer is not None
            if counts[topic] == len(self._consumer.partitions_for_topic(tp.topic) or ()):
                self._copartitioned |= {topic}
        same = self._copartitioned
        own = tp.partition
        return [
            (
                out.topic,
                own if out.topic in same else partition_for(out.key, counts[out.topic]),
                out.key,
                out.value,
                out.headers,
            )
            for out in records
        ]

    def _count_abort(self, tp: TopicPartition, exc: Exception) -> None:
        """A transaction of ``tp`` failed: count it, log once per state change, and lengthen
        the backoff its partition waits before it is taken over again."""
        self.stats.aborted += 1
        self.metrics.transactions.labels("aborted").inc()
        if not self._txn_failing:
            self._txn_failing = True
            log.error(
                "transaction aborted; the batch will be decided again",
                extra={
                    "partition": tp.partition,
                    "error": repr(exc)[:300],
                    "retriable": getattr(exc, "retriable", None),
                },
            )
        self._backoff = min(max(self._backoff * 2, 0.1), 5.0)

    async def _copartitioned_topics(self, producer: Producer) -> frozenset[str]:
        """Output topics with as many partitions as intake: their records go to the intake
        record's partition number, the same partition the key's hash picks."""
        assert self._consumer is not None
        topics = self.config.topics
        intake = len(self._consumer.partitions_for_topic(topics.intake) or ())
        same = set()
        for topic in (topics.agent, topics.quarantine, topics.audit):
            count = len(await producer.partitions_for(topic))
            self._partition_counts[topic] = count
            if intake and count == intake:
                same.add(topic)
        return frozenset(same)

    def _sweep(self) -> bool:
        """Evict expired requests and end their accepted attempts (tombstones due); True
        when it ran (every ``sweep_seconds``)."""
        mono = self.options.monotonic()
        if mono - self._last_sweep < self.options.sweep_seconds:
            self.metrics.outstanding.set(len(self.requests))
            return False
        self._last_sweep = mono
        now = self.clock()
        self.requests.evict_expired(now)
        count = self._intake_count
        for rid in self.ledger.expired(now):
            self._tombstone_due(partition_of(rid.encode(), count), rid)
        self.metrics.outstanding.set(len(self.requests))
        self.metrics.accepted_held.set(len(self.ledger))
        return True

    def _update_lag(self) -> None:
        """Per owned partition: the high watermark minus the next offset to decide."""
        assert self._consumer is not None
        for tp, owned in self._partitions.items():
            next_offset = owned.next_offset
            high = self._consumer.highwater(tp)
            if high is None or next_offset is None:
                continue
            label = str(tp.partition)
            self._lag_partitions.add(label)
            self.metrics.lag.labels(label).set(max(0, high - next_offset))

    async def _assign(self, partitions: set[TopicPartition]) -> None:
        assert self._consumer is not None
        started = time.perf_counter()
        async with self._lock:
            # Owned from now on, and not ready until taken over and restored (the take-overs
            # below run as tasks: the loop may turn between the last one's end and the
            # restore's start).
            ordered = sorted(partitions)
            taken = [self._own(tp) for tp in ordered]
            self._set_restoring(taken, True)
            # Each partition has its own transactional producer: they are started (and fence
            # their previous owners) together, so many partitions cost about one round.
            outcomes = await asyncio.gather(*(owned.take_over() for owned in taken), return_exceptions=True)
            for owned, outcome in zip(taken, outcomes, strict=True):
                tp = owned.tp
                if isinstance(outcome, KafkaError):
                    # Raising here would end the listener with the remaining partitions
                    # assigned but never decided; they are taken over before their next batch.
                    # The restore below reads their state before their previous owner is
                    # fenced: that take-over reads it again.
                    owned.unfenced_state = True
                    log.warning(
                        "taking over a partition failed; retried before its next batch",
                        extra={"partition": tp.partition, "error": repr(outcome)[:300]},
                    )
                elif isinstance(outcome, BaseException):
                    raise outcome
            await self._restore({tp.partition for tp in partitions})
        seconds = time.perf_counter() - started
        session = self.config.session_timeout_ms / 1000
        if seconds > session / 2:
            log.warning(
                "taking partitions over took more than half the group session timeout",
                extra={
                    "seconds": round(seconds, 3),
                    "session_timeout_s": session,
                    "hint": "raise TOOLGATE_SESSION_TIMEOUT_MS (no heartbeats while partitions are "
                    "taken over and restored) or spread the partitions over more workers",
                },
            )
        self._joined = True
        self._export_ownership()
        log.info(
            "partitions assigned",
            extra={
                "partitions": sorted(p.partition for p in partitions),
                "owned": sorted(tp.partition for tp in self._producers),
            },
        )

    def _own(self, tp: TopicPartition) -> OwnedPartition:
        owned = self._partitions[tp] = self.partition_class(tp, self._uses)
        return owned

    async def _catch_up(self, partition: int, wait_seconds: float) -> bool:
        """The request reader has read what was written before now to the requests partition
        of ``partition``'s number (co-partitioned: where the requests of its results are),
        or ``wait_seconds`` passed."""
        assert self._request_reader is not None
        return await self._request_reader.catch_up(wait_seconds, {partition})

    async def _prepare(self, producer: Producer) -> None:
        """At a take-over: learn which output topics are co-partitioned with intake, once."""
        if not self._copartitioned:
            self._copartitioned = await self._copartitioned_topics(producer)

    async def _outputs(
        self,
        producer: Producer,
        tp: TopicPartition,
        records: Sequence[OutRecord],
        updates: list[StateUpdate],
        tombstones: set[str],
    ) -> list[Outgoing]:
        """A transaction's records: the decisions' and the state changelog's."""
        out = await self._outgoing(producer, tp, records) if records else []
        return out + self._state_records(tp.partition, updates, tombstones)

    def _aborted(self, tp: TopicPartition, exc: Exception) -> float:
        """A transaction of ``tp`` failed: counted; the backoff to wait before retrying."""
        self._count_abort(tp, exc)
        return self._backoff

    def _fenced(self, owned: OwnedPartition) -> None:
        """``owned`` was fenced by another owner: counted, and no longer this worker's."""
        self.stats.aborted += 1
        self.metrics.transactions.labels("aborted").inc()
        if self._partitions.get(owned.tp) is owned:
            del self._partitions[owned.tp]

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        async with self._lock:
            # No longer this worker's: none starts another batch; each transaction in flight
            # ends (committed or aborted) before the partition is given up.
            gone_owned = [o for o in (self._partitions.pop(tp, None) for tp in sorted(partitions)) if o]
            await asyncio.gather(*(owned.release() for owned in gone_owned))
            for tp in partitions:
                label = str(tp.partition)
                if label in self._lag_partitions:
                    self._lag_partitions.discard(label)
                    self.metrics.lag.remove(label)
            gone = {tp.partition for tp in partitions}
            if gone and self._request_reader is not None:
                with contextlib.suppress(KafkaError):
                    await self._request_reader.disown(gone)
                # Their due tombstones went with them: the next owner finds them at restore.
                self.requests.drop_partitions(gone, self._intake_count)
                self.ledger.drop_partitions(gone, self._intake_count)
                self.metrics.restoring.set(len(self._restoring))
                for partition in gone:
                    with contextlib.suppress(KeyError):
                        self.metrics.restore_last.remove(str(partition))
        if partitions:
            log.info("partitions revoked", extra={"partitions": sorted(p.partition for p in partitions)})
        self._export_ownership()

    def _export_ownership(self) -> None:
        self.metrics.owned_partitions.set(len(self._producers))
        self.metrics.ready.set(1 if self.ready() else 0)

    async def _shutdown(self) -> None:
        # The transactions in flight end first (committed or aborted), then the group is left.
        owned = list(self._partitions.values())
        for partition in owned:
            partition.closing = True
        await asyncio.gather(*(p.task for p in owned if p.task is not None), return_exceptions=True)
        if self._consumer is not None:
            with contextlib.suppress(KafkaError):
                await self._consumer.stop()  # leaves the group
            self._consumer = None
        for partition in owned:
            with contextlib.suppress(KafkaError):
                await partition.release()
        self._partitions.clear()
        if self._request_reader is not None:
            await self._request_reader.stop()
        if self.group_view is not None:
            with contextlib.suppress(KafkaError):
                await self.group_view.stop()
            self.group_view = None
        if self._health is not None:
            await self._health.stop()
        self.metrics.ready.set(0)
        self.metrics.owned_partitions.set(0)
        log.info(
            "worker stopped",
            extra={
                "decided": self.stats.decided,
                "committed": self.stats.committed,
                "aborted": self.stats.aborted,
            },
        )


class _Listener(RebalanceListener):
    """Creates and retires the per-partition transactional producers on rebalance."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.worker._revoke(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.worker._assign(set(assigned))
