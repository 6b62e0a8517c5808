"""The host's stdio, read and written on the event loop itself.

The MCP SDK's ``stdio_server`` reads each line of stdin, writes each message and flushes
stdout in a worker thread (``anyio.wrap_file``): three or more thread hand-offs for every
``tools/call``, each a wake-up of another thread and a return to the loop, which on a busy
machine cost more than the proxy's own work. When stdin and stdout are pipes or sockets (as
MCP hosts start a server), :func:`host_stdio` serves the same SDK transport over asyncio's
pipe transports instead: no thread, the same messages. Anything else (a terminal, a file)
keeps the SDK's own.

As the SDK does, while serving, fd 0 reads the null device and fd 1 writes to stderr, so
nothing else in the process reaches the wire; both are restored on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator
from typing import Any

# The longest line read from the host: a message over it is answered as one that does not
# parse (the SDK's error), and the line after it is read as the next message.
MAX_LINE_BYTES = 64 * 1024 * 1024


def _streamable(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket (what asyncio's pipe transports take)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class LineReader:
    """Lines of the host's stdin as text, ``async for`` (what the SDK's transport reads)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self.reader.readline()
        except ValueError:  # over MAX_LINE_BYTES: what is left of it was dropped
            return "\n"  # not JSON: the SDK's transport reports it, and reads on
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


class LineWriter:
    """The host's stdout as the SDK's transport writes it (``write``, then ``flush``)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


@contextlib.asynccontextmanager
async def host_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's ``stdio_server`` (read and write streams of session messages), over asyncio
    pipe transports when stdin and stdout are pipes or sockets, else as the SDK serves it."""
    from mcp.server.stdio import stdio_server

    if not (_streamable(0) and _streamable(1)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
    finally:
        os.close(devnull)
    reading: asyncio.BaseTransport | None = None
    writing: asyncio.BaseTransport | None = None
    try:
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
        reading, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
        )
        writing, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
        )
        writer = asyncio.StreamWriter(writing, protocol, None, loop)
        async with stdio_server(
            stdin=LineReader(reader),  # type: ignore[arg-type]
            stdout=LineWriter(writer),  # type: ignore[arg-type]
        ) as streams:
            yield streams
    finally:
        for transport in (reading, writing):
            if transport is not None:
                transport.close()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)
