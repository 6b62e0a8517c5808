"""Secrets from files (SASL password, keyring keys) and the client TLS context.

The TLS handshakes themselves, and the failures a user meets, are proven on a real broker in
tests/integration/test_tls.py.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from toolgate._config import load_config
from toolgate._errors import ConfigError
from toolgate._secrets import read_secret
from toolgate.gate._signing import Keyring, signed_message
from toolgate.service._kafka import client_settings
from toolgate.service._transport import tls_context

from tests import ROOT

PASSWORD = "s3cret-Password-never-logged"
SECRET = base64.b64encode(b"k" * 32).decode()
VAR = "TOOLGATE_SECURITY_SASL_PASSWORD_FILE"


def _secret_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "toolgate.secrets"]


class TestSaslPasswordFile:
    def test_password_read_from_the_file(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """The file's content (one trailing line break dropped) becomes the SASL password; a
        private file gets no warning."""
        path = _secret_file(tmp_path / "pw", PASSWORD + "\n")
        with caplog.at_level(logging.WARNING):
            config = load_config(
                environ={VAR: str(path), "TOOLGATE_SECURITY_SASL_MECHANISM": "SCRAM-SHA-512"}
            )
        assert config.security.sasl_password == PASSWORD
        assert config.security.sasl_password_file == str(path)
        assert client_settings(config)["sasl_plain_password"] == PASSWORD
        assert _warnings(caplog) == []

    def test_the_log_shows_the_file_name_never_the_content(self, tmp_path: Path) -> None:
        """masked() (the start-up log's configuration) names the file and hides the password."""
        path = _secret_file(tmp_path / "pw", PASSWORD)
        masked = json.dumps(load_config(environ={VAR: str(path)}).masked())
        assert str(path) in masked
        assert PASSWORD not in masked

    @pytest.mark.parametrize(
        ("mode", "who"), [(0o644, "group and others"), (0o604, "others"), (0o640, "group")]
    )
    def test_a_shared_file_gets_a_warning(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, who: str
    ) -> None:
        """A password file that group or others may read is used, with one warning naming the
        setting, the file and its mode (and not the password)."""
        path = _secret_file(tmp_path / "pw", PASSWORD, mode)
        with caplog.at_level(logging.WARNING):
            config = load_config(environ={VAR: str(path)})
        assert config.security.sasl_password == PASSWORD
        (warning,) = _warnings(caplog)
        assert warning.startswith(f"{VAR}: {path} is readable by {who} (mode {mode:04o})")
        assert PASSWORD not in warning

    def test_missing_file(self, tmp_path: Path) -> None:
        """A file that cannot be read fails naming the setting and the file."""
        missing = tmp_path / "nope"
        with pytest.raises(ConfigError, match=rf"^{VAR}: {missing}: cannot read: No such file"):
            load_config(environ={VAR: str(missing)})

    def test_empty_file(self, tmp_path: Path) -> None:
        """An empty (or blank) password file is refused rather than sent as an empty password."""
        path = _secret_file(tmp_path / "pw", "\n")
        with pytest.raises(ConfigError, match=rf"{VAR}: {path} is empty"):
            load_config(environ={VAR: str(path)})

    def test_password_and_file_together(self, tmp_path: Path) -> None:
        """Both ways at once is a mistake: which one wins would be a guess."""
        path = _secret_file(tmp_path / "pw", PASSWORD)
        with pytest.raises(ConfigError, match="both set"):
            load_config(environ={VAR: str(path), "TOOLGATE_SECURITY_SASL_PASSWORD": "x"})

    def test_from_the_toml_file(self, tmp_path: Path) -> None:
        """The same setting in the TOML file, [security] sasl_password_file."""
        path = _secret_file(tmp_path / "pw", PASSWORD + "\r\n")
        toml = tmp_path / "tg.toml"
        toml.write_text(f'[security]\nprotocol = "SASL_SSL"\nsasl_password_file = "{path}"\n')
        assert load_config(toml, environ={}).security.sasl_password == PASSWORD

    def test_unknown_protocol_is_a_config_error(self) -> None:
        """A misspelt security protocol fails at start-up naming the field."""
        with pytest.raises(ConfigError, match=r"security\.protocol"):
            load_config(environ={"TOOLGATE_SECURITY_PROTOCOL": "SASL-SSL"})

    def test_a_shared_client_key_gets_a_warning(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The TLS client key file is a secret too."""
        key = _secret_file(tmp_path / "client.key", "not read here", 0o644)
        with caplog.at_level(logging.WARNING):
            load_config(environ={"TOOLGATE_SECURITY_SSL_KEYFILE": str(key)})
        (warning,) = _warnings(caplog)
        assert warning.startswith(f"TOOLGATE_SECURITY_SSL_KEYFILE: {key} is readable by group and others")

    def test_read_secret_keeps_inner_whitespace(self, tmp_path: Path) -> None:
        """Only one trailing line break goes: a password may end in spaces."""
        path = _secret_file(tmp_path / "pw", "a b  \n\n")
        assert read_secret(path, "X") == "a b  \n"


class TestKeyringFiles:
    def test_secret_file_relative_to_the_keyring(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """secret_file is read relative to the keyring's folder; the key signs and verifies;
        its source names the file; a private file gets no warning."""
        (tmp_path / "secrets").mkdir()
        _secret_file(tmp_path / "secrets" / "k1", SECRET + "\n")
        path = tmp_path / "keys.toml"
        path.write_text('[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret_file = "secrets/k1"\n')
        with caplog.at_level(logging.WARNING):
            keyring = Keyring.load(path, environ={})
        key = keyring.get("k1")
        assert key is not None
        assert key.verify(signed_message("r", b"{}"), key.sign(signed_message("r", b"{}")))
        inline = tmp_path / "inline.toml"
        inline.write_text(f'[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret = "{SECRET}"\n')
        twin = Keyring.load(inline, environ={}).get("k1")
        assert twin is not None
        assert twin.sign(b"m") == key.sign(b"m")  # the same secret
        assert keyring.sources() == f"k1=file {tmp_path / 'secrets' / 'k1'}"
        assert SECRET not in keyring.sources()
        assert _warnings(caplog) == []

    def test_shared_key_file_warns(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """A key file others may read is used, with a warning naming the key and the file."""
        secret = _secret_file(tmp_path / "k1.key", SECRET, 0o644)
        path = tmp_path / "keys.toml"
        path.write_text(f'[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret_file = "{secret}"\n')
        with caplog.at_level(logging.WARNING):
            assert Keyring.load(path, environ={}).get("k1") is not None
        (warning,) = _warnings(caplog)
        assert warning.startswith(f"{path}: $.keys.k1.secret_file: {secret} is readable by group and others")
        assert SECRET not in warning

    def test_missing_key_file(self, tmp_path: Path) -> None:
        """A key file that cannot be read fails naming the keyring, the key and the file."""
        path = tmp_path / "keys.toml"
        path.write_text('[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret_file = "gone"\n')
        with pytest.raises(
            ConfigError, match=rf"{path}: \$\.keys\.k1\.secret_file: {tmp_path / 'gone'}: cannot"
        ):
            Keyring.load(path, environ={})

    def test_one_source_per_secret(self, tmp_path: Path) -> None:
        """secret_file beside secret or secret_env is refused."""
        _secret_file(tmp_path / "k", SECRET)
        path = tmp_path / "keys.toml"
        path.write_text(
            f'[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret = "{SECRET}"\nsecret_file = "k"\n'
        )
        with pytest.raises(ConfigError, match="one of secret, secret_env and secret_file"):
            Keyring.load(path, environ={})

    def test_ed25519_private_key_file(self, tmp_path: Path) -> None:
        """private_key_file signs; the public key alone verifies what it signed."""
        private = Ed25519PrivateKey.generate()
        raw = private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        _secret_file(tmp_path / "ed.key", base64.b64encode(raw).decode())
        signer = tmp_path / "signer.toml"
        signer.write_text('[keys.e]\nalgorithm = "ed25519"\nadapter = "a"\nprivate_key_file = "ed.key"\n')
        verifier = tmp_path / "verifier.toml"
        encoded = base64.b64encode(public).decode()
        verifier.write_text(f'[keys.e]\nalgorithm = "ed25519"\nadapter = "a"\npublic_key = "{encoded}"\n')
        signing_key = Keyring.load(signer, environ={}).get("e")
        verifying_key = Keyring.load(verifier, environ={}).get("e")
        assert signing_key is not None
        assert verifying_key is not None
        assert verifying_key.verify(b"msg", signing_key.sign(b"msg"))
        assert signing_key.source == f"file {tmp_path / 'ed.key'}"


class TestTlsContext:
    def test_verifies_certificate_and_host_name(self) -> None:
        """The client context checks the broker's certificate chain and its host name."""
        config = load_config(environ={"TOOLGATE_SECURITY_PROTOCOL": "SSL"})
        context = client_settings(config)["ssl_context"]
        assert isinstance(context, ssl.SSLContext)
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname

    def test_unreadable_ca_file(self, tmp_path: Path) -> None:
        """A CA file that does not exist or is not PEM fails naming the setting and file."""
        missing = tmp_path / "ca.pem"
        config = load_config(
            environ={"TOOLGATE_SECURITY_PROTOCOL": "SSL", "TOOLGATE_SECURITY_SSL_CAFILE": str(missing)}
        )
        with pytest.raises(ConfigError, match=rf"^TOOLGATE_SECURITY_SSL_CAFILE: {missing}: cannot read"):
            tls_context(config.security)
        missing.write_text("not a certificate\n")
        with pytest.raises(ConfigError, match=rf"^TOOLGATE_SECURITY_SSL_CAFILE: {missing}: not a usable PEM"):
            tls_context(config.security)

    def test_key_without_certificate(self, tmp_path: Path) -> None:
        """A client key alone is a mistake (the certificate is what the broker checks)."""
        key = _secret_file(tmp_path / "c.key", "x")
        config = load_config(
            environ={"TOOLGATE_SECURITY_PROTOCOL": "SSL", "TOOLGATE_SECURITY_SSL_KEYFILE": str(key)}
        )
        with pytest.raises(ConfigError, match="KEYFILE is set without TOOLGATE_SECURITY_SSL_CERTFILE"):
            tls_context(config.security)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestRunStartUp:
    def test_run_logs_file_names_and_fails_in_one_json_line(self, tmp_path: Path) -> None:
        """`toolgate run` with its secrets in files: the configuration line names the password
        file and the key file, never their content, the shared key file gets a JSON warning,
        and a broker that cannot be reached ends the run with one JSON error line, exit 2,
        and no traceback."""
        password = _secret_file(tmp_path / "pw", PASSWORD)
        _secret_file(tmp_path / "k1", SECRET, 0o644)
        keyring = tmp_path / "keys.toml"
        keyring.write_text('[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret_file = "k1"\n')
        port = _closed_port()
        # Unsigned contracts only: a signed one would need its key in this keyring to start.
        contracts = tmp_path / "contracts"
        shutil.copytree(ROOT / "contracts" / "review_status", contracts / "review_status")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
        env.update(
            {
                "TOOLGATE_BOOTSTRAP": f"127.0.0.1:{port}",
                "TOOLGATE_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "TOOLGATE_SECURITY_SASL_MECHANISM": "SCRAM-SHA-512",
                "TOOLGATE_SECURITY_SASL_USERNAME": "toolgate",
                VAR: str(password),
                "TOOLGATE_KEYRING": str(keyring),
                "TOOLGATE_METRICS_PORT": "0",
                "TOOLGATE_CONTRACTS_DIR": str(contracts),
            }
        )
        done = subprocess.run(
            [sys.executable, "-m", "toolgate", "run"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert PASSWORD not in done.stderr
        assert SECRET not in done.stderr
        lines = [json.loads(line) for line in done.stderr.splitlines()]
        events = {line["event"].split(":")[0]: line for line in lines}
        configuration = events["configuration"]
        assert configuration["config"]["security"]["sasl_password_file"] == str(password)
        assert configuration["config"]["security"]["sasl_password"] == "***"
        assert configuration["keys"] == f"k1=file {tmp_path / 'k1'}"
        warning = next(line for line in lines if line["logger"] == "toolgate.secrets")
        assert (warning["level"], warning["file"]) == ("warning", str(tmp_path / "k1"))
        failure = lines[-1]
        assert (failure["level"], failure["event"]) == (
            "error",
            f"cannot reach the Kafka broker at 127.0.0.1:{port} "
            "(is it running? --bootstrap or TOOLGATE_BOOTSTRAP names it)",
        )
