"""Adapter keys: the keyring, signatures and their alphabets."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from toolgate._errors import ConfigError
from toolgate.gate._signing import Keyring, decode_signature, signed_message

SECRET = base64.b64encode(b"k" * 32).decode()


class TestKeyring:
    def test_hmac_round_trip(self, tmp_path: Path) -> None:
        """A key verifies its own signature and refuses another message's."""
        path = tmp_path / "keys.toml"
        path.write_text(f'[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret = "{SECRET}"\n')
        key = Keyring.load(path, environ={}).get("k1")
        assert key is not None
        signature = key.sign(signed_message("req.1", b"{}"))
        assert key.verify(signed_message("req.1", b"{}"), signature)
        assert not key.verify(signed_message("req.2", b"{}"), signature)

    def test_secret_from_environment(self, tmp_path: Path) -> None:
        """secret_env reads the secret from the environment, and fails clearly when unset."""
        path = tmp_path / "keys.toml"
        path.write_text('[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecret_env = "TG_K1"\n')
        assert Keyring.load(path, environ={"TG_K1": SECRET}).get("k1") is not None
        with pytest.raises(ConfigError, match="TG_K1"):
            Keyring.load(path, environ={})

    def test_unknown_field(self, tmp_path: Path) -> None:
        """An unknown key field fails naming the file."""
        path = tmp_path / "keys.toml"
        path.write_text('[keys.k1]\nalgorithm = "hmac-sha256"\nadapter = "a"\nsecrett = "x"\n')
        with pytest.raises(ConfigError, match=r"keys\.toml"):
            Keyring.load(path, environ={})

    def test_signature_alphabets(self) -> None:
        """Standard and URL-safe base64, with or without padding, decode the same."""
        raw = bytes(range(250, 256)) * 3
        std, url = base64.b64encode(raw), base64.urlsafe_b64encode(raw).rstrip(b"=")
        assert decode_signature(std) == decode_signature(url) == raw
        with pytest.raises(ValueError, match="base64"):
            decode_signature(b"***")
