"""Adapter keys and signatures: the keyring, signature alphabets, the published v2 vectors and the
reference signer, the attempt a signature covers and the schemes a contract accepts."""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from toolgate._errors import ConfigError
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._records import Message
from toolgate.gate._signing import Keyring, decode_signature, signed_message, signed_message_v2

from tests import ROOT
from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, copy_tool, message, pairs, review_request

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


VECTORS = ROOT / "ops" / "signing" / "vectors.json"


def reference_signer() -> Any:
    spec = importlib.util.spec_from_file_location("sign_result", ROOT / "ops" / "signing" / "sign_result.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class TestSignatures:
    """Signatures v2: the published vectors, the reference signer, attempt-bound and scheme-listed."""

    def test_published_vectors(self) -> None:
        """The reference signer reproduces every published vector, and the gate's keys verify them."""
        signer = reference_signer()
        ring = fixtures_keyring(CONTRACTS)
        vectors = json.loads(VECTORS.read_text())["vectors"]
        assert {v["algorithm"] for v in vectors} == {"hmac-sha256", "ed25519"}
        for v in vectors:
            raw = base64.b64decode(v["value_base64"])
            message_bytes = signed_message_v2(v["request_id"], v["attempt"], raw)
            assert signer.signed_message(v["request_id"], v["attempt"], raw) == message_bytes
            assert message_bytes == v["signed_message"].encode()
            secret = (
                {"hmac_secret": base64.b64decode(v["hmac_secret"])}
                if "hmac_secret" in v
                else {"ed25519_private_key": base64.b64decode(v["ed25519_private_key"])}
            )
            assert signer.sign(v["request_id"], v["attempt"], raw, **secret) == v["signature"]
            key = ring.get(v["key_id"])
            assert key is not None
            assert key.verify(message_bytes, base64.b64decode(v["signature"]))
            assert not key.verify(
                signed_message_v2(v["request_id"], v["attempt"] + 1, raw), base64.b64decode(v["signature"])
            )

    def test_reference_signer_command(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The script prints the tg-signature of a file (exit 0), one line on bad input (exit 2)."""
        v = json.loads(VECTORS.read_text())["vectors"][0]
        result = tmp_path / "result.json"
        result.write_bytes(base64.b64decode(v["value_base64"]))
        signer = reference_signer()
        args = [
            "--request-id",
            v["request_id"],
            "--attempt",
            str(v["attempt"]),
            "--hmac-secret",
            v["hmac_secret"],
        ]
        assert signer.main([*args, str(result)]) == 0
        assert capsys.readouterr().out.strip() == v["signature"]
        assert signer.main([*args, str(tmp_path / "missing")]) == 2
        assert len(capsys.readouterr().err.splitlines()) == 1

    def deploy(self, root: Path, schemes: str | None) -> tuple[Gate, Any]:
        extra = (
            {}
            if schemes is None
            else {"signature": f"{{algorithm: hmac-sha256, key_id: deploy-adapter-2026, schemes: {schemes}}}"}
        )
        copy_tool(root, "deploy_status", **extra)
        shutil.copy(CONTRACTS / "fixtures-keyring.toml", root)
        ring = Keyring.load(root / "fixtures-keyring.toml", environ={})
        return Gate(ContractSet.load(root), ring), ring.get("deploy-adapter-2026")

    def signed(self, key: Any, signed: bytes, **headers: str | None) -> Message:
        value = {
            "tool": "deploy_status",
            "request_id": REQUEST_ID,
            "outcome": "success",
            "data": {"environment": "staging", "revision": "4f2a9c1", "state": "healthy"},
        }
        raw = msgspec.json.encode(value)
        headers.update(tg_adapter="deploy-adapter", tg_adapter_version="3.1.0")
        msg = message(raw=raw, tool="deploy_status", **headers)  # type: ignore[arg-type]
        return pairs(msg, ("tg-signature", base64.b64encode(key.sign(signed.replace(b"RAW", raw))).decode()))

    def request(self, attempt: int = 1) -> Any:
        return review_request(tool="deploy_status", bind={"environment": "staging"}, attempt=attempt)

    def test_attempt_is_signed(self, tmp_path: Path) -> None:
        """A signature of attempt 1 does not verify for attempt 2, with tg-attempt absent or rewritten."""
        gate, key = self.deploy(tmp_path, None)
        for headers in ({}, {"tg_attempt": "2"}):
            msg = self.signed(key, b"", **headers)
            raw = msg.value or b""
            msg = msgspec.structs.replace(
                msg,
                headers=[(k, v) for k, v in msg.headers if k != "tg-signature"]
                + [
                    (
                        "tg-signature",
                        base64.b64encode(key.sign(signed_message_v2(REQUEST_ID, 1, raw))).decode().encode(),
                    )
                ],
            )
            verdict = gate.evaluate(msg, self.request(attempt=2), NOW)
            assert (verdict.stage, verdict.code) == ("semantic", "BAD_SIGNATURE")
            assert gate.evaluate(msg, self.request(attempt=1), NOW).code in (None, "STALE_RESULT")

    def test_old_scheme_only_where_listed(self, tmp_path: Path) -> None:
        """A v1 signature verifies only for a contract whose signature.schemes lists v1."""
        for schemes, accepted in ((None, False), ("[v2, v1]", True), ("[v2]", False)):
            root = tmp_path / str(schemes).strip("[]").replace(", ", "-")
            gate, key = self.deploy(root, schemes)
            msg = self.signed(key, b"")
            raw = msg.value or b""
            msg = msgspec.structs.replace(
                msg,
                headers=[(k, v) for k, v in msg.headers if k != "tg-signature"]
                + [
                    (
                        "tg-signature",
                        base64.b64encode(key.sign(signed_message(REQUEST_ID, raw))).decode().encode(),
                    )
                ],
            )
            verdict = gate.evaluate(msg, self.request(), NOW)
            assert verdict.accepted is accepted, (schemes, verdict.diagnostics)
