"""The copier-style crash run: Kafka's ``TransactionsBounceTest`` / ``transactions_test.py``
applied to toolgate, on a private broker that the run restarts.

A producer feeds intake (request records first, some results *before* their request
record) while worker subprocesses (``toolgate run`` through ``tests/integration/chaos_worker.py``,
which holds each transaction open a moment before its commit) decide it; meanwhile
the run SIGKILLs workers at random points (when a transaction is open, if it catches
one), has a second worker join and leave (SIGTERM), and restarts the broker (optionally
after an outage: longer than the clients' 40 s request timeout, the workers' own
failed-transaction path runs, not only aiokafka's reconnects). A last crash is followed
by a ``--burst`` worker that drains what is left. A ``read_committed`` reader of the
three output topics runs the whole time and remembers every record it was handed.

Then everything is read back and checked:

* every committed intake offset (the audit events' ``origin``) has exactly one agent
  envelope, one ``decision`` audit event, and a quarantine record exactly when it was
  rejected: no duplicates, no losses;
* records of aborted transactions (present ``read_uncommitted``, absent
  ``read_committed``; a record's identity is topic/partition/offset) were never seen by
  the concurrent ``read_committed`` reader;
* every decision is the one its sample expects (a result sent before its request
  record may also be ``UNKNOWN_REQUEST``: decided before the record was written).

The broker is a second instance of ``ops/kafka/kafka.sh`` (``TOOLGATE_KAFKA_PORT``,
``TOOLGATE_KAFKA_CONTROLLER_PORT``, ``TOOLGATE_KAFKA_DATA``), never the shared one.
Used by ``tests/integration/test_chaos.py`` (CI size) and ``ops/chaos/copier.py``
(full size).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from toolgate._config import Config
from toolgate.gate._signing import Keyring
from toolgate.operations._traffic import Sample, TrafficGenerator

from tests.integration.broker_kit import BrokerScriptError, Instance, free_ports, unavailable
from tests.integration.worker_kit import KEYRING, private_config, read_all, start_worker

UNKNOWN_REQUEST = ("correlate", "UNKNOWN_REQUEST")

__all__ = ["BrokerScriptError"]  # the broker kit's, as before tests/integration/broker_kit.py


def free_port_pair(first: int = 29092, last: int = 29990) -> tuple[int, int]:
    """Two adjacent free ports (client, controller) from ``first`` on, below the ephemeral
    range so a client connection cannot take them while the broker is down."""
    port, controller = free_ports(2, first, last, adjacent=True)
    return port, controller


class PrivateBroker(Instance):
    """A second ``kafka.sh`` instance with its own ports and data directory, which a run
    stops, SIGKILLs and starts again."""

    def __init__(self, data: Path, port: int, controller_port: int) -> None:
        super().__init__(data, {"PORT": port, "CONTROLLER_PORT": controller_port})

    @classmethod
    def pick(cls, data: Path) -> PrivateBroker:
        """An instance on the first free port pair from 29092/29093 on."""
        return cls(data, *free_port_pair())

    @property
    def port(self) -> int:
        return self.ports["PORT"]

    @property
    def controller_port(self) -> int:
        return self.ports["CONTROLLER_PORT"]

    async def start(self) -> None:
        await self.script("start")

    async def stop(self) -> None:
        await self.script("stop")

    def _sigkill(self) -> None:
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists():  # gone once reaped
            time.sleep(0.05)

    async def restart(self, *, hard: bool = False, down: float = 0.0) -> None:
        """``stop`` then ``start``: a clean bounce; ``hard``: SIGKILL the broker's JVM instead of
        ``stop`` (no controlled shutdown; the start recovers the logs); ``down``: seconds to
        stay down in between."""
        if hard:
            await asyncio.to_thread(self._sigkill)
        else:
            await self.stop()
        await asyncio.sleep(down)
        await self.start()


@contextlib.asynccontextmanager
async def private_broker(data: Path, what: str) -> AsyncIterator[PrivateBroker]:
    """A broker instance of ``what`` (a test) of its own under ``data``, stopped (``kafka.sh
    stop``) at the end; a skip when it cannot start, a failure with ``TOOLGATE_REQUIRE_KAFKA=1``."""
    broker = PrivateBroker.pick(data)
    try:
        await broker.start()
    except BrokerScriptError as exc:
        unavailable(f"{what}'s own broker instance did not start: {exc}")
    try:
        yield broker
    finally:
        await broker.stop()


@dataclass
class Plan:
    """What one run does. ``kills`` counts the SIGKILLs at random points mid-run; the run
    always ends with one more (every live worker) before the ``--burst`` drain."""

    messages: int = 10_000
    seed: int = 0
    kills: int = 1
    broker_restarts: int = 1
    hard_broker_restart: bool = False  # SIGKILL the broker instead of a clean stop
    broker_down_seconds: float = 0.0  # the outage between stop and start
    partitions: int = 3
    batch_size: int = 200
    chunk: int = 500  # samples per publish round (fresh timestamps each round)
    max_ahead: int = 2500  # published but not yet decided, at most (keeps requests fresh)
    late_share: float = 0.02  # results published before their request record
    stall_seconds: float = 150.0  # no progress for this long (plus the outage) fails the run
    drain_seconds: float = 300.0  # the --burst worker must finish within this
    # Each transaction is held open this long before its commit (tests/integration/chaos_worker.py),
    # so a kill sent when a batch's records are seen lands inside the transaction.
    hold_commit_ms: int = 50


@dataclass
class WorkerProc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    expected_end: str | None = None  # "SIGKILL" / "SIGTERM" once the run ended it on purpose


class RunFailed(Exception):
    """The scenario could not go on (a worker died, the run stalled, the producer failed)."""


class ConcurrentReader:
    """A ``read_committed`` reader of the output topics for the whole run: remembers every
    record it was handed (topic, partition, offset) and counts the decided intake offsets.

    Beside it, a ``read_uncommitted`` watcher of the audit topic notes which intake
    partitions' decisions were just written: a fetch returns as soon as records are
    appended, that is while their transaction still has its offsets and commit to send,
    so the run can crash the partition's owner mid-transaction.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        t, p = config.topics, config.partitions
        self.tps = (
            [TopicPartition(t.agent, i) for i in range(p.agent)]
            + [TopicPartition(t.quarantine, i) for i in range(p.quarantine)]
            + [TopicPartition(t.audit, i) for i in range(p.audit)]
        )
        self.seen: set[tuple[str, int, int]] = set()
        self.seen_twice = 0
        self.decided_origins: set[str] = set()
        self.errors = 0
        self.progress = asyncio.Event()  # set whenever committed records arrived
        self.written = asyncio.Event()  # set whenever the watcher saw records appended
        self.written_partitions: set[int] = set()  # intake partitions of those records
        self._consumer: AIOKafkaConsumer | None = None
        self._watcher: AIOKafkaConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def decided(self) -> int:
        return len(self.decided_origins)

    async def start(self) -> None:
        settings = {
            "bootstrap_servers": self.config.bootstrap,
            "group_id": None,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
        }
        self._consumer = AIOKafkaConsumer(
            **settings, isolation_level="read_committed", client_id="chaos-reader"
        )
        self._watcher = AIOKafkaConsumer(
            **settings, isolation_level="read_uncommitted", client_id="chaos-watcher"
        )
        await self._consumer.start()
        await self._watcher.start()
        self._consumer.assign(self.tps)
        await self._consumer.seek_to_beginning(*self.tps)
        audit = [tp for tp in self.tps if tp.topic == self.config.topics.audit]
        self._watcher.assign(audit)
        await self._watcher.seek_to_end(*audit)
        self._tasks = [
            asyncio.create_task(self._read(), name="chaos-reader"),
            asyncio.create_task(self._watch(), name="chaos-watcher"),
        ]

    async def _poll(self, consumer: AIOKafkaConsumer) -> dict[TopicPartition, list[Any]]:
        try:
            batches: dict[TopicPartition, list[Any]] = await consumer.getmany(
                timeout_ms=200, max_records=5000
            )
            return batches
        except KafkaError:  # the broker is restarting: the consumer reconnects
            self.errors += 1
            await asyncio.sleep(0.5)
            return {}

    async def _read(self) -> None:
        assert self._consumer is not None
        audit = self.config.topics.audit
        while True:
            batches = await self._poll(self._consumer)
            for tp, records in batches.items():
                for r in records:
                    ident = (tp.topic, tp.partition, r.offset)
                    if ident in self.seen:
                        self.seen_twice += 1
                    self.seen.add(ident)
                    if tp.topic == audit:
                        event = json.loads(r.value or b"{}")
                        if event.get("kind", "decision") == "decision":
                            self.decided_origins.add(event.get("origin", ""))
            if batches:
                self.progress.set()

    async def _watch(self) -> None:
        assert self._watcher is not None
        while True:
            batches = await self._poll(self._watcher)
            partitions = set()
            for records in batches.values():
                for r in records:
                    origin = json.loads(r.value or b"{}").get("origin", "")
                    with contextlib.suppress(ValueError, IndexError):
                        partitions.add(int(origin.split("/")[-2]))
            if partitions:
                self.written_partitions = partitions
                self.written.set()

    async def next_write(self, seconds: float) -> set[int] | None:
        """The intake partitions of the next decisions written (uncommitted), or None when
        nothing was written within ``seconds``."""
        self.written.clear()
        try:
            await asyncio.wait_for(self.written.wait(), seconds)
        except TimeoutError:
            return None
        return self.written_partitions

    def failed(self) -> BaseException | None:
        for task in self._tasks:
            if task.done() and not task.cancelled():
                return task.exception()
        return None

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for consumer in (self._consumer, self._watcher):
            if consumer is not None:
                await consumer.stop()


