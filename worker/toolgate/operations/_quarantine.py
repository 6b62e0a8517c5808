"""``toolgate quarantine tail`` and ``summary``: what the quarantine holds, without a consumer group.

``summary`` counts the records by tool, code, adapter version and schema path, with
when each combination was first and last rejected: where a drifting connector
starts, and which adapter version brought it. It marks what replays did, from the
audit topic (:class:`ReplayMarks`): a record is *replayed* when the worker decided a
replay of it, *resolved* when a replay of the same result (request id and raw
SHA-256) was accepted. ``tail``: the latest records' diagnostics, as JSON lines.

Reads the quarantine topic ``read_committed`` with a group-less consumer (it
commits nothing and moves nobody's offsets), looks at the last ``max_scan``
records of each partition, keeps those matching the filters and prints the last
``n`` of them in log order (partitions interleaved by time). Each line holds the
record's position, its tool (see :func:`tool_of`), stage and code, and every
header: the adapter's original ones as they came and toolgate's ``tg-error-*``
diagnostics, ``tg-error-detail`` decoded. The raw value is hostile input: it is
left out unless asked for, and then given as escaped JSON text, bounded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import json
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec
from aiokafka.errors import KafkaError

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError
from toolgate.gate._sealing import KEY_HEADER, Sealer, SealError
from toolgate.service._kafka import AiokafkaClients, partitions_of
from toolgate.service._store import TopicReader

VALUE_CHARS = 4096
# How far back summary reads the audit topic for replay marks: the window `replay --apply`
# looks back for accepted replays, so both say the same about a record.
REPLAY_WINDOW_HOURS = 24.0


class QuarantinedRecord(Protocol):
    """What is read of a consumer record (aiokafka's ConsumerRecord has these)."""

    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True)
