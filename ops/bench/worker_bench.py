"""Worker benchmark: the Kafka loop end to end, against a relay that does not validate.

Usage::

    .venv/bin/python ops/bench/worker_bench.py [--messages N] [--repeat R] [--json]
        [--baseline-worktree PATH] [--partitions 3 12 24] [--variants ...]
        [--peer-source PATH] [--one-at-a-time N]

Needs the broker (``bash ops/kafka/kafka.sh start``; ``TOOLGATE_BOOTSTRAP`` points
elsewhere). Everything the run creates is its own: topics ``bench.<run id>.*``,
consumer groups and transactional ids with the same tag, a bench-only contract in
a temporary folder. Topics and groups are deleted at the end, also on failure.

Backlog throughput. Every variant consumes the same backlog of N results of
about 1 KB (``bench_listing``: a few bounded strings and an array of small
closed objects; no signature, so crypto does not dominate; every tenth result
has an extra property and is rejected at the ``schema`` stage, so quarantine
records are written too). The workers run in subprocesses (this process only
waits) with transactions on, the production batch size and linger, and one
transactional producer per intake partition (3 partitions).

* ``peer``: what a user would run instead, side by side on the same backlog and broker: a
  Benthos pipeline (its ``json_schema`` processor on the bench contract's schema, a
  ``switch`` output to a valid and an invalid topic) over franz-go clients, no
  transactions, no binding or projection, one record out per record in. Built with Go
  from the peer's sources (``shared/peer`` beside or above the checkout, or
  ``--peer-source``) into ``~/.cache/toolgate/bench-peer/<digest>/`` once and reused;
  skipped with one line where Go is missing. Its CPU is ``/proc/<pid>/stat`` utime +
  stime from the backlog's commit until its output topics hold every result (its
  wall time includes the 20 ms polls of their end offsets). Its validator
  (gojsonschema, Drafts 4-7) checks less than toolgate's, so the ratio compares CPU
  per result of work that is not the same.
* ``copier``: the client's own limit. A minimal aiokafka transactional copier in
  this script, no toolgate code: consume, produce the same records per result as
  the worker (agent + audit, quarantine per rejection: the bytes ``decide_batch``
  wrote for a sample result), send the offsets, commit; the same poll size and
  wait, one transactional producer per partition, and the same send path as the
  worker (aiokafka's batch API, ``create_batch``/``send_batch``, one batch of up to
  512 KiB per topic partition). The relay against it is the loop's own overhead.
* ``relay``: the ceiling. The same ``Worker`` loop with a gate that returns a
  precomputed verdict (accepted, or rejected for every tenth result): the same
  consumer, batches, transactions and records (agent + audit per result,
  quarantine per rejection), no parsing, no validation.
* ``worker``: the real ``Worker`` with the real ``Gate`` (jsonschema-rs).
* ``worker-pyjsonschema``: the same, with the contract's validator replaced by
  python-jsonschema (``Draft202012Validator`` with its format checker); the
  closed output-schema check stays on jsonschema-rs.
* ``worker x2``: two worker processes in one consumer group (3 partitions: one
  process owns two, the other one, so 1.5 is the ideal ratio on enough cores).
* ``baseline worker`` (``--baseline-worktree PATH``): the worker of another
  checkout, e.g. ``git worktree add ../base <commit>``, run by that checkout's own
  ``ops/bench/worker_bench.py --child`` (its own package and imports, this
  virtualenv's libraries), interleaved with the others: today's code against an
  earlier commit's on one machine at one time.
* ``worker pN`` (``--partitions 3 12 24``): the worker with N intake partitions
  (agent and audit topics as many, requests co-partitioned), one transactional
  producer each: what more partitions cost per result.

Each run gets fresh intake and output topics holding the same records (fresh
output topics also mean an empty accepted-results ledger). The backlog is written
in one producer transaction that stays open while the workers start and the group
settles (for ``x2``: until both processes own partitions), so nothing is decided
during start-up or a rebalance; it is committed once every worker is ready.
Throughput is N over the wall time from the first batch any worker took to the
commit of the last decision (timestamps taken inside the worker processes; the
audit records' timestamp span is printed beside it as a cross-check). Runs are
interleaved (repeat 1 of every variant, then repeat 2, ...) and medians reported,
so noise on a shared machine spreads alike over all variants. The audit topic is
read back (``read_committed``) after each run: exactly N events, the expected
rejections, or the run is reported as a problem (exit status 1).

Where the time goes, per result: ``cpu`` is the worker processes' CPU time over
the window; ``decide`` the loop thread's CPU time in ``decide_batch`` (gate and
output records, before the transaction opens); below the table, the loop
thread's CPU time by phase (decide, send, commit, poll and decode, metrics, the
rest of the loop) from a phase clock injected into the worker
(``toolgate.service._phases``), adding up to its thread time, beside the
process's; ``gc`` the garbage collector's pauses; ``broker`` the broker's CPU time
(read from /proc for the local broker; it counts every user of the broker);
``others`` how many CPUs the rest of the machine kept busy meanwhile. Ratios are
given from throughput and from CPU time per result; the latter barely moves when
other users take CPUs away mid-run.

Latency. Then one real worker runs live and a producer sends results at half
the median ``worker`` throughput for ``--latency-seconds`` (request records are
written first, as the platform writes them before it calls an adapter); latency
is from the intake record's timestamp (CreateTime, set when it was sent) to the
moment a ``read_committed`` consumer of the agent topic receives the envelope,
split at the audit record's timestamp (when the worker sent its decision). The
producer and that consumer share this process. Then ``--one-at-a-time`` results
go one by one, each sent (linger 0) once the previous one's envelope was read: an
agent waiting on each call; its latency is send to read, on this process's clock.

The worker processes are this script (``--child``): a subclass of ``Worker`` that
reports partition assignments and the first and last batch of the run around the
Worker's own ``_assign`` and ``_revoke`` and each owned partition's
``decide_and_commit``, with a ``PhaseClock`` given as ``WorkerOptions.phase_clock``.
``--profile DIR`` runs each variant once more under cProfile (or py-spy with ``--py-spy BIN``).

Targets. The report ends with every target, the measured figure and met / not
met: worker CPU per result against the baseline checkout's (<= 0.4), worker/relay
per CPU-second (>= 0.7), relay/copier CPU per result (<= 1.5), worker/peer per
CPU-second, both measured in this run (>= 3), latency p99 at half the sustained
rate (<= 50 ms) and one result at a time (<= 15 ms), results per transaction at
full load (>= 200), broker CPU per result against the peer's in this run (<= 3x),
and CPU per result over the partition sweep (most/least <= 1.3).

Everything a run creates goes at its end, also on failure: its topics (the state
changelogs too), consumer groups (the peer's too) and the temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import hashlib
import json
import math
import os
import pstats
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[2]
sys.path.insert(0, str(ROOT))
# This checkout's own package first: a --baseline-worktree child imports its checkout's
# toolgate, not the one the virtualenv's editable install points at.
sys.path.insert(0, str(ROOT / "worker"))
sys.path.insert(0, str(SCRIPT.parent))

import msgspec  # noqa: E402
from aiokafka import TopicPartition  # noqa: E402
from aiokafka.partitioner import murmur2 as aiokafka_murmur2  # noqa: E402
from toolgate._config import LOCAL_BOOTSTRAP, Config, Partitions, Topics  # noqa: E402
from toolgate.service._kafka import AiokafkaClients, Producer, RebalanceListener, ensure_topics  # noqa: E402

PARTITIONS = 3  # intake partitions of every run but the partition sweep's
TOOL = "bench_listing"
TARGET_WORKER_OVER_RELAY = 0.7  # results per CPU-second
TARGET_RS_OVER_PY = 3.0
TARGET_P99_MS = 50.0  # at half the sustained rate, on a quiet machine
TARGET_CLOSED_P99_MS = 15.0  # one result at a time (an agent waiting on each call)
TARGET_RELAY_OVER_COPIER = 1.5  # CPU per result
TARGET_OVER_BASELINE = 0.4  # worker CPU per result against the baseline checkout's
TARGET_RESULTS_PER_TXN = 200  # at full load (the backlog runs)
TARGET_OVER_PEER = 3.0  # results per CPU-second, the peer run in the same run on the same backlog
TARGET_BROKER_OVER_PEER = 3.0
TARGET_PARTITION_SPREAD = 1.3  # CPU per result, most against least, over the partition sweep
CONTENDED_CPUS = 0.3  # other users' CPUs above which a shared machine's figures are flagged
REJECT_EVERY = 10  # every tenth result is rejected (schema, extra property)
VARIANTS = ("peer", "copier", "relay", "worker", "worker-pyjsonschema", "worker x2")
BASELINE = "baseline worker"  # the variant run from --baseline-worktree

# ------------------------------------------------------------------ bench contract

CONTRACT_YAML = f"""\
tool: {TOOL}
version: 1
status: active
description: Benchmark only. A listing of up to 20 small closed items, about 1 KB.
adapter_versions: ["1.*"]
schema: schema.json
limits:
  max_bytes: 8192
  max_depth: 6
