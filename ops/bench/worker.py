"""The ``worker`` variants' process: the real ``Worker`` with timing around its own methods.

Runs as ``worker_bench.py --child SPEC`` (a JSON object: the configuration, the variant,
the contracts folder, an optional cProfile path). A subclass of ``Worker`` reports
partition assignments and the first and last batch of the run around the Worker's own
``_assign`` and ``_revoke`` and each owned partition's ``decide_and_commit``, with a
``PhaseClock`` given as
``WorkerOptions.phase_clock`` (the loop thread's CPU time by phase) and the garbage
collector's pauses; it talks JSON lines on stdout and takes ``go N`` / ``stop`` on stdin.

* ``worker``: the real ``Worker`` with the real ``Gate`` (jsonschema-rs).
* ``relay``: the same loop with :class:`ops.bench.relay.RelayGate` (no validation).
* ``worker-pyjsonschema``: the contract's validator replaced by python-jsonschema
  (``Draft202012Validator`` with its format checker); the closed output-schema check stays
  on jsonschema-rs.
"""

from __future__ import annotations

import asyncio
import cProfile
import dataclasses
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiokafka import TopicPartition
from toolgate._config import Config

from ops.bench.measure import percentiles
from ops.bench.relay import RelayGate
from ops.bench.relaying import watch_stdin