class _Opened:
    """A sealed record, opened."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes]]


def locked(headers: Iterable[tuple[str, bytes]]) -> str:
    """One line: a sealed record read without any quarantine key."""
    key_id = next((v.decode("utf-8", "replace") for n, v in headers if n == KEY_HEADER), "?")
    return (
        f"sealed with quarantine key {key_id!r}: its value and diagnostic message need the key "
        f"(--keyring FILE or TOOLGATE_KEYRING with [quarantine.{key_id}])"
    )


@dataclass(frozen=True)
class Filters:
    """Which records to keep: each given field must match."""

    tool: str | None = None
    code: str | None = None
    stage: str | None = None
    unreplayed: bool = False  # summary only: records no replay decided and no replay resolved


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", errors="replace")


def headers_of(record: QuarantinedRecord) -> dict[str, Any]:
    """Every header as text; a name that came more than once maps to the list of its values;
    ``tg-error-detail`` decoded from JSON."""
    out: dict[str, Any] = {}
    for name, raw in record.headers:
        value: Any = _text(raw)
        if name == "tg-error-detail" and value:
            with contextlib.suppress(ValueError):  # else shown as the text it is
                value = json.loads(value)
        if name in out:
            previous = out[name]
            out[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            out[name] = value
    return out


def _first(headers: dict[str, Any], name: str) -> str:
    value = headers.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) else ""


def tool_of(headers: dict[str, Any]) -> str:
    """The record's tool: the contract's (``tg-contract`` is tool@version), else the tool the
    adapter named in ``tg-tool`` (no contract was reached, or none exists), else ``unknown``.
    ``toolgate replay --tool`` selects by the same rule."""
    contract = _first(headers, "tg-contract")
    return contract.split("@", 1)[0] if contract else _first(headers, "tg-tool") or "unknown"


def matches(headers: dict[str, Any], filters: Filters) -> bool:
    """True when the record passes every given filter."""
    if filters.code is not None and _first(headers, "tg-error-code") != filters.code:
        return False
    if filters.stage is not None and _first(headers, "tg-error-stage") != filters.stage:
        return False
    return filters.tool is None or filters.tool == tool_of(headers)


def describe(
    topic: str, record: QuarantinedRecord, *, with_value: bool = False, sealer: Sealer | None = None
) -> dict[str, Any]:
    """The JSON object printed for one quarantine record. A sealed one (gate/_sealing.py) is
    opened with ``sealer``; without the key it says in ``sealed`` what is missing, and its
    value and diagnostic message are left out."""
    sealed = ""
    if any(name == KEY_HEADER for name, _ in record.headers):
        try:
            if sealer is None:
                raise SealError(locked(record.headers))
            value, opened = sealer.open(record.key, record.value, record.headers)
            record = _Opened(record.partition, record.offset, record.timestamp, record.key, value, opened)
        except SealError as exc:
            sealed = str(exc)
    headers = headers_of(record)
    line: dict[str, Any] = {
        "topic": topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": datetime.fromtimestamp(record.timestamp / 1000, UTC).isoformat(),
        "key": _text(record.key),
        "tool": tool_of(headers),
        "stage": _first(headers, "tg-error-stage"),
        "code": _first(headers, "tg-error-code"),
        "size": len(record.value or b""),
        "headers": headers,
    }
    if sealed:
        line["sealed"] = sealed
    if with_value and sealed:
        line["value"] = None
    elif with_value:
        text = _text(record.value)
        line["value"] = text if text is None else text[:VALUE_CHARS]
        line["value_truncated"] = text is not None and len(text) > VALUE_CHARS
    return line


async def _scan(
    config: Config,
    visit: Callable[[QuarantinedRecord], None],
    *,
    max_scan: int,
    wait_seconds: float,
) -> None:
    """Call ``visit`` on each of the last ``max_scan`` committed records of every quarantine
    partition, in log order per partition.

    Raises:
        ConfigError: the quarantine topic does not exist.
        BrokerError: the cluster could not be read within ``wait_seconds``.
    """
    topic = config.topics.quarantine
    clients = AiokafkaClients(config)
    consumer = clients.consumer(
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    try:
        await consumer.start()
        async with asyncio.timeout(wait_seconds):
            tps = await partitions_of(clients, topic)
            if not tps:
                raise ConfigError(
                    f"quarantine topic {topic!r} does not exist on {config.bootstrap} "
                    "(TOOLGATE_TOPIC_QUARANTINE names it)"
                )
            consumer.assign(tps)
            begins = await consumer.beginning_offsets(tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, max(begins[tp], ends[tp] - max_scan))
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batches = await consumer.getmany(timeout_ms=500, max_records=2000)
                for tp, records in batches.items():
                    for record in records:
                        if record.offset < ends[tp]:
                            visit(record)
    except TimeoutError as exc:
        raise BrokerError(
            f"{config.bootstrap}: reading {topic!r} took longer than {wait_seconds:g} s", retriable=True
        ) from exc
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    finally:
        await consumer.stop()


async def tail(
    config: Config,
    *,
    count: int,
    filters: Filters,
    max_scan: int = 100_000,
    with_value: bool = False,
    wait_seconds: float = 60.0,
    sealer: Sealer | None = None,
) -> list[dict[str, Any]]:
    """The last ``count`` matching quarantine records, oldest first.

    Raises:
        ConfigError: the quarantine topic does not exist.
        BrokerError: the cluster could not be read within ``wait_seconds``.
    """
    topic = config.topics.quarantine
    kept: dict[int, collections.deque[tuple[int, int, dict[str, Any]]]] = {}

    def visit(record: QuarantinedRecord) -> None:
        line = describe(topic, record, with_value=with_value, sealer=sealer)
        if matches(line["headers"], filters):
            if record.partition not in kept:
                kept[record.partition] = collections.deque(maxlen=count)
            kept[record.partition].append((record.timestamp, record.offset, line))

    if count > 0:
        await _scan(config, visit, max_scan=max_scan, wait_seconds=wait_seconds)
    # Each partition in log order; partitions interleaved by record timestamp.
    merged = list(heapq.merge(*(kept[p] for p in sorted(kept)), key=lambda item: item[0]))
    return [line for _, _, line in merged[-count:]] if count > 0 else []


@dataclass
class SummaryRow:
    """Quarantine records of one (tool, code, adapter version, schema path)."""

    tool: str
    code: str
    adapter_version: str
    schema_path: str
    count: int = 0
    replayed: int = 0  # records a replay of which the worker decided (accepted or not)
    resolved: int = 0  # records whose result a replay got accepted
    first_seen: datetime | None = None
    last_seen: datetime | None = None


def rejected_at(record: QuarantinedRecord, headers: dict[str, Any]) -> datetime:
    """When the record was rejected: ``tg-rejected-at``, else the record's timestamp."""
    with contextlib.suppress(ValueError):
        at = datetime.fromisoformat(_first(headers, "tg-rejected-at"))
        if at.tzinfo is not None:
            return at.astimezone(UTC)
    return datetime.fromtimestamp(record.timestamp / 1000, UTC)