rules:
  - kind: bind
    pointer: /data/query
    request_key: query
  - kind: freshness
    pointer: /data/observed_at
    max_age_seconds: 86400
    max_future_skew_seconds: 60
    issued_skew_seconds: 60
projection:
  - /data/query
  - /data/project
  - /data/status
  - /data/count
  - /data/observed_at
  - /data/labels
display_text:
  - pointer: /data/title
    max_length: 120
retry:
  retryable_codes: [UPSTREAM_UNAVAILABLE]
"""

_ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$"}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "oneOf": [
        {
            "type": "object",
            "required": ["tool", "request_id", "outcome", "data"],
            "properties": {
                "tool": {"const": TOOL},
                "request_id": _ID,
                "outcome": {"const": "success"},
                "data": {
                    "type": "object",
                    "required": [
                        "query",
                        "project",
                        "title",
                        "status",
                        "observed_at",
                        "count",
                        "labels",
                        "items",
                    ],
                    "properties": {
                        "query": {"type": "string", "pattern": "^Q-[0-9]{1,10}$"},
                        "project": {"type": "string", "pattern": "^[a-z][a-z0-9-]{1,31}$"},
                        "title": {"type": "string", "maxLength": 200},
                        "status": {"enum": ["complete", "partial", "empty"]},
                        "observed_at": {
                            "type": "string",
                            "maxLength": 40,
                            "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                            "(\\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$",
                        },
                        "count": {"type": "integer", "minimum": 0, "maximum": 20},
                        "labels": {
                            "type": "array",
                            "maxItems": 8,
                            "items": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,23}$"},
                        },
                        "items": {
                            "type": "array",
                            "maxItems": 20,
                            "items": {
                                "type": "object",
                                "required": ["id", "name", "state", "score", "owner"],
                                "properties": {
                                    "id": {"type": "string", "pattern": "^IT-[0-9]{1,8}$"},
                                    "name": {"type": "string", "maxLength": 64},
                                    "state": {"enum": ["open", "closed", "blocked"]},
                                    "score": {"type": "number", "minimum": 0, "maximum": 100},
                                    "owner": {"type": "string", "maxLength": 64},
                                },
                                "additionalProperties": False,
                            },
                        },
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["tool", "request_id", "outcome", "error"],
            "properties": {
                "tool": {"const": TOOL},
                "request_id": _ID,
                "outcome": {"const": "failure"},
                "error": {
                    "type": "object",
                    "required": ["code", "retryable"],
                    "properties": {
                        "code": {"enum": ["NOT_FOUND", "UPSTREAM_UNAVAILABLE"]},
                        "retryable": {"type": "boolean"},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    ],
}
ITEMS = 8  # about 1 KB per result


# Contract fields an earlier checkout (--baseline-worktree) does not know: left out of its copy.
NEWER_FIELDS = ("issued_skew_seconds",)


def write_contract(root: Path, *, baseline: Path | None = None) -> Path:
    """Write ``bench_listing/v1`` under ``root``; return ``root`` (the contracts folder).

    ``baseline``: for that checkout, without the fields of :data:`NEWER_FIELDS` its gate does
    not know (a field it knows stays: without it the same results would be decided otherwise).
    """
    folder = root / TOOL / "v1"
    folder.mkdir(parents=True)
    text = CONTRACT_YAML
    if baseline is not None:
        unknown = {name for name in NEWER_FIELDS if not _gate_knows(baseline, name)}
        text = "".join(line for line in text.splitlines(True) if line.split(":")[0].strip() not in unknown)
    (folder / "contract.yaml").write_text(text)
    (folder / "schema.json").write_text(json.dumps(SCHEMA, indent=1))
    return root


@dataclass(frozen=True)
class Result:
    """One intake record and the request record it answers."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    request: bytes
    rejected: bool


def run_tag(hex_ids: bool) -> str:
    """A fresh tag for request ids, topics and groups.

    Letters only by default. With ``hex_ids`` it carries a hex segment with a digit
    before an ``e`` (as UUIDs and commit hashes often do): the strict parse's cheap
    byte scan then cannot rule out an exponent and walks the whole parsed value.
    """
    letters = "".join("abcdfghijklmnopq"[int(c, 16)] for c in uuid.uuid4().hex[:12])
    return f"{letters}x3e9f" if hex_ids else letters


def results(tag: str, count: int, now: datetime) -> Iterator[Result]:
    """``count`` results with fresh request ids; every tenth has an extra property."""
    observed = (now - timedelta(seconds=30)).isoformat()
    issued = (now - timedelta(seconds=5)).isoformat()
    expires = (now + timedelta(hours=6)).isoformat()
    for i in range(count):
        rid = f"req.{tag}.{i:08d}"
        query = f"Q-{i}"
        items = [
            {
                "id": f"IT-{(i * 7 + n) % 10**8}",
                "name": f"nightly build step {n:02d} of run {i}",
                "state": ("open", "closed", "blocked")[(i + n) % 3],
                "score": round(((i + n) % 1000) / 10, 1),
                "owner": f"team-{(i + n) % 7}@example.com",
            }
            for n in range(ITEMS)
        ]
        data: dict[str, Any] = {
            "query": query,
            "project": "bluebird",
            "title": f"Open items of the nightly pipeline, run {i}",
            "status": "partial",
            "observed_at": observed,
            "count": len(items),
            "labels": ["ci", "nightly", "bluebird"],
            "items": items,
        }
        rejected = i % REJECT_EVERY == REJECT_EVERY - 1
        if rejected:
            data["admin_override"] = True
        value = {"tool": TOOL, "request_id": rid, "outcome": "success", "data": data}
        request = {
            "request_id": rid,
            "tool": TOOL,
            "issued_at": issued,
            "expires_at": expires,
            "bind": {"query": query},
            "attempt": 1,
            "max_attempts": 3,
        }
        headers = [
            ("tg-tool", TOOL.encode()),
            ("tg-request-id", rid.encode()),
            ("tg-adapter", b"bench-adapter"),
            ("tg-adapter-version", b"1.0.0"),
            ("tg-source", b"https://bench.invalid/listing"),
        ]
        yield Result(
            rid.encode(), msgspec.json.encode(value), headers, msgspec.json.encode(request), rejected
        )


