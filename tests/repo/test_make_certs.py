"""ops/kafka/secure/make-certs.sh: the TLS material of the compose stack and of the local TLS broker.

The handshakes with this material are proven on a real broker in tests/integration/test_tls.py;
here the files themselves: who signed them, the names and dates in them, their permissions, and
that git would never commit them.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from tests import ROOT

SECURE = ROOT / "ops" / "kafka" / "secure"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not on PATH")


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SECURE / "make-certs.sh"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _keystore(path: Path, password_file: Path) -> x509.Certificate:
    key, cert, chain = pkcs12.load_key_and_certificates(path.read_bytes(), password_file.read_bytes().strip())
    assert key is not None
    assert cert is not None
    assert len(chain) == 1  # the CA, so that clients get the whole chain
    return cert


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    public = ca.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    public.verify(
        cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm
    )
    return cert.issuer == ca.subject


def _names(cert: x509.Certificate) -> set[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)} | {
        f"IP:{n}" for n in san.get_values_for_type(x509.IPAddress)
    }


def _cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def _private(path: Path) -> bool:
    return path.stat().st_mode & 0o077 == 0


class TestCompose:
    def test_makes_what_the_secured_stack_mounts(self, tmp_path: Path) -> None:
        """In a copy of the folder: client/ca.pem, the broker keystore (PKCS12, its password in
        broker/keystore_creds) for the names kafka and localhost, signed by that CA; keys and
        passwords private; every file made is one git ignores; a second run keeps them."""
        secure = tmp_path / "secure"
        shutil.copytree(SECURE, secure)
        before = {p.relative_to(secure) for p in secure.rglob("*")}
        done = subprocess.run(
            ["bash", str(secure / "make-certs.sh"), "compose"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        made = {p.relative_to(secure) for p in secure.rglob("*") if p.is_file()} - before
        assert made == {
            Path("ca.key"),
            Path("client/ca.pem"),
            Path("broker/kafka.keystore.p12"),
            Path("broker/keystore_creds"),
        }
        ignored = [
            line.strip()
            for line in (SECURE / ".gitignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        assert all(any(fnmatch.fnmatch(p.name, pattern) for pattern in ignored) for p in made), made
        ca = _cert(secure / "client" / "ca.pem")
        broker = _keystore(secure / "broker" / "kafka.keystore.p12", secure / "broker" / "keystore_creds")
        assert _signed_by(broker, ca)
        assert _names(broker) == {"DNS:kafka", "DNS:localhost"}
        for secret in ("ca.key", "broker/kafka.keystore.p12", "broker/keystore_creds"):
            assert _private(secure / secret), secret
        keystore = (secure / "broker" / "kafka.keystore.p12").read_bytes()
        again = subprocess.run(
            ["bash", str(secure / "make-certs.sh"), "compose"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert again.returncode == 0, again.stderr
        assert "kept" in again.stderr
        assert (secure / "broker" / "kafka.keystore.p12").read_bytes() == keystore


class TestLocal:
    def test_makes_the_local_brokers_set(self, tmp_path: Path) -> None:
        """The local TLS broker's set: a CA; the broker's certificate for localhost and
        127.0.0.1; one for another host only; one that expired (2020-01-02); client
        certificates CN=admin and CN=toolgate for client authentication; a second CA that signed
        none of them. Private keys readable by their owner only."""
        out = tmp_path / "tls"
        done = _make("local", str(out))
        assert done.returncode == 0, done.stderr
        ca, other = _cert(out / "ca.pem"), _cert(out / "other-ca.pem")
        password = out / "keystore.pass"
        broker = _keystore(out / "broker.p12", password)
        other_host = _keystore(out / "broker-other-host.p12", password)
        expired = _keystore(out / "broker-expired.p12", password)
        now = datetime.now(UTC)
        for cert in (broker, other_host, expired):
            assert _signed_by(cert, ca)
            assert cert.issuer != other.subject
        assert _names(broker) == {"DNS:localhost", "IP:127.0.0.1"}
        assert broker.not_valid_before_utc <= now < broker.not_valid_after_utc
        assert _names(other_host) == {"DNS:other.example.invalid"}
        assert _names(expired) == {"DNS:localhost", "IP:127.0.0.1"}
        assert expired.not_valid_after_utc == datetime(2020, 1, 2, tzinfo=UTC)
        for user in ("admin", "toolgate"):
            client = _cert(out / f"{user}.pem")
            assert _signed_by(client, ca)
            assert _cn(client) == user
            usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            assert x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usage
            assert _private(out / f"{user}.key")
        assert _private(password)

    def test_usage(self) -> None:
        """Without a known action: the usage text and exit 2."""
        done = _make("nonsense")
        assert done.returncode == 2
        assert "make-certs.sh compose" in done.stderr
