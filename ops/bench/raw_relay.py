"""A relay of JSON-RPC lines over stdio, without the MCP SDK: the floor of any relay process.

Usage::

    python -m ops.bench.raw_relay -- COMMAND [ARG...]

Starts ``COMMAND`` (an MCP server over stdio) as a subprocess and passes each line of this
process's stdin to the upstream's stdin, and each line of the upstream's stdout to this
process's stdout, unchanged: no parse, no session, no thread, one asyncio loop. What a relay
over stdio costs on this machine before any MCP machinery: two more pipe hops per message and
one more process. ``mcp_proxy_bench.py`` calls through it as the ``raw`` path. The upstream's
stderr is this process's. It ends when the upstream's stdout ends (after this stdin ends, the
upstream's stdin is closed), with the upstream's exit status. Its stdin and stdout are pipes
or sockets, as MCP hosts start a server (asyncio's pipe transports take nothing else).
"""

from __future__ import annotations

import asyncio
import os
import sys

# The longest line passed; a longer one ends the relay (the bench's messages are far shorter).
MAX_LINE_BYTES = 64 * 1024 * 1024


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Every line of ``source`` to ``sink`` as read, then close ``sink`` (a reader gone on
    the other side ends it too)."""
    try:
        while line := await source.readline():
            sink.write(line)
            await sink.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sink.close()


async def relay(command: list[str]) -> int:
    """Relay lines between this process's stdio and ``command``'s; its exit status."""
    loop = asyncio.get_running_loop()
    upstream = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=MAX_LINE_BYTES
    )
    assert upstream.stdin is not None
    assert upstream.stdout is not None
    host_in = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(host_in), os.fdopen(os.dup(0), "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(os.dup(1), "wb", buffering=0)
    )
    host_out = asyncio.StreamWriter(transport, protocol, None, loop)
    to_upstream = asyncio.create_task(_pump(host_in, upstream.stdin))
    try:
        await _pump(upstream.stdout, host_out)
    finally:
        to_upstream.cancel()
        if upstream.returncode is None:
            upstream.stdin.close()
    return await upstream.wait()


def main(argv: list[str]) -> int:
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m ops.bench.raw_relay -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    return asyncio.run(relay(command))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