class _AuditView(msgspec.Struct, frozen=True):
    """The audit fields a replay mark needs (other fields ignored)."""

    outcome: str = ""
    raw_sha256: str = ""
    request_id: str | None = None
    kind: str = "decision"
    replay: int = 0
    replay_of: str | None = None


_audit_decoder = msgspec.json.Decoder(_AuditView)


class ReplayMarks:
    """What replays did, from the audit topic's decisions on replayed results.

    Holds one name per replayed quarantine record and one (request id, raw SHA-256) per result
    a replay got accepted: bounded by the replays in the window read, not by live traffic.
    """

    def __init__(self) -> None:
        self.replayed: set[str] = set()  # quarantine records, as audit's replay_of names them
        self.resolved: set[tuple[str, str]] = set()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one audit event (anything not a decision on a replay is skipped)."""
        if value is None:
            return
        try:
            event = _audit_decoder.decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        if event.kind != "decision" or not event.replay:
            return
        if event.replay_of:
            self.replayed.add(event.replay_of)
        if event.outcome not in ("", "rejected") and event.request_id:
            self.resolved.add((event.request_id, event.raw_sha256))

    def of(self, topic: str, record: QuarantinedRecord, headers: dict[str, Any]) -> tuple[bool, bool]:
        """(replayed, resolved) for one quarantine record of ``topic``."""
        replayed = f"{topic}/{record.partition}/{record.offset}" in self.replayed
        resolved = (_text(record.key) or "", _first(headers, "tg-raw-sha256")) in self.resolved
        return replayed, resolved


def summarise(
    records: Iterable[QuarantinedRecord],
    filters: Filters,
    marks: ReplayMarks | None = None,
    topic: str = "toolgate.quarantine",
) -> list[SummaryRow]:
    """Counts by tool, code, adapter version and schema path, with first and last seen and
    the replay marks; most records first."""
    rows: dict[tuple[str, str, str, str], SummaryRow] = {}
    for record in records:
        add(rows, record, filters, marks or ReplayMarks(), topic)
    return ordered(rows)


def add(
    rows: dict[tuple[str, str, str, str], SummaryRow],
    record: QuarantinedRecord,
    filters: Filters,
    marks: ReplayMarks,
    topic: str,
) -> None:
    """Count one record into ``rows`` (when it passes ``filters``)."""
    headers = headers_of(record)
    if not matches(headers, filters):
        return
    replayed, resolved = marks.of(topic, record, headers)
    if filters.unreplayed and (replayed or resolved):
        return
    detail = headers.get("tg-error-detail")
    schema_path = detail.get("schema_path", "") if isinstance(detail, dict) else ""
    key = (
        tool_of(headers),
        _first(headers, "tg-error-code") or "-",
        _first(headers, "tg-adapter-version") or "-",
        schema_path if isinstance(schema_path, str) and schema_path else "-",
    )
    row = rows.get(key)
    if row is None:
        row = rows[key] = SummaryRow(*key)
    at = rejected_at(record, headers)
    row.count += 1
    row.replayed += replayed
    row.resolved += resolved
    row.first_seen = at if row.first_seen is None else min(row.first_seen, at)
    row.last_seen = at if row.last_seen is None else max(row.last_seen, at)


def ordered(rows: dict[tuple[str, str, str, str], SummaryRow]) -> list[SummaryRow]:
    """Most records first, then by tool, code, adapter version and schema path."""
    return sorted(rows.values(), key=lambda r: (-r.count, r.tool, r.code, r.adapter_version, r.schema_path))


async def replay_marks(config: Config, since: datetime, wait_seconds: float) -> ReplayMarks:
    """The replay marks of the audit topic's events since ``since``.

    Raises:
        BrokerError: the audit topic could not be read up to its end within ``wait_seconds``.
    """
    marks = ReplayMarks()
    reader = TopicReader(
        config.topics.audit, marks.apply, AiokafkaClients(config), start_ms=int(since.timestamp() * 1000)
    )
    try:
        await reader.start()
        if not await reader.catch_up(wait_seconds):
            raise BrokerError(
                f"{config.bootstrap}: reading {config.topics.audit!r} (the replay marks) took longer "
                f"than {wait_seconds:g} s",
                retriable=True,
            )
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    finally:
        await reader.stop()
    return marks


async def summary(
    config: Config,
    *,
    filters: Filters,
    max_scan: int = 1_000_000,
    wait_seconds: float = 120.0,
    replays_since: datetime | None = None,
) -> tuple[list[SummaryRow], int]:
    """The summary rows of the last ``max_scan`` records of each partition, and how many were read.

    ``replays_since``: read the audit topic from then on for the replay marks (None: no marks).

    Raises:
        ConfigError: the quarantine topic does not exist.
        BrokerError: the cluster could not be read within ``wait_seconds``.
    """
    marks = ReplayMarks()
    if replays_since is not None:
        marks = await replay_marks(config, replays_since, wait_seconds)
    rows: dict[tuple[str, str, str, str], SummaryRow] = {}
    read = 0

    def visit(record: QuarantinedRecord) -> None:
        nonlocal read
        read += 1
        add(rows, record, filters, marks, config.topics.quarantine)

    await _scan(config, visit, max_scan=max_scan, wait_seconds=wait_seconds)
    return ordered(rows), read


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def format_summary(rows: list[SummaryRow], read: int, topic: str) -> list[str]:
    """The summary as a table, columns as wide as their widest value (times in UTC)."""
    total = sum(row.count for row in rows)
    replayed = sum(row.replayed for row in rows)
    resolved = sum(row.resolved for row in rows)
    lines = [
        f"{topic}: {total} of {read} quarantine records matched"
        + (f" ({replayed} replayed, {resolved} resolved by a replay)" if replayed or resolved else "")
    ]
    if not rows:
        return lines
    header = (
        "tool",
        "code",
        "adapter",
        "schema path",
        "count",
        "replayed",
        "resolved",
        "first seen (UTC)",
        "last seen (UTC)",
    )
    table = [
        (
            _clean(r.tool),
            _clean(r.code),
            _clean(r.adapter_version),
            _clean(r.schema_path),
            str(r.count),
            str(r.replayed),
            str(r.resolved),
            _when(r.first_seen),
            _when(r.last_seen),
        )
        for r in rows
    ]
    numbers = {4, 5, 6}
    widths = [max(len(cells[i]) for cells in [header, *table]) for i in range(len(header))]
    for cells in [header, *table]:
        lines.append(
            "  ".join(
                cell.rjust(widths[i]) if i in numbers else cell.ljust(widths[i])
                for i, cell in enumerate(cells)
            ).rstrip()
        )
    # The values stay out of the table (adapter-chosen text, docs/design.md, Decisions and why);
    # the command that shows the top row's, escaped and bounded, one record at a time.
    top = rows[0]
    command = ["toolgate", "quarantine", "tail", "--tool", _clean(top.tool), "--code", _clean(top.code)]
    lines += ["", "its values: " + shlex.join([*command, "--value", "-n", "5"])]
    return lines


def _clean(text: str, width: int = 48) -> str:
    """Header values are the adapter's: printable and bounded before they reach a terminal."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text)
    return cleaned if len(cleaned) <= width else cleaned[: width - 1] + "…"
