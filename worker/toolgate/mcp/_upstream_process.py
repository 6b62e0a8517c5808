"""The stdio upstream's process: the variables of this environment it is started with (a named
allow-list, never the whole environment), and SIGTERM ending its process group first, so the
upstream never outlives the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError

_log = logging.getLogger("toolgate.mcp_proxy")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def upstream_env_names(args: argparse.Namespace, config: Config) -> list[str]:
    """The variables passed to a stdio upstream: ``--upstream-env NAME`` (repeatable) and the
    configuration's ``mcp_upstream_env`` (``TOOLGATE_MCP_UPSTREAM_ENV``, comma-separated).

    Raises:
        ConfigError: a name that is not a variable name, or names given with --upstream-url.
    """
    names = list(getattr(args, "upstream_env", None) or [])
    names += [n.strip() for n in config.mcp_upstream_env.split(",") if n.strip()]
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"--upstream-env {name[:80]!r}: not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if names and getattr(args, "upstream_url", None):
        raise ConfigError("--upstream-env: passes variables to an --upstream-command, not an --upstream-url")
    return list(dict.fromkeys(names))


def with_upstream_env(target: Any, names: list[str], environ: Mapping[str, str] | None = None) -> Any:
    """``target`` (a stdio upstream) started with the named variables of this environment
    beside the MCP SDK's default ones (``HOME``, ``PATH``, ...): a named allow-list, never the
    whole environment. A name this environment does not set is not passed."""
    env = os.environ if environ is None else environ
    if not names or isinstance(target, str):
        return target
    passed = {name: env[name] for name in names if name in env}
    return target.model_copy(update={"env": {**(target.env or {}), **passed}})


def upstream_groups(pid: int | None = None) -> list[int]:
    """The process groups of the children of ``pid`` (this process) that lead a session of
    their own: the stdio upstream the MCP SDK starts (``start_new_session``), out of reach of
    a signal sent to the proxy alone. Read from ``/proc`` (empty where there is none)."""
    me = os.getpid() if pid is None else pid
    groups: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp session
        if len(fields) > 3 and fields[1] == str(me) and fields[3] == stat.parent.name:
            groups.append(int(stat.parent.name))
    return groups


def end_upstreams(sig: int = signal.SIGTERM) -> int:
    """Send ``sig`` to every upstream process group (:func:`upstream_groups`); how many."""
    ended = 0
    for group in upstream_groups():
        try:
            os.killpg(group, sig)
            ended += 1
        except (ProcessLookupError, PermissionError):
            continue
    return ended


class SigtermEndsUpstream:
    """While entered, SIGTERM (a host shutting down: the TypeScript SDK closes stdin, then
    sends SIGTERM 2 s later) ends the upstream's process group at once, then stops serving
    (cancels :attr:`serving`, if set): the upstream never outlives the proxy, even when the
    signal comes while the proxy waits out the upstream's own grace period."""

    def __init__(self) -> None:
        self.came = False
        self.serving: asyncio.Task[Any] | None = None
        self._installed = False

    def on_term(self) -> None:
        """The signal handler."""
        self.came = True
        _log.warning("SIGTERM: ending the upstream (%d process group(s)) and stopping", end_upstreams())
        if self.serving is not None:
            self.serving.cancel()

    def __enter__(self) -> SigtermEndsUpstream:
        # No signal handling in a thread or on Windows: the SDK's own shutdown is all there is.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.on_term)
            self._installed = True
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
