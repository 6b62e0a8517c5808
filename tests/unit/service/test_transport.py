"""The first connection is bounded: a port that accepts and never answers ends in one line.

Without the bound a TLS client waits for a handshake (and a PLAINTEXT client for an answer) as long
as aiokafka's request timeout, then retries. The failures a real broker produces (wrong CA, host
name, expired certificate, wrong protocol, no client certificate, wrong password) are proven in
tests/integration/test_tls.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from toolgate._config import Config, Security
from toolgate._errors import BrokerError
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.service._kafka import client_settings
from toolgate.service._service import Worker, WorkerOptions
from toolgate.service._transport import check_connection

from tests.unit.builders import CONTRACTS
from tests.unit.worker_kit import get


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port that accepts connections, reads what arrives and never writes a byte."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(4096):
            pass

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        for writer in held:
            writer.close()
        server.close()


class TestSilentPort:
    @pytest.mark.parametrize(
        ("security", "problem"),
        [
            (Security(protocol="SSL"), "no TLS handshake and no Kafka answer within 0.5s"),
            (Security(protocol="PLAINTEXT"), "no Kafka answer within 0.5s"),
        ],
    )
    async def test_check_ends_with_one_line(self, silent_port: int, security: Security, problem: str) -> None:
        """A silent port: a retriable BrokerError naming the address, well before the outer
        guard (the bound and the follow-up probes, a few seconds)."""
        config = Config(bootstrap=f"127.0.0.1:{silent_port}", security=security)
        async with asyncio.timeout(30):
            with pytest.raises(BrokerError) as caught:
                await check_connection(config, client_settings(config), within_s=0.5)
        assert str(caught.value) == f"127.0.0.1:{silent_port}: {problem}"
        assert caught.value.retriable

    async def test_worker_is_not_ready_and_stops(self, silent_port: int) -> None:
        """The worker serves /readyz (503) while it checks the connection, then run() raises the
        one-line error: it never reports ready and never hangs."""
        config = Config(bootstrap=f"127.0.0.1:{silent_port}", security=Security(protocol="SSL"))
        options = WorkerOptions(handle_signals=False, metrics_port=0, connect_check_s=1.0)
        worker = Worker(config, Gate(ContractSet.load(CONTRACTS)), options=options)
        task = asyncio.create_task(worker.run())
        statuses: list[int] = []
        async with asyncio.timeout(30):
            while not task.done():
                if worker.metrics_port is not None:
                    # A worker stopping closes its health server between the look and the read.
                    with contextlib.suppress(ConnectionError):
                        statuses.append((await get(worker.metrics_port, "/readyz"))[0])
                await asyncio.sleep(0.1)  # polling the worker's /readyz while it checks
            with pytest.raises(BrokerError, match=r"no TLS handshake and no Kafka answer within 1s"):
                await task
        assert statuses, "the health server never answered during the check"
        assert set(statuses) == {503}
        assert worker.metrics.ready._value.get() == 0
