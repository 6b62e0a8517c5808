"""The adapter's side: publish a result (raw bytes or an MCP ``CallToolResult``) for one attempt
of one request, with every header the gate reads and, with a :class:`Signer`, a v2 signature."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.client._sender import Sender
from toolgate.client._values import MAX_ATTEMPTS, whole
from toolgate.gate._records import CONTRACT_GENERATION_HEADER
from toolgate.gate._signing import Key, Keyring, signed_message_v2
from toolgate.gate._trace_context import from_headers


class Signer:
    """Signs results (scheme v2) with one key of a keyring file toolgate reads
    (``hmac-sha256`` with its secret, ``ed25519`` with its private key)."""

    def __init__(self, key: Key) -> None:
        self.key = key
        self.adapter = key.adapter  # the tg-adapter the key vouches for

    @classmethod
    def from_keyring(cls, path: str | Path, key_id: str, environ: dict[str, str] | None = None) -> Signer:
        """The key ``key_id`` of the keyring TOML file ``path``.

        Raises:
            ConfigError: the file cannot be read, or holds no such key.
        """
        key = Keyring.load(path, environ).get(key_id)
        if key is None:
            raise ConfigError(f"{path}: no key {key_id!r} in the keyring (--keyring or TOOLGATE_KEYRING)")
        return cls(key)

    def sign(self, request_id: str, attempt: int, raw: bytes) -> bytes:
        """The ``tg-signature`` header value: base64 of the v2 signature."""
        return base64.b64encode(self.key.sign(signed_message_v2(request_id, attempt, raw)))


def call_tool_result_bytes(result: Any) -> bytes:
    """The JSON bytes of an MCP ``CallToolResult`` (an SDK model, or its wire form as a dict)."""
    if isinstance(result, bytes):
        return result
    if hasattr(result, "model_dump"):
        result = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return json.dumps(result, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class AdapterSide:
    """Publish results (a part of :class:`toolgate.client.Client`)."""

    config: Config
    _sends: Sender

    async def publish_result(
        self,
        request_id: str,
        attempt: int,
        result: bytes | Mapping[str, Any] | Any,
        *,
        tool: str,
        adapter_version: str,
        adapter: str | None = None,
        signer: Signer | None = None,
        content_type: str = "application/json",
        source: str | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
        contract_generation: int | None = None,
    ) -> None:
        """Publish one result to intake: raw bytes, or an MCP ``CallToolResult`` (an SDK
        model or its wire form), keyed by the request id, with ``tg-tool``,
        ``tg-request-id``, ``tg-attempt``, ``tg-adapter``, ``tg-adapter-version``,
        ``tg-content-type`` (and ``tg-source``, ``traceparent``, ``tracestate`` when given)
        and, with a ``signer``, ``tg-signature`` (scheme v2; ``tg-adapter`` is the key's).
        ``contract_generation``: the contract set generation the caller saw (1 or more), as
        ``tg-contract-generation``: a worker with an older set catches up before deciding.

        Raises:
            ValueError: a header value that the gate would refuse, an attempt out of range.
            TypeError: an attempt that is not a whole number.
            BrokerError: the result was not acknowledged within the send timeout.
        """
        raw, headers = result_record(
            request_id,
            attempt,
            result,
            tool=tool,
            adapter_version=adapter_version,
            adapter=adapter,
            signer=signer,
            content_type=content_type,
            source=source,
            traceparent=traceparent,
            tracestate=tracestate,
            contract_generation=contract_generation,
        )
        await self._sends.send(self.config.topics.intake, request_id, raw, headers)

    async def publish_records(
        self, records: Sequence[tuple[str, bytes | None, bytes | None, Sequence[tuple[str, bytes]]]]
    ) -> None:
        """Send records a decision made in this process wrote (topic, key, value, headers), each
        to its key's murmur2 partition, in one hand-over (one produce request per partition
        leader: ``Sender.send_all``), and return once the broker
        acknowledged every one (acks=all, idempotent producer: a retried send is not written
        twice).

        Raises:
            BrokerError: a record was not acknowledged within the send timeout (some of the
                others may have been).
        """
        await self._sends.send_all(
            [
                (topic, (key or b"").decode("utf-8", "replace"), value, list(headers))
                for topic, key, value, headers in records
            ]
        )


def result_record(
    request_id: str,
    attempt: int,
    result: bytes | Mapping[str, Any] | Any,
    *,
    tool: str,
    adapter_version: str,
    adapter: str | None = None,
    signer: Signer | None = None,
    content_type: str = "application/json",
    source: str | None = None,
    traceparent: str | None = None,
    tracestate: str | None = None,
    contract_generation: int | None = None,
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The intake record's value and headers :meth:`AdapterSide.publish_result` sends (and
    what a decision in process reads as that record).

    Raises:
        ValueError: a header value that the gate would refuse, an attempt out of range.
        TypeError: an attempt that is not a whole number.
    """
    whole("attempt", attempt, low=1, high=MAX_ATTEMPTS)
    raw = call_tool_result_bytes(result)
    if signer is not None:
        if adapter is not None and adapter != signer.adapter:
            raise ValueError(f"the key {signer.key.key_id} belongs to adapter {signer.adapter!r}")
        adapter = signer.adapter
    headers: list[tuple[str, bytes]] = [
        ("tg-tool", tool.encode()),
        ("tg-request-id", request_id.encode()),
        ("tg-attempt", str(attempt).encode()),
        ("tg-adapter-version", adapter_version.encode()),
        ("tg-content-type", content_type.encode()),
    ]
    if adapter is not None:
        headers.append(("tg-adapter", adapter.encode()))
    if source is not None:
        headers.append(("tg-source", source.encode()))
    if traceparent is not None:
        context = from_headers([("traceparent", traceparent.encode())])
        if context is not None:  # an invalid one would be dropped by the worker anyway
            headers.append(("traceparent", traceparent.encode()))
            if tracestate:
                headers.append(("tracestate", tracestate.encode()))
    if contract_generation:
        whole("contract_generation", contract_generation, low=1, high=10**18 - 1)
        headers.append((CONTRACT_GENERATION_HEADER, str(contract_generation).encode()))
    if signer is not None:
        headers.append(("tg-signature", signer.sign(request_id, attempt, raw)))
    for name, value in headers:
        if len(value) > 1024 or any(b < 0x20 or b == 0x7F for b in value):
            raise ValueError(f"header {name}: more than 1024 bytes or a control character")
    return raw, headers
