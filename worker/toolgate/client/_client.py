"""The client: the platform's side and the adapter's side over one connection."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from toolgate._config import Config
from toolgate._errors import BrokerError
from toolgate.client._adapter import AdapterSide
from toolgate.client._platform import PlatformSide
from toolgate.client._reader import DEFAULT_MAX_PENDING, POLL_MS, Reader
from toolgate.client._sender import DEFAULT_MAX_SENDS, SEND_TIMEOUT_S, Sender, is_kafka_error
from toolgate.client._values import seconds, whole
from toolgate.service._kafka import AiokafkaClients, KafkaClients, partitions_of


class Client(PlatformSide, AdapterSide):
    """Issue requests, publish results, await answers. Use ``async with`` (or ``start``/``close``).

    ``clients`` is the Kafka seam (default: aiokafka with the configuration's connection and
    security settings); ``clock`` gives the time in seconds since the epoch (request
    timestamps and wait deadlines); ``max_pending`` bounds the concurrent waits,
    ``max_sends`` the records handed to the producer at once (callers beyond either wait);
    ``send_timeout_s`` is how long a handed-over record may go unacknowledged.
    ``answers`` False: a client that decides in process (the MCP proxy's default) and so
    reads no envelope: no agent-topic consumer, no wait opened by ``issue``, and
    ``answer`` refuses.

    Raises:
        ValueError, TypeError: a setting out of range or of the wrong type (named).
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        clients: KafkaClients | None = None,
        clock: Callable[[], float] = time.time,
        max_pending: int = DEFAULT_MAX_PENDING,
        poll_ms: int = POLL_MS,
        send_timeout_s: float = SEND_TIMEOUT_S,
        max_sends: int = DEFAULT_MAX_SENDS,
        answers: bool = True,
    ) -> None:
        self.max_pending = whole("max_pending", max_pending, low=1, high=1_000_000)
        poll_ms = whole("poll_ms", poll_ms, low=1, high=60_000)
        send_timeout_s = seconds("send_timeout_s", send_timeout_s, high=300)
        max_sends = whole("max_sends", max_sends, low=1, high=100_000)
        self.config = config or Config()
        self._clients = clients or AiokafkaClients(self.config)
        self.clock = clock
        self._sends = Sender(self.config, self._clients, send_timeout_s=send_timeout_s, max_sends=max_sends)
        self._reader = Reader(
            self.config, self._clients, clock=clock, max_pending=self.max_pending, poll_ms=poll_ms
        )
        self._answers = answers
        self._closed = True  # until started

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect, start reading the agent topic from its end, and return once reading.

        Raises:
            BrokerError: the broker cannot be reached (one line naming the bootstrap), or the
                agent topic does not exist; nothing is left open.
            TransportError: a TLS, protocol or login mistake (one line naming the setting).
        """
        topic = self.config.topics.agent
        bootstrap = self.config.bootstrap
        timeout_s = self._sends.send_timeout_s
        try:
            try:
                await self._clients.check_connection(within_s=timeout_s)
            except BrokerError as exc:
                raise BrokerError(
                    f"cannot reach the Kafka broker at {bootstrap} ({exc}; is it running? "
                    "TOOLGATE_BOOTSTRAP names it)",
                    retriable=True,
                ) from None
            tps = await partitions_of(self._clients, topic, timeout_ms=int(timeout_s * 1000))
            if not tps:
                raise BrokerError(
                    f"{bootstrap}: topic {topic!r} does not exist (run: toolgate topics ensure)",
                    retriable=False,
                )
            await self._sends.start()
            if self._answers:
                await self._reader.start(tps)
        except BaseException as exc:
            await self.close()
            if isinstance(exc, BrokerError) or not is_kafka_error(exc):
                raise
            raise BrokerError(f"{bootstrap}: {exc}", retriable=True) from None
        self._closed = False

    async def close(self) -> None:
        """Stop reading; every request still waiting fails with :class:`ClientClosed`."""
        self._closed = True
        await self._reader.close()
        await self._sends.close()
