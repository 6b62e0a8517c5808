"""The command line of ``toolgate mcp-proxy``: its options (:func:`add_arguments`), each
checked (:func:`options_from`, :func:`parse_listen`, :func:`upstream_target`), and what the
proxy says at start-up about the settings it found and where from (:func:`settings_lines`).
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate._urls import redact_url, split_url
from toolgate._version import __version__
from toolgate.mcp._progress import PROGRESS_CEILING_MAX_S, PROGRESS_CEILING_S

DEFAULT_MAX_CONCURRENT = 64
# --decide: in this process (the default) or by the worker fleet.
DECIDE_MODES = ("proxy", "worker")
DEFAULT_MAX_QUEUED = 1024
# The numeric options: (flag, attribute, lowest, highest), each finite and in range.
OPTION_RANGES: tuple[tuple[str, str, float, float], ...] = (
    ("--ttl", "ttl", 1.0, 7 * 86400.0),
    ("--timeout", "timeout", 0.1, 3600.0),
    ("--upstream-timeout", "upstream_timeout", 0.1, 3600.0),
    ("--progress-ceiling", "progress_ceiling", 0.1, PROGRESS_CEILING_MAX_S),
    ("--max-attempts", "max_attempts", 1, 100),
    ("--max-concurrent", "max_concurrent", 1, 10_000),
    ("--max-queued", "max_queued", 1, 1_000_000),
)


@dataclass(frozen=True)
class ProxyOptions:
    """How the proxy issues requests and waits (seconds)."""

    adapter: str = "mcp-proxy"  # tg-adapter of unsigned results
    adapter_version: str = __version__
    ttl_s: float = 60.0  # the request records' expiry
    wait_s: float = 30.0  # per attempt, for the decided envelope
    upstream_timeout_s: float = 30.0
    progress_ceiling_s: float = PROGRESS_CEILING_S  # how long progress may hold one upstream call
    max_attempts: int = 1
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    max_queued: int = DEFAULT_MAX_QUEUED


def _loopback(url: str, flag: str) -> None:
    parts = split_url(url, flag)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{flag} {redact_url(url)}: give an http:// URL")
    if parts.hostname == "localhost":
        return
    try:
        loop = ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        loop = False
    if not loop:
        raise ConfigError(
            f"{flag} {url}: not on the loopback (127.0.0.0/8, ::1, localhost); "
            "--allow-remote serves or connects beyond it"
        )


@dataclass(frozen=True)
class Listen:
    """Where the host connects: stdio, or streamable HTTP at host:port/path."""

    stdio: bool
    host: str = "127.0.0.1"
    port: int = 0
    path: str = "/mcp"


def parse_listen(text: str, *, allow_remote: bool) -> Listen:
    """``stdio`` or ``http://HOST:PORT/PATH``.

    Raises:
        ConfigError: naming ``--listen``.
    """
    if text == "stdio":
        return Listen(stdio=True)
    if not allow_remote:
        _loopback(text, "--listen")
    parts = split_url(text, "--listen")
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ConfigError(f"--listen {text}: give stdio or http://HOST:PORT/PATH")
    return Listen(stdio=False, host=parts.hostname, port=parts.port, path=parts.path or "/mcp")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``toolgate mcp-proxy``."""
    p.add_argument(
        "--server", required=True, metavar="NAME", help="the MCP server's name in contracts (<NAME>.<tool>)"
    )
    upstream = p.add_mutually_exclusive_group(required=True)
    upstream.add_argument("--upstream-command", metavar="CMD", help="start the upstream server (stdio)")
    upstream.add_argument("--upstream-url", metavar="URL", help="the upstream's streamable HTTP URL")
    p.add_argument(
        "--upstream-env",
        action="append",
        metavar="NAME",
        help="pass this variable of the environment to the --upstream-command (repeatable; also "
        "mcp_upstream_env in --config, TOOLGATE_MCP_UPSTREAM_ENV): the upstream gets only these "
        "beside HOME, PATH and the like, never the whole environment",
    )
    p.add_argument(
        "--listen",
        default="stdio",
        metavar="stdio|URL",
        help="where the host connects: stdio (default) or http://127.0.0.1:PORT/mcp",
    )
    p.add_argument(
        "--allow-remote", action="store_true", help="allow --listen/--upstream-url beyond the loopback"
    )
    p.add_argument(
        "--decide",
        choices=DECIDE_MODES,
        default="proxy",
        help="who decides a result: proxy (default: in this process, with the workers' gate and "
        "contracts, records written acks=all before the answer) or worker (published to intake, "
        "the answer awaited from a worker's envelope)",
    )
    p.add_argument(
        "--adapter", default="mcp-proxy", help="tg-adapter of unsigned results (default mcp-proxy)"
    )
    p.add_argument("--adapter-version", default=__version__, help="tg-adapter-version (default: toolgate's)")
    p.add_argument("--ttl", type=float, default=60.0, metavar="S", help="request expiry (default 60)")
    p.add_argument(
        "--timeout", type=float, default=30.0, metavar="S", help="wait per attempt for the decision (30)"
    )
    p.add_argument(
        "--upstream-timeout", type=float, default=30.0, metavar="S", help="upstream tools/call (30)"
    )
    p.add_argument(
        "--progress-ceiling",
        type=float,
        default=PROGRESS_CEILING_S,
        metavar="S",
        help=f"the longest an upstream call reporting progress is waited for ({PROGRESS_CEILING_S:g})",
    )
    p.add_argument("--max-attempts", type=int, default=1, metavar="N", help="attempts per call (default 1)")
    p.add_argument(
        "--max-concurrent", type=int, default=DEFAULT_MAX_CONCURRENT, metavar="N", help="calls in flight (64)"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (default 0: off)",
    )
    p.add_argument(
        "--max-queued",
        type=int,
        default=DEFAULT_MAX_QUEUED,
        metavar="N",
        help="calls waiting beyond those (1024)",
    )