@dataclass
class Report:
    """The figures of a run. ``violations`` is empty exactly when every invariant held."""

    seed: int
    messages: int = 0  # committed intake records
    decided: int = 0  # intake offsets with a committed decision audit event
    accepted: int = 0
    rejected: int = 0
    late_results: int = 0  # results published before their request record
    late_unknown: int = 0  # ... of which decided UNKNOWN_REQUEST (before the record was read)
    kills: int = 0
    kills_mid_txn: int = 0  # ... while a transaction was open (of some worker)
    sigterms: int = 0
    rebalances: int = 0  # group generations after the first (assignments logged together)
    assignments: int = 0  # "partitions assigned" log events over all workers
    broker_restarts: int = 0
    restarts_mid_txn: int = 0
    restart_recovery_s: list[float] = field(default_factory=list)  # broker up -> decisions flow
    workers_started: int = 0
    txn_aborts_logged: int = 0  # "transaction aborted" log events (each: a batch redone)
    duplicates: int = 0
    losses: int = 0
    misfiled: int = 0  # quarantine records of accepted results, outputs of no intake record
    unexpected_verdicts: int = 0
    aborted_records: int = 0  # output records of aborted transactions (read_uncommitted only)
    aborted_seen: int = 0  # ... handed to the concurrent read_committed reader (must be 0)
    uncommitted_seen: int = 0  # records it saw that are not committed at all (must be 0)
    reader_seen: int = 0
    reader_seen_twice: int = 0
    elapsed_s: float = 0.0  # first worker start -> drained
    total_s: float = 0.0  # broker up -> checked
    codes: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return self.messages / self.elapsed_s if self.elapsed_s else 0.0

    def figures(self) -> str:
        """One line per figure, for print and assertion messages."""
        lines = [
            f"seed                {self.seed}",
            f"messages            {self.messages}",
            f"decided             {self.decided} (accepted {self.accepted}, rejected {self.rejected})",
            f"late results        {self.late_results} (decided UNKNOWN_REQUEST: {self.late_unknown})",
            f"workers started     {self.workers_started}",
            f"kills (SIGKILL)     {self.kills} ({self.kills_mid_txn} while a transaction was open)",
            f"sigterms            {self.sigterms}",
            f"rebalances          {self.rebalances} (assignments logged: {self.assignments})",
            f"broker restarts     {self.broker_restarts} ({self.restarts_mid_txn} while a transaction "
            "was open; decisions again after "
            + ", ".join(f"{s:.1f}s" for s in self.restart_recovery_s)
            + ")",
            f"txn aborts logged   {self.txn_aborts_logged}",
            f"aborted records     {self.aborted_records} (in aborted transactions)",
            f"aborted reads       {self.aborted_seen} (of them seen read_committed)",
            f"uncommitted reads   {self.uncommitted_seen}",
            f"reader saw          {self.reader_seen} records ({self.reader_seen_twice} twice)",
            f"duplicates          {self.duplicates}",
            f"losses              {self.losses}",
            f"misfiled            {self.misfiled}",
            f"unexpected verdicts {self.unexpected_verdicts}",
            f"rejection codes     {len(self.codes)}: "
            + ", ".join(f"{c}={n}" for c, n in sorted(self.codes.items())),
            f"elapsed             {self.elapsed_s:.1f}s (total with broker and checks {self.total_s:.1f}s)",
            f"throughput          {self.throughput:.0f} messages/s",
        ]
        for name, items in self.examples.items():
            lines.append(f"e.g. {name}: {items}")
        lines.append("violations          " + ("none" if not self.violations else ""))
        lines += [f"  - {v}" for v in self.violations]
        return "\n".join(lines)


