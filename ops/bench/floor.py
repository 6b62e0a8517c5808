"""The ``floor`` variant: Kafka's own exactly-once round trip, the latency nothing can beat.

A minimal aiokafka transactional relay, no toolgate code on its path: it reads the intake
``read_committed`` and, per input record, writes one record (the agent envelope the worker
writes for an accepted sample result, under the input's key, to the same partition of the
agent topic) and the consumer offset in a transaction of that partition's own producer; the
bench's ``read_committed`` consumer reads it back. It never waits for a commit to poll:
each partition commits in a task of its own while the loop polls. One result at a time, a
transaction holds one record; under the open loop's rate a partition's next transaction
takes what arrived during its previous one (one record per transaction cannot keep up with
half the worker's rate here: a transaction takes milliseconds), so at both rates it is the
shortest path a decision could take through Kafka's transactions.

Runs as ``worker_bench.py --floor SPEC`` in a process of its own (as the worker does),
driven by the same latency cases as the worker (:meth:`ops.bench.harness.Bench.latency_run`):
it reports its partitions like a worker child and, at its end, its transactions.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from aiokafka import TopicPartition
from toolgate._config import Config
from toolgate.service._kafka import AiokafkaClients, Producer, RebalanceListener

MAX_PER_TRANSACTION = 500  # as the worker's batch size


def floor_main(spec: dict[str, Any]) -> int:
    """One floor process: ``spec`` names the broker, group, topics, the agent record's value."""
    topics = spec["topics"]
    value = spec["value"].encode("latin-1")
    headers = [(name, v.encode("latin-1")) for name, v in spec["headers"]]
    settings = spec["settings"]
    clients = AiokafkaClients(
        Config(bootstrap=settings["bootstrap_servers"], client_id=settings["client_id"])
    )
    producers: dict[TopicPartition, Producer] = {}
    queues: dict[TopicPartition, asyncio.Queue[Any]] = {}
    tasks: dict[TopicPartition, asyncio.Task[None]] = {}
    stats = {"transactions": 0, "records": 0, "txn_seconds": 0.0}
    stop = asyncio.Event()

    def emit(event: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    async def relay(tp: TopicPartition) -> None:
        """One partition: a transaction per turn, with every record that is waiting."""
        producer, queue = producers[tp], queues[tp]
        while True:
            records = [await queue.get()]
            while not queue.empty() and len(records) < MAX_PER_TRANSACTION:
                records.append(queue.get_nowait())
            started = time.perf_counter()
            async with producer.transaction():
                futures = [
                    await producer.send(
                        topics["agent"], value, key=r.key, headers=headers, partition=tp.partition
                    )
                    for r in records
                ]
                await asyncio.gather(*futures)
                await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, spec["group_id"])
            stats["txn_seconds"] += time.perf_counter() - started
            stats["transactions"] += 1
            stats["records"] += len(records)

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
                    task = tasks.pop(tp, None)
                    if task is not None:
                        task.cancel()
                    producer = producers.pop(tp, None)
                    if producer is not None:
                        await producer.stop()
                emit({"event": "revoked", "partitions": sorted(tp.partition for tp in producers)})

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                for tp in sorted(assigned):
                    producer = clients.producer(
                        enable_idempotence=True,
                        acks="all",
                        linger_ms=0,
                        transactional_id=f"{spec['transactional_prefix']}.floor.{tp.topic}.{tp.partition}",
                    )
                    await producer.start()
                    producers[tp] = producer
                    queues[tp] = asyncio.Queue()
                    tasks[tp] = asyncio.create_task(relay(tp))
                emit({"event": "assigned", "partitions": sorted(tp.partition for tp in producers)})

        def read_stdin() -> None:
            for _line in sys.stdin:
                pass  # the floor takes no commands but stop (end of input)
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=read_stdin, daemon=True).start()
        await consumer.start()
        consumer.subscribe([topics["intake"]], listener=Listener())
        try:
            while not stop.is_set():
                batches = await consumer.getmany(
                    timeout_ms=spec["linger_ms"], max_records=MAX_PER_TRANSACTION
                )
                for tp, records in batches.items():
                    queue = queues.get(tp)
                    for record in records if queue is not None else ():
                        queue.put_nowait(record)  # type: ignore[union-attr]
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            await consumer.stop()
            for producer in producers.values():
                await producer.stop()

    asyncio.run(main())
    count = stats["transactions"]
    emit(
        {
            "event": "exit",
            "transactions": count,
            "txn_mean_ms": stats["txn_seconds"] / count * 1000 if count else 0,
            "batch_mean": stats["records"] / count if count else 0,
        }
    )
    return 0
