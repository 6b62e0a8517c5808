"""``toolgate mcp-proxy --print-host-config``: the ``mcpServers`` entry that starts this very proxy.

An MCP host (Claude Desktop, Cursor, VS Code, the inspector) starts its servers with a minimal
environment, from a JSON entry ``{"command", "args", "env"}``. :func:`host_entry` writes that
entry for the proxy as the command line and the configuration in force describe it: the
``toolgate`` of this installation and every path absolute (the contracts folder, the keyring,
the upstream's program, TLS and secret files), the proxy's options that differ from their
defaults, and in ``env`` the ``TOOLGATE_*`` settings that differ from the defaults (the topic
prefix rather than eight topic names when one is in force) and the variables passed to the
upstream (``--upstream-env``) with their values here. No password is ever written: a SASL
password is named by its file.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from toolgate._config import Config, Topics
from toolgate._errors import ConfigError
from toolgate.mcp._options import DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_QUEUED

__all__ = ["host_entry"]

# The proxy's options passed on when they differ from their defaults: (flag, attribute, default).
_PASSED: Final[tuple[tuple[str, str, Any], ...]] = (
    ("--decide", "decide", "proxy"),
    ("--adapter", "adapter", "mcp-proxy"),
    ("--ttl", "ttl", 60.0),
    ("--timeout", "timeout", 30.0),
    ("--upstream-timeout", "upstream_timeout", 30.0),
    ("--max-attempts", "max_attempts", 1),
    ("--max-concurrent", "max_concurrent", DEFAULT_MAX_CONCURRENT),
    ("--max-queued", "max_queued", DEFAULT_MAX_QUEUED),
    ("--metrics-port", "metrics_port", 0),
)
# Settings the proxy does not read (the worker's and topics ensure's), or written as options.
_NOT_PASSED: Final = frozenset(
    {
        "metrics_port",
        "metrics_host",
        "max_requests",
        "session_timeout_ms",
        "replication_factor",
        "partitions",
        "contracts_dir",
        "keyring",
        "mcp_upstream_env",
        "topic_prefix",
        "topics",
        "group_id",
    }
)
_PATHS: Final = frozenset(
    {
        "sasl_password_file",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        "basic_auth_file",
        "bearer_token_file",
        "ca_file",
        "snapshot_dir",
    }
)
_SECTIONS: Final = {"security": "SECURITY_", "registry": "REGISTRY_"}


def host_entry(
    args: argparse.Namespace,
    config: Config,
    upstream_env: list[str],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``{"mcpServers": {<server>: {"command", "args", "env"}}}`` for this proxy.

    Raises:
        ConfigError: ``--listen URL`` (a host connects to the URL, it starts nothing), a SASL
            password given as a value rather than a file, an upstream program not found.
    """
    env = os.environ if environ is None else environ
    if getattr(args, "listen", "stdio") != "stdio":
        raise ConfigError(
            f"--print-host-config: prints the entry of a proxy the host starts over stdio; with "
            f"--listen {args.listen} the host connects to that URL instead"
        )
    if config.security.sasl_password is not None and config.security.sasl_password_file is None:
        raise ConfigError(
            "--print-host-config: the SASL password is set as a value: give it as a file "
            "(TOOLGATE_SECURITY_SASL_PASSWORD_FILE), which the entry names, never the password"
        )
    toolgate = Path(sys.executable).parent / "toolgate"
    command, head = (str(toolgate), []) if toolgate.is_file() else (sys.executable, ["-m", "toolgate"])
    argv = [*head, "mcp-proxy", "--server", args.server, "--contracts", _source(config.contracts_dir)]
    if args.upstream_command:
        argv += ["--upstream-command", _absolute_command(args.upstream_command)]
    else:
        argv += ["--upstream-url", args.upstream_url]
    for name in upstream_env:
        argv += ["--upstream-env", name]
    keyring = getattr(args, "keyring", None) or config.keyring
    if keyring:
        argv += ["--keyring", str(Path(keyring).absolute())]
    for flag, attribute, default in _PASSED:
        value = getattr(args, attribute, default)
        if value != default:
            argv += [flag, str(value)]
    if getattr(args, "allow_remote", False):
        argv.append("--allow-remote")
    variables = {"TOOLGATE_BOOTSTRAP": config.bootstrap, **_settings(config)}
    variables.update({name: env[name] for name in upstream_env if name in env})
    return {"mcpServers": {args.server: {"command": command, "args": argv, "env": variables}}}


def _source(contracts: str) -> str:
    if contracts.startswith(("kafka:", "registry+")):
        return contracts
    return str(Path(contracts).absolute())


def _absolute_command(line: str) -> str:
    """The upstream command with its program, and every argument naming a file here, absolute."""
    words = shlex.split(line)
    if not words:
        raise ConfigError("--upstream-command: empty")
    program = words[0]
    if "/" in program:
        found: str | None = os.path.abspath(program) if os.path.exists(program) else None
    else:
        found = shutil.which(program)
    if found is None:
        raise ConfigError(f"--upstream-command: {program[:200]!r} not found (on PATH or as a file)")
    rest = [os.path.abspath(w) if not w.startswith("-") and os.path.exists(w) else w for w in words[1:]]
    return shlex.join([os.path.abspath(found), *rest])


def _settings(config: Config) -> dict[str, str]:
    """The ``TOOLGATE_*`` settings in force that differ from the defaults, paths absolute."""
    defaults = Config()
    out: dict[str, str] = {}
    if config.topic_prefix is not None:
        out["TOOLGATE_TOPIC_PREFIX"] = config.topic_prefix
        implied_topics, implied_group = Topics.under(config.topic_prefix), config.topic_prefix
    else:
        implied_topics, implied_group = defaults.topics, defaults.group_id
    for role in Topics.__struct_fields__:
        if getattr(config.topics, role) != getattr(implied_topics, role):
            out[f"TOOLGATE_TOPIC_{role.upper()}"] = getattr(config.topics, role)
    if config.group_id != implied_group:
        out["TOOLGATE_GROUP_ID"] = config.group_id
    mine, theirs = msgspec.to_builtins(config), msgspec.to_builtins(defaults)
    for name, value in mine.items():
        if name in _NOT_PASSED or value == theirs.get(name):
            continue
        if name in _SECTIONS:
            for key, item in value.items():
                if item is None or item == theirs[name].get(key) or key == "sasl_password":
                    continue
                shown = str(Path(item).absolute()) if key in _PATHS else str(item)
                out[f"TOOLGATE_{_SECTIONS[name]}{key.upper()}"] = shown
        elif value is not None:
            out[f"TOOLGATE_{name.upper()}"] = str(value)
    return out
