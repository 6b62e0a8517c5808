"""The connection to the brokers: the TLS context, and a bounded first connection that says why
it failed.

aiokafka reports every failed bootstrap as ``Unable to bootstrap from [...]`` and keeps the cause
in its log; some mistakes (a TLS client on a PLAINTEXT port) can also leave it waiting for its
request timeout. ``check_connection`` opens one connection to a bootstrap address exactly as
the clients do (same security settings, aiokafka's own connection code), bounded in time, and
turns a failure into one line naming the address and the setting to look at::

    127.0.0.1:9094: TLS certificate verify failed: certificate has expired (the broker's
    certificate was valid until 2020-01-02 00:00:00 UTC)

Every command that talks to Kafka runs it first; the worker runs it before it starts reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import struct
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from toolgate._config import Config, Security
from toolgate._errors import BrokerError, ConfigError

CONNECT_TIMEOUT_S = 10.0
# How long the follow-up probes (what does this port speak?) may take, each.
_PROBE_TIMEOUT_S = 3.0

# OpenSSL's X509_V_ERR_* codes (SSLCertVerificationError.verify_code) that need a hint.
_UNTRUSTED = {
    18,  # self-signed certificate
    19,  # self-signed certificate in certificate chain
    20,  # unable to get local issuer certificate
    21,  # unable to verify the first certificate
}
_EXPIRED = 10
_NOT_YET_VALID = 9
_HOST_MISMATCH = {62, 64}  # hostname mismatch, IP address mismatch


class TransportError(ConfigError):
    """The broker cannot be spoken to as configured: TLS, security protocol or login."""


def tls_context(sec: Security) -> ssl.SSLContext:
    """A client context that verifies the broker's certificate and host name.

    Trusts ``ssl_cafile`` (else the system's CAs) and presents ``ssl_certfile``/``ssl_keyfile``
    when set (mutual TLS).

    Raises:
        ConfigError: naming the setting and the file that cannot be used.
    """
    try:
        context = ssl.create_default_context(cafile=sec.ssl_cafile)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"TOOLGATE_SECURITY_SSL_CAFILE: {sec.ssl_cafile}: {_file_problem(exc)}") from exc
    if sec.ssl_keyfile and not sec.ssl_certfile:
        raise ConfigError("TOOLGATE_SECURITY_SSL_KEYFILE is set without TOOLGATE_SECURITY_SSL_CERTFILE")
    if sec.ssl_certfile:
        try:
            context.load_cert_chain(sec.ssl_certfile, sec.ssl_keyfile)
        except (OSError, ssl.SSLError) as exc:
            files = sec.ssl_certfile + (
                f", TOOLGATE_SECURITY_SSL_KEYFILE {sec.ssl_keyfile}" if sec.ssl_keyfile else ""
            )
            raise ConfigError(f"TOOLGATE_SECURITY_SSL_CERTFILE {files}: {_file_problem(exc)}") from exc
    return context


def _file_problem(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"not a usable PEM certificate or key ({exc.reason or exc})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read: {exc.strerror}"
    return str(exc)


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"TOOLGATE_BOOTSTRAP: {item.strip()!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


_CONN_KEYS = (
    "client_id",
    "ssl_context",
    "security_protocol",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
)


async def check_connection(
    config: Config, settings: dict[str, Any], *, within_s: float = CONNECT_TIMEOUT_S
) -> None:
    """Connect (and log in) to the first bootstrap address that answers, then disconnect.

    ``settings`` are the clients' keyword arguments (``client_settings(config)``).

    Raises:
        TransportError: TLS, protocol or login problems (the configuration must change).
        BrokerError: no bootstrap address could be reached (retriable).
    """
    conn_args = {key: settings[key] for key in _CONN_KEYS if key in settings}
    problems: list[Exception] = []
    for host, port in _addresses(config.bootstrap):
        try:
            async with asyncio.timeout(within_s):
                conn = await create_conn(host, port, request_timeout_ms=int(within_s * 1000), **conn_args)
        except (OSError, KafkaError, TimeoutError, asyncio.IncompleteReadError) as exc:
            problems.append(await _explain(config.security, conn_args, host, port, exc, within_s))
            continue
        conn.close()
        return
    transport = [p for p in problems if isinstance(p, TransportError)]
    raise transport[0] if transport else problems[0]


async def _explain(
    sec: Security, conn_args: dict[str, Any], host: str, port: int, exc: BaseException, within_s: float
) -> Exception:
    """One line for a failed first connection to ``host:port``."""
    where = f"{host}:{port}"
    tls = sec.protocol in ("SSL", "SASL_SSL")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TransportError(f"{where}: {await _verify_failure(sec, host, port, exc)}")
    if isinstance(exc, SaslAuthenticationFailed):
        return TransportError(
            f"{where}: SASL login as {sec.sasl_username!r} ({sec.sasl_mechanism}) failed: {_broker_text(exc)}"
            " (check TOOLGATE_SECURITY_SASL_USERNAME and the password)"
        )
    if isinstance(exc, UnsupportedSaslMechanismError):
        return TransportError(f"{where}: {exc} (TOOLGATE_SECURITY_SASL_MECHANISM)")
    if isinstance(exc, ConnectionRefusedError) or (
        isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError | ConnectionResetError | TimeoutError)
    ):
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or type(exc).__name__)
        unreachable = BrokerError(f"{where}: cannot connect: {reason}", retriable=True)
        # What the clients would have raised (the CLI words it "cannot reach the Kafka broker").
        unreachable.__cause__ = KafkaConnectionError(f"Unable to connect to {where}: {reason}")
        return unreachable
    if tls:
        alert = _tls_alert(exc)
        if alert is not None:
            return TransportError(f"{where}: {_client_certificate_refused(sec, alert)}")
        if await _speaks_plain_kafka(host, port):
            return TransportError(
                f"{where}: TLS handshake failed: the port speaks PLAINTEXT, not TLS "
                f"(TOOLGATE_SECURITY_PROTOCOL is {sec.protocol}: use the broker's {sec.protocol} port, "
                "or PLAINTEXT/SASL_PLAINTEXT for this one)"
            )
        if isinstance(exc, TimeoutError):
            return BrokerError(
                f"{where}: no TLS handshake and no Kafka answer within {within_s:g}s", retriable=True
            )
        return BrokerError(f"{where}: the TLS connection failed: {_describe(exc)}", retriable=True)
    if await _speaks_tls(host, port):
        return TransportError(
            f"{where}: the port speaks TLS, and TOOLGATE_SECURITY_PROTOCOL is {sec.protocol} "
            "(set it to SSL or SASL_SSL, with TOOLGATE_SECURITY_SSL_CAFILE)"
        )
    if isinstance(exc, TimeoutError):
        return BrokerError(f"{where}: no Kafka answer within {within_s:g}s", retriable=True)
    return BrokerError(f"{where}: {_describe(exc)}", retriable=getattr(exc, "retriable", True))


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, KafkaConnectionError) and cause is not None:
        text += f" ({type(cause).__name__}: {cause})" if str(cause) else f" ({type(cause).__name__})"
    return text


def _broker_text(exc: KafkaError) -> str:
    """The broker's own message of a KafkaError (``str`` adds the class name first)."""
    args = [str(a) for a in exc.args if a]
    return "; ".join(args) or type(exc).__name__


def _tls_alert(exc: BaseException) -> str | None:
    """The TLS alert the broker sent (``bad certificate``, ``certificate required``...), if any."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError) and seen.reason and "ALERT" in seen.reason:
            # e.g. SSLV3_ALERT_BAD_CERTIFICATE, TLSV13_ALERT_CERTIFICATE_REQUIRED
            return seen.reason.split("ALERT_", 1)[-1].replace("_", " ").lower()
        seen = seen.__cause__ or seen.__context__
    return None


def _client_certificate_refused(sec: Security, alert: str) -> str:
    if not sec.ssl_certfile:
        return (
            f"the broker refused the TLS connection (alert: {alert}): this listener requires a client "
            "certificate (mutual TLS): set TOOLGATE_SECURITY_SSL_CERTFILE and TOOLGATE_SECURITY_SSL_KEYFILE"
        )
    return (
        f"the broker refused the TLS connection (alert: {alert}): it does not accept the client "
        f"certificate TOOLGATE_SECURITY_SSL_CERTFILE {sec.ssl_certfile} (signed by a CA it does not "
        "trust, expired, or not for client authentication)"
    )


async def _verify_failure(sec: Security, host: str, port: int, exc: ssl.SSLCertVerificationError) -> str:
    """The verification failure with what the broker's certificate actually says."""
    code = exc.verify_code
    message = str(exc.verify_message or exc.reason or exc).rstrip(".")
    if code in _HOST_MISMATCH:
        message = message[0].lower() + message[1:]
        message = message.replace("iP address", "IP address")
    line = f"TLS certificate verify failed: {message}"
    cert = await _peer_certificate(host, port)
    if code in _HOST_MISMATCH:
        names = _names(cert) if cert is not None else ""
        named = f"it names {names}" if names else "it names other hosts"
        return f"{line} ({named}; TOOLGATE_BOOTSTRAP must use one of the certificate's names)"
    if code == _EXPIRED and cert is not None:
        return f"{line} (the broker's certificate was valid until {_utc(cert.not_valid_after_utc)})"
    if code == _NOT_YET_VALID and cert is not None:
        return f"{line} (the broker's certificate is valid from {_utc(cert.not_valid_before_utc)})"
    if code in _UNTRUSTED:
        issuer = _issuer(cert) if cert is not None else ""
        trusted = (
            f"TOOLGATE_SECURITY_SSL_CAFILE {sec.ssl_cafile}"
            if sec.ssl_cafile
            else "the system's CAs (set TOOLGATE_SECURITY_SSL_CAFILE)"
        )
        by = f" (issuer {issuer!r})" if issuer else ""
        return f"{line}: the broker's certificate{by} is not signed by a CA in {trusted}"
    return line


def _utc(value: Any) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC"


async def _peer_certificate(host: str, port: int) -> Any:
    """The broker's certificate (not verified: only to describe a failure), or None."""
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
    except (OSError, TimeoutError):
        return None
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        return x509.load_der_x509_certificate(der) if der else None
    except ValueError:
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(_PROBE_TIMEOUT_S):
                await writer.wait_closed()


def _names(cert: Any) -> str:
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return _common_name(cert.subject)
    names = [f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)]
    names += [f"IP:{n}" for n in san.get_values_for_type(x509.IPAddress)]
    return ", ".join(names)


def _issuer(cert: Any) -> str:
    return _common_name(cert.issuer) or str(cert.issuer.rfc4514_string())


def _common_name(name: Any) -> str:
    from cryptography.x509.oid import NameOID

    values = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""


# ApiVersions v0 with client id "toolgate": what a Kafka broker answers on any listener.
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 8) + b"toolgate"


async def _speaks_plain_kafka(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a Kafka request sent without TLS."""
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
                await writer.drain()
                size, correlation = struct.unpack(">ii", await reader.readexactly(8))
                return bool(correlation == 1 and 0 < size < 1 << 20)
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, struct.error):
        return False


async def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (any certificate)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(host, port, ssl=context)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True
