"""The send path both sides share: one idempotent producer, a bounded number of sends handed
to it at once, and the partition Kafka's default partitioner gives each key.

Backpressure: at most ``max_sends`` hand-overs (a record, or the records of one decision sent
together: :meth:`Sender.send_all`) are in the producer at once; a caller beyond them waits
for room, and the send timeout starts only once its records are handed over, so a deep queue
of the caller's own sends is never reported as a broker that does not answer. When a
send gets no acknowledgement within the timeout, the sends that were already queued behind
it fail at once with the same error (they would wait for the same broker), and the first
acknowledgement after it clears that state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from toolgate._config import Config
from toolgate._errors import BrokerError
from toolgate.client._errors import ClientClosed
from toolgate.service._kafka import KafkaClients, Producer, partition_of

# A request record or result not acknowledged within this is an outage for the caller.
SEND_TIMEOUT_S = 10.0
# Records handed to the producer at once. aiokafka fills one batch per partition at a time
# and wakes every sender waiting on a full batch when it drains, so thousands of concurrent
# sends cost far more than the same sends a few hundred at a time.
DEFAULT_MAX_SENDS = 256
# One record to send: (topic, key, value, headers), to the key's murmur2 partition.
Record = tuple[str, str, bytes | None, list[tuple[str, bytes]]]


class Sender:
    """Sends records keyed by a request id to their murmur2 partition, within a timeout."""

    def __init__(
        self,
        config: Config,
        clients: KafkaClients,
        *,
        send_timeout_s: float,
        max_sends: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._clients = clients
        self.send_timeout_s = send_timeout_s
        self.max_sends = max_sends
        self._monotonic = monotonic
        self._room = asyncio.Semaphore(max_sends)
        self._producer: Producer | None = None
        self._partitions: dict[str, int] = {}
        self._lookup = asyncio.Lock()
        self._outage_at: float | None = None  # when a send last went unacknowledged
        self.waiting = 0  # callers waiting for room now
        self.in_flight = 0  # records in the producer now

    async def start(self) -> None:
        # linger 0: a hand-over leaves at once, in one produce request per partition leader.
        producer = self._clients.producer(acks="all", enable_idempotence=True, linger_ms=0)
        self._producer = producer  # set before starting: close() stops it whatever happens
        await producer.start()

    async def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send(self, topic: str, key: str, value: bytes | None, headers: list[tuple[str, bytes]]) -> None:
        """Send one record and await its acknowledgement (:meth:`send_all` of one).

        Raises:
            BrokerError: not acknowledged within the send timeout (counted from the hand-over),
                a send ahead of it was not, or the producer refused it (the topic named).
            ClientClosed: the client is not started.
        """
        await self.send_all([(topic, key, value, headers)])

    async def send_all(self, records: Sequence[Record]) -> None:
        """Send ``records`` (topic, key, value, headers) together and await every
        acknowledgement: one hand-over, each record appended to its partition's batch in one
        pass (no task per record), so they leave in one produce request per partition leader,
        with whatever other callers appended meanwhile (concurrent callers share the next
        request rather than queueing behind one another's acknowledgement). The hand-over
        takes one of the ``max_sends`` places however many records it holds.

        Raises:
            BrokerError: a record not acknowledged within the send timeout (counted from the
                hand-over; some of the others may have been), a send ahead of them was not, or
                the producer refused one (the topics named).
            ClientClosed: the client is not started.
        """
        if not records:
            return
        if self._producer is None:
            raise ClientClosed("the client is not started (use async with, or start())")
        queued_at = self._monotonic()
        self.waiting += 1
        try:
            await self._room.acquire()
        finally:
            self.waiting -= 1
        self.in_flight += len(records)
        try:
            await self._hand_over(records, queued_at)
        finally:
            self.in_flight -= len(records)
            self._room.release()

    async def _hand_over(self, records: Sequence[Record], queued_at: float) -> None:
        producer = self._producer
        if producer is None:
            raise ClientClosed("the client closed while the record waited to be sent")
        topics = list(dict.fromkeys(topic for topic, _key, _value, _headers in records))
        named = ", ".join(repr(topic) for topic in topics)
        where = f"{self.config.bootstrap}: topic{'s' if len(topics) > 1 else ''} {named}"
        if self._outage_at is not None and self._outage_at >= queued_at:
            raise BrokerError(
                f"{where}: not sent: a send ahead of it got no acknowledgement within "
                f"{self.send_timeout_s:g} s (is the broker running?)",
                retriable=True,
            )
        try:
            async with asyncio.timeout(self.send_timeout_s):
                deliveries = []
                for topic, key, value, headers in records:
                    count = await self._count(producer, topic)
                    raw_key = key.encode()
                    partition = partition_of(raw_key, count)  # murmur2, as the worker expects
                    deliveries.append(
                        await producer.send(topic, value, key=raw_key, partition=partition, headers=headers)
                    )
                await asyncio.gather(*deliveries)
        except TimeoutError:
            self._outage_at = self._monotonic()
            raise BrokerError(
                f"{where}: no acknowledgement within {self.send_timeout_s:g} s (is the broker running?)",
                retriable=True,
            ) from None
        except Exception as exc:
            if not is_kafka_error(exc):
                raise
            raise BrokerError(f"{where}: {exc}", retriable=True) from None
        self._outage_at = None

    async def _count(self, producer: Producer, topic: str) -> int:
        """The topic's partition count, asked once however many sends wait for it."""
        count = self._partitions.get(topic)
        if count is None:
            async with self._lookup:
                count = self._partitions.get(topic)
                if count is None:
                    count = self._partitions[topic] = len(await producer.partitions_for(topic))
        return count


def is_kafka_error(exc: BaseException) -> bool:
    from aiokafka.errors import KafkaError

    return isinstance(exc, KafkaError)
