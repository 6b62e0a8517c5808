"""Sample results for ``toolgate contracts review --sample``: the reviewed tools called for real on
their MCP server, so the review shows a few of each projected field's values beside its bound.

Each call is named ``<server>.<tool>=<arguments as a JSON object>``; at most :data:`MAX_CALLS`, each
bounded by the timeout; the server is reached as import reaches it (a stdio command, or a URL on
the loopback). A tool is called only when the reviewer names it: a call does what the tool does.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Final

from toolgate._errors import ConfigError

__all__ = ["MAX_CALLS", "call_samples", "parse_sample"]

MAX_CALLS: Final = 20


def parse_sample(given: str, tools: list[str]) -> tuple[str, str, dict[str, Any]]:
    """``<server>.<tool>=<JSON object>`` as (qualified tool, MCP tool name, arguments).

    Raises:
        ConfigError: no ``=``, a tool not reviewed, arguments that are not a JSON object.
    """
    qualified, sep, text = given.partition("=")
    shown = f"--sample {given[:120]!r}"
    if not sep:
        raise ConfigError(f"{shown}: write TOOL=ARGUMENTS, the arguments a JSON object ({{}} for none)")
    if qualified not in tools:
        raise ConfigError(f"{shown}: {qualified[:130]!r} is not a draft reviewed here ({', '.join(tools)})")
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{shown}: the arguments are not JSON: {exc}") from exc
    if not isinstance(arguments, dict):
        raise ConfigError(f"{shown}: the arguments are a JSON object")
    return qualified, qualified.split(".", 1)[1], arguments


def call_samples(
    calls: list[tuple[str, str, dict[str, Any]]], *, command: str | None, url: str | None, timeout_s: float
) -> dict[str, list[dict[str, Any]]]:
    """Each call made on the server, its ``CallToolResult`` as JSON, by qualified tool.

    Raises:
        ConfigError: more than :data:`MAX_CALLS` calls, no server named, one that cannot be
            reached or does not answer within the timeout (one line naming it).
    """
    import anyio
    from mcp import Client

    from toolgate.mcp._import import check_loopback, stdio_server

    if len(calls) > MAX_CALLS:
        raise ConfigError(f"--sample: at most {MAX_CALLS} calls")
    if url:
        check_loopback(url)
        server: Any = url
        where = url
    elif command and shlex.split(command):
        server, where = stdio_server(shlex.split(command)), f"--command {command!r}"
    else:
        raise ConfigError("--sample: name the server to call with --command CMD or --url URL")

    async def run() -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        async with Client(server) as client:
            for qualified, name, arguments in calls:
                with anyio.fail_after(timeout_s):
                    result = await client.call_tool(name, arguments)
                out.setdefault(qualified, []).append(result.model_dump(by_alias=True, mode="json"))
        return out

    try:
        return anyio.run(run)
    except TimeoutError as exc:
        raise ConfigError(f"{where}: a --sample call got no answer within {timeout_s:g}s") from exc
    except Exception as exc:  # any failure to reach the server or to call: one line
        cause: BaseException = exc
        while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
            cause = cause.exceptions[0]
        text = str(cause).splitlines()[0] if str(cause) else ""
        raise ConfigError(f"{where}: --sample: {type(cause).__name__}: {text}"[:400]) from exc
