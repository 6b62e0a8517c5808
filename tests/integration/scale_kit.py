"""A scale-out run on a real broker: an autoscaler that computes the intake lag as KEDA's Kafka
scaler does and starts and stops ``toolgate run`` processes as the HPA would, each a static group
member named like a StatefulSet pod, under a load ramp; one worker restarted within the session.

Used by tests/integration/test_scale.py (the short run in ``make test``) and
ops/bench/scale_bench.py (the full run, with and without static membership).

KEDA's lag (kedacore/keda, pkg/scalers/kafka_scaler.go, getLagForPartition and getTotalLag): per
partition, the newest offset (the high watermark) minus the group's committed offset; a partition
without a committed offset counts 1 under offsetResetPolicy latest, its whole high watermark
under earliest; the total, capped at partitions x lagThreshold (allowIdleConsumers false), is the
metric; the HPA asks for ceil(total / lagThreshold) replicas within min and max. KEDA is active
(scales from zero) while the total exceeds activationLagThreshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from toolgate._config import Config
from toolgate.operations._traffic import Sample
from toolgate.service._kafka import client_settings

from tests.integration.worker_kit import CLEAN, check_exactly_once, read_all, samples, start_worker

Clock = Callable[[], float]


def keda_partition_lag(committed: int | None, newest: int, policy: str = "earliest") -> int:
    """One partition's lag as KEDA's Kafka scaler computes it."""
    if committed is None or committed < 0:
        return 1 if policy == "latest" else newest
    return newest - committed


def keda_total_lag(
    committed: dict[int, int | None], newest: dict[int, int], threshold: int, policy: str
) -> int:
    """The scaler's metric: the partitions' lags summed, capped at partitions x threshold."""
    total = sum(keda_partition_lag(committed.get(p), n, policy) for p, n in newest.items())
    return min(total, len(newest) * threshold)


def hpa_replicas(total: int, threshold: int, low: int, high: int) -> int:
    """What the HPA asks for from an AverageValue target of ``threshold``."""
    return max(low, min(high, math.ceil(total / threshold)))


@dataclass
class Worker:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Event:
    """A scale event or restart: when, what, and how long until the group settled."""

    at: float
    what: str
    settled_s: float | None = None


@dataclass
class ScaleReport:
    static: bool
    results: int = 0
    counts: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    replicas_seen: list[int] = field(default_factory=list)
    fenced_lines: int = 0
    restart_rebalanced: list[str] = field(default_factory=list)  # other workers that rebalanced
    drained_lag: dict[str, int] = field(default_factory=dict)  # KEDA's metric on the drained intake

    def lines(self) -> list[str]:
        kind = "static membership" if self.static else "dynamic membership"
        out = [f"scale-out run, {kind}: {self.results} results, replicas {self.replicas_seen}"]
        for e in self.events:
            settled = "not settled" if e.settled_s is None else f"{e.settled_s:.2f} s"
            out.append(f"  {e.what:<34} pause until the group settled: {settled}")
        lost = self.counts.get("agent_missing", 0) + self.counts.get("audit_missing", 0)
        dup = self.counts.get("agent_duplicates", 0) + self.counts.get("audit_duplicates", 0)
        out.append(f"  lost {lost}, duplicated {dup}, fenced-producer log lines {self.fenced_lines}")
        others = ", ".join(self.restart_rebalanced) or "none"
        out.append(f"  workers that rebalanced during the restart: {others}")
        out.append(f"  KEDA lag of the drained intake: {self.drained_lag}")
        return out


def _events(log: Path, name: str) -> list[tuple[float, dict[str, Any]]]:
    out = []
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError, KeyError):
                    event = json.loads(line)
                    out.append((datetime.fromisoformat(event["ts"]).timestamp(), event))
    return out


class ScaleRun:
    """One run: 12 intake partitions, load bursts, the KEDA-style autoscaler, one restart."""

    def __init__(
        self,
        config: Config,
        folder: Path,
        *,
        static: bool = True,
        results: int = 1500,
        max_replicas: int = 4,
        lag_threshold: int = 25,
        poll_s: float = 0.5,
        stabilization_s: float = 8.0,
        session_timeout_ms: int = 6000,
        clock: Clock = time.time,
    ) -> None:
        self.config = config
        self.folder = folder
        self.static = static
        self.results = results
        self.max_replicas = max_replicas
        self.threshold = lag_threshold
        self.poll_s = poll_s
        self.stabilization_s = stabilization_s
        self.session_timeout_ms = session_timeout_ms
        self.clock = clock
        self.workers: list[Worker] = []
        self.report = ScaleReport(static=static, results=results)
        self._admin: AIOKafkaAdminClient | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._tps = [TopicPartition(config.topics.intake, p) for p in range(config.partitions.intake)]
        self._lock = asyncio.Lock()  # one scale event or restart at a time
        self.hold_at_max = True  # no scale-down from the maximum until the restart is done

    # --------------------------------------------------------------- workers as the HPA runs them
    def _start(self, name: str) -> Worker:
        env = {"TOOLGATE_SESSION_TIMEOUT_MS": str(self.session_timeout_ms)}
        if self.static:
            env["TOOLGATE_GROUP_INSTANCE_ID"] = name
        log = self.folder / f"{name}.log"
        return Worker(name, start_worker(self.config, log=log, env=env), log)

    async def _stop(self, worker: Worker) -> None:
        worker.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.proc.wait, 60)

    async def scale_to(self, replicas: int) -> None:
        """StatefulSet order: add the next ordinals, remove the highest first."""
        async with self._lock:
            await self._scale_to(replicas)

    async def _scale_to(self, replicas: int) -> None:
        before = len(self.workers)
        if replicas == before:
            return
        at = self.clock()
        if replicas > before:
            self.workers += [self._start(f"toolgate-{i}") for i in range(before, replicas)]
        else:
            gone, self.workers = self.workers[replicas:], self.workers[:replicas]
            await asyncio.gather(*(self._stop(w) for w in gone))
        self.report.events.append(Event(at, f"scale {before} -> {replicas}"))
        self.report.replicas_seen.append(replicas)

    async def restart(self, index: int) -> None:
        """SIGTERM one worker and start it again under the same name at once."""
        async with self._lock:
            worker = self.workers[index]
            at = self.clock()
            await self._stop(worker)
            self.workers[index] = self._start(worker.name)
            self.report.events.append(Event(at, f"restart {worker.name}"))

    # ------------------------------------------------------------------------ the lag, as KEDA
    async def lag(self, policy: str = "earliest") -> int:
        assert self._admin is not None
        assert self._reader is not None
        offsets = await self._admin.list_consumer_group_offsets(self.config.group_id)
        committed = {
            tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == self.config.topics.intake
        }
        newest = {tp.partition: n for tp, n in (await self._reader.end_offsets(self._tps)).items()}
        return keda_total_lag(committed, newest, self.threshold, policy)

    async def autoscale_until(self, done: Callable[[], bool], bound_s: float) -> None:
        """Poll the lag; scale up at once, down one pod per stabilization window."""
        below_since: float | None = None
        deadline = self.clock() + bound_s
        while not done():
            if self.clock() > deadline:
                raise AssertionError(f"the run did not finish within {bound_s:g} s")
            want = hpa_replicas(await self.lag(), self.threshold, 1, self.max_replicas)
            current = len(self.workers)
            if want > current:
                await self.scale_to(want)
                below_since = None
            elif want < current and not (self.hold_at_max and current == self.max_replicas):
                below_since = below_since or self.clock()
                if self.clock() - below_since >= self.stabilization_s:
                    await self.scale_to(current - 1)
                    below_since = None
            else:
                below_since = None
            await asyncio.sleep(self.poll_s)  # the autoscaler's polling interval

    # ---------------------------------------------------------------------------- traffic
    async def publish(self, items: list[Sample]) -> None:
        producer = AIOKafkaProducer(**client_settings(self.config), acks="all", linger_ms=5)
        await producer.start()
        try:
            for sample in items:
                raw = sample.request_bytes()
                if raw is not None:
                    await producer.send(self.config.topics.requests, raw, key=sample.request_id.encode())
            for sample in items:
                message = sample.message
                await producer.send(
                    self.config.topics.intake, message.value, key=message.key, headers=list(message.headers)
                )
            await producer.flush()
        finally:
            await producer.stop()

    async def decided(self) -> int:
        assert self._admin is not None
        offsets = await self._admin.list_consumer_group_offsets(self.config.group_id)
        return sum(meta.offset for tp, meta in offsets.items() if tp.topic == self.config.topics.intake)

    # ------------------------------------------------------------------------------- the run
    async def run(self) -> ScaleReport:
        settings = client_settings(self.config)
        self._admin = AIOKafkaAdminClient(**settings)
        self._reader = AIOKafkaConsumer(**settings, group_id=None, isolation_level="read_uncommitted")
        await self._admin.start()
        await self._reader.start()
        items = samples(self.results, seed=31)
        try:
            await self.scale_to(1)
            await self.wait_owned(self.config.partitions.intake, 60)
            self.settle(self.report.events[-1])
            # The ramp: a small load the single worker keeps up with, then a burst it does not.
            first = len(items) // 10
            await self.publish(items[:first])
            await self.publish(items[first:])
            published = len(items)
            state = {"decided": 0}

            async def refresh() -> None:
                state["decided"] = await self.decided()

            def drained_and_one() -> bool:
                return state["decided"] >= published and len(self.workers) == 1

            restarted = False

            async def watch() -> None:
                nonlocal restarted
                while True:
                    await refresh()
                    if not restarted and len(self.workers) == self.max_replicas:
                        # Settled at the maximum: restart one worker within the session timeout.
                        await self.wait_owned(self.config.partitions.intake, 60)
                        await self.restart(1)
                        await self.wait_owned(self.config.partitions.intake, 60)
                        restarted = True
                        self.hold_at_max = False
                    await asyncio.sleep(self.poll_s)

            watcher = asyncio.create_task(watch())
            try:
                await self.autoscale_until(drained_and_one, 240)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            await self.wait_owned(self.config.partitions.intake, 60)
            for event in self.report.events:
                self.settle(event)
            self.report.drained_lag = {
                "earliest": await self.lag("earliest"),
                "latest": await self.lag("latest"),
            }
            self.check_restart()
        finally:
            for worker in self.workers:
                with contextlib.suppress(ProcessLookupError):
                    await self._stop(worker)
            await self._reader.stop()
            await self._admin.close()
        t = self.config.topics
        agent = await read_all(self.config, t.agent)
        quarantine = await read_all(self.config, t.quarantine)
        audit = await read_all(self.config, t.audit)
        self.report.counts = check_exactly_once(items, agent, quarantine, audit)
        self.report.fenced_lines = sum(
            1
            for w in self.folder.glob("*.log")
            for line in w.read_text(errors="replace").splitlines()
            if "fenced" in line
        )
        return self.report

    def assignments(self) -> dict[str, set[int] | None]:
        """Each live worker's partitions since its last start (None: no assignment yet)."""
        out: dict[str, set[int] | None] = {}
        for worker in self.workers:
            mine: set[int] | None = None
            for _, event in _events(worker.log, worker.name):
                if event.get("event") == "configuration":  # a (re)start of this worker
                    mine = None
                elif event.get("event") == "partitions assigned":
                    mine = set(event.get("owned", event.get("partitions", [])))
                elif event.get("event") == "partitions revoked" and mine is not None:
                    mine -= set(event.get("partitions", []))
            out[worker.name] = mine
        return out

    def owned(self) -> set[int]:
        return set().union(*(m for m in self.assignments().values() if m))

    def settled(self, count: int) -> bool:
        """Every live worker has its assignment and together they own every partition once."""
        mine = list(self.assignments().values())
        return all(m is not None for m in mine) and sum(len(m or ()) for m in mine) == count == len(
            self.owned()
        )

    async def wait_owned(self, count: int, bound_s: float) -> None:
        deadline = self.clock() + bound_s
        while not self.settled(count):
            if self.clock() > deadline:
                raise AssertionError(f"the workers own {sorted(self.owned())} of {count} partitions")
            await asyncio.sleep(0.2)  # polling the workers' logs

    def settle(self, event: Event) -> None:
        """The pause of ``event``: until the last "partitions assigned" line of any worker after it
        (before the next event)."""
        later = [e.at for e in self.report.events if e.at > event.at]
        until = min(later) if later else math.inf
        times = [
            at
            for w in self.folder.glob("*.log")
            for at, e in _events(w, w.stem)
            if e.get("event") == "partitions assigned" and event.at <= at < until
        ]
        event.settled_s = max(times) - event.at if times else None

    def check_restart(self) -> None:
        """Which other workers revoked or were assigned partitions while one restarted."""
        restarts = [e for e in self.report.events if e.what.startswith("restart")]
        if not restarts:
            return
        at = restarts[0].at
        later = [e.at for e in self.report.events if e.at > at]
        until = min(later) if later else math.inf
        name = restarts[0].what.split()[-1]
        for log in self.folder.glob("*.log"):
            if log.stem == name:
                continue
            moved = [
                e
                for t, e in _events(log, log.stem)
                if at <= t < until and e.get("event") in ("partitions assigned", "partitions revoked")
            ]
            if moved:
                self.report.restart_rebalanced.append(log.stem)


def clean(report: ScaleReport) -> dict[str, Any]:
    """The counts that must be zero, as check_exactly_once names them."""
    return {k: report.counts.get(k) for k in CLEAN}
