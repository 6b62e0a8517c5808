"""Broker instances of a test's own: ``ops/kafka/kafka.sh`` on free ports and a data folder of
the test's, never the shared broker on 127.0.0.1:19092.

An :class:`Instance` is the script's knobs for one instance (``TOOLGATE_KAFKA_PORT``,
``_CONTROLLER_PORT``, the optional listeners' ports, ``_DATA``, ``_SCRAM_USERS``); every
command run with its :meth:`Instance.env` acts on that instance only. Each test picks its
ports from a range of its own, below the ephemeral range (a client connection cannot take
them while the broker is down): the chaos kit from 29092, the SASL test from 39092, the TLS
test from 41092. :func:`started` runs one for a module and stops it after; a broker that
cannot start skips the tests, or fails them with ``TOOLGATE_REQUIRE_KAFKA=1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from tests import ROOT

KAFKA_SH = ROOT / "ops" / "kafka" / "kafka.sh"
HOST = "127.0.0.1"
SCRIPT_TIMEOUT_S = 240


class BrokerScriptError(RuntimeError):
    """``kafka.sh`` failed; the message holds its output."""


def unavailable(reason: str) -> NoReturn:
    """Skip the test for ``reason`` (no broker to test on), or fail it with
    ``TOOLGATE_REQUIRE_KAFKA=1``: a broker that did not come up never turns into a green run."""
    if os.environ.get("TOOLGATE_REQUIRE_KAFKA") == "1":
        pytest.fail(f"TOOLGATE_REQUIRE_KAFKA=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick, from the ephemeral range)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int) -> bool:
    """Nothing listens on ``HOST:port`` (a bind succeeds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_ports(count: int, first: int, last: int, *, adjacent: bool = False) -> list[int]:
    """``count`` free ports between ``first`` and ``last``; ``adjacent``: consecutive ones."""
    if adjacent:
        for port in range(first, last - count + 1, count):
            if all(port_free(p) for p in range(port, port + count)):
                return list(range(port, port + count))
        raise BrokerScriptError(f"no {count} free adjacent ports between {first} and {last}")
    found = list(itertools.islice((port for port in range(first, last) if port_free(port)), count))
    if len(found) < count:
        raise BrokerScriptError(f"no {count} free ports between {first} and {last}")
    return found


@dataclass
class Instance:
    """One ``kafka.sh`` instance: its data folder, its listeners' ports by knob (``PORT``,
    ``CONTROLLER_PORT``, ``SASL_PORT``, ...) and the SCRAM users made when it is formatted."""

    data: Path
    ports: dict[str, int]
    passwords: dict[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listener."""
        return f"{HOST}:{self.ports['PORT']}"

    def env(self) -> dict[str, str]:
        """The environment that selects this instance in ``kafka.sh`` (every command), and no
        other knob of the caller's: a listener port meant for another instance would collide."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_KAFKA_")}
        env.update({f"TOOLGATE_KAFKA_{name}": str(port) for name, port in self.ports.items()})
        env["TOOLGATE_KAFKA_DATA"] = str(self.data)
        if self.passwords:
            env["TOOLGATE_KAFKA_SCRAM_USERS"] = ",".join(f"{u}:{p}" for u, p in self.passwords.items())
        return env

    def _command(self, command: str) -> list[str]:
        return ["bash", str(KAFKA_SH), command]

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """``kafka.sh COMMAND`` for this instance, waited for (at most SCRIPT_TIMEOUT_S)."""
        return subprocess.run(
            self._command(command),
            env=self.env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
            check=False,
        )

    async def script(self, command: str) -> str:
        """``kafka.sh COMMAND`` for this instance from a running loop; its output, or
        BrokerScriptError naming the command, the port and the data folder."""
        proc = await asyncio.create_subprocess_exec(
            *self._command(command),
            env=self.env(),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        text = out.decode(errors="replace")
        if proc.returncode != 0:
            raise BrokerScriptError(
                f"kafka.sh {command} (port {self.ports['PORT']}, data {self.data}) "
                f"exited {proc.returncode}:\n{text[-3000:]}"
            )
        return text

    def pid(self) -> int:
        """The broker JVM's process id (kafka.sh's pid file)."""
        return int((self.data / "kafka.pid").read_text().strip())


InstanceT = TypeVar("InstanceT", bound=Instance)


@contextlib.contextmanager
def started(instance: InstanceT, what: str) -> Iterator[InstanceT]:
    """``instance`` started (``kafka.sh start``) and stopped at the end (``stop``, which must
    succeed); when it does not start, :func:`unavailable` naming ``what`` and its output."""
    try:
        done = instance.run("start")
        if done.returncode != 0:
            unavailable(
                f"{what} did not start (kafka.sh start exited {done.returncode}):\n{done.stderr[-3000:]}"
            )
        yield instance
    finally:
        stopped = instance.run("stop")
        assert stopped.returncode == 0, stopped.stderr
