"""One worker bench run: its topics, groups and processes, the backlog runs, the latency cases.

Everything a run creates is its own: topics ``bench.<run id>.*``, consumer groups and
transactional ids with the same tag, a bench-only contract in a temporary folder; all of it
goes at the end, also on failure. Each variant's process is ``worker_bench.py`` with a flag
(``--child``: :mod:`ops.bench.worker`, ``--copier``: :mod:`ops.bench.copier`, ``--floor``:
:mod:`ops.bench.floor`; the baseline checkout's own ``worker_bench.py --child``); the peer is
:mod:`ops.bench.peer`. :func:`bench_main` runs them interleaved and returns the figures
:mod:`ops.bench.summary` prints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import TopicPartition
from toolgate._config import LOCAL_BOOTSTRAP, Config, Partitions, Topics
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message, Origin, decode_request
from toolgate.service._kafka import AiokafkaClients, ensure_topics

from ops.bench.backlog import (
    BASELINE,
    FLOOR,
    PARTITIONS,
    REJECT_EVERY,
    VARIANTS,
    Result,
    results,
    run_tag,
    run_topics,
    write_contract,
)
from ops.bench.copier import copier_templates
from ops.bench.gate_bench import decide_batch_us
from ops.bench.measure import (
    ROOT,
    Load,
    broker_pid,
    cpu_snapshot,
    describe,
    knows_state_topic,
    lanes,
    machine_others,
    paced,
    percentiles,
)
from ops.bench.peer import find_peer, peer_run
from ops.bench.summary import summarise, targets

ENTRY = Path(__file__).resolve().parent / "worker_bench.py"


@dataclass
class Child:
    """A worker subprocess and what it reported."""

    proc: asyncio.subprocess.Process
    stderr_path: Path
    partitions: list[int] = field(default_factory=list)
    events: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    done: dict[str, Any] | None = None
    reader: asyncio.Task[None] | None = None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())

    async def read_events(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") in ("assigned", "revoked"):
                self.partitions = event["partitions"]
            await self.events.put(event)
        await self.events.put({"event": "eof"})

    def stderr_tail(self) -> str:
        try:
            return "\n".join(self.stderr_path.read_text().splitlines()[-20:])
        except OSError:
            return ""


WORKER_BATCH_SIZE = 500  # WorkerOptions' defaults, which the worker runs use
WORKER_LINGER_MS = 20
WORKER_PRODUCER_BATCH_BYTES = 512 * 1024


def plan(variant: str) -> tuple[str, int, int]:
    """(what the child process runs, how many processes, intake partitions) of a variant."""
    if variant == "worker x2":
        return "worker", 2, PARTITIONS
    if variant.startswith("worker p"):  # the partition sweep: "worker p12"
        return "worker", 1, int(variant.removeprefix("worker p"))
    return variant, 1, PARTITIONS


class Bench:
    """One benchmark run: its tag, its topics and groups (all removed at the end)."""

    def __init__(
        self,
        bootstrap: str,
        messages: int,
        tmp: Path,
        *,
        hex_ids: bool = False,
        py_spy: str | None = None,
        baseline: Path | None = None,
        peer: tuple[Path, Path] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.peer = peer  # (its binary, its source folder)
        self.messages = messages
        self.tmp = tmp
        self.py_spy = py_spy
        self.run_id = run_tag(hex_ids)
        self.prefix = f"bench.{self.run_id}"
        self.contracts_dir = write_contract(tmp / "contracts")
        self.baseline = baseline  # a checkout of an earlier commit: its own worker_bench --child
        self._templates: dict[str, list[dict[str, Any]]] | None = None
        self.topics: set[str] = set()
        self.groups: set[str] = set()
        self.children: list[Child] = []
        self.now = datetime.now(UTC)
        self.backlog = list(results(self.run_id, messages, self.now))
        self.clients = AiokafkaClients(Config(bootstrap=bootstrap))
        self.broker_pid = broker_pid(bootstrap)

    def decide_batch_us(self) -> float:
        """The gate bench's ``decide_batch`` case on this run's workload (its contract, the
        first batch of its backlog, every tenth rejected) in this process, no Kafka: CPU
        microseconds per result, what the worker's ``decide`` phase is compared to."""
        gate = Gate(ContractSet.load(self.contracts_dir))
        pool = [
            (
                Message(key=r.key, value=r.value, headers=r.headers, origin=Origin("i", 0, i)),
                decode_request(r.request),
            )
            for i, r in enumerate(self.backlog[:WORKER_BATCH_SIZE])
        ]
        return decide_batch_us(gate, pool, self.now)

    # --- topics -----------------------------------------------------------------------

    def requests_topic(self, partitions: int) -> str:
        """One requests topic per intake partition count: the two are co-partitioned."""
        return f"{self.prefix}.requests.p{partitions}"

    def config(self, tag: str, partitions: int = PARTITIONS) -> Config:
        name = f"{self.prefix}.{tag}"
        topics = Topics(
            requests=self.requests_topic(partitions),
            intake=f"{name}.intake",
            agent=f"{name}.agent",
            quarantine=f"{name}.quarantine",
            audit=f"{name}.audit",
            state=f"{name}.state",
        )
        return Config(
            bootstrap=self.bootstrap,
            client_id=f"{self.prefix}",
            group_id=name,
            contracts_dir=str(self.contracts_dir),
            topics=topics,
            partitions=Partitions(requests=partitions, intake=partitions, agent=partitions, audit=partitions),
        )

    async def prepare_requests(self, partitions: int) -> None:
        """The requests topic for ``partitions`` with the backlog's request records."""
        setup = self.config(f"setup.p{partitions}", partitions)
        await self.create(setup)
        await self.delete(run_topics(setup) - {setup.topics.requests})
        await self.publish_requests(self.backlog, setup.topics.requests)

    async def create(self, config: Config) -> None:
        self.topics.update(run_topics(config))
        self.groups.add(config.group_id)
        report = await ensure_topics(config)
        if report.warnings:
            raise RuntimeError("; ".join(report.warnings))

    async def delete(self, topics: set[str]) -> None:
        if not topics:
            return
        # Every name is asked for, listed or not: a topic created a moment ago may be missing
        # from the metadata list_topics answers with (which is how a setup run's topics once
        # stayed behind). Then asked again while the list still shows some.
        admin = self.clients.admin()
        await admin.start()
        try:
            doomed = sorted(topics)
            for _ in range(5):
                with contextlib.suppress(Exception):  # unknown names: already gone
                    await admin.delete_topics(doomed)
                await asyncio.sleep(0.2)  # the deletion's metadata, before it is checked
                doomed = sorted(topics & set(await admin.list_topics()))
                if not doomed:
                    break
            else:
                print(f"WARNING: topics not deleted: {', '.join(doomed)}", file=sys.stderr)
            self.topics -= topics
        finally:
            await admin.close()

    async def delete_groups(self, wait_seconds: float = 60.0) -> None:
        """Delete the run's consumer groups. The workers leave theirs when they stop; the peer,
        stopped without its 20 s shutdown, stays a member until its session times out (45 s,
        franz-go's default), so a group still in use is asked again for up to ``wait_seconds``."""
        from aiokafka.protocol.admin import DeleteGroupsRequest

        non_empty = 68  # NON_EMPTY_GROUP
        admin = self.clients.admin()
        await admin.start()
        try:
            pending = sorted(self.groups)
            deadline = time.monotonic() + wait_seconds
            told = False
            while pending:
                busy = []
                for group in pending:
                    with contextlib.suppress(Exception):
                        answer = await admin.send_to_coordinator(group, DeleteGroupsRequest([group]))
                        if any(code == non_empty for _, code in answer.results):
                            busy.append(group)
                pending = busy
                if not pending or time.monotonic() > deadline:
                    break
                if not told:
                    told = True
                    print(
                        f"waiting for {len(pending)} group(s) to empty: {', '.join(pending)}", file=sys.stderr
                    )
                await asyncio.sleep(2)
            if pending:
                print(f"WARNING: consumer groups not deleted: {', '.join(pending)}", file=sys.stderr)
            self.groups.clear()
        finally:
            await admin.close()

    async def publish_requests(self, batch: list[Result], topic: str) -> None:
        producer = self.clients.producer(acks="all", linger_ms=5, max_batch_size=256 * 1024)
        await producer.start()
        try:
            futures = [await producer.send(topic, r.request, key=r.key) for r in batch]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    # --- workers ----------------------------------------------------------------------

    async def spawn(self, config: Config, variant: str, profile: str | None = None) -> Child:
        spec: dict[str, Any] = {
            "config": msgspec.to_builtins(config),
            "variant": variant,
            "contracts_dir": str(self.contracts_dir),
            "profile": profile,
            "transactional_prefix": f"{self.prefix}",
        }
        script, cwd, flag = ENTRY, ROOT, "--child"
        if variant == "copier":
            if set(self.clients.settings) - {"bootstrap_servers", "client_id", "security_protocol"}:
                raise RuntimeError("the copier runs on a plaintext broker only (no SASL or TLS settings)")
            if self._templates is None:
                self._templates = copier_templates(self.contracts_dir)
            t = config.topics
            spec = {
                "settings": self.clients.settings,
                "group_id": config.group_id,
                "topics": {
                    "intake": t.intake,
                    "agent": t.agent,
                    "quarantine": t.quarantine,
                    "audit": t.audit,
                },
                "templates": self._templates,
                "transactional_prefix": self.prefix,
                "batch_size": WORKER_BATCH_SIZE,
                "linger_ms": WORKER_LINGER_MS,
                "producer_batch_bytes": WORKER_PRODUCER_BATCH_BYTES,
            }
            flag = "--copier"
        elif variant == FLOOR:
            if set(self.clients.settings) - {"bootstrap_servers", "client_id", "security_protocol"}:
                raise RuntimeError("the floor runs on a plaintext broker only (no SASL or TLS settings)")
            if self._templates is None:
                self._templates = copier_templates(self.contracts_dir)
            agent = next(r for r in self._templates["accepted"] if r["topic"] == "agent")
            spec = {
                "settings": self.clients.settings,
                "group_id": config.group_id,
                "topics": {"intake": config.topics.intake, "agent": config.topics.agent},
                "value": agent["value"],
                "headers": agent["headers"],
                "transactional_prefix": self.prefix,
                "linger_ms": WORKER_LINGER_MS,
            }
            flag = "--floor"
        elif variant == BASELINE:
            # The baseline checkout's own bench script runs its own worker (its package name,
            # its imports): only the fields every version of Config knows are passed.
            assert self.baseline is not None
            script, cwd = self.baseline / "ops" / "bench" / "worker_bench.py", self.baseline
            t = config.topics
            spec["variant"] = "worker"
            baseline_contracts = self.tmp / "baseline-contracts"
            if not baseline_contracts.exists():
                write_contract(baseline_contracts, baseline=self.baseline)
            spec["contracts_dir"] = str(baseline_contracts)
            spec["config"] = {
                "bootstrap": config.bootstrap,
                "client_id": config.client_id,
                "group_id": config.group_id,
                "contracts_dir": str(baseline_contracts),
                "topics": {
                    "requests": t.requests,
                    "intake": t.intake,
                    "agent": t.agent,
                    "quarantine": t.quarantine,
                    "audit": t.audit,
                }
                # The run's own state changelog where that checkout has one (else its worker
                # would use the default topic of the shared broker).
                | ({"state": t.state} if knows_state_topic(self.baseline) else {}),
            }
        stderr_path = self.tmp / f"child-{len(self.children)}.log"
        command = [sys.executable, str(script), flag, json.dumps(spec)]
        if profile and self.py_spy:  # sample instead of cProfile: no overhead on the worker
            spec["profile"] = None
            command = [
                self.py_spy,
                "record",
                "--rate",
                "250",
                "--format",
                "raw",
                "--output",
                profile,
                "--",
                sys.executable,
                str(script),
                flag,
                json.dumps(spec),
            ]
        with stderr_path.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=str(cwd),
            )
        child = Child(proc, stderr_path)
        child.reader = asyncio.create_task(child.read_events())
        self.children.append(child)
        return child

    async def next_event(self, child: Child, wait_seconds: float) -> dict[str, Any]:
        try:
            event = await asyncio.wait_for(child.events.get(), wait_seconds)
        except TimeoutError:
            raise RuntimeError(
                f"worker {child.proc.pid} silent for {wait_seconds:g}s:\n{child.stderr_tail()}"
            ) from None
        if event["event"] == "eof":
            raise RuntimeError(f"worker {child.proc.pid} exited early:\n{child.stderr_tail()}")
        return event

    async def settled(
        self, children: list[Child], partitions: int = PARTITIONS, wait_seconds: float = 60.0
    ) -> None:
        """Wait until the children own all partitions between them, each some, and stay so."""
        deadline = time.monotonic() + wait_seconds
        quiet = 0.5
        while True:
            owned = [set(c.partitions) for c in children]
            good = (
                all(owned)
                and sum(map(len, owned)) == partitions
                and set().union(*owned) == set(range(partitions))
            )
            waits = [asyncio.ensure_future(c.events.get()) for c in children]
            finished, pending = await asyncio.wait(
                waits, timeout=quiet if good else 1.0, return_when=asyncio.FIRST_COMPLETED
            )
            for w in pending:
                w.cancel()
            for w in finished:
                if w.result()["event"] == "eof":
                    raise RuntimeError(f"a worker exited early:\n{children[0].stderr_tail()}")
            if good and not finished:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"partitions not settled after {wait_seconds:g}s: {owned}")

    async def stop(self, children: list[Child]) -> None:
        for child in children:
            with contextlib.suppress(Exception):
                child.send("stop")
                assert child.proc.stdin is not None
                child.proc.stdin.close()
        for child in children:
            try:
                await asyncio.wait_for(child.proc.wait(), 30)
            except TimeoutError:
                child.proc.kill()
                await child.proc.wait()
            if child.reader is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(child.reader, 5)
            if child in self.children:
                self.children.remove(child)

    async def kill_all(self) -> None:
        for child in list(self.children):
            if child.proc.returncode is None:
                child.proc.kill()
                await child.proc.wait()
            self.children.remove(child)

    # --- one backlog run --------------------------------------------------------------

    async def open_fill(self, config: Config, slug: str, partitions: int) -> tuple[Any, list[int]]:
        """A producer that has written the backlog to the intake in a transaction left open
        (invisible to read_committed until committed), and the records per partition."""
        fill = self.clients.producer(
            acks="all",
            linger_ms=5,
            max_batch_size=512 * 1024,
            transactional_id=f"{self.prefix}.fill.{slug}",
            transaction_timeout_ms=300_000,
        )
        await fill.start()
        try:
            await fill.begin_transaction()
            futures = [
                await fill.send(config.topics.intake, r.value, key=r.key, headers=r.headers)
                for r in self.backlog
            ]
            metadata = await asyncio.gather(*futures)
        except BaseException:
            await fill.stop()
            raise
        per_partition = [0] * partitions
        for meta in metadata:
            per_partition[meta.partition] += 1
        return fill, per_partition

    async def backlog_run(self, variant: str, repeat: int, profile: str | None = None) -> dict[str, Any]:
        kind, workers, partitions = plan(variant)
        slug = variant.replace(" ", "").replace("-", "")
        config = self.config(f"{slug}.{repeat}", partitions)
        await self.create(config)
        fill, per_partition = await self.open_fill(config, f"{slug}.{repeat}", partitions)
        children: list[Child] = []
        try:
            children = [await self.spawn(config, kind, profile) for _ in range(workers)]
            await self.settled(children, partitions)
            for child in children:
                child.send(f"go {sum(per_partition[p] for p in child.partitions)}")
                assert child.proc.stdin is not None
                await child.proc.stdin.drain()
                while (await self.next_event(child, 30))["event"] != "armed":
                    pass
            before = cpu_snapshot(self.broker_pid)
            own_before = time.process_time()
            await fill.commit_transaction()
            budget = max(120.0, self.messages / 100)
            for child in children:
                while child.done is None:
                    event = await self.next_event(child, budget)
                    if event["event"] == "done":
                        child.done = event
                    elif event["event"] in ("assigned", "revoked"):
                        raise RuntimeError(f"rebalance during the run: {event}")
            after = cpu_snapshot(self.broker_pid)
            own = time.process_time() - own_before
        finally:
            await self.stop(children)
            await fill.stop()
        done = [c.done for c in children if c.done is not None]
        first = min(d["first"] for d in done)
        last = max(d["last"] for d in done)
        check = await self.read_audit(config.topics.audit, partitions, expected=self.messages)
        await self.delete(run_topics(config) - {config.topics.requests})
        decided = sum(d["decided"] for d in done)
        rejected = sum(d["rejected"] for d in done)
        expected_rejected = sum(r.rejected for r in self.backlog)
        problems = []
        if decided != self.messages or check["events"] != self.messages:
            problems.append(f"decided {decided}, audit events {check['events']}, expected {self.messages}")
        if rejected != expected_rejected or check["rejected"] != expected_rejected:
            problems.append(
                f"rejected {rejected} (audit {check['rejected']}), "
                f"expected {expected_rejected}: {[d['by_code'] for d in done]}"
            )
        wall = last - first
        window = after[2] - before[2]
        workers_cpu = sum(d["cpu"] for d in done)
        broker_cpu = after[1] - before[1]
        machine = after[0] - before[0]
        return {
            "variant": variant,
            "repeat": repeat,
            "workers": len(children),
            "intake_partitions": partitions,
            # CPUs in use over the window: the broker, and everything but the broker, the
            # workers and this process (other users of a shared machine).
            "broker_cpus": broker_cpu / window if self.broker_pid else None,
            "other_cpus": max(0.0, machine - workers_cpu - broker_cpu - own) / window,
            "broker_us_per_result": broker_cpu / self.messages * 1e6 if self.broker_pid else None,
            "seconds": wall,
            "results": self.messages,
            "results_per_s": self.messages / wall,
            "cpu_us_per_result": sum(d["cpu"] for d in done) / self.messages * 1e6,
            "phases_us_per_result": {
                phase: sum(d["phases"].get(phase, 0.0) for d in done) / self.messages * 1e6
                for phase in done[0]["phases"]
            },
            "gc_us_per_result": sum(d["gc"] for d in done) / self.messages * 1e6,
            # Of the decide phase, the collector's pauses (an older checkout does not report them).
            "gc_in_decide_us_per_result": sum(d.get("gc_phases", {}).get("decide", 0.0) for d in done)
            / self.messages
            * 1e6
            if all("gc_phases" in d for d in done)
            else None,
            "audit_span_seconds": check["span"],
            "transactions": sum(d["committed"] for d in done),
            "aborted": sum(d["aborted"] for d in done),
            "partitions": per_partition,
            "problems": problems,
        }

    async def read_audit(
        self,
        topic: str,
        partitions: int,
        stamps: dict[bytes, int] | None = None,
        *,
        expected: int = 0,
        settle_seconds: float = 10.0,
    ) -> dict[str, Any]:
        """Count the committed audit events and their rejections; the span of their timestamps.

        ``stamps`` gets each event's timestamp (when the worker sent it) by key. Reads up to the
        end offsets (``read_committed``: the last stable offsets) and, while fewer than
        ``expected`` events were read, up to the end offsets read again, for ``settle_seconds``
        at most: a transaction's commit is acknowledged before the coordinator has written its
        markers, and until then its partition's last stable offset stays before its records.
        """
        consumer = self.clients.consumer(
            group_id=None,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        events = rejected = 0
        low, high = math.inf, -math.inf
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + settle_seconds
            while True:
                ends = await consumer.end_offsets(tps)
                while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                    batches = await consumer.getmany(timeout_ms=500, max_records=5000)
                    for records in batches.values():
                        for record in records:
                            events += 1
                            rejected += b'"outcome":"rejected"' in (record.value or b"")
                            low, high = min(low, record.timestamp), max(high, record.timestamp)
                            if stamps is not None:
                                stamps[record.key or b""] = record.timestamp
                if events >= expected or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)  # the markers are being written: read the offsets again
        finally:
            await consumer.stop()
        return {"events": events, "rejected": rejected, "span": (high - low) / 1000 if events else 0}

    # --- latency ----------------------------------------------------------------------

    async def latency_run(
        self, rate: float, seconds: float, one_at_a_time: int, variant: str = "worker", repeat: int = 1
    ) -> dict[str, Any]:
        """A live worker fed at ``rate`` results/s; latencies in ms, split at the decision.
        Then ``one_at_a_time`` results sent each once the previous one's envelope is read.
        ``variant``: ``worker``, :data:`BASELINE` for the --baseline-worktree checkout's, or
        :data:`FLOOR` (the transactional relay of :mod:`ops.bench.floor`, same cases)."""
        slug = {"worker": "live", BASELINE: "livebase", FLOOR: "livefloor"}[variant]
        config = self.config(f"{slug}.{repeat}")
        # A requests topic of its own: each live worker holds the same number of requests.
        own = msgspec.structs.replace(config.topics, requests=f"{self.prefix}.{slug}.{repeat}.requests")
        config = msgspec.structs.replace(config, topics=own)
        await self.create(config)
        count = max(1, int(rate * seconds))
        live = list(results(f"{self.run_id}{slug}{repeat}", count, datetime.now(UTC)))
        closed = list(results(f"{self.run_id}one{slug}{repeat}", one_at_a_time, datetime.now(UTC)))
        # The platform writes requests before calling adapters.
        await self.publish_requests(live + closed, config.topics.requests)
        child = await self.spawn(config, variant)
        consumer = self.clients.consumer(
            group_id=None,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        # linger 5 ms: the Java client's default since Kafka 4.0 (KIP-1030), what a platform's
        # producer sends with; one request per result would make the load generator the
        # broker's largest cost on a machine it shares with the worker.
        producer = self.clients.producer(acks="all", linger_ms=5)
        # One at a time: an adapter that sends each result as it has it (no linger to wait for
        # more) to an agent that waits for each envelope before its next call.
        single = self.clients.producer(acks="all", linger_ms=0)
        sent: dict[bytes, int] = {}
        received: dict[bytes, float] = {}
        waiting: dict[bytes, asyncio.Future[float]] = {}
        all_in = asyncio.Event()
        round_trips: list[float] = []
        receiver: asyncio.Task[None] | None = None
        try:
            await self.settled([child])
            await consumer.start()
            tps = [TopicPartition(config.topics.agent, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            await producer.start()
            await single.start()

            async def receive() -> None:
                while True:
                    batches = await consumer.getmany(timeout_ms=100)
                    now_ms, now = time.time() * 1000, time.perf_counter()
                    for records in batches.values():
                        for record in records:
                            key = record.key or b""
                            received[key] = now_ms
                            future = waiting.pop(key, None)
                            if future is not None and not future.done():
                                future.set_result(now)
                    if len(received) >= count:
                        all_in.set()

            async def send_live(result: Result) -> Any:
                stamp = int(time.time() * 1000)  # the record's CreateTime
                sent[result.key] = stamp
                return await producer.send(
                    config.topics.intake,
                    result.value,
                    key=result.key,
                    headers=result.headers,
                    timestamp_ms=stamp,
                )

            receiver = asyncio.create_task(receive())
            load = Load(self.broker_pid, child.proc.pid)
            futures, send_seconds = await paced(rate, live, send_live)
            load.stop()
            await asyncio.gather(*futures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), 60)
            loop = asyncio.get_running_loop()
            pending = iter(closed)
            gave_up = False

            async def one() -> bool:
                nonlocal gave_up
                result = next(pending)
                future: asyncio.Future[float] = loop.create_future()
                waiting[result.key] = future
                await (
                    await single.send(
                        config.topics.intake, result.value, key=result.key, headers=result.headers
                    )
                )
                try:
                    await asyncio.wait_for(future, 30)
                except TimeoutError:
                    gave_up = True
                    return False  # reported as fewer round trips than sent
                return True

            if closed:
                round_trips = await lanes(one, len(closed), 1)
        finally:
            if receiver is not None:
                receiver.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await receiver
            await single.stop()
            await producer.stop()
            await consumer.stop()
            await self.stop([child])
        decided: dict[bytes, int] = {}
        if variant != FLOOR:  # the floor writes no audit record
            await self.read_audit(config.topics.audit, PARTITIONS, decided)
        await self.delete(run_topics(config))
        worker: dict[str, Any] = {}
        while not child.events.empty():
            event = child.events.get_nowait()
            if event["event"] == "exit":
                worker = event
        keys = [k for k in sent if k in received]
        split = [k for k in keys if k in decided]
        window = load.window
        return {
            "variant": variant,
            "repeat": repeat,
            "waits": worker.get("waits") or {},
            "rate": rate,
            "sent": count,
            "received": len(keys),
            "one_at_a_time": percentiles(round_trips),
            "one_at_a_time_sent": len(closed),
            "one_at_a_time_received": len(round_trips),
            "gave_up": gave_up,
            "send_seconds": send_seconds,
            "achieved_rate": count / send_seconds,
            "total": percentiles([received[k] - sent[k] for k in keys]),
            "to_decision": percentiles([decided[k] - sent[k] for k in split]),
            "decision_to_agent": percentiles([received[k] - decided[k] for k in split]),
            "txn_mean_ms": worker.get("txn_mean_ms"),
            "batch_mean": worker.get("batch_mean"),
            "transactions": worker.get("transactions"),
            "gc_max_ms": worker.get("gc_max_ms"),
            "txn_p99_ms": worker.get("txn_p99_ms"),
            "gc_full": worker.get("gc_full"),
            "requests_held": worker.get("requests"),
            # CPUs in use while sending: the worker, the broker, this process (producer and
            # consumer), and everything else (other users of a shared machine).
            "worker_cpus": load.known_cpu[0] / window,
            "broker_cpus": load.broker_cpu / window,
            "bench_cpus": load.own / window,
            "other_cpus": load.others(),
        }


async def bench_main(args: argparse.Namespace) -> dict[str, Any]:
    bootstrap = os.environ.get("TOOLGATE_BOOTSTRAP", LOCAL_BOOTSTRAP)
    variants = [v for v in VARIANTS if v in args.variants]
    baseline = Path(args.baseline_worktree) if args.baseline_worktree else None  # resolved by main()
    if baseline is not None:
        variants.insert(variants.index("worker") + 1 if "worker" in variants else len(variants), BASELINE)
    variants += [f"worker p{n}" for n in args.partitions if n != PARTITIONS]
    if args.partitions and "worker" not in variants:
        variants.append("worker")
    peer, peer_skipped = None, ""
    if "peer" in variants:
        peer, peer_skipped = find_peer(args.peer_source)
        if peer is None:
            variants.remove("peer")
            if not args.json:
                print(f"peer: skipped: {peer_skipped}", flush=True)
    others_before = machine_others(1.0)  # nothing of the bench runs yet: all of it is others' work
    with tempfile.TemporaryDirectory(prefix="worker-bench-") as tmp:
        bench = Bench(
            bootstrap,
            args.messages,
            Path(tmp),
            hex_ids=args.hex_ids,
            py_spy=args.py_spy,
            baseline=baseline,
            peer=peer,
        )
        runs: list[dict[str, Any]] = []
        latency = latency_base = latency_floor = None
        latency_runs: list[dict[str, Any]] = []
        decide_alone: list[float] = []
        try:
            for partitions in sorted({plan(v)[2] for v in variants}):
                await bench.prepare_requests(partitions)
            for repeat in range(1, args.repeat + 1):
                for variant in variants:
                    run = await (
                        peer_run(bench, repeat) if variant == "peer" else bench.backlog_run(variant, repeat)
                    )
                    runs.append(run)
                    if not args.json:
                        print(
                            f"  run {repeat} {variant:<20} {run['results_per_s']:>8,.0f} results/s "
                            f"({run['seconds']:.2f}s, audit span {run['audit_span_seconds']:.2f}s, "
                            f"{run['transactions']} txns)"
                            + (f"  {run['problems']}" if run["problems"] else ""),
                            flush=True,
                        )
                if "worker" in variants:
                    # Between the rounds, while nothing else of the bench runs.
                    decide_alone.append(bench.decide_batch_us())
            if args.profile:
                for variant in variants:
                    if variant not in ("worker x2", BASELINE, "peer"):
                        slug = variant.replace("-", "_")
                        await bench.backlog_run(variant, 0, profile=str(Path(args.profile) / slug))
            summary = summarise(runs, variants)
            rates = {row["variant"]: row["results_per_s"] for row in summary["rows"]}
            # The floor first in each round: the same rates, the same broker, minutes apart at most.
            live = [FLOOR, "worker"] + ([BASELINE] if baseline is not None else [])
            rate = args.latency_rate or rates.get("worker", 0) / 2
            if args.latency_seconds > 0 and rate > 0:
                for repeat in range(1, args.latency_repeat + 1):
                    # Alternating, and the other way round every second round: neither side
                    # always runs right after the backlog runs or the other one.
                    for variant in live if repeat % 2 else [FLOOR, *live[:0:-1]]:
                        run = await bench.latency_run(
                            rate, args.latency_seconds, args.one_at_a_time, variant, repeat
                        )
                        latency_runs.append(run)
                        if not args.json:
                            print(f"  latency {repeat} {variant:<16} {latency_line(run)}", flush=True)
                latency = _median_run([r for r in latency_runs if r["variant"] == "worker"])
                latency_base = _median_run([r for r in latency_runs if r["variant"] == BASELINE])
                latency_floor = _median_run([r for r in latency_runs if r["variant"] == FLOOR])
        finally:
            await bench.kill_all()
            await bench.delete(set(bench.topics))
            await bench.delete_groups()
    sample = bench.backlog[0]
    result = {
        "command": " ".join([".venv/bin/python", "ops/bench/worker_bench.py", *sys.argv[1:]]),
        "bootstrap": bootstrap,
        "messages": args.messages,
        "repeat": args.repeat,
        "bytes": len(sample.value),
        "rejected_share": 1 / REJECT_EVERY,
        "batch_size": WORKER_BATCH_SIZE,
        "linger_ms": WORKER_LINGER_MS,
        "cpus": os.cpu_count(),
        "runs": runs,
        **summary,
        "latency": latency,
        "latency_baseline": latency_base,
        "latency_floor": latency_floor,
        "latency_runs": latency_runs,
        "decide_batch_us": statistics.median(decide_alone) if decide_alone else None,
        "others_before": others_before,
        "baseline": describe(baseline) if baseline else None,
        "problems": [p for run in runs for p in run["problems"]],
        "peer": str(peer[0]) if peer else None,
        "peer_skipped": peer_skipped,
    }
    result["targets"] = targets(result)
    return result


def latency_line(run: dict[str, Any]) -> str:
    """One latency run in a line: p50/p99 at the fed rate and one at a time."""
    total, one = run["total"], run["one_at_a_time"]
    text = f"p50 {total.get('p50', math.nan):.1f} p99 {total.get('p99', math.nan):.1f} ms"
    if one:
        text += f"; one at a time p50 {one['p50']:.1f} p99 {one['p99']:.1f} ms"
    return text + f" (others {run['other_cpus']:.2f} CPUs)"


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run whose p99 at the fed rate is the median (the lower middle one of an even count)."""
    if not runs:
        return None
    ordered = sorted(runs, key=lambda r: r["total"].get("p99", math.inf))
    return ordered[(len(ordered) - 1) // 2]