# ------------------------------------------------------------------- worker process


def _child_main(spec: dict[str, Any]) -> int:
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
        phases = PhaseClock()
    spent = {"gc": 0.0, "gc_max": 0.0, "gc_full": 0}
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            pause = time.perf_counter() - gc_started[0]
            spent["gc"] += pause
            spent["gc_max"] = max(spent["gc_max"], pause)
            spent["gc_full"] += info.get("generation") == 2

    gc.callbacks.append(on_gc)
    waits: dict[str, list[float]] = {"queued": [], "batch": [], "between": []}
    partition_ended: dict[TopicPartition, float] = {}
    contracts = ContractSet.load(spec["contracts_dir"])
    variant = spec["variant"]
    if variant == "worker-pyjsonschema":
        from gate_bench import with_python_jsonschema  # the same adapter as the gate bench

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
        loop = asyncio.get_running_loop()

        def read_stdin() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(command, line.strip())
            loop.call_soon_threadsafe(command, "stop")

        threading.Thread(target=read_stdin, daemon=True).start()
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


class RelayGate:
    """A gate that decides nothing: a precomputed verdict per result, no parse, no schema.

    The verdicts are the real gate's on the first accepted and the first rejected
    result, so the records written have the real sizes. Every tenth request id
    (ending in 9) gets the rejected one, as the backlog's rejections; an accepted one
    is a copy naming the result's own request id.
    """

    def __init__(self, real: Any, message_type: Any, verdict_type: Any) -> None:
        self.contracts = real.contracts
        from toolgate.gate._records import RequestRecord

        now = datetime.now(UTC)
        sample = list(results("relay", REJECT_EVERY, now))
        verdicts = []
        for result in (sample[0], sample[-1]):
            request = msgspec.json.decode(result.request, type=RequestRecord)
            verdicts.append(
                real.evaluate(
                    message_type(key=result.key, value=result.value, headers=result.headers), request, now
                )
            )
        self.accepted, self.rejected = verdicts
        assert self.accepted.accepted
        assert not self.rejected.accepted
        assert isinstance(self.accepted, verdict_type)

    def evaluate(self, message: Any, request: Any, now: Any, ledger: Any = None, **_: Any) -> Any:
        if message.key.endswith(b"9"):
            return self.rejected
        # An acceptance names the message's own request (the state changelog records the
        # accepted attempts of live requests, and a request must be there for that).
        return msgspec.structs.replace(self.accepted, request_id=message.key.decode())


# ----------------------------------------------------------------- copier process


def _copier_main(spec: dict[str, Any]) -> int:
    """The third baseline: a minimal aiokafka transactional copier, no toolgate code.

    Per batch of one intake partition, in one transaction of that partition's own
    producer: the same records per result the worker writes (the records ``decide_batch``
    returned for a sample accepted and a sample rejected result, replayed with each
    intake record's key), the consumer offset, commit. The same poll size and wait,
    the same per-partition producers and explicit partitions as the worker: what is
    left between it and the relay is the worker loop's own overhead.
    """
    topics = spec["topics"]
    templates = {
        kind: [
            (
                topics[t["topic"]],  # the template names the topic's role
                t["value"].encode("latin-1"),
                [(name, value.encode("latin-1")) for name, value in t["headers"]],
            )
            for t in records
        ]
        for kind, records in spec["templates"].items()
    }

    def emit(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    state: dict[str, Any] = {"share": None, "decided": 0, "rejected": 0, "committed": 0, "first": None}
    producers: dict[TopicPartition, Producer] = {}
    counts: dict[str, int] = {}  # output topic -> partitions
    stop = asyncio.Event()
    settings = spec["settings"]
    # Plaintext only (checked by the parent): the bootstrap and client id are all there is.
    clients = AiokafkaClients(
        Config(bootstrap=settings["bootstrap_servers"], client_id=settings["client_id"])
    )

    async def process(tp: TopicPartition, records: list[Any], same: set[str]) -> None:
        # aiokafka's batch API, as the worker sends: one batch per topic partition (a new one
        # when it fills up), one future per batch; the partition from the key's murmur2 where
        # the topic is not co-partitioned (aiokafka's own partitioner function).
        producer = producers[tp]
        async with producer.transaction():
            batches: dict[tuple[str, int], Any] = {}
            ready = []
            for record in records:
                kind = "rejected" if record.key.endswith(b"9") else "accepted"
                for topic, value, headers in templates[kind]:
                    partition = (
                        tp.partition
                        if topic in same
                        else (aiokafka_murmur2(record.key) & 0x7FFFFFFF) % counts[topic]
                    )
                    batch = batches.get((topic, partition))
                    if batch is None:
                        batch = batches[topic, partition] = producer.create_batch()
                    if batch.append(timestamp=None, key=record.key, value=value, headers=headers) is None:
                        ready.append((batch, topic, partition))
                        batch = batches[topic, partition] = producer.create_batch()
                        batch.append(timestamp=None, key=record.key, value=value, headers=headers)
            ready.extend((batch, topic, partition) for (topic, partition), batch in batches.items())
            futures = [await producer.send_batch(b, t, partition=p) for b, t, p in ready]
            await asyncio.gather(*futures)
            await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, spec["group_id"])
        state["committed"] += 1
        state["decided"] += len(records)
        state["rejected"] += sum(record.key.endswith(b"9") for record in records)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        consumer = clients.consumer(
            group_id=spec["group_id"],
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
        )

        class Listener(RebalanceListener):
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                for tp in revoked:
                    producer = producers.pop(tp, None)
                    if producer is not None:
                        await producer.stop()
                emit({"event": "revoked", "partitions": sorted(tp.partition for tp in producers)})

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                for tp in sorted(assigned):
                    producer = clients.producer(
                        enable_idempotence=True,
                        acks="all",
                        max_batch_size=spec["producer_batch_bytes"],
                        transactional_id=f"{spec['transactional_prefix']}.copier.{tp.topic}.{tp.partition}",
                    )
                    await producer.start()
                    producers[tp] = producer
                emit({"event": "assigned", "partitions": sorted(tp.partition for tp in producers)})

        def command(line: str) -> None:
            if line.startswith("go "):
                state["share"] = int(line.split()[1])
                emit({"event": "armed"})
            else:
                stop.set()

        def read_stdin() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(command, line.strip())
            loop.call_soon_threadsafe(command, "stop")

        threading.Thread(target=read_stdin, daemon=True).start()
        await consumer.start()
        consumer.subscribe([topics["intake"]], listener=Listener())
        same: set[str] | None = None
        reported = False
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=spec["linger_ms"], max_records=spec["batch_size"])
                work = [(tp, records) for tp, records in batches.items() if tp in producers]
                if not work:
                    continue
                if same is None:
                    intake = len(consumer.partitions_for_topic(topics["intake"]) or ())
                    any_producer = next(iter(producers.values()))
                    for topic in (topics["agent"], topics["quarantine"], topics["audit"]):
                        counts[topic] = len(await any_producer.partitions_for(topic))
                    same = {topic for topic, count in counts.items() if count == intake}
                if state["first"] is None:
                    state["first"] = (time.time(), time.process_time())
                await asyncio.gather(*(process(tp, records, same) for tp, records in work))
                last = (time.time(), time.process_time())
                if state["share"] is not None and not reported and state["decided"] >= state["share"]:
                    reported = True
                    emit(
                        {
                            "event": "done",
                            "first": state["first"][0],
                            "last": last[0],
                            "cpu": last[1] - state["first"][1],
                            "phases": {},
                            "gc": 0.0,
                            "decided": state["decided"],
                            "accepted": state["decided"] - state["rejected"],
                            "rejected": state["rejected"],
                            "by_code": {"SCHEMA_VIOLATION": state["rejected"]},
                            "committed": state["committed"],
                            "aborted": 0,
                        }
                    )
        finally:
            await consumer.stop()
            for producer in producers.values():
                await producer.stop()

    asyncio.run(main())
    emit({"event": "exit", "transactions": state["committed"]})
    return 0


