"""``toolgate quarantine tail``: the latest quarantine records' diagnostics, as JSON lines.

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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError
from toolgate.service._kafka import client_settings

VALUE_CHARS = 4096


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
class Filters:
    """Which records to keep: each given field must match."""

    tool: str | None = None
    code: str | None = None
    stage: str | None = None


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


def describe(topic: str, record: QuarantinedRecord, *, with_value: bool = False) -> dict[str, Any]:
    """The JSON object printed for one quarantine record."""
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
    if with_value:
        text = _text(record.value)
        line["value"] = text if text is None else text[:VALUE_CHARS]
        line["value_truncated"] = text is not None and len(text) > VALUE_CHARS
    return line


async def tail(
    config: Config,
    *,
    count: int,
    filters: Filters,
    max_scan: int = 100_000,
    with_value: bool = False,
    wait_seconds: float = 60.0,
) -> list[dict[str, Any]]:
    """The last ``count`` matching quarantine records, oldest first.

    Raises:
        ConfigError: the quarantine topic does not exist.
        BrokerError: the cluster could not be read within ``wait_seconds``.
    """
    topic = config.topics.quarantine
    consumer = AIOKafkaConsumer(
        **client_settings(config),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    kept: dict[int, collections.deque[tuple[int, int, dict[str, Any]]]] = {}
    try:
        await consumer.start()
        async with asyncio.timeout(wait_seconds):
            cluster = await consumer._client.fetch_all_metadata()
            partitions = cluster.partitions_for_topic(topic)
            if not partitions:
                raise ConfigError(
                    f"quarantine topic {topic!r} does not exist on {config.bootstrap} "
                    "(TOOLGATE_TOPIC_QUARANTINE names it)"
                )
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            begins = await consumer.beginning_offsets(tps)
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                consumer.seek(tp, max(begins[tp], ends[tp] - max_scan))
                kept[tp.partition] = collections.deque(maxlen=count)
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                batches = await consumer.getmany(timeout_ms=500, max_records=2000)
                for tp, records in batches.items():
                    for record in records:
                        if record.offset >= ends[tp]:
                            continue
                        line = describe(topic, record, with_value=with_value)
                        if matches(line["headers"], filters):
                            kept[tp.partition].append((record.timestamp, record.offset, line))
    except TimeoutError as exc:
        raise BrokerError(
            f"{config.bootstrap}: reading {topic!r} took longer than {wait_seconds:g} s", retriable=True
        ) from exc
    except KafkaError as exc:
        raise BrokerError(f"{config.bootstrap}: {exc}", retriable=exc.retriable) from exc
    finally:
        await consumer.stop()
    # Each partition in log order; partitions interleaved by record timestamp.
    merged = list(heapq.merge(*(kept[p] for p in sorted(kept)), key=lambda item: item[0]))
    return [line for _, _, line in merged[-count:]] if count > 0 else []