def options_from(args: argparse.Namespace) -> ProxyOptions:
    """ProxyOptions from the command line.

    Raises:
        ConfigError: a value not finite or out of range, naming its option.
    """
    for flag, attribute, lowest, highest in OPTION_RANGES:
        value = getattr(args, attribute)
        if not math.isfinite(value) or not lowest <= value <= highest:
            raise ConfigError(f"{flag}: must be a finite number in {lowest:g}..{highest:g} (got {value})")
    metrics_port = getattr(args, "metrics_port", 0)
    if not 0 <= metrics_port <= 65535:
        raise ConfigError(f"--metrics-port: must be in 0..65535 (got {metrics_port})")
    return ProxyOptions(
        adapter=args.adapter,
        adapter_version=args.adapter_version,
        ttl_s=args.ttl,
        wait_s=args.timeout,
        upstream_timeout_s=args.upstream_timeout,
        progress_ceiling_s=getattr(args, "progress_ceiling", PROGRESS_CEILING_S),
        max_attempts=args.max_attempts,
        max_concurrent=args.max_concurrent,
        max_queued=args.max_queued,
    )


def upstream_target(args: argparse.Namespace) -> Any:
    """What :class:`mcp.Client` connects to."""
    if args.upstream_url:
        if not args.allow_remote:
            _loopback(args.upstream_url, "--upstream-url")
        return args.upstream_url
    from mcp import StdioServerParameters

    command = shlex.split(args.upstream_command)
    if not command:
        raise ConfigError("--upstream-command: empty")
    return StdioServerParameters(command=command[0], args=command[1:])


def reimport_command(args: argparse.Namespace, contracts_dir: str) -> str:
    """The ``toolgate contracts import-mcp`` command that imports this proxy's upstream again,
    runnable as written (the proxy adds ``--tool NAME``): the contracts folder as an absolute
    path, the server name, and the upstream as the proxy reaches it (``--command`` or ``--url``).
    Over the contracts topic or a registry there is no folder to name: the import goes into the
    folder the set is published from, which ``--contracts`` must then name."""
    words = ["toolgate", "contracts", "import-mcp"]
    if not contracts_dir.startswith(("kafka:", "registry+")):
        words += ["--contracts", str(Path(contracts_dir).resolve())]
    words += ["--server", args.server]
    if args.upstream_url:
        words += ["--url", args.upstream_url]
    else:
        words += ["--command", args.upstream_command]
    return shlex.join(words)


def _origin(args: argparse.Namespace, setting: str, flag: str, variable: str, key: str) -> str:
    """Where a setting came from: the flag, the environment, the config file or the default."""
    if getattr(args, setting, None):
        return flag
    if os.environ.get(variable):
        return variable
    config_file = getattr(args, "config", None) or os.environ.get("TOOLGATE_CONFIG")
    if config_file:
        try:
            with open(config_file, "rb") as stream:
                named = key in tomllib.load(stream)
        except (OSError, tomllib.TOMLDecodeError):
            named = False
        if named:
            return f"--config {config_file}"
    return "default"


def settings_lines(args: argparse.Namespace, config: Config) -> list[str]:
    """What the proxy uses, for stderr at start-up: an MCP host starts it with a minimal
    environment, so the broker, folder and topics it found are said, with where from."""
    bootstrap_from = _origin(args, "bootstrap", "--bootstrap", "TOOLGATE_BOOTSTRAP", "bootstrap")
    if bootstrap_from == "default":
        bootstrap_from += ": --bootstrap, TOOLGATE_BOOTSTRAP or --config FILE names another"
    contracts_from = _origin(args, "contracts", "--contracts", "TOOLGATE_CONTRACTS_DIR", "contracts_dir")
    topics = config.topics
    prefix = f" (topic prefix {config.topic_prefix})" if config.topic_prefix else ""
    return [
        f"broker {config.bootstrap} (from {bootstrap_from})",
        f"contracts {_contracts_text(config.contracts_dir)} (from {contracts_from})",
        f"topics requests={topics.requests} intake={topics.intake} agent={topics.agent}; "
        f"worker group {config.group_id}{prefix}",
    ]


def _contracts_text(contracts: str) -> str:
    """A folder as its absolute path; a source (``kafka:``, ``registry+URL``) as it is given."""
    if contracts.startswith(("kafka:", "registry+")):
        return contracts
    return str(Path(contracts).resolve())
