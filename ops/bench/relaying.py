"""What the bench's own transactional relays share (the copier, :mod:`ops.bench.copier`, and
the floor, :mod:`ops.bench.floor`): no toolgate code on their path but the Kafka seam.

Each is a process of its own, driven like a worker child: JSON events on stdout, commands on
stdin (end of input or ``stop`` ends it). It reads the intake in a consumer group
``read_committed`` and holds one transactional producer per assigned intake partition, with
the transactional id ``<prefix>.<role>.<topic>.<partition>`` (as the worker's, so a new owner
fences the previous one), created when the partition is assigned and stopped when it is
revoked (:class:`PartitionProducers`); :func:`relay` polls and hands each poll to the relay.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import TopicPartition
from toolgate._config import Config
from toolgate.service._kafka import AiokafkaClients, Consumer, Producer, RebalanceListener


def emit(event: dict[str, Any]) -> None:
    """One event for the bench (a JSON line on stdout)."""
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def relay_clients(spec: dict[str, Any]) -> AiokafkaClients:
    """The clients of a relay process: plaintext only (checked by the parent), so the bootstrap
    and client id of ``spec["settings"]`` are all there is."""
    settings = spec["settings"]
    return AiokafkaClients(Config(bootstrap=settings["bootstrap_servers"], client_id=settings["client_id"]))


def watch_stdin(command: Callable[[str], None]) -> None:
    """Hand every line of stdin to ``command`` on the running loop, then ``stop`` at the end of
    input (the bench closed it, or died): a thread reads, the loop never blocks on it."""
    loop = asyncio.get_running_loop()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(command, line.strip())
        loop.call_soon_threadsafe(command, "stop")

    threading.Thread(target=read, daemon=True).start()


class PartitionProducers(RebalanceListener):
    """One transactional producer per assigned intake partition; ``assigned`` and ``revoked``
    events with the partitions held after each change.

    ``started(tp)`` runs once a partition's producer has started, ``stopping(tp)`` before it is
    stopped at revocation; ``settings`` go to every producer (idempotent, acks=all always).
    """

    def __init__(
        self,
        clients: AiokafkaClients,
        transactional_prefix: str,
        role: str,
        *,
        started: Callable[[TopicPartition], None] | None = None,
        stopping: Callable[[TopicPartition], None] | None = None,
        **settings: Any,
    ) -> None:
        self.producers: dict[TopicPartition, Producer] = {}
        self._clients = clients
        self._prefix = f"{transactional_prefix}.{role}"
        self._started = started
        self._stopping = stopping
        self._settings = settings

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        for tp in revoked:
            if self._stopping is not None:
                self._stopping(tp)
            producer = self.producers.pop(tp, None)
            if producer is not None:
                await producer.stop()
        emit({"event": "revoked", "partitions": sorted(tp.partition for tp in self.producers)})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        for tp in sorted(assigned):
            producer = self._clients.producer(
                enable_idempotence=True,
                acks="all",
                transactional_id=f"{self._prefix}.{tp.topic}.{tp.partition}",
                **self._settings,
            )
            await producer.start()
            self.producers[tp] = producer
            if self._started is not None:
                self._started(tp)
        emit({"event": "assigned", "partitions": sorted(tp.partition for tp in self.producers)})

    async def stop(self) -> None:
        """Stop every producer still held."""
        for producer in self.producers.values():
            await producer.stop()


async def relay(
    clients: AiokafkaClients,
    spec: dict[str, Any],
    listener: PartitionProducers,
    command: Callable[[str], None],
    stopped: asyncio.Event,
    polled: Callable[[Consumer, dict[TopicPartition, list[Any]]], Awaitable[None]],
    *,
    max_records: int,
    before_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Read ``spec["topics"]["intake"]`` in the group ``spec["group_id"]`` and hand each poll
    (``linger_ms`` long at most, ``max_records`` at most) to ``polled`` until ``stopped`` is
    set; every stdin line goes to ``command`` (a final ``stop`` at the end of input).
    At the end, also on failure: ``before_stop``, then the consumer and the producers stop."""
    consumer = clients.consumer(
        group_id=spec["group_id"],
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )

    watch_stdin(command)
    await consumer.start()
    consumer.subscribe([spec["topics"]["intake"]], listener=listener)
    try:
        while not stopped.is_set():
            batches = await consumer.getmany(timeout_ms=spec["linger_ms"], max_records=max_records)
            await polled(consumer, batches)
    finally:
        if before_stop is not None:
            await before_stop()
        await consumer.stop()
        await listener.stop()