def owned_partitions(log: Path) -> set[int]:
    """The intake partitions a worker owns now, from its "partitions assigned/revoked" log lines."""
    owned: set[int] = set()
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            if '"partitions ' not in line:
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                raw = event.get("partitions", [])
                # A list in the JSON log line (older log lines held it as JSON text).
                partitions = set(json.loads(raw) if isinstance(raw, str) else raw)
                if event.get("event") == "partitions assigned":
                    owned |= partitions
                elif event.get("event") == "partitions revoked":
                    owned -= partitions
    return owned


def _assignment_times(log_text: str) -> list[float]:
    """When a worker log says "partitions assigned" (epoch seconds)."""
    times = []
    for line in log_text.splitlines():
        if '"event": "partitions assigned"' in line:
            with contextlib.suppress(ValueError, KeyError):
                times.append(datetime.fromisoformat(json.loads(line)["ts"]).timestamp())
    return times


def _logged(log: Path, event: str) -> bool:
    """A worker log has a line with this event."""
    try:
        return f'"event": "{event}"' in log.read_text(errors="replace")
    except OSError:
        return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ChaosRun:
    """One run of :class:`Plan` against ``broker``; ``workdir`` receives the worker logs."""

    def __init__(
        self, plan: Plan, broker: PrivateBroker, workdir: Path, out: Callable[[str], None] = print
    ) -> None:
        self.plan = plan
        self.broker = broker
        self.workdir = workdir
        self.out = out
        self.rng = random.Random(plan.seed)  # a reproducible schedule
        self.report = Report(seed=plan.seed)
        self.workers: list[WorkerProc] = []
        self.samples: dict[str, Sample] = {}
        self.late: set[str] = set()
        self.published = 0
        self.config: Config | None = None
        self.reader: ConcurrentReader | None = None
        self._publish_lock = asyncio.Lock()
        self._recovery: tuple[float, int] | None = None  # (broker up at, decided then)
        self._t0 = time.monotonic()

    # --- helpers ---------------------------------------------------------------------

    def say(self, text: str) -> None:
        decided = self.reader.decided if self.reader else 0
        self.out(
            f"[{time.monotonic() - self._t0:7.1f}s] decided {decided:>7} "
            f"published {self.published:>7}  {text}"
        )

    def live(self) -> list[WorkerProc]:
        return [w for w in self.workers if w.expected_end is None]

    def start_worker(self, *args: str) -> WorkerProc:
        assert self.config is not None
        name = f"worker-{len(self.workers) + 1}"
        log = self.workdir / f"{name}.log"
        popen = start_worker(
            self.config,
            "--batch-size",
            str(self.plan.batch_size),
            *args,
            log=log,
            launcher="tests.integration.chaos_worker",
            env={"CHAOS_HOLD_COMMIT_MS": str(self.plan.hold_commit_ms)},
        )
        proc = WorkerProc(name, popen, log)
        self.workers.append(proc)
        self.report.workers_started += 1
        self.say(f"started {name} (pid {popen.pid}){' ' + ' '.join(args) if args else ''}")
        return proc

    async def mid_transaction(self, candidates: list[WorkerProc]) -> tuple[WorkerProc, bool]:
        """Wait (a few seconds at most) until one of ``candidates`` has just written a batch's
        records and return it: killed now, it leaves an open transaction to abort. When none
        does in time, a random candidate (False: not caught mid-transaction)."""
        assert self.reader is not None
        deadline = time.monotonic() + self.rng.uniform(2.0, 5.0)
        while (left := deadline - time.monotonic()) > 0:
            partitions = await self.reader.next_write(left)
            if partitions is None:
                break
            owners = [w for w in candidates if owned_partitions(w.log) & partitions]
            if owners:
                return self.rng.choice(owners), True
        return self.rng.choice(candidates), False

    async def kill(self, *procs: WorkerProc, mid: bool) -> None:
        for proc in procs:
            proc.expected_end = "SIGKILL"
            proc.popen.send_signal(signal.SIGKILL)
        for proc in procs:
            await asyncio.to_thread(proc.popen.wait, 30)
            self.report.kills += 1
            self.report.kills_mid_txn += mid
            self.say(f"SIGKILL {proc.name}" + (" (a transaction was open)" if mid else ""))

    async def terminate(self, proc: WorkerProc) -> None:
        proc.expected_end = "SIGTERM"
        proc.popen.send_signal(signal.SIGTERM)
        try:
            rc = await asyncio.to_thread(proc.popen.wait, 90)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            await asyncio.to_thread(proc.popen.wait, 30)
            rc = None
        self.report.sigterms += 1
        self.say(f"SIGTERM {proc.name}: exit {rc}")
        if rc != 0:
            self.report.violations.append(
                f"{proc.name} did not stop cleanly on SIGTERM (exit {rc}):\n{_tail(proc.log)}"
            )

    def check_alive(self) -> None:
        """A worker that ended without being told to is a failure of the run."""
        for proc in self.live():
            rc = proc.popen.poll()
            if rc is not None:
                proc.expected_end = f"died ({rc})"
                raise RunFailed(f"{proc.name} died on its own (exit {rc}); log tail:\n{_tail(proc.log)}")

    async def wait_for(self, done: Callable[[], bool], what: str, producer: asyncio.Task[None]) -> None:
        """Poll ``done`` while checking the workers, the producer and progress (stall guard)."""
        assert self.reader is not None
        last, since = self.reader.decided, time.monotonic()
        stall = self.plan.stall_seconds + self.plan.broker_down_seconds
        while not done():
            self.check_alive()
            if producer.done() and producer.exception() is not None:
                raise RunFailed(f"the producer failed: {producer.exception()!r}")
            if self.reader.failed() is not None:
                raise RunFailed(f"the concurrent reader failed: {self.reader.failed()!r}")
            if self.reader.decided != last:
                last, since = self.reader.decided, time.monotonic()
            elif time.monotonic() - since > stall:
                raise RunFailed(f"no progress for {stall:g}s while waiting for {what}")
            await asyncio.sleep(0.1)

    # --- traffic -----------------------------------------------------------------------

    async def produce(self) -> None:
        """Publish ``messages`` samples in rounds, at most ``max_ahead`` ahead of decisions."""
        assert self.config is not None
        assert self.reader is not None
        plan, topics = self.plan, self.config.topics
        traffic = TrafficGenerator(
            Keyring.load(KEYRING, environ={}), seed=plan.seed, run_id=uuid.uuid4().hex[:8]
        )
        rng = random.Random(plan.seed + 1)  # apart from the schedule's: same traffic per seed
        producer = AIOKafkaProducer(
            bootstrap_servers=self.config.bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=120_000,
            client_id="chaos-producer",
        )
        await producer.start()
        try:
            while self.published < plan.messages:
                count = min(plan.chunk, plan.messages - self.published)
                while self.published + count - self.reader.decided > plan.max_ahead:
                    self.reader.progress.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.reader.progress.wait(), 1.0)
                # Fresh timestamps each round: requests expire 10 min after they are issued.
                chunk = list(traffic.mix(count, datetime.now(UTC)))
                late = [s for s in chunk if s.request is not None and rng.random() < plan.late_share]
                late_ids = {s.request_id for s in late}
                async with self._publish_lock:  # a broker restart waits for the round to finish
                    # Each step is acknowledged before the next: every request record is in
                    # before its result, except the late ones, sent after their results.
                    await asyncio.gather(
                        *[
                            await producer.send(topics.requests, s.request_bytes(), key=s.request_id.encode())
                            for s in chunk
                            if s.request is not None and s.request_id not in late_ids
                        ]
                    )
                    for s in chunk:
                        self.samples[s.request_id] = s
                    await asyncio.gather(
                        *[
                            await producer.send(
                                topics.intake,
                                s.message.value,
                                key=s.message.key,
                                headers=list(s.message.headers),
                            )
                            for s in chunk
                        ]
                    )
                    if late:
                        await asyncio.sleep(rng.uniform(0.0, 0.3))
                        await asyncio.gather(
                            *[
                                await producer.send(
                                    topics.requests, s.request_bytes(), key=s.request_id.encode()
                                )
                                for s in late
                            ]
                        )
                self.late |= late_ids
                self.published += count
        finally:
            await producer.stop()

    # --- the scenario --------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        """(fraction of messages decided, action), in order."""
        plan, rng = self.plan, self.rng
        events = [(rng.uniform(0.05, 0.12), "join")]
        events += [(rng.uniform(0.30, 0.55), "restart") for _ in range(plan.broker_restarts)]
        events.append((rng.uniform(0.60, 0.75), "term"))
        span = 0.70 / max(plan.kills, 1)
        events += [(rng.uniform(0.15 + i * span, 0.15 + (i + 1) * span), "kill") for i in range(plan.kills)]
        events.sort()
        events.append((rng.uniform(0.80, 0.92), "crash"))
        return events

    async def wait_started(self, producer: asyncio.Task[None]) -> None:
        """Until every live worker runs. A worker still starting up fails its start-up when
        the broker goes away (start-up needs the cluster and is not retried) and dies of a
        SIGTERM that comes before its signal handlers: the restart and the SIGTERM are for
        running workers."""
        await self.wait_for(
            lambda: all(_logged(w.log, "worker started") for w in self.live()),
            "the workers to finish starting",
            producer,
        )

    async def bounce_broker(self, producer: asyncio.Task[None]) -> None:
        assert self.reader is not None
        await self.wait_started(producer)
        async with self._publish_lock:
            _, mid = await self.mid_transaction(self.live())
            self.report.restarts_mid_txn += mid
            how = "SIGKILL" if self.plan.hard_broker_restart else "stop"
            self.say(f"broker restart: {how}" + (" (a transaction was open)" if mid else ""))
            started = time.monotonic()
            await self.broker.restart(hard=self.plan.hard_broker_restart, down=self.plan.broker_down_seconds)
            self.report.broker_restarts += 1
            self.say(f"broker restart: serving again after {time.monotonic() - started:.1f}s")
        self._recovery = (time.monotonic(), self.reader.decided)

    async def run(self) -> Report:
        """Set up topics, run the scenario, read everything back and check it."""
        plan = self.plan
        self._t0 = time.monotonic()
        self.config = await private_config(self.broker.bootstrap, partitions=plan.partitions)
        self.reader = ConcurrentReader(self.config)
        await self.reader.start()
        events = self.schedule()
        self.say("schedule: " + ", ".join(f"{action}@{at:.2f}" for at, action in events))
        producer = asyncio.create_task(self.produce(), name="chaos-producer")
        run_started = time.monotonic()
        try:
            self.start_worker()
            for at, action in events:
                target = int(at * plan.messages)

                def traffic_done(t: int = target) -> bool:
                    return producer.done() and self._past(t)

                def reached(t: int = target) -> bool:
                    return self._past(t)

                if action == "crash":
                    await self.wait_for(traffic_done, "the end of the traffic", producer)
                else:
                    await self.wait_for(reached, f"{action} at {target}", producer)
                await asyncio.sleep(self.rng.uniform(0.0, 0.4))  # a random point, not a boundary
                await self.act(action, producer)
                await self.wait_recovered(producer)
            producer.result()
            await self.drain()
            self.report.elapsed_s = time.monotonic() - run_started
        except RunFailed as exc:
            self.report.violations.append(str(exc))
        finally:
            await self.cleanup(producer)
        if self.report.elapsed_s:  # the run got to the end: check what it left
            await self.check()
        self.report.total_s = time.monotonic() - self._t0
        return self.report

    def _past(self, target: int) -> bool:
        assert self.reader is not None
        return self.reader.decided >= target

    async def wait_recovered(self, producer: asyncio.Task[None]) -> None:
        """After a broker restart: the workers are alive and decisions flow again."""
        if self._recovery is None:
            return
        assert self.reader is not None
        up, before = self._recovery
        remaining = self.published - before
        need = before + min(3 * self.plan.batch_size, max(remaining, 1))
        await self.wait_for(
            lambda: self.reader is not None and self.reader.decided >= need,
            "decisions after the broker restart",
            producer,
        )
        self.check_alive()
        recovery = time.monotonic() - up
        self.report.restart_recovery_s.append(recovery)
        self._recovery = None
        self.say(
            f"decisions flow again {recovery:.1f}s after the broker restart; {len(self.live())} workers alive"
        )

    async def act(self, action: str, producer: asyncio.Task[None]) -> None:
        if action == "join":
            self.start_worker()
        elif action == "kill":
            victim, mid = await self.mid_transaction(self.live())
            await self.kill(victim, mid=mid)
            self.start_worker()  # a replacement joins; the victim leaves at its session timeout
        elif action == "term":
            await self.wait_started(producer)
            await self.terminate(self.rng.choice(self.live()))
            if not self.live():
                self.start_worker()
        elif action == "restart":
            await self.bounce_broker(producer)
        elif action == "crash":
            _, mid = await self.mid_transaction(self.live())
            await self.kill(*self.live(), mid=mid)

    async def drain(self) -> None:
        burst = self.start_worker("--burst")
        try:
            rc = await asyncio.to_thread(burst.popen.wait, self.plan.drain_seconds)
        except subprocess.TimeoutExpired as exc:
            raise RunFailed(
                f"the --burst worker did not finish within {self.plan.drain_seconds:g}s; "
                f"log tail:\n{_tail(burst.log)}"
            ) from exc
        burst.expected_end = f"exit {rc}"
        self.say(f"{burst.name} (--burst) exited {rc}")
        if rc != 0:
            raise RunFailed(f"the --burst worker exited {rc}; log tail:\n{_tail(burst.log)}")

    async def cleanup(self, producer: asyncio.Task[None]) -> None:
        if not producer.done():
            producer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await producer
        for proc in self.workers:
            if proc.popen.poll() is None:
                proc.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.popen.wait, 30)
        if self.reader is not None:
            await self.reader.stop()
        assigned: list[float] = []
        for proc in self.workers:
            text = proc.log.read_text(errors="replace") if proc.log.exists() else ""
            assigned += _assignment_times(text)
            self.report.txn_aborts_logged += text.count('"event": "transaction aborted')
        self.report.assignments = len(assigned)
        # Every member logs its assignment once per rebalance, all within moments of each other.
        assigned.sort()
        generations = sum(1 for i, at in enumerate(assigned) if i == 0 or at - assigned[i - 1] > 1.5)
        self.report.rebalances = max(0, generations - 1)

    # --- the checks ------------------------------------------------------------------------

    async def check(self) -> None:
        assert self.config is not None
        assert self.reader is not None
        t, report = self.config.topics, self.report
        intake = await read_all(self.config, t.intake)
        agent = await read_all(self.config, t.agent)
        quarantine = await read_all(self.config, t.quarantine)
        audit = await read_all(self.config, t.audit)
        uncommitted = []
        for topic in (t.agent, t.quarantine, t.audit):
            uncommitted += await read_all(self.config, topic, isolation="read_uncommitted")

        report.messages = len(intake)
        if report.messages != self.plan.messages:
            report.violations.append(
                f"intake holds {report.messages} records, {self.plan.messages} were published"
            )
        origin_of = {}  # request id (intake key) -> origin
        for r in intake:
            origin_of[r.key] = f"{t.intake}/{r.partition}/{r.offset}"
        if len(origin_of) != len(intake):
            report.violations.append("intake keys are not unique: the checks below are unreliable")
        origins = set(origin_of.values())

        decisions: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for r in audit:
            event = json.loads(r.value or b"{}")
            if event.get("kind", "decision") == "decision":
                decisions[event["origin"]].append(event)
        agent_n = collections.Counter(origin_of.get(r.key, f"?key={r.key}") for r in agent)
        quarantine_n = collections.Counter(
            r.headers.get("tg-origin", b"?").decode(errors="replace") for r in quarantine
        )

        dup, lost, misfiled, unexpected = [], [], [], []
        for origin in sorted(origins):
            events = decisions.get(origin, [])
            rejected = bool(events) and events[0]["outcome"] == "rejected"
            extra = max(0, len(events) - 1) + max(0, agent_n[origin] - 1) + max(0, quarantine_n[origin] - 1)
            if extra:
                dup.extend([origin] * extra)
            if not events:
                lost.append(f"{origin} (no decision)")
            if agent_n[origin] == 0:
                lost.append(f"{origin} (no agent envelope)")
            if rejected and quarantine_n[origin] == 0:
                lost.append(f"{origin} (rejected, not quarantined)")
            if events and not rejected and quarantine_n[origin]:
                misfiled.append(f"{origin} (accepted, but quarantined)")
        strays = (set(decisions) | set(agent_n) | set(quarantine_n)) - origins
        misfiled += [f"{s} (output of no intake record)" for s in sorted(strays)]

        key_of = {origin: key for key, origin in origin_of.items()}
        codes: collections.Counter[str] = collections.Counter()
        for origin, events in decisions.items():
            if origin not in origins:
                continue
            event = events[0]
            sample = self.samples.get(key_of[origin])
            got = (event["stage"], event["code"]) if event["outcome"] == "rejected" else None
            if got is None:
                report.accepted += 1
            else:
                report.rejected += 1
                codes[event["code"]] += 1
            if sample is None:
                unexpected.append(f"{origin}: no sample for key {key_of[origin]}")
                continue
            allowed = {sample.expect}
            if sample.request_id in self.late:
                allowed.add(UNKNOWN_REQUEST)
                report.late_unknown += got == UNKNOWN_REQUEST
            if got not in allowed:
                unexpected.append(f"{origin} {sample.kind}: expected {sample.expect}, got {got}")
        report.decided = sum(1 for o in origins if decisions.get(o))
        report.late_results = len(self.late)
        report.codes = dict(codes)

        committed = {(r.topic, r.partition, r.offset) for r in agent + quarantine + audit}
        aborted = {(r.topic, r.partition, r.offset) for r in uncommitted} - committed
        seen = self.reader.seen
        report.aborted_records = len(aborted)
        report.aborted_seen = len(seen & aborted)
        report.uncommitted_seen = len(seen - committed)
        report.reader_seen = len(seen)
        report.reader_seen_twice = self.reader.seen_twice
        report.duplicates, report.losses = len(dup), len(lost)
        report.misfiled, report.unexpected_verdicts = len(misfiled), len(unexpected)
        for name, items in (
            ("duplicates", dup),
            ("losses", lost),
            ("misfiled", misfiled),
            ("unexpected verdicts", unexpected),
            ("aborted reads", sorted(seen & aborted)),
        ):
            if items:
                report.examples[name] = [str(i) for i in items[:5]]
        for name, value in (
            ("duplicates", report.duplicates),
            ("losses", report.losses),
            ("misfiled", report.misfiled),
            ("unexpected verdicts", report.unexpected_verdicts),
            ("aborted reads", report.aborted_seen),
            ("uncommitted reads", report.uncommitted_seen),
        ):
            if value:
                report.violations.append(f"{name}: {value}")
        expected_codes = {s.expect[1] for s in self.samples.values() if s.expect is not None}
        if missing := expected_codes - set(codes):
            report.violations.append(f"rejection codes never decided: {sorted(missing)}")


async def run_chaos(
    plan: Plan, broker: PrivateBroker, workdir: Path, out: Callable[[str], None] = print
) -> Report:
    """Run ``plan`` on ``broker`` (already started); the report of the run."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    return await ChaosRun(plan, broker, workdir, out).run()
