"""Secrets and personal data through ``toolgate mcp-proxy`` on a real broker: the upstream's text is
screened as the imported contract says (secrets rejected, personal data redacted), deciding in the
proxy and through a worker, and the proxy's quarantine records are sealed with the keyring's key."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp.types as types
import msgspec
import pytest
from mcp import Client as McpClient
from toolgate._config import Config
from toolgate.client import Client
from toolgate.gate import ContractSet, Keyring
from toolgate.mcp._decide import Decider
from toolgate.mcp._options import ProxyOptions
from toolgate.mcp._proxy import Proxy

from tests import mcp_kit
from tests.integration.proxy_kit import running_worker
from tests.integration.test_mcp_proxy import (
    TextUpstream,
    decisions,
    error_of,
    request_id_of,
    seen_by_host,
    text_contracts,
)
from tests.integration.worker_kit import read_all
from tests.sensitive_kit import load_corpus

__all__ = ["text_contracts"]  # the module fixture, shared

SECRET_CLASSES = ("aws-access-key", "github-token", "private-key", "connection-string", "jwt", "stripe-key")


def keyring(folder: Path) -> Keyring:
    path = folder / "keyring.toml"
    secret = base64.b64encode(os.urandom(32)).decode()
    path.write_text(f'[quarantine.qp]\ncreated = "2026-12-01"\nsecret = "{secret}"\n')
    return Keyring.load(path)


@asynccontextmanager
async def proxied(cfg: Config, decide: str, ring: Keyring | None) -> AsyncIterator[McpClient]:
    """A host connected to a proxy in front of the text upstream, deciding in the proxy (with
    ``ring``) or through the running worker."""
    upstream = TextUpstream()
    async with Client(cfg, answers=decide == "worker") as client, McpClient(upstream.server()) as up:
        contracts = ContractSet.load(cfg.contracts_dir)
        decider = Decider(mcp_kit.SERVER, contracts, ring, cfg.topics) if decide == "proxy" else None
        proxy = Proxy(
            mcp_kit.SERVER, up, client, contracts, options=ProxyOptions(max_attempts=1), decider=decider
        )
        assert await proxy.load_tools() == [upstream.served]
        async with McpClient(proxy.mcp_server()) as host:
            yield host


def texts(result: types.CallToolResult) -> list[str]:
    assert not result.is_error, result
    return [b.text for b in result.content if isinstance(b, types.TextContent)]


class TestProxyScreens:
    """The imported contract's decision (secrets: reject, personal: redact) holds on the proxy path."""

    @pytest.mark.parametrize("decide", ["proxy", "worker"])
    async def test_corpus_through_the_proxy(
        self, config: Config, text_contracts: Path, tmp_path: Path, decide: str
    ) -> None:
        """Secrets are INVALID_RESPONSE (SENSITIVE_DATA in the audit), personal data reaches the host
        redacted, benign text as it came; the proxy's quarantine holds no planted value."""
        cfg = msgspec.structs.replace(config, contracts_dir=str(text_contracts))
        detect = load_corpus("detect")
        secrets = [next(e for e in detect if e["class"] == c) for c in SECRET_CLASSES]
        personal = [next(e for e in detect if e["class"] == c) for c in ("card", "iban", "email", "phone")]
        benign = load_corpus("benign")[::12]
        ring = keyring(tmp_path)

        async def call(host: McpClient, text: str) -> types.CallToolResult:
            return await host.call_tool("echo", {"case": "text", "text": text[:200]})

        if decide == "worker":
            async with running_worker(cfg), proxied(cfg, decide, None) as host:
                results = [await call(host, e["text"]) for e in secrets + personal + benign]
        else:
            async with proxied(cfg, decide, ring) as host:
                results = [await call(host, e["text"]) for e in secrets + personal + benign]
        audit = await decisions(cfg)
        for entry, result in zip(secrets, results, strict=False):
            assert error_of(result) == {"code": "INVALID_RESPONSE", "retryable": False}, entry["class"]
            assert audit[request_id_of(result)] == ["semantic/SENSITIVE_DATA"], entry["class"]
        for entry, result in zip(personal, results[len(secrets) :], strict=False):
            (shown,) = texts(result)
            assert f"[redacted:{entry['class']}]" in shown
        shown_benign = [texts(r)[0] for r in results[len(secrets) + len(personal) :]]
        assert shown_benign == [e["text"][:200] for e in benign]
        everything = "".join(seen_by_host(r) for r in results)
        for entry in secrets + personal:
            assert entry["value"] not in everything
        if decide == "proxy":
            quarantine = await read_all(cfg, cfg.topics.quarantine, isolation="read_uncommitted")
            assert len(quarantine) == len(secrets)
            assert {r.headers["tg-quarantine-key"] for r in quarantine} == {b"qp"}
            raw = b"".join((r.value or b"") + b"".join(r.headers.values()) for r in quarantine)
            for entry in secrets:
                assert entry["value"].encode() not in raw