def copier_templates(contracts_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """What the worker writes for a sample accepted and a sample rejected result, as plain
    JSON (topic role, value, headers; bytes as latin-1 text) for the copier process."""
    from toolgate.gate._batch import AcceptedView, decide_batch
    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._gate import Gate
    from toolgate.gate._records import Message, Origin, RequestRecord

    now = datetime.now(UTC)
    sample = list(results("copier", REJECT_EVERY, now))
    requests = {r.key.decode(): msgspec.json.decode(r.request, type=RequestRecord) for r in sample}
    roles = Topics(
        requests="requests", intake="intake", agent="agent", quarantine="quarantine", audit="audit"
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for kind, result in (("accepted", sample[0]), ("rejected", sample[-1])):
        message = Message(
            key=result.key, value=result.value, headers=result.headers, origin=Origin("intake", 0, 0)
        )
        batch = decide_batch(
            Gate(ContractSet.load(contracts_dir)),
            [message],
            requests.get,
            AcceptedView(lambda request_id, attempt: False),
            now,
            topics=roles,
            max_record_bytes=1024 * 1024,
        )
        out[kind] = [
            {
                "topic": record.topic,
                "value": (record.value or b"").decode("latin-1"),
                "headers": [(name, value.decode("latin-1")) for name, value in record.headers],
            }
            for record in batch.records
        ]
    return out


# ------------------------------------------------------------------------- the peer

# What a user would run instead: a Benthos pipeline (its json_schema processor, a switch output
# to a valid and an invalid topic) over franz-go clients, no transactions. Its sources come
# with the project's shared material (README there: build with Go, run with the template).
PEER_FILES = ("README.md", "go.mod", "go.sum", "main.go", "pipeline.yaml.template")
PEER_ASSIGNED = re.compile(rb"assigned (\d+) partitions")


def peer_source(given: str | None) -> Path | None:
    """The peer's source folder: ``given``, else ``shared/peer`` beside the checkout or above it."""
    candidates = (
        [Path(given)] if given else [base / "shared" / "peer" for base in (ROOT.parent, ROOT.parent.parent)]
    )
    return next((c for c in candidates if all((c / f).is_file() for f in PEER_FILES)), None)


def peer_cache() -> Path:
    """Where built peers are kept between runs (never in the checkout)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolgate" / "bench-peer"


def build_peer(source: Path, go: str) -> tuple[Path, bool]:
    """The peer binary built from ``source`` and whether it was built now (else reused).

    Kept in :func:`peer_cache` under a digest of its sources and of ``go version``, so a
    second run reuses it and a changed source or toolchain builds afresh (about 3.5 minutes
    with a cold Go module cache, seconds with a warm one).
    """
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode())
    for name in PEER_FILES:
        digest.update(name.encode() + b"\0" + (source / name).read_bytes())
    folder = peer_cache() / digest.hexdigest()[:16]
    binary = folder / "peer"
    if binary.is_file():
        return binary, False
    src = folder / "src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "cmd" / "peer").mkdir(parents=True)
    for name in PEER_FILES:
        shutil.copyfile(source / name, src / "cmd" / "peer" / name if name == "main.go" else src / name)
    partial = folder / f"peer.{os.getpid()}.partial"
    built = subprocess.run(
        [go, "build", "-o", str(partial), "./cmd/peer"],
        cwd=src,
        env=os.environ | {"GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(f"building the peer in {src} failed:\n{built.stderr[-2000:]}")
    partial.replace(binary)
    return binary, True


def peer_pipeline(template: str, values: dict[str, str], http_port: int) -> str:
    """The pipeline template with its ``{placeholders}`` filled and its HTTP server on ``http_port``."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    code = "\n".join(line for line in template.splitlines() if not line.lstrip().startswith("#"))
    left = re.findall(r"\{[a-z_]+\}", code)
    if left:
        raise RuntimeError(f"peer pipeline template: placeholders not filled: {sorted(set(left))}")
    return template.replace("127.0.0.1:4195", f"127.0.0.1:{http_port}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ----------------------------------------------------------------------- the parent

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_BROKER_PID_FILE = ROOT / "ops" / "kafka" / ".data" / "kafka.pid"


def _broker_pid(bootstrap: str) -> int | None:
    """The local broker's pid, to read its CPU time; None for a remote broker.

    The process listening on the bootstrap port (found through /proc, so a broker
    started from another checkout counts too), else ``ops/kafka/kafka.sh``'s pid file.
    """
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1", "[::1]") or not port.isdigit():
        return None
    return _listener_pid(int(port)) or _pid_file()


def _pid_file() -> int | None:
    try:
        return int(_BROKER_PID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


def _listener_pid(port: int) -> int | None:
    """The pid of the process with a socket listening on ``port`` (readable /proc only)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(proc.name)
    return None


def _process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far; 0 when unknown."""
    if pid is None:
        return 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / _TICKS
    return 0.0


def _cpu_snapshot(broker: int | None) -> tuple[float, float, float]:
    """(busy CPU seconds of the whole machine, the broker's CPU seconds, wall time)."""
    busy = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / _TICKS  # all but idle and iowait
    return busy, _process_cpu(broker), time.monotonic()


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


def run_topics(config: Config) -> set[str]:
    """Every topic a run's configuration names (the state changelog too): all deleted after it."""
    t = config.topics
    return {t.requests, t.intake, t.agent, t.quarantine, t.audit, t.state}


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
        self.broker_pid = _broker_pid(bootstrap)

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
        script, cwd, flag = SCRIPT, ROOT, "--child"
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
                | ({"state": t.state} if _knows_state_topic(self.baseline) else {}),
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

    async def peer_run(self, repeat: int) -> dict[str, Any]:
        """The peer on the same backlog: valid results to the agent topic, invalid ones to
        quarantine; its CPU from /proc from the backlog's commit until both topics hold all."""
        assert self.peer is not None
        binary, source = self.peer
        config = self.config(f"peer.{repeat}")
        await self.create(config)
        t = config.topics
        pipeline = self.tmp / f"peer-{repeat}.yaml"
        pipeline.write_text(
            peer_pipeline(
                (source / "pipeline.yaml.template").read_text(),
                {
                    "boot": self.bootstrap,
                    "intake": t.intake,
                    "group": config.group_id,
                    "schema_path": str(self.contracts_dir / TOOL / "v1" / "schema.json"),
                    "valid": t.agent,
                    "invalid": t.quarantine,
                },
                _free_port(),
            )
        )
        log_path = self.tmp / f"peer-{repeat}.log"
        fill, per_partition = await self.open_fill(config, f"peer.{repeat}", PARTITIONS)
        watcher = self.clients.consumer(group_id=None, enable_auto_commit=False)
        proc: asyncio.subprocess.Process | None = None
        problems: list[str] = []
        try:
            with log_path.open("wb") as log_file:
                proc = await asyncio.create_subprocess_exec(
                    str(binary), "-c", str(pipeline), stdout=log_file, stderr=subprocess.STDOUT
                )
            await watcher.start()
            deadline = time.monotonic() + 60
            while True:  # it owns every intake partition before the backlog is committed
                text = log_path.read_bytes()
                if any(int(n) == PARTITIONS for n in PEER_ASSIGNED.findall(text)):
                    break
                if proc.returncode is not None or time.monotonic() > deadline:
                    tail = text.decode(errors="replace")[-2000:]
                    raise RuntimeError(f"peer did not take its {PARTITIONS} partitions:\n{tail}")
                await asyncio.sleep(0.05)
            outputs = {
                topic: [TopicPartition(topic, p) for p in range(count)]
                for topic, count in (
                    (t.agent, config.partitions.agent),
                    (t.quarantine, config.partitions.quarantine),
                )
            }
            every = [tp for tps in outputs.values() for tp in tps]
            before = _cpu_snapshot(self.broker_pid)
            own_before = time.process_time()
            peer_before = _process_cpu(proc.pid)
            first = time.time()
            await fill.commit_transaction()
            seen, stalled = 0, time.monotonic() + 30  # no new output for 30 s: give up
            while True:
                ends = await watcher.end_offsets(every)
                total = sum(ends.values())
                if total >= self.messages or time.monotonic() > stalled:
                    break
                if total > seen:
                    seen, stalled = total, time.monotonic() + 30
                await asyncio.sleep(0.02)
            last = time.time()
            after = _cpu_snapshot(self.broker_pid)
            peer_cpu = _process_cpu(proc.pid) - peer_before
            own = time.process_time() - own_before
        finally:
            if proc is not None and proc.returncode is None:
                # Its output is counted: no need to wait out its shutdown timeout (20 s).
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 3)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            await watcher.stop()
            await fill.stop()
        valid = sum(ends[tp] for tp in outputs[t.agent])
        invalid = sum(ends[tp] for tp in outputs[t.quarantine])
        expected_rejected = sum(r.rejected for r in self.backlog)
        if (valid, invalid) != (self.messages - expected_rejected, expected_rejected):
            problems.append(
                f"peer wrote {valid} valid and {invalid} invalid, expected "
                f"{self.messages - expected_rejected} and {expected_rejected}; its log ends:\n"
                + log_path.read_text(errors="replace")[-1500:]
            )
        await self.delete(run_topics(config) - {config.topics.requests})
        wall = last - first
        window = after[2] - before[2]
        broker_cpu = after[1] - before[1]
        return {
            "variant": "peer",
            "repeat": repeat,
            "workers": 1,
            "intake_partitions": PARTITIONS,
            "broker_cpus": broker_cpu / window if self.broker_pid else None,
            "other_cpus": max(0.0, after[0] - before[0] - peer_cpu - broker_cpu - own) / window,
            "broker_us_per_result": broker_cpu / self.messages * 1e6 if self.broker_pid else None,
            "seconds": wall,
            "results": self.messages,
            "results_per_s": self.messages / wall,
            "cpu_us_per_result": peer_cpu / self.messages * 1e6,
            "phases_us_per_result": {},
            "gc_us_per_result": 0.0,
            "audit_span_seconds": wall,
            "transactions": 0,
            "aborted": 0,
            "partitions": per_partition,
            "problems": problems,
        }

    async def backlog_run(self, variant: str, repeat: int, profile: str | None = None) -> dict[str, Any]:
        if variant == "peer":
            return await self.peer_run(repeat)
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
            before = _cpu_snapshot(self.broker_pid)
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
            after = _cpu_snapshot(self.broker_pid)
            own = time.process_time() - own_before
        finally:
            await self.stop(children)
            await fill.stop()
        done = [c.done for c in children if c.done is not None]
        first = min(d["first"] for d in done)
        last = max(d["last"] for d in done)
        check = await self.read_audit(config.topics.audit, partitions)
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
            "audit_span_seconds": check["span"],
            "transactions": sum(d["committed"] for d in done),
            "aborted": sum(d["aborted"] for d in done),
            "partitions": per_partition,
            "problems": problems,
        }

    async def read_audit(
        self, topic: str, partitions: int, stamps: dict[bytes, int] | None = None
    ) -> dict[str, Any]:
        """Count the committed audit events and their rejections; the span of their timestamps.

        ``stamps`` gets each event's timestamp (when the worker sent it) by key.
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
        finally:
            await consumer.stop()
        return {"events": events, "rejected": rejected, "span": (high - low) / 1000 if events else 0}

    # --- latency ----------------------------------------------------------------------

    async def latency_run(
        self, rate: float, seconds: float, one_at_a_time: int, variant: str = "worker", repeat: int = 1
    ) -> dict[str, Any]:
        """A live worker fed at ``rate`` results/s; latencies in ms, split at the decision.
        Then ``one_at_a_time`` results sent each once the previous one's envelope is read.
        ``variant``: ``worker``, or :data:`BASELINE` for the --baseline-worktree checkout's."""
        slug = "live" if variant == "worker" else "livebase"
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

            receiver = asyncio.create_task(receive())
            before = _cpu_snapshot(self.broker_pid)
            worker_before, own_before = _process_cpu(child.proc.pid), time.process_time()
            started = time.monotonic()
            futures = []
            for i, result in enumerate(live):
                delay = started + i / rate - time.monotonic()
                if delay > 0.002:
                    await asyncio.sleep(delay)
                stamp = int(time.time() * 1000)  # the record's CreateTime
                sent[result.key] = stamp
                futures.append(
                    await producer.send(
                        config.topics.intake,
                        result.value,
                        key=result.key,
                        headers=result.headers,
                        timestamp_ms=stamp,
                    )
                )
            send_seconds = time.monotonic() - started
            after = _cpu_snapshot(self.broker_pid)
            worker_cpu = _process_cpu(child.proc.pid) - worker_before
            own_cpu = time.process_time() - own_before
            await asyncio.gather(*futures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), 60)
            loop = asyncio.get_running_loop()
            for result in closed:
                future: asyncio.Future[float] = loop.create_future()
                waiting[result.key] = future
                started_one = time.perf_counter()
                acknowledged = await single.send(
                    config.topics.intake, result.value, key=result.key, headers=result.headers
                )
                await acknowledged
                try:
                    round_trips.append((await asyncio.wait_for(future, 30) - started_one) * 1000)
                except TimeoutError:
                    break  # reported as fewer round trips than sent
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
        await self.read_audit(config.topics.audit, PARTITIONS, decided)
        await self.delete(run_topics(config))
        worker: dict[str, Any] = {}
        while not child.events.empty():
            event = child.events.get_nowait()
            if event["event"] == "exit":
                worker = event
        keys = [k for k in sent if k in received and k in decided]
        window, busy, broker_cpu = after[2] - before[2], after[0] - before[0], after[1] - before[1]
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
            "send_seconds": send_seconds,
            "achieved_rate": count / send_seconds,
            "total": percentiles([received[k] - sent[k] for k in keys]),
            "to_decision": percentiles([decided[k] - sent[k] for k in keys]),
            "decision_to_agent": percentiles([received[k] - decided[k] for k in keys]),
            "txn_mean_ms": worker.get("txn_mean_ms"),
            "batch_mean": worker.get("batch_mean"),
            "transactions": worker.get("transactions"),
            "gc_max_ms": worker.get("gc_max_ms"),
            "txn_p99_ms": worker.get("txn_p99_ms"),
            "gc_full": worker.get("gc_full"),
            "requests_held": worker.get("requests"),
            # CPUs in use while sending: the worker, the broker, this process (producer and
            # consumer), and everything else (other users of a shared machine).
            "worker_cpus": worker_cpu / window,
            "broker_cpus": broker_cpu / window,
            "bench_cpus": own_cpu / window,
            "other_cpus": max(0.0, busy - worker_cpu - broker_cpu - own_cpu) / window,
        }


