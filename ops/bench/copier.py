"""The ``copier`` variant: the client's own limit, a minimal aiokafka transactional copier.

No toolgate code on its path: consume, produce the same records per result as the worker
(agent + audit, quarantine per rejection: the bytes ``decide_batch`` wrote for a sample
result), send the offsets, commit; the same poll size and wait, one transactional producer
per partition, and the same send path as the worker (aiokafka's batch API,
``create_batch``/``send_batch``, one batch of up to 512 KiB per topic partition). The
relay against it is the loop's own overhead. Runs as ``worker_bench.py --copier SPEC``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import TopicPartition
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from toolgate._config import Topics
from toolgate.service._kafka import Consumer

from ops.bench.backlog import REJECT_EVERY, results
from ops.bench.relaying import PartitionProducers, emit, relay, relay_clients


def copier_main(spec: dict[str, Any]) -> int:
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

    state: dict[str, Any] = {"share": None, "decided": 0, "rejected": 0, "committed": 0, "first": None}
    counts: dict[str, int] = {}  # output topic -> partitions
    stop = asyncio.Event()
    clients = relay_clients(spec)
    partitions = PartitionProducers(
        clients, spec["transactional_prefix"], "copier", max_batch_size=spec["producer_batch_bytes"]
    )
    producers = partitions.producers

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

    def command(line: str) -> None:
        if line.startswith("go "):
            state["share"] = int(line.split()[1])
            emit({"event": "armed"})
        else:
            stop.set()

    same: set[str] = set()

    async def polled(consumer: Consumer, batches: dict[TopicPartition, list[Any]]) -> None:
        work = [(tp, records) for tp, records in batches.items() if tp in producers]
        if not work:
            return
        if not counts:
            intake = len(consumer.partitions_for_topic(topics["intake"]) or ())
            any_producer = next(iter(producers.values()))
            for topic in (topics["agent"], topics["quarantine"], topics["audit"]):
                counts[topic] = len(await any_producer.partitions_for(topic))
            same.update(topic for topic, count in counts.items() if count == intake)
        if state["first"] is None:
            state["first"] = (time.time(), time.process_time())
        await asyncio.gather(*(process(tp, records, same) for tp, records in work))
        last = (time.time(), time.process_time())
        if state["share"] is not None and not state.get("reported") and state["decided"] >= state["share"]:
            state["reported"] = True
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

    async def main() -> None:
        await relay(clients, spec, partitions, command, stop, polled, max_records=spec["batch_size"])

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
