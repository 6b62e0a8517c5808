"""Prometheus metrics and the one HTTP port that serves them with the health probes.

Names follow Prometheus conventions: ``toolgate_`` prefix, ``_total`` counters,
``_seconds`` and ``_bytes`` units. Label values are bounded: ``tool`` is a
contract's tool name or ``unknown`` (never an attacker's header), ``stage`` and
``code`` come from the fixed lists of docs/design.md (Stages and codes).

``toolgate_evaluation_seconds{stage}`` is the per-stage latency: the time the
gate took on results whose evaluation ended at that stage (``project`` for
accepted ones), so a slow stage shows as its own series.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from toolgate._codes import Stage
from toolgate.gate import Contract, rejected_rule
from toolgate.gate._contracts import version_label

if TYPE_CHECKING:
    from toolgate.gate._batch import Decision

log = logging.getLogger("toolgate.metrics")

_LATENCY_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, 0.1)
_SIZE_BUCKETS = (128, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 8388608)
_BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000)
_TXN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

OUTCOMES = ("success", "failure", "rejected")
TRANSACTION_RESULTS = ("committed", "aborted")
WAIT_RESULTS = ("caught_up", "timeout")
CATCH_UP_RESULTS = ("caught_up", "unchanged", "behind")


def observe_many(child: Histogram) -> Callable[[list[float]], None]:
    """``observe`` of many values at once for a histogram child: the values counted per bucket
    here, then one increment per bucket that got any and one of the sum (``observe`` takes
    two locks per value). The same series as observing each value; where the installed
    prometheus-client keeps its buckets otherwise, each value is observed."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total: Any = getattr(child, "_sum", None)
    if not (
        isinstance(bounds, list)
        and isinstance(buckets, list)
        and len(bounds) == len(buckets)
        and bounds == sorted(bounds)
        and callable(getattr(total, "inc", None))
    ):
        observe = child.observe

        def each(values: list[float]) -> None:
            for value in values:
                observe(value)

        return each

    def many(values: list[float]) -> None:
        # bisect_left: the first bucket whose bound is >= the value, as observe() picks it.
        for index, n in collections.Counter(bisect.bisect_left(bounds, v) for v in values).items():
            buckets[index].inc(n)
        total.inc(sum(values))

    return many


def _observe_grouped(
    histogram: Histogram,
    children: dict[str, Callable[[list[float]], None]],
    grouped: dict[str, list[float]],
) -> None:
    """Observe each label value's values at once, through its child's cached
    :func:`observe_many` (``labels()`` is slow per call)."""
    for label, values in grouped.items():
        observe = children.get(label)
        if observe is None:
            observe = children[label] = observe_many(histogram.labels(label))
        observe(values)