# ------------------------------------------------------------------------- reporting


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p90, p99 and the maximum of ``values`` (nearest rank); empty when there are none."""
    values = sorted(values)
    if not values:
        return {}
    return {f"p{p}": values[min(len(values) - 1, int(p / 100 * len(values)))] for p in (50, 90, 99)} | {
        "max": values[-1]
    }


def _median_or_none(values: Iterator[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(runs: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    rows = []
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        rates = [r["results_per_s"] for r in mine]
        rows.append(
            {
                "variant": variant,
                "workers": mine[0]["workers"],
                "intake_partitions": mine[0]["intake_partitions"],
                "results_per_s": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "cpu_us_per_result": statistics.median(r["cpu_us_per_result"] for r in mine),
                "phases_us_per_result": {
                    phase: statistics.median(r["phases_us_per_result"].get(phase, 0.0) for r in mine)
                    for phase in mine[0]["phases_us_per_result"]
                },
                "gc_us_per_result": statistics.median(r["gc_us_per_result"] for r in mine),
                "broker_us_per_result": _median_or_none(r["broker_us_per_result"] for r in mine),
                "broker_cpus": _median_or_none(r["broker_cpus"] for r in mine),
                "other_cpus": statistics.median(r["other_cpus"] for r in mine),
                "seconds": statistics.median(r["seconds"] for r in mine),
                "transactions": statistics.median(r["transactions"] for r in mine),
                "results_per_txn": statistics.median(r["results"] / max(1, r["transactions"]) for r in mine)
                if mine[0]["transactions"]
                else None,
            }
        )
    by = {row["variant"]: row["results_per_s"] for row in rows}
    cpu = {row["variant"]: row["cpu_us_per_result"] for row in rows}
    ratios = {}
    # Throughput ratios, and the same from CPU time per result (results per CPU-second):
    # the latter hardly moves when other users take CPUs away mid-run.
    if "worker" in by and "relay" in by:
        ratios["worker/relay"] = by["worker"] / by["relay"]
        ratios["worker/relay, per CPU-second"] = cpu["relay"] / cpu["worker"]
    if "worker" in by and "worker-pyjsonschema" in by:
        ratios["worker/pyjsonschema"] = by["worker"] / by["worker-pyjsonschema"]
        ratios["worker/pyjsonschema, per CPU-second"] = cpu["worker-pyjsonschema"] / cpu["worker"]
    if "worker" in by and "worker x2" in by:
        ratios["x2/x1"] = by["worker x2"] / by["worker"]
    if "relay" in by and "copier" in by:
        ratios["relay/copier, CPU per result"] = cpu["relay"] / cpu["copier"]
    if "worker" in by and "peer" in by:
        ratios["worker/peer"] = by["worker"] / by["peer"]
        ratios["worker/peer, per CPU-second"] = cpu["peer"] / cpu["worker"]
    if "worker" in by and BASELINE in by:
        ratios["worker/baseline, CPU per result"] = cpu["worker"] / cpu[BASELINE]
        ratios["worker/baseline, throughput"] = by["worker"] / by[BASELINE]
    return {"rows": rows, "ratios": ratios}


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the worker bench: what was measured and whether it is met.

    ``met`` is None where the run did not measure it (a variant left out).
    """
    rows = {row["variant"]: row for row in result["rows"]}
    ratios = result["ratios"]
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, target: str, met: bool | None, note: str = "") -> None:
        out.append({"target": name, "measured": value, "goal": target, "met": met, "note": note})

    worker = rows.get("worker")
    value = ratios.get("worker/baseline, CPU per result")
    add(
        "worker CPU per result / the baseline checkout's",
        value,
        f"<= {TARGET_OVER_BASELINE}",
        None if value is None else value <= TARGET_OVER_BASELINE,
        "" if value is not None else "needs --baseline-worktree",
    )
    value = ratios.get("worker/relay, per CPU-second")
    add(
        "worker/relay, results per CPU-second",
        value,
        f">= {TARGET_WORKER_OVER_RELAY}",
        None if value is None else value >= TARGET_WORKER_OVER_RELAY,
    )
    value = ratios.get("relay/copier, CPU per result")
    add(
        "relay/copier, CPU per result",
        value,
        f"<= {TARGET_RELAY_OVER_COPIER}",
        None if value is None else value <= TARGET_RELAY_OVER_COPIER,
    )
    value = ratios.get("worker/peer, per CPU-second")
    peer = rows.get("peer")
    add(
        "worker/peer, results per CPU-second",
        value,
        f">= {TARGET_OVER_PEER:g} (same run, same backlog)",
        None if value is None else value >= TARGET_OVER_PEER,
        f"per result: peer {peer['cpu_us_per_result']:,.0f} us, worker {worker['cpu_us_per_result']:,.0f} us"
        if peer and worker
        else result.get("peer_skipped", ""),
    )
    lat = result.get("latency")
    busy = "machine busy: figures unreliable" if lat and lat["other_cpus"] > CONTENDED_CPUS else ""
    value = lat["total"].get("p99") if lat and lat["total"] else None
    add(
        "latency p99 at half the sustained rate, ms",
        value,
        f"<= {TARGET_P99_MS:g}",
        None if value is None else value <= TARGET_P99_MS,
        busy,
    )
    value = lat["one_at_a_time"].get("p99") if lat and lat["one_at_a_time"] else None
    add(
        "latency p99 one result at a time, ms",
        value,
        f"<= {TARGET_CLOSED_P99_MS:g}",
        None if value is None else value <= TARGET_CLOSED_P99_MS,
        busy,
    )
    value = worker["results_per_txn"] if worker else None
    add(
        "results per transaction at full load",
        value,
        f">= {TARGET_RESULTS_PER_TXN}",
        None if value is None else value >= TARGET_RESULTS_PER_TXN,
    )
    mine, theirs = (row["broker_us_per_result"] if row else None for row in (worker, peer))
    value = mine / theirs if mine is not None and theirs else None
    add(
        "broker CPU per result, worker/peer",
        value,
        f"<= {TARGET_BROKER_OVER_PEER:g}",
        None if value is None else value <= TARGET_BROKER_OVER_PEER,
        f"worker {mine:,.0f} us, peer {theirs:,.0f} us; counts every user of the broker"
        if value is not None
        else "needs the peer and a local broker",
    )
    sweep = {
        row["intake_partitions"]: row["cpu_us_per_result"]
        for row in result["rows"]
        if row["variant"] == "worker" or row["variant"].startswith("worker p")
    }
    value = max(sweep.values()) / min(sweep.values()) if len(sweep) > 1 else None
    add(
        f"CPU per result, most/least over {', '.join(map(str, sorted(sweep)))} intake partitions",
        value,
        f"<= {TARGET_PARTITION_SPREAD}",
        None if value is None else value <= TARGET_PARTITION_SPREAD,
        ", ".join(f"{p}: {us:,.0f} us" for p, us in sorted(sweep.items()))
        if len(sweep) > 1
        else "needs --partitions",
    )
    return out


