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
import time
from typing import Any

from aiokafka import TopicPartition

from ops.bench.relaying import PartitionProducers, emit, relay, relay_clients

MAX_PER_TRANSACTION = 500  # as the worker's batch size


def floor_main(spec: dict[str, Any]) -> int:
    """One floor process: ``spec`` names the broker, group, topics, the agent record's value."""
    topics = spec["topics"]
    value = spec["value"].encode("latin-1")
    headers = [(name, v.encode("latin-1")) for name, v in spec["headers"]]
    clients = relay_clients(spec)
    queues: dict[TopicPartition, asyncio.Queue[Any]] = {}
    tasks: dict[TopicPartition, asyncio.Task[None]] = {}
    stats = {"transactions": 0, "records": 0, "txn_seconds": 0.0}

    def started(tp: TopicPartition) -> None:
        queues[tp] = asyncio.Queue()
        tasks[tp] = asyncio.create_task(forward(tp))

    def stopping(tp: TopicPartition) -> None:
        task = tasks.pop(tp, None)
        if task is not None:
            task.cancel()

    partitions = PartitionProducers(
        clients, spec["transactional_prefix"], "floor", started=started, stopping=stopping, linger_ms=0
    )

    async def forward(tp: TopicPartition) -> None:
        """One partition: a transaction per turn, with every record that is waiting."""
        producer, queue = partitions.producers[tp], queues[tp]
        while True:
            records = [await queue.get()]
            while not queue.empty() and len(records) < MAX_PER_TRANSACTION:
                records.append(queue.get_nowait())
            began = time.perf_counter()
            async with producer.transaction():
                futures = [
                    await producer.send(
                        topics["agent"], value, key=r.key, headers=headers, partition=tp.partition
                    )
                    for r in records
                ]
                await asyncio.gather(*futures)
                await producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, spec["group_id"])
            stats["txn_seconds"] += time.perf_counter() - began
            stats["transactions"] += 1
            stats["records"] += len(records)

    async def polled(_consumer: Any, batches: dict[TopicPartition, list[Any]]) -> None:
        for tp, records in batches.items():
            queue = queues.get(tp)
            for record in records if queue is not None else ():
                queue.put_nowait(record)  # type: ignore[union-attr]

    async def main() -> None:
        stop = asyncio.Event()

        def command(line: str) -> None:
            if line == "stop":  # the floor takes no other command
                stop.set()

        async def cancel_tasks() -> None:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

        await relay(
            clients,
            spec,
            partitions,
            command,
            stop,
            polled,
            max_records=MAX_PER_TRANSACTION,
            before_stop=cancel_tasks,
        )

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
