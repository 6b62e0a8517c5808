"""Transport security on a real broker: TLS (mutual) and SASL_SSL, and the failures users meet.

A broker instance of its own (``ops/kafka/kafka.sh`` with ``TOOLGATE_KAFKA_SSL_PORT``,
``TOOLGATE_KAFKA_SASL_SSL_PORT`` and the two broken-certificate listeners; its own ports and
data directory, never the shared broker) serves certificates that ``ops/kafka/secure/make-certs.sh``
made at its first start: a throw-away CA, the broker's certificate for localhost and 127.0.0.1,
client certificates CN=admin and CN=toolgate. ACLs are enforced on every authenticated listener
(``allow.everyone.if.no.acl.found=false``); the plan of ``toolgate acls plan`` is applied.

Proven here, with host names verified throughout:

* every Kafka-facing command (``topics ensure``, ``acls apply``/``list``, ``run``, ``demo``,
  ``top``'s view of the worker, ``quarantine tail``, ``replay``) works over SASL_SSL
  (SCRAM-SHA-512, passwords read from files) and over SSL with a client certificate;
* the worker, as ``toolgate`` under the ACLs, decides sample traffic over SASL_SSL exactly once
  across a SIGKILL and a restart;
* each failure a user meets ends in one line naming the address and what to change, a non-zero
  exit, and for ``run`` one JSON log line: the wrong CA, a certificate for another host name, an
  expired certificate, PLAINTEXT on the TLS port and TLS on the PLAINTEXT port, no client
  certificate where mutual TLS is required, a wrong SCRAM password.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from toolgate._config import Config, Partitions, Security, Topics
from toolgate.operations._acls import acl_plan, apply_acls
from toolgate.service._kafka import ensure_topics

from tests import ROOT
from tests.integration.broker_kit import HOST, Instance, free_port, free_ports, started
from tests.integration.worker_kit import (
    CLEAN,
    CONTRACTS,
    KEYRING,
    check_exactly_once,
    kill_mid_stream_then_drain,
    publish,
    read_all,
    samples,
)

USERS = ("admin", "toolgate", "platform", "adapter", "agent", "operator")
MECHANISM = "SCRAM-SHA-512"
LISTENERS = (
    "PORT",
    "CONTROLLER_PORT",
    "SSL_PORT",
    "SASL_SSL_PORT",
    "TLS_OTHER_HOST_PORT",
    "TLS_EXPIRED_PORT",
)


class TlsBroker(Instance):
    """A ``kafka.sh`` instance with TLS listeners; one SCRAM password per user of ``USERS``."""

    @property
    def tls(self) -> Path:
        """The certificates kafka.sh made (make-certs.sh local)."""
        return self.data / "tls"

    def port(self, name: str) -> int:
        return self.ports[name]

    def password_file(self, user: str, password: str | None = None) -> Path:
        """The user's password in a file only its owner may read (as a mounted secret)."""
        path = self.data / "secrets" / f"{user}-{uuid.uuid4().hex[:6]}"
        path.parent.mkdir(exist_ok=True)
        path.write_text((self.passwords[user] if password is None else password) + "\n")
        path.chmod(0o600)
        return path

    def sasl_ssl(self, user: str, *, password: str | None = None) -> Security:
        """SCRAM-SHA-512 over TLS as ``user``, the password read from a file."""
        return Security(
            protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_username=user,
            sasl_password=self.passwords[user] if password is None else password,
            sasl_password_file=str(self.password_file(user, password)),
            ssl_cafile=str(self.tls / "ca.pem"),
        )

    def mtls(self, user: str) -> Security:
        """TLS with the client certificate CN=``user`` (admin or toolgate)."""
        return Security(
            protocol="SSL",
            ssl_cafile=str(self.tls / "ca.pem"),
            ssl_certfile=str(self.tls / f"{user}.pem"),
            ssl_keyfile=str(self.tls / f"{user}.key"),
        )


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """The TLS instance, started for this module and stopped after it; its ports from 41092 on,
    away from the shared broker (19092/19093), the chaos test's instance (29092 on) and the
    SASL test's (39092 on)."""
    broker = TlsBroker(
        tmp_path_factory.mktemp("tls-broker"),
        dict(zip(LISTENERS, free_ports(len(LISTENERS), 41092, 41990), strict=True)),
        {user: secrets.token_hex(12) for user in USERS},
    )
    with started(broker, "the TLS broker instance"):
        yield broker


def _bootstrap(broker: TlsBroker, security: Security, host: str = HOST) -> str:
    port = broker.port("SSL_PORT" if security.protocol == "SSL" else "SASL_SSL_PORT")
    return f"{host}:{port}"


def _as(config: Config, broker: TlsBroker, security: Security, host: str = HOST) -> Config:
    return msgspec.structs.replace(config, bootstrap=_bootstrap(broker, security, host), security=security)