def print_targets(rows: list[dict[str, Any]]) -> None:
    header = f"{'target':<58}{'measured':>10}  {'goal':<36}{'':<8}"
    print(header)
    print("-" * len(header))
    for row in rows:
        measured = "-" if row["measured"] is None else f"{row['measured']:,.2f}"
        verdict = {True: "met", False: "NOT MET", None: "not run"}[row["met"]]
        print(f"{row['target']:<58}{measured:>10}  {row['goal']:<36}{verdict:<8}")
        if row["note"]:
            print(f"{'':<60}{row['note']}")


def print_phases(rows: list[dict[str, Any]]) -> None:
    """CPU per result by phase of the worker loop, for the variants that report phases."""
    timed = [row for row in rows if row["phases_us_per_result"]]
    if not timed:
        return
    names = list(timed[0]["phases_us_per_result"])
    header = f"{'CPU us per result':<22}" + "".join(f"{n:>9}" for n in names)
    header += f"{'= thread':>10}{'+ others':>10}{'= cpu':>8}"
    print(header)
    print("-" * len(header))
    for row in timed:
        phases = row["phases_us_per_result"]
        thread = sum(phases.values())
        cells = "".join(f"{phases.get(n, 0.0):>9,.1f}" for n in names)
        print(
            f"{row['variant']:<22}{cells}{thread:>10,.1f}{row['cpu_us_per_result'] - thread:>10,.1f}"
            f"{row['cpu_us_per_result']:>8,.0f}"
        )
    print(
        "the loop thread's CPU time (time.thread_time) charged to the phase it last entered: decide\n"
        "(decide_batch), send (partitions, records to the producer, their acknowledgement), commit\n"
        "(offsets, commit), poll (getmany: fetch and decode), metrics (counters and stats after the\n"
        "commit), loop (the rest: request lookup, messages, sweeps). decide and metrics do not await,\n"
        "so they are exact; while a partition's batch awaits, other partitions' work and the client's\n"
        "background tasks go to the phase last entered. + others: the process's other threads (the\n"
        "metrics server, the bench's control reader); = cpu: the process's CPU per result (cpu us/res)"
    )
    print()


