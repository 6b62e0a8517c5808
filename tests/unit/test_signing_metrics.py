"""Adapter keys and the metrics/health HTTP endpoint."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from toolgate._errors import ConfigError
from toolgate.gate._signing import Keyring, decode_signature, signed_message
from toolgate.service._metrics import HealthServer, Metrics

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


async def get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


class TestHealthServer:
    async def test_endpoints(self) -> None:
        """/metrics exposes the registry, /healthz is alive, /readyz follows readiness, else 404."""
        metrics = Metrics()
        metrics.decided("review_status", "rejected", "parse", "DUPLICATE_KEY", 120, 2e-6)
        ready = False
        server = HealthServer(metrics, "127.0.0.1", 0, lambda: ready)
        await server.start()
        try:
            status, body = await get(server.port, "/metrics")
            assert status == 200
            assert (
                b'toolgate_rejections_total{code="DUPLICATE_KEY",stage="parse",tool="review_status"} 1.0'
            ) in body
            assert (await get(server.port, "/healthz"))[0] == 200
            assert (await get(server.port, "/readyz"))[0] == 503
            ready = True
            assert (await get(server.port, "/readyz"))[0] == 200
            assert (await get(server.port, "/nope"))[0] == 404
        finally:
            await server.stop()
