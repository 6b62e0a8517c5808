"""The host's stdio on the event loop: lines read and written over pipes without a thread,
as the SDK's stdio transport reads and writes them, and the SDK's own transport kept for
anything that is not a pipe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from toolgate.mcp import _stdio
from toolgate.mcp._stdio import LineReader, LineWriter

from tests import ROOT


async def pipe_reader(limit: int) -> tuple[asyncio.StreamReader, int]:
    """A StreamReader on the read end of a new pipe, and the write end's fd."""
    read_fd, write_fd = os.pipe()
    reader = asyncio.StreamReader(limit=limit)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0))
    return reader, write_fd


class TestLines:
    """Each line of the pipe is one message's text; an over-long line is one that does not parse."""

    async def test_lines_then_the_end(self) -> None:
        """Two lines come as two texts (undecodable bytes replaced), then the iteration ends."""
        reader, write_fd = await pipe_reader(1024)
        os.write(write_fd, b'{"a":1}\n{"b":"\xff"}\n')
        os.close(write_fd)
        lines = [line async for line in LineReader(reader)]
        assert lines == ['{"a":1}\n', '{"b":"\ufffd"}\n']

    async def test_an_over_long_line_is_not_json_and_the_next_is_read(self) -> None:
        """A line over the limit reads as an empty line (the SDK reports it as not parsing);
        the line after it is read as it came."""
        reader, write_fd = await pipe_reader(64)
        os.write(write_fd, b"x" * 200 + b'\n{"ok":true}\n')
        os.close(write_fd)
        lines = [line async for line in LineReader(reader)]
        assert lines[0] == "\n"
        assert lines[-1] == '{"ok":true}\n'

    async def test_written_then_flushed(self) -> None:
        """What is written reaches the pipe's reader once flushed."""
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", 0)
        )
        writer = LineWriter(asyncio.StreamWriter(transport, protocol, None, loop))
        await writer.write('{"id":1}\n')
        await writer.flush()
        transport.close()
        assert os.read(read_fd, 100) == b'{"id":1}\n'
        os.close(read_fd)


class TestStreamable:
    """Pipes and sockets take the loop's transports; a regular file keeps the SDK's transport."""

    def test_a_pipe_is_streamable_and_a_file_is_not(self) -> None:
        """os.pipe() ends: yes; a temporary file: no; a closed fd: no."""
        read_fd, write_fd = os.pipe()
        with tempfile.TemporaryFile() as file:
            assert _stdio._streamable(read_fd)
            assert _stdio._streamable(write_fd)
            assert not _stdio._streamable(file.fileno())
        os.close(read_fd)
        os.close(write_fd)
        assert not _stdio._streamable(read_fd)


ECHO = """
import asyncio, sys
import mcp.types as types
from toolgate.mcp._stdio import host_stdio
from mcp.shared.message import SessionMessage

async def main():
    async with host_stdio() as (read, write):
        print("stray", flush=True)  # fd 1 is stderr while serving: never on the wire
        async for message in read:
            if isinstance(message, Exception):
                reply = types.JSONRPCNotification(jsonrpc="2.0", method="bad")
            else:
                reply = types.JSONRPCResponse(jsonrpc="2.0", id=message.message.id, result={"ok": True})
            await write.send(SessionMessage(reply))
        await write.aclose()  # as the server does when the host has gone

asyncio.run(main())
"""


class TestOverAProcessesPipes:
    """A process whose stdio are pipes answers each line on stdout and nothing else reaches it."""

    @pytest.mark.parametrize("stdin_is_file", [False, True])
    def test_requests_answered_on_stdout(self, tmp_path: Path, stdin_is_file: bool) -> None:
        """Two requests and a line that is not JSON: two answers and one report, in order, on
        stdout; the process's own print goes to stderr (pipes, or the SDK's transport for a
        file on stdin)."""
        lines = (
            b'{"jsonrpc":"2.0","id":1,"method":"ping"}\nnot json\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n'
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT / "worker")}
        source = tmp_path / "in.jsonl"
        source.write_bytes(lines)
        with source.open("rb") as file:
            feed: dict[str, Any] = {"stdin": file} if stdin_is_file else {"input": lines}
            command = [sys.executable, "-c", ECHO]
            done = subprocess.run(command, capture_output=True, env=env, timeout=60, check=True, **feed)
        out = done.stdout.decode().splitlines()
        assert out == [
            '{"jsonrpc":"2.0","id":1,"result":{"ok":true}}',
            '{"jsonrpc":"2.0","method":"bad"}',
            '{"jsonrpc":"2.0","id":2,"result":{"ok":true}}',
        ]
        assert "stray" in done.stderr.decode()