def _opt(value: float | None, spec: str) -> str:
    width = int(spec.split(",")[0].split(".")[0])
    return f"{'-':>{width}}" if value is None else f"{value:{spec}}"


def _print_percentiles(label: str, row: dict[str, float]) -> None:
    print(f"{label:<44}{row['p50']:>8.1f}{row['p90']:>8.1f}{row['p99']:>8.1f}{row['max']:>8.1f}")


def print_latency(lat: dict[str, Any], whose: str) -> None:
    """One latency run: percentiles, where the time went inside the worker, the CPUs busy."""
    print()
    print(
        f"latency, {whose} worker: fed at {lat['rate']:,.0f} results/s ("
        f"achieved {lat['achieved_rate']:,.0f}/s for {lat['send_seconds']:.0f}s), "
        f"{lat['received']:,}/{lat['sent']:,} received"
    )
    print(f"{'ms':<44}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}")
    for name, label in (
        ("total", "intake CreateTime -> agent read (committed)"),
        ("to_decision", "  intake CreateTime -> audit record sent"),
        ("decision_to_agent", "  audit record sent -> agent read"),
    ):
        row = lat[name]
        if row:
            _print_percentiles(label, row)
    if lat.get("txn_mean_ms") is not None:
        print(
            f"worker: {lat['transactions']:,.0f} transactions (first send to commit: mean "
            f"{lat['txn_mean_ms']:.1f} ms, p99 <= {lat['txn_p99_ms']:.0f} ms), mean batch "
            f"{lat['batch_mean']:.1f} results; {lat['gc_full']} full collections, longest GC "
            f"pause {lat['gc_max_ms']:.0f} ms ({lat['requests_held']:,} requests held)"
        )
    for name, label in (
        ("queued", "  intake CreateTime -> its batch in the loop"),
        ("batch", "  a batch: decision and transaction"),
        ("between", "  a partition: commit -> its next batch"),
    ):
        row = lat.get("waits", {}).get(name)
        if row:
            _print_percentiles(label, row)
    print(
        f"CPUs busy while sending: worker {lat['worker_cpus']:.2f}, broker {lat['broker_cpus']:.2f}, "
        f"bench producer+consumer {lat['bench_cpus']:.2f}, other users {lat['other_cpus']:.2f}"
    )
    one = lat["one_at_a_time"]
    if one:
        print(
            f"{'one result at a time: send -> agent read':<44}{one['p50']:>8.1f}{one['p90']:>8.1f}"
            f"{one['p99']:>8.1f}{one['max']:>8.1f}   "
            f"({lat['one_at_a_time_received']}/{lat['one_at_a_time_sent']} round trips)"
        )
    if lat["other_cpus"] > CONTENDED_CPUS:
        print(
            f"WARNING: other users kept {lat['other_cpus']:.2f} CPUs busy during the latency run: "
            "the worker was starved, the figures say more about the machine than the worker"
        )


def print_report(result: dict[str, Any]) -> None:
    print(f"command: {result['command']}")
    print(
        f"broker {result['bootstrap']}; {result['messages']} results of ~{result['bytes']} bytes "
        f"({result['rejected_share']:.0%} rejected), {PARTITIONS} intake partitions (unless named), "
        f"transactions on, batch {result['batch_size']} / linger {result['linger_ms']} ms; "
        f"{result['cpus']} CPUs shared with the broker; median of {result['repeat']} interleaved runs"
    )
    print()
    header = (
        f"{'variant':<22}{'procs':>6}{'results/s':>11}{'min':>9}{'max':>9}"
        f"{'cpu us/res':>12}{'decide':>8}{'gc':>6}{'broker':>8}{'res/txn':>9}{'others':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in result["rows"]:
        print(
            f"{row['variant']:<22}{row['workers']:>6}{row['results_per_s']:>11,.0f}"
            f"{row['min']:>9,.0f}{row['max']:>9,.0f}{row['cpu_us_per_result']:>12,.0f}"
            f"{_opt(row['phases_us_per_result'].get('decide'), '8,.0f')}{row['gc_us_per_result']:>6,.0f}"
            f"{_opt(row['broker_us_per_result'], '8,.0f')}{_opt(row['results_per_txn'], '9,.0f')}"
            f"{row['other_cpus']:>8.2f}"
        )
    print(
        "cpu us/res: CPU time of the worker process(es) per result; decide: of it, the loop thread's\n"
        "CPU time in decide_batch (gate + output records, before the transaction opens); gc: wall\n"
        "time in the garbage collector; broker: the broker's CPU per result; res/txn: results per\n"
        "transaction; peer: the Benthos json_schema pipeline (no transactions), CPU from /proc;\n"
        "others: CPUs busy with other users' work during the run (machine busy time minus the\n"
        "workers, the broker and this process). copier: aiokafka alone, no toolgate code;\n"
        f"{BASELINE}: the worker of the checkout given with --baseline-worktree"
        + (f" ({result['baseline']})" if result.get("baseline") else "")
    )
    print()
    print_phases(result["rows"])
    contended = [row["variant"] for row in result["rows"] if row["other_cpus"] > CONTENDED_CPUS]
    if contended:
        print(
            f"WARNING: other users kept more than {CONTENDED_CPUS} CPUs busy (median) during: "
            f"{', '.join(contended)}; compare per CPU-second"
        )
    targets = {
        "worker/relay": f"target >= {TARGET_WORKER_OVER_RELAY}",
        "worker/pyjsonschema": f"target >= {TARGET_RS_OVER_PY}",
        "x2/x1": "at most 1.5 with 3 partitions, given the cores",
        "relay/copier, CPU per result": f"target <= {TARGET_RELAY_OVER_COPIER}",
        "worker/peer, per CPU-second": f"target >= {TARGET_OVER_PEER:g}",
        "worker/baseline, CPU per result": f"target <= {TARGET_OVER_BASELINE}",
    }
    for name, value in result["ratios"].items():
        print(f"{name:<36}{value:>6.2f}   {targets.get(name, '')}")
    for key, whose in (("latency", "this checkout's"), ("latency_baseline", "the baseline checkout's")):
        if result.get(key):
            print_latency(result[key], whose)
    base = result.get("latency_baseline")
    lat = result.get("latency")
    if lat and base and lat["total"] and base["total"]:
        print()
        for name, key in (("at the fed rate", "total"), ("one at a time", "one_at_a_time")):
            mine, theirs = lat[key], base[key]
            if mine and theirs:
                print(
                    f"latency {name}, this/baseline: p50 {mine['p50'] / theirs['p50']:.2f}, "
                    f"p99 {mine['p99'] / theirs['p99']:.2f}"
                )
    print()
    print_targets(result["targets"])
    for problem in result["problems"]:
        print(f"PROBLEM: {problem}")


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
        latency = latency_base = None
        latency_runs: list[dict[str, Any]] = []
        try:
            for partitions in sorted({plan(v)[2] for v in variants}):
                await bench.prepare_requests(partitions)
            for repeat in range(1, args.repeat + 1):
                for variant in variants:
                    run = await bench.backlog_run(variant, repeat)
                    runs.append(run)
                    if not args.json:
                        print(
                            f"  run {repeat} {variant:<20} {run['results_per_s']:>8,.0f} results/s "
                            f"({run['seconds']:.2f}s, audit span {run['audit_span_seconds']:.2f}s, "
                            f"{run['transactions']} txns)"
                            + (f"  {run['problems']}" if run["problems"] else ""),
                            flush=True,
                        )
            if args.profile:
                for variant in variants:
                    if variant not in ("worker x2", BASELINE, "peer"):
                        slug = variant.replace("-", "_")
                        await bench.backlog_run(variant, 0, profile=str(Path(args.profile) / slug))
            summary = summarise(runs, variants)
            rates = {row["variant"]: row["results_per_s"] for row in summary["rows"]}
            live = ["worker"] + ([BASELINE] if baseline is not None else [])
            rate = args.latency_rate or rates.get("worker", 0) / 2
            if args.latency_seconds > 0 and rate > 0:
                for repeat in range(1, args.latency_repeat + 1):
                    # Alternating, and the other way round every second round: neither side
                    # always runs right after the backlog runs or the other one.
                    for variant in live if repeat % 2 else live[::-1]:
                        run = await bench.latency_run(
                            rate, args.latency_seconds, args.one_at_a_time, variant, repeat
                        )
                        latency_runs.append(run)
                        if not args.json:
                            print(f"  latency {repeat} {variant:<16} {_latency_line(run)}", flush=True)
                latency = _median_run([r for r in latency_runs if r["variant"] == "worker"])
                latency_base = _median_run([r for r in latency_runs if r["variant"] == BASELINE])
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
        "latency_runs": latency_runs,
        "baseline": _describe(baseline) if baseline else None,
        "problems": [p for run in runs for p in run["problems"]],
        "peer": str(peer[0]) if peer else None,
        "peer_skipped": peer_skipped,
    }
    result["targets"] = targets(result)
    return result