async def _private(broker: TlsBroker) -> Config:
    """Private topic names and group on the TLS instance, created by admin (SASL_SSL), with the
    ACL plan applied."""
    tag = uuid.uuid4().hex[:8]
    admin = broker.sasl_ssl("admin")
    config = Config(
        bootstrap=_bootstrap(broker, admin),
        group_id=f"toolgate.t-{tag}",
        topics=Topics.under(f"tg-tls-{tag}"),
        partitions=Partitions(quarantine=1),
        contracts_dir=str(CONTRACTS),
        keyring=str(KEYRING),
        security=admin,
    )

    await ensure_topics(config)
    await apply_acls(config, acl_plan(config))
    return config


def env_for(config: Config, **extra: str) -> dict[str, str]:
    """``TOOLGATE_*`` variables for a ``toolgate`` subprocess: the configuration's topics and
    group, and its security settings with the password as a file (never in the environment)."""
    t, sec = config.topics, config.security
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env.update(
        {
            "TOOLGATE_BOOTSTRAP": config.bootstrap,
            "TOOLGATE_GROUP_ID": config.group_id,
            **t.env(),
            "TOOLGATE_PARTITIONS_QUARANTINE": str(config.partitions.quarantine),
            "TOOLGATE_CONTRACTS_DIR": str(CONTRACTS),
            "TOOLGATE_KEYRING": str(KEYRING),
            "TOOLGATE_METRICS_PORT": "0",
            "TOOLGATE_SECURITY_PROTOCOL": sec.protocol,
        }
    )
    optional = {
        "TOOLGATE_SECURITY_SASL_MECHANISM": sec.sasl_mechanism,
        "TOOLGATE_SECURITY_SASL_USERNAME": sec.sasl_username,
        "TOOLGATE_SECURITY_SASL_PASSWORD_FILE": sec.sasl_password_file,
        "TOOLGATE_SECURITY_SSL_CAFILE": sec.ssl_cafile,
        "TOOLGATE_SECURITY_SSL_CERTFILE": sec.ssl_certfile,
        "TOOLGATE_SECURITY_SSL_KEYFILE": sec.ssl_keyfile,
    }
    env.update({key: value for key, value in optional.items() if value})
    env.update(extra)
    return env