class Metrics:
    """Every metric the worker exports, on its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.results = Counter(
            "toolgate_results",
            "Live results decided, by tool and outcome (success, failure = a valid upstream failure, "
            "rejected); replays count in toolgate_replayed_results_total.",
            ["tool", "outcome"],
            registry=r,
        )
        self.rejections = Counter(
            "toolgate_rejections",
            "Live results rejected, by tool, stage and code; replays count in "
            "toolgate_replayed_rejections_total.",
            ["tool", "stage", "code"],
            registry=r,
        )
        self.evaluation = Histogram(
            "toolgate_evaluation_seconds",
            "Gate time per result, by the stage where evaluation ended.",
            ["stage"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.result_bytes = Histogram(
            "toolgate_result_bytes", "Raw result sizes by tool.", ["tool"], buckets=_SIZE_BUCKETS, registry=r
        )
        self.batch_size = Histogram(
            "toolgate_batch_size", "Intake records per transaction.", buckets=_BATCH_BUCKETS, registry=r
        )
        self.transaction_seconds = Histogram(
            "toolgate_transaction_seconds",
            "Time from begin to commit of a transaction.",
            buckets=_TXN_BUCKETS,
            registry=r,
        )
        self.transactions = Counter(
            "toolgate_transactions", "Transactions by result (committed, aborted).", ["result"], registry=r
        )
        self.outstanding = Gauge("toolgate_outstanding_requests", "Request records held.", registry=r)
        self.request_store_evictions = Counter(
            "toolgate_request_store_evictions", "Requests dropped because the store was full.", registry=r
        )
        self.invalid_request_records = Counter(
            "toolgate_invalid_request_records",
            "Records of the requests topic skipped because they are not valid request records "
            "(contracts/wire/request.schema.json); each is logged with its key, partition and offset.",
            registry=r,
        )
        self.request_waits = Counter(
            "toolgate_request_waits",
            "Batches that waited for the request reader to catch up, by result (caught_up, timeout).",
            ["result"],
            registry=r,
        )
        self.lag = Gauge(
            "toolgate_consumer_lag",
            "Intake records not yet decided, by partition.",
            ["partition"],
            registry=r,
        )
        self.restore_seconds = Histogram(
            "toolgate_state_restore_seconds",
            "Time to restore an assigned intake partition's state (its requests) before deciding it.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.restore_last = Gauge(
            "toolgate_state_restore_last_seconds",
            "How long the last restore of each owned intake partition took (removed on revoke).",
            ["partition"],
            registry=r,
        )
        self.restoring = Gauge(
            "toolgate_state_restoring_partitions",
            "Assigned intake partitions whose state is being restored (not decided meanwhile).",
            registry=r,
        )
        self.accepted_held = Gauge(
            "toolgate_state_accepted_requests",
            "Live requests of the owned partitions with an accepted result (held from the state changelog).",
            registry=r,
        )
        self.state_tombstones = Counter(
            "toolgate_state_tombstones",
            "State changelog tombstones written by the sweep for requests that ended (idle partitions; "
            "busy ones write theirs with their next batch).",
            registry=r,
        )
        self.misrouted = Counter(
            "toolgate_misrouted_results",
            "Results with no known request that sit in another intake partition than the default "
            "(murmur2) partitioner puts their key: the adapter's client partitions differently.",
            registry=r,
        )
        self.stall_recoveries = Counter(
            "toolgate_stall_recoveries",
            "Times the worker rebuilt its Kafka clients and rejoined its group because it made no "
            "progress (records pending, no transaction committed) while the cluster answered.",
            registry=r,
        )
        self.ready = Gauge(
            "toolgate_ready",
            "1 when the worker has joined its group, its partitions are taken over and restored and "
            "transactions work; a worker that owns no partition (a hot standby) is ready.",
            registry=r,
        )
        self.owned_partitions = Gauge(
            "toolgate_owned_partitions",
            "Intake partitions this worker owns (0: a hot standby, more workers than partitions).",
            registry=r,
        )
        self.intake_partitions = Gauge(
            "toolgate_intake_partitions", "Partitions of the intake topic, as read at start-up.", registry=r
        )
        self.contract_info = Gauge(
            "toolgate_contract_info",
            "Loaded contract versions: version is major[.minor] (2, 2.1), digest what the version "
            "enforces (SHA-256 of its contract and schema, 16 hex digits).",
            ["tool", "version", "status", "digest"],
            registry=r,
        )
        self.contract_set_generation = Gauge(
            "toolgate_contract_set_generation",
            "Generation of the contract set this worker decides with (0: unordered, a folder); "
            "every decision's records name the set in their tg-contract-set header.",
            registry=r,
        )
        self.contract_set_info = Gauge(
            "toolgate_contract_set_info",
            "The contract set this worker decides with: label (g<generation>-<digest[:12]>, the "
            "tg-contract-set header of its decisions) and digest (SHA-256 over every loaded version).",
            ["label", "digest"],
            registry=r,
        )
        self.contract_catch_ups = Counter(
            "toolgate_contract_catch_ups",
            "Batches with a result of an unknown tool or version, or naming a newer contract set, "
            "for which the worker caught up on its contract source before deciding, by result: "
            "caught_up (a newer set loaded), unchanged (none newer), behind (still behind at the "
            "bound: CONTRACTS_BEHIND answered, retryable).",
            ["result"],
            registry=r,
        )
        self.group_disagreement = Gauge(
            "toolgate_contracts_group_disagreement",
            "1 while the live workers of this worker's group (the members topic) decide with more "
            "than one contract set; 0 when they agree (or this worker is alone).",
            registry=r,
        )
        self.group_members = Gauge(
            "toolgate_contracts_group_members",
            "Live workers of this worker's group on the members topic, itself included.",
            registry=r,
        )
        self.contracts_from_snapshot = Gauge(
            "toolgate_contracts_from_snapshot",
            "1 while the contracts are the last snapshot on disk because the schema registry "
            "(--contracts registry+...) was unreachable at start-up; 0 once a fresh one loaded.",
            registry=r,
        )
        self.shadow_disagreements = Counter(
            "toolgate_shadow_disagreements",
            "Shadow version verdicts that differ from the deciding version's.",
            ["tool", "version"],
            registry=r,
        )
        self.rule_failures = Counter(
            "toolgate_rule_failures",
            "Live results rejected by a contract's cel rule (RULE_FAILED), by tool and rule name "
            "(bounded: rule names come from reviewed contracts).",
            ["tool", "rule"],
            registry=r,
        )
        self.shadow_rule_failures = Counter(
            "toolgate_shadow_rule_failures",
            "Results a shadow version's cel rule would have rejected where the deciding version "
            "did not reject the same way, by tool, shadow version and rule.",
            ["tool", "version", "rule"],
            registry=r,
        )
        self.replayed = Counter(
            "toolgate_replayed_results",
            "Decided results that came from a quarantine replay, by outcome (not counted in "
            "toolgate_results_total).",
            ["tool", "outcome"],
            registry=r,
        )
        self.replayed_rejections = Counter(
            "toolgate_replayed_rejections",
            "Replayed results rejected again, by tool, stage and code (not counted in "
            "toolgate_rejections_total).",
            ["tool", "stage", "code"],
            registry=r,
        )
        self._children: dict[tuple[str, ...], tuple[Callable[[], None], ...]] = {}
        # Histogram children by label value, observing a batch's values at once (labels() is
        # slow per message, and each observe() takes two locks).
        self._evaluation_observe: dict[str, Callable[[list[float]], None]] = {}
        self._bytes_observe: dict[str, Callable[[list[float]], None]] = {}

    def initialise(
        self,
        contracts: Sequence[tuple[str, str, str, str]],
        rules: Sequence[tuple[str, str, str, str]] = (),
    ) -> None:
        """Export every series a dashboard or alert watches, at 0, before its first event.

        A labelled counter has no series until its first increment, so a rare event
        (an abort, a replay, a shadow disagreement) would leave panels empty and
        ``increase()`` blind to the first one. ``contracts``: (tool, version, status,
        digest) of every loaded contract version, the version as ``2`` or ``2.1``; ``rules``:
        (tool, version, status, rule name) of every cel rule.
        """
        tools = sorted({tool for tool, _, _, _ in contracts} | {"unknown"})
        for tool, version, status, digest in contracts:
            self.contract_info.labels(tool, version, status, digest).set(1)
            self.shadow_disagreements.labels(tool, version)
        for tool, version, status, rule in rules:
            if status == "shadow":
                self.shadow_rule_failures.labels(tool, version, rule)
            else:
                self.rule_failures.labels(tool, rule)
        for tool in tools:
            for outcome in OUTCOMES:
                self.results.labels(tool, outcome)
                self.replayed.labels(tool, outcome)
            # What a replay of an already answered result becomes.
            self.replayed_rejections.labels(tool, "semantic", "DUPLICATE_RESULT")
        for result in TRANSACTION_RESULTS:
            self.transactions.labels(result)
        for result in WAIT_RESULTS:
            self.request_waits.labels(result)
        for result in CATCH_UP_RESULTS:
            self.contract_catch_ups.labels(result)

    def contract_set(self, generation: int, label: str, digest: str) -> None:
        """Export the set the worker decides with (the one series of the info metric)."""
        self.contract_set_generation.set(generation)
        self.contract_set_info.clear()
        self.contract_set_info.labels(label, digest).set(1)

    def decided_batch(self, decisions: Sequence[Decision]) -> None:
        """Count a committed batch: one ``inc(n)`` per label set and histogram bucket, not one
        per result."""
        counts: collections.Counter[tuple[str, str, Stage | None, str]] = collections.Counter()
        seconds: dict[str, list[float]] = collections.defaultdict(list)
        sizes: dict[str, list[float]] = collections.defaultdict(list)
        for decision in decisions:
            v = decision.verdict
            tool = v.tool or "unknown"
            seconds[v.stage or "project"].append(decision.seconds)
            sizes[tool].append(decision.size)
            if decision.replays:
                # A replay is counted apart: an operator's replay of answered results must not
                # look like an attack or a drift to the alerts that read the live series.
                self.replayed.labels(tool, v.result).inc()
                if v.result == "rejected":
                    self.replayed_rejections.labels(tool, v.stage or "", v.code or "").inc()
                continue
            counts[(tool, v.result, v.stage, v.code or "")] += 1
            if v.code == "RULE_FAILED":
                self.rule_failures.labels(tool, rejected_rule(v) or "").inc()
        for (tool, outcome, stage, code), n in counts.items():
            self.results.labels(tool, outcome).inc(n)
            if outcome == "rejected":
                self.rejections.labels(tool, stage or "", code).inc(n)
        _observe_grouped(self.evaluation, self._evaluation_observe, seconds)
        _observe_grouped(self.result_bytes, self._bytes_observe, sizes)

    def decided(
        self, tool: str | None, outcome: str, stage: Stage | None, code: str | None, size: int, seconds: float
    ) -> None:
        """Count one decision (label children cached: ``labels()`` is slow per message)."""
        name = tool or "unknown"
        key = (name, outcome, stage or "", code or "")
        children = self._children.get(key)
        if children is None:
            incs: list[Callable[[], None]] = [self.results.labels(name, outcome).inc]
            if outcome == "rejected":
                incs.append(self.rejections.labels(name, stage or "", code or "").inc)
            children = tuple(incs)
            self._children[key] = children
        for inc in children:
            inc()
        self.evaluation.labels(stage or "project").observe(seconds)
        self.result_bytes.labels(name).observe(size)


def rule_series(contracts: Iterable[Contract]) -> list[tuple[str, str, str, str]]:
    """(tool, version, status, rule name) of every cel rule of ``contracts``, for
    :meth:`Metrics.initialise`."""
    return [
        (c.spec.tool, version_label(c.spec), c.spec.status, rule.name)
        for c in contracts
        for rule in c.cel_rules
    ]


class HealthServer:
    """``/metrics``, ``/healthz`` (process alive) and ``/readyz`` (ready to decide) on one port."""

    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        ready: Callable[[], bool],
        status: Callable[[], str] | None = None,
    ) -> None:
        self._status = status
        self.metrics = metrics
        self.host = host
        self.port = port
        self._ready = ready
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Listen (port 0 picks a free port, then :attr:`port` holds it)."""
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            # Drain headers (bounded) so clients that send them are not reset.
            for _ in range(100):
                header = await asyncio.wait_for(reader.readline(), 5)
                if header in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            if path == "/metrics":
                status, body, ctype = "200 OK", generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST
            elif path == "/healthz":
                status, body, ctype = "200 OK", b"ok\n", "text/plain"
            elif path == "/readyz":
                ok = self._ready()
                status = "200 OK" if ok else "503 Service Unavailable"
                # The worker's own words (a standby says so while ready); else ready / not ready.
                text = self._status() if self._status is not None else "ready" if ok else "not ready"
                body, ctype = text.encode() + b"\n", "text/plain"
            else:
                status, body, ctype = "404 Not Found", b"not found\n", "text/plain"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                "\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