def _gate_knows(checkout: Path, name: str) -> bool:
    """Whether the checkout's contract loader names the field ``name``."""
    with contextlib.suppress(OSError):
        return name in (checkout / "worker" / "toolgate" / "gate" / "_contracts.py").read_text()
    return False


def _knows_state_topic(checkout: Path) -> bool:
    """Whether the checkout's configuration has the state changelog topic."""
    with contextlib.suppress(OSError):
        text = (checkout / "worker" / "toolgate" / "_config.py").read_text()
        return re.search(r"^\s+state: str", text, re.M) is not None
    return False


def _latency_line(run: dict[str, Any]) -> str:
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


def find_peer(given: str | None) -> tuple[tuple[Path, Path] | None, str]:
    """(the peer's binary and source folder, "") or (None, why it is skipped), building it
    into the cache when it is not there yet."""
    go = shutil.which("go")
    if go is None:
        return None, "no Go toolchain on PATH (the peer is built with go build)"
    source = peer_source(given)
    if source is None:
        where = given or f"{ROOT.parent}/shared/peer or {ROOT.parent.parent}/shared/peer"
        return None, f"no peer sources at {where} (--peer-source PATH)"
    started = time.monotonic()
    binary, built = build_peer(source, go)
    if built:
        print(f"peer: built {binary} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return (binary, source), ""


def _describe(checkout: Path) -> str:
    """``path at <short commit>`` of a checkout (git worktree)."""
    import subprocess

    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{checkout} at {commit or 'an unknown commit'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example, the peer and the loop side by side with latency:\n"
        "  .venv/bin/python ops/bench/worker_bench.py --messages 20000 --repeat 3 \\\n"
        "      --variants peer copier relay worker --latency-seconds 20 --one-at-a-time 300",
    )
    parser.add_argument("--messages", type=int, default=20_000, help="results in the backlog (default 20000)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per variant; the median is reported (default 3)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=20.0,
        help="length of the live latency run, 0 to skip (default 20)",
    )
    parser.add_argument(
        "--latency-rate",
        type=float,
        default=0.0,
        metavar="R",
        help="feed the live worker R results/s (default: half the worker variant's median rate)",
    )
    parser.add_argument(
        "--latency-repeat",
        type=int,
        default=1,
        metavar="N",
        help="latency runs (with --baseline-worktree: of each checkout, alternating); the run with "
        "the median p99 is reported (default 1)",
    )
    parser.add_argument(
        "--one-at-a-time",
        type=int,
        default=300,
        metavar="N",
        help="after the latency run, N results each sent once the previous one's envelope is read "
        "(an agent waiting on each call), 0 to skip (default 300)",
    )
    parser.add_argument(
        "--peer-source",
        metavar="PATH",
        help="the peer's sources (default: shared/peer beside or above this checkout); built with "
        f"Go into {peer_cache()} once and reused",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=VARIANTS,
        metavar="VARIANT",
        help=f"subset of {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="also run each variant once under cProfile, stats to DIR/<variant>"
    )
    parser.add_argument(
        "--py-spy", metavar="BIN", help="with --profile: sample with this py-spy binary instead (raw stacks)"
    )
    parser.add_argument(
        "--hex-ids",
        action="store_true",
        help="request ids with a hex segment (digit before 'e'), see run_tag()",
    )
    parser.add_argument(
        "--baseline-worktree",
        metavar="PATH",
        help="also run the worker of this checkout of an earlier commit (git worktree add PATH "
        "<commit>), interleaved with the others, with that checkout's own bench script and code",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help=f"also run the worker with N intake partitions (the partition sweep; {PARTITIONS} is "
        "the worker variant itself), e.g. --partitions 3 12 24",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--copier", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(json.loads(args.child))
    if args.copier:
        return _copier_main(json.loads(args.copier))
    if args.messages < 100 or args.repeat < 1:
        parser.error("--messages must be at least 100 and --repeat at least 1")
    if any(n < 1 for n in args.partitions):
        parser.error("--partitions takes positive partition counts")
    if args.baseline_worktree and not (Path(args.baseline_worktree) / "ops/bench/worker_bench.py").is_file():
        parser.error(f"--baseline-worktree {args.baseline_worktree}: no ops/bench/worker_bench.py there")
    if args.baseline_worktree:
        args.baseline_worktree = str(Path(args.baseline_worktree).resolve())
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    result = asyncio.run(bench_main(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print()
        print_report(result)
        if args.profile:
            kind = "py-spy raw stacks" if args.py_spy else "cProfile"
            print(f"\nprofiles of one run of each variant ({kind}): {args.profile}/")
            if not args.py_spy and "worker" in args.variants:
                pstats.Stats(str(Path(args.profile) / "worker")).sort_stats("tottime").print_stats(25)
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