def toolgate(
    config: Config, *args: str, timeout: float = 120, **extra: str
) -> subprocess.CompletedProcess[str]:
    """Run a ``toolgate`` command as ``config`` says, to its end (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "toolgate", *args],
        env=env_for(config, **extra),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path, seconds: float) -> None:
    async with asyncio.timeout(seconds):
        while not _ready(port):
            assert proc.poll() is None, _tail(log)
            await asyncio.sleep(0.2)  # polling the worker's /readyz


def start_worker(config: Config, *args: str, log: Path, metrics_port: int = 0) -> subprocess.Popen[bytes]:
    """A ``toolgate run`` subprocess as ``config`` says, logging to ``log``."""
    with log.open("ab") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "toolgate", "run", *args],
            cwd=ROOT,
            env=env_for(config, TOOLGATE_METRICS_PORT=str(metrics_port)),
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# --------------------------------------------------------------------------- every command


class TestEveryCommandOverTls:
    """Each Kafka-facing command, over SASL_SSL and over SSL with a client certificate."""

    @pytest.mark.parametrize("transport", ["SASL_SSL", "SSL"])
    async def test_commands(self, tls_broker: TlsBroker, transport: str, tmp_path: Path) -> None:
        """topics ensure and acls apply/list as admin; the worker as toolgate (ACLs only); demo
        traffic decided; top shows the worker's Kafka lag; quarantine tail and replay read back
        the rejections. Bootstrap by host name (localhost) for TLS, by IP for SASL_SSL: the
        certificate names both."""
        base = await _private(tls_broker)
        if transport == "SASL_SSL":
            admin = _as(base, tls_broker, tls_broker.sasl_ssl("admin"))
            worker = _as(base, tls_broker, tls_broker.sasl_ssl("toolgate"))
            operator = _as(base, tls_broker, tls_broker.sasl_ssl("operator"))
        else:
            admin = _as(base, tls_broker, tls_broker.mtls("admin"), host="localhost")
            worker = _as(base, tls_broker, tls_broker.mtls("toolgate"), host="localhost")
            operator = admin  # client certificates are made for admin and toolgate

        ensured = toolgate(admin, "topics", "ensure")
        assert ensured.returncode == 0, ensured.stderr
        every = len(admin.topics.names())
        assert f"{admin.bootstrap}: 0 created, {every} already existed" in ensured.stdout
        applied = toolgate(admin, "acls", "apply")
        assert applied.returncode == 0, applied.stderr
        assert re.search(r": \d+ ACLs applied", applied.stdout), applied.stdout
        listed = toolgate(admin, "acls", "list")
        assert listed.returncode == 0, listed.stderr
        assert f"User:toolgate\tread\ttopic\t{base.topics.intake}\tliteral" in listed.stdout, listed.stdout

        log = tmp_path / "worker.log"
        metrics = free_port()
        proc = start_worker(worker, log=log, metrics_port=metrics)
        try:
            await _wait_ready(proc, metrics, log, 120)
            demo = toolgate(admin, "demo", "--count", "60", "--wait", "90", timeout=180)
            assert demo.returncode == 0, demo.stdout + demo.stderr
            top = toolgate(
                worker, "top", "--once", "--interval", "0", "--url", f"http://{HOST}:{metrics}/metrics"
            )
            assert top.returncode == 0, top.stderr
            assert re.search(r"^partition 0\s+\d+$", top.stdout, re.MULTILINE), top.stdout
            assert re.search(r"^committed\s+[1-9]", top.stdout, re.MULTILINE), top.stdout
        finally:
            _stop(proc)
        assert proc.returncode == 0, log.read_text()[-3000:]
        started = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        configuration = next(line for line in started if line["event"] == "configuration")
        security = configuration["config"]["security"]
        assert security["protocol"] == transport
        if transport == "SASL_SSL":
            assert security["sasl_password_file"] == worker.security.sasl_password_file
            assert tls_broker.passwords["toolgate"] not in log.read_text()

        rejected = await read_all(admin, base.topics.quarantine)
        assert rejected, "the demo traffic has hostile results: some must be quarantined"
        tail = toolgate(operator, "quarantine", "tail", "-n", "5")
        assert tail.returncode == 0, tail.stderr
        lines = [json.loads(line) for line in tail.stdout.splitlines()]
        assert len(lines) == min(5, len(rejected))
        assert all(line["topic"] == base.topics.quarantine and line["code"] for line in lines)
        replay = toolgate(operator, "replay", "--dry-run")
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert f"selected {len(rejected)} of {len(rejected)} quarantine records" in replay.stdout


# --------------------------------------------------------------------------- exactly once


class TestExactlyOnceOverSaslSsl:
    async def test_sigkill_mid_stream_over_tls(self, tls_broker: TlsBroker, tmp_path: Path) -> None:
        """Requests written by the platform, results by an adapter, the worker as toolgate with
        only the ACL plan's rights, all over SASL_SSL: a worker SIGKILLed mid-stream and a new
        one run to the end leave every result decided exactly once (0 lost, 0 duplicated)."""
        base = await _private(tls_broker)
        items = samples(2000, seed=29)
        await publish(_as(base, tls_broker, tls_broker.sasl_ssl("platform")), items, results=False)
        await publish(_as(base, tls_broker, tls_broker.sasl_ssl("adapter")), items, requests=False)
        worker = _as(base, tls_broker, tls_broker.sasl_ssl("toolgate"))
        log = tmp_path / "worker.log"
        await kill_mid_stream_then_drain(start_worker, worker, base, kill_at=200, total=len(items), log=log)
        agent = await read_all(_as(base, tls_broker, tls_broker.sasl_ssl("agent")), base.topics.agent)
        quarantine = await read_all(
            _as(base, tls_broker, tls_broker.sasl_ssl("operator")), base.topics.quarantine
        )
        audit = await read_all(base, base.topics.audit)
        assert check_exactly_once(items, agent, quarantine, audit) == {"results": len(items), **CLEAN}


# --------------------------------------------------------------------------- failures


def _case(broker: TlsBroker, name: str) -> tuple[Config, str]:
    """(configuration, the exact line a user sees) of one failure case."""
    tls = broker.tls
    ca = str(tls / "ca.pem")
    ssl_port, sasl_port = broker.port("SSL_PORT"), broker.port("SASL_SSL_PORT")
    admin_cert = {"ssl_certfile": str(tls / "admin.pem"), "ssl_keyfile": str(tls / "admin.key")}
    cases: dict[str, tuple[str, Security, str]] = {
        "wrong CA": (
            f"{HOST}:{ssl_port}",
            Security(protocol="SSL", ssl_cafile=str(tls / "other-ca.pem"), **admin_cert),
            f"{HOST}:{ssl_port}: TLS certificate verify failed: self-signed certificate in certificate "
            f"chain: the broker's certificate (issuer 'toolgate local test CA') is not signed by a CA in "
            f"TOOLGATE_SECURITY_SSL_CAFILE {tls / 'other-ca.pem'}",
        ),
        "another host name": (
            f"localhost:{broker.port('TLS_OTHER_HOST_PORT')}",
            Security(protocol="SSL", ssl_cafile=ca),
            f"localhost:{broker.port('TLS_OTHER_HOST_PORT')}: TLS certificate verify failed: hostname "
            "mismatch, certificate is not valid for 'localhost' (it names DNS:other.example.invalid; "
            "TOOLGATE_BOOTSTRAP must use one of the certificate's names)",
        ),
        "expired certificate": (
            f"{HOST}:{broker.port('TLS_EXPIRED_PORT')}",
            Security(protocol="SSL", ssl_cafile=ca),
            f"{HOST}:{broker.port('TLS_EXPIRED_PORT')}: TLS certificate verify failed: certificate has "
            "expired (the broker's certificate was valid until 2020-01-02 00:00:00 UTC)",
        ),
        "PLAINTEXT client on the TLS port": (
            f"{HOST}:{sasl_port}",
            Security(protocol="PLAINTEXT"),
            f"{HOST}:{sasl_port}: the port speaks TLS, and TOOLGATE_SECURITY_PROTOCOL is PLAINTEXT "
            "(set it to SSL or SASL_SSL, with TOOLGATE_SECURITY_SSL_CAFILE)",
        ),
        "TLS client on the PLAINTEXT port": (
            f"{HOST}:{broker.port('PORT')}",
            Security(protocol="SSL", ssl_cafile=ca),
            f"{HOST}:{broker.port('PORT')}: TLS handshake failed: the port speaks PLAINTEXT, not TLS "
            "(TOOLGATE_SECURITY_PROTOCOL is SSL: use the broker's SSL port, or PLAINTEXT/SASL_PLAINTEXT "
            "for this one)",
        ),
        "no client certificate": (
            f"{HOST}:{ssl_port}",
            Security(protocol="SSL", ssl_cafile=ca),
            f"{HOST}:{ssl_port}: the broker refused the TLS connection (alert: bad certificate): this "
            "listener requires a client certificate (mutual TLS): set TOOLGATE_SECURITY_SSL_CERTFILE "
            "and TOOLGATE_SECURITY_SSL_KEYFILE",
        ),
        "wrong SCRAM password": (
            f"{HOST}:{sasl_port}",
            broker.sasl_ssl("toolgate", password="not-the-password"),
            f"{HOST}:{sasl_port}: SASL login as 'toolgate' (SCRAM-SHA-512) failed: Authentication "
            "failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
            "(check TOOLGATE_SECURITY_SASL_USERNAME and the password)",
        ),
    }
    bootstrap, security, line = cases[name]
    config = Config(
        bootstrap=bootstrap,
        group_id=f"toolgate.f-{uuid.uuid4().hex[:6]}",
        contracts_dir=str(CONTRACTS),
        keyring=str(KEYRING),
        security=security,
    )
    return config, line


FAILURES = [
    "wrong CA",
    "another host name",
    "expired certificate",
    "PLAINTEXT client on the TLS port",
    "TLS client on the PLAINTEXT port",
    "no client certificate",
    "wrong SCRAM password",
]


class TestFailures:
    """Each mistake: one line naming the address and the setting, exit 2, no traceback, no hang."""

    @pytest.mark.parametrize("case", FAILURES)
    def test_topics_ensure(self, tls_broker: TlsBroker, case: str) -> None:
        """`toolgate topics ensure` prints exactly the case's line and exits 2."""
        config, line = _case(tls_broker, case)
        done = toolgate(config, "topics", "ensure", timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"toolgate: {line}\n")

    @pytest.mark.parametrize("case", FAILURES)
    def test_run(self, tls_broker: TlsBroker, case: str) -> None:
        """`toolgate run` ends with one JSON error line carrying the case's line, exit 2, before it
        owned any partition (so /readyz never answered ready: tests/unit/service/test_transport.py)."""
        config, line = _case(tls_broker, case)
        done = toolgate(config, "run", timeout=60)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        events = [json.loads(text) for text in done.stderr.splitlines()]
        errors = [e for e in events if e["level"] == "error"]
        assert errors == [events[-1]]
        assert errors[0]["event"] == line
        assert not any(e["event"] == "partitions assigned" for e in events)

    @pytest.mark.parametrize(
        "args",
        [
            ("acls", "apply"),
            ("acls", "list"),
            ("quarantine", "tail"),
            ("replay", "--dry-run"),
            ("demo", "--count", "5", "--wait", "5"),
        ],
    )
    @pytest.mark.parametrize("case", ["no client certificate", "wrong SCRAM password"])
    def test_every_other_command(self, tls_broker: TlsBroker, case: str, args: tuple[str, ...]) -> None:
        """The other Kafka-facing commands fail the same way, before touching any topic."""
        config, line = _case(tls_broker, case)
        done = toolgate(config, *args, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"toolgate: {line}\n")