def child_main(spec: dict[str, Any]) -> int:
    """One worker process: build the variant's gate, run the Worker, talk JSON lines."""
    import gc
    import logging

    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._gate import Gate
    from toolgate.gate._records import Message, Verdict
    from toolgate.service._service import Worker, WorkerOptions

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # Where the time goes, measured inside the worker process: the loop thread's CPU time by
    # phase (a phase clock injected into the Worker, where the checkout has one) and the
    # garbage collector's pauses.
    try:
        from toolgate.service._phases import PhaseClock
    except ImportError:  # a --baseline-worktree checkout from before the phase clock
        phases = None
    else:

        class NamedPhaseClock(PhaseClock):
            """The phase clock, also saying which phase is current (to charge GC pauses to)."""

            __slots__ = ("current",)

            def __init__(self) -> None:
                super().__init__()
                self.current = "loop"

            def enter(self, phase: str) -> None:
                super().enter(phase)
                self.current = phase

        phases = NamedPhaseClock()
    spent = {"gc": 0.0, "gc_max": 0.0, "gc_full": 0}
    gc_started: list[Any] = [0.0, "loop"]
    # The collector's pauses by the phase they interrupted: a collection runs when some
    # allocation crosses the threshold, so its cost lands in whichever phase allocated last,
    # and it scans every tracked object of the process (requests held, the ledger, buffers).
    gc_by_phase: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
            gc_started[1] = phases.current if phases is not None else "loop"
        else:
            pause = time.perf_counter() - gc_started[0]
            spent["gc"] += pause
            spent["gc_max"] = max(spent["gc_max"], pause)
            spent["gc_full"] += info.get("generation") == 2
            gc_by_phase[gc_started[1]] = gc_by_phase.get(gc_started[1], 0.0) + pause

    gc.callbacks.append(on_gc)
    waits: dict[str, list[float]] = {"queued": [], "batch": [], "between": []}
    partition_ended: dict[TopicPartition, float] = {}
    contracts = ContractSet.load(spec["contracts_dir"])
    variant = spec["variant"]
    if variant == "worker-pyjsonschema":
        from ops.bench.gate_bench import with_python_jsonschema  # the same adapter as the gate bench

        contracts = ContractSet(with_python_jsonschema(list(contracts)))
    gate: Any = Gate(contracts)
    if variant == "relay":
        gate = RelayGate(gate, Message, Verdict)
    config = msgspec.convert(spec["config"], Config)

    def emit(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    class BenchWorker(Worker):
        """The Worker with timing and assignment reports around its own methods."""

        share: int | None = None
        first: tuple[float, float] | None = None
        spent_before: dict[str, float] = {}  # noqa: RUF012
        phases_before: dict[str, float] = {}  # noqa: RUF012
        gc_phases_before: dict[str, float] = {}  # noqa: RUF012
        last: tuple[float, float] = (0.0, 0.0)
        reported = False

        def _own(self, tp: TopicPartition) -> Any:
            owned = super()._own(tp)
            worker = self
            inner = owned.decide_and_commit

            async def timed(records: list[Any]) -> None:
                await worker._timed_batch(tp, records, inner)

            owned.decide_and_commit = timed  # type: ignore[method-assign]
            return owned

        async def _timed_batch(
            self, tp: TopicPartition, records: list[Any], process: Callable[[list[Any]], Awaitable[None]]
        ) -> None:
            if self.first is None:
                self.first = (time.time(), time.process_time())
                self.spent_before = dict(spent)
                self.gc_phases_before = dict(gc_by_phase)
                self.phases_before = phases.snapshot() if phases is not None else {}
            # Where a live result's time goes (the latency run): from its CreateTime until
            # its batch is in the loop's hands, the batch's decision and transaction, and
            # the partition's time between committing one batch and taking up the next
            # (waiting for the other partitions' transactions, then polling).
            begun = time.time()
            begun_ms = begun * 1000
            waits["queued"].extend(begun_ms - r.timestamp for r in records)
            ended = partition_ended.get(tp)
            if ended is not None:
                waits["between"].append((begun - ended) * 1000)
            await process(records)
            self.last = (time.time(), time.process_time())
            partition_ended[tp] = self.last[0]
            waits["batch"].append((self.last[0] - begun) * 1000)
            if self.share is not None and not self.reported and self.stats.decided >= self.share:
                self.reported = True
                now = phases.snapshot() if phases is not None else {}
                emit(
                    {
                        "event": "done",
                        "first": self.first[0],
                        "last": self.last[0],
                        "cpu": self.last[1] - self.first[1],
                        "phases": {k: v - self.phases_before[k] for k, v in now.items()},
                        "gc": spent["gc"] - self.spent_before["gc"],
                        "gc_phases": {
                            k: v - self.gc_phases_before.get(k, 0.0) for k, v in gc_by_phase.items()
                        },
                        "decided": self.stats.decided,
                        "accepted": self.stats.accepted,
                        "rejected": self.stats.rejected,
                        "by_code": self.stats.by_code,
                        "committed": self.stats.committed,
                        "aborted": self.stats.aborted,
                    }
                )

        async def _assign(self, partitions: set[TopicPartition]) -> None:
            await super()._assign(partitions)
            emit({"event": "assigned", "partitions": sorted(tp.partition for tp in self._producers)})

        async def _revoke(self, partitions: set[TopicPartition]) -> None:
            await super()._revoke(partitions)
            emit({"event": "revoked", "partitions": sorted(tp.partition for tp in self._producers)})

    options = WorkerOptions(
        handle_signals=False, metrics_port=0, transactional_prefix=spec["transactional_prefix"]
    )
    if phases is not None:
        options = dataclasses.replace(options, phase_clock=phases)
    worker = BenchWorker(config, gate, options=options)

    def command(line: str) -> None:
        if line.startswith("go "):
            worker.share = int(line.split()[1])
            emit({"event": "armed"})
        else:  # "stop" or end of input
            worker.request_stop()

    async def main() -> None:
        watch_stdin(command)
        await worker.run()

    profile = cProfile.Profile() if spec.get("profile") else None
    if profile is not None:
        profile.enable()
    asyncio.run(main())
    if profile is not None:
        profile.disable()
        profile.dump_stats(spec["profile"])
    txn = {s.name: s.value for m in worker.metrics.transaction_seconds.collect() for s in m.samples}
    size = {s.name: s.value for m in worker.metrics.batch_size.collect() for s in m.samples}
    count = txn.get("toolgate_transaction_seconds_count", 0)
    buckets = sorted(
        (float(s.labels["le"]), s.value)
        for m in worker.metrics.transaction_seconds.collect()
        for s in m.samples
        if s.name.endswith("_bucket")
    )
    txn_p99 = next((le for le, seen in buckets if count and seen >= 0.99 * count), math.inf)
    emit(
        {
            "event": "exit",
            "transactions": count,
            "gc_max_ms": spent["gc_max"] * 1000,
            "txn_p99_ms": txn_p99 * 1000,
            "gc_full": spent["gc_full"],
            "requests": len(worker.requests),
            "txn_mean_ms": txn.get("toolgate_transaction_seconds_sum", 0) / count * 1000 if count else 0,
            "batch_mean": size.get("toolgate_batch_size_sum", 0) / count if count else 0,
            "waits": {name: percentiles(values) for name, values in waits.items()},
        }
    )
    return 0
