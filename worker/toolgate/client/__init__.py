"""toolgate.client: the platform's and the adapter's side of toolgate, async, over Kafka.

Who uses this room: **platforms** (they issue a request record and await the decided answer)
and **adapters** (they publish a tool's result). It may import :mod:`toolgate.gate` and the
Kafka clients of :mod:`toolgate.service`, never :mod:`toolgate.authoring`,
:mod:`toolgate.mcp`, :mod:`toolgate.operations` or the CLI.

The platform issues a request record and awaits the decided answer::

    async with toolgate.client.Client(config) as client:
        request = await client.issue("deployer.deploy_status", bind={"environment": "staging"})
        ...  # the adapter calls the tool and publishes its result
        answer = await client.answer(request)   # Answer, or AnswerTimeout
        if answer.outcome == "failure" and answer.retryable:
            request = await client.next_attempt(request)

The adapter publishes a raw result, or an MCP ``CallToolResult``, for one attempt of one
request, with every header the gate reads and a v2 signature::

    signer = toolgate.client.Signer.from_keyring("keyring.toml", "deploy-adapter-2026")
    await client.publish_result(request.request_id, request.attempt, result,
                                tool=request.tool, adapter_version="1.0.0", signer=signer)

The modules follow the two users: ``_platform`` (issue, answer, next attempt, end) with
``_reader`` (one ``read_committed`` consumer of the agent topic resolving every wait),
``_adapter`` (publish a result, sign it), and what both share: ``_sender`` (one idempotent
producer, a bounded number of sends at once, the murmur2 partition of each key) and
``_values`` (every number a caller gives, finite and in range). ``_client`` joins them.

An envelope is the answer of the request's attempt in progress: ``INVALID_RESPONSE``
(``answer.rejected``) may later be followed by a success for the same request, after an
operator replays the quarantined result; a client that still waits then sees the new one.
"""

from __future__ import annotations

from toolgate.client._adapter import Signer, call_tool_result_bytes, result_record
from toolgate.client._client import Client
from toolgate.client._errors import AnswerTimeout, ClientClosed
from toolgate.client._platform import EXPIRY_GRACE_S, Request
from toolgate.client._reader import DEFAULT_MAX_PENDING, Answer, answer_of
from toolgate.client._sender import DEFAULT_MAX_SENDS, SEND_TIMEOUT_S
from toolgate.client._values import MAX_ATTEMPTS, MAX_TTL_S

__all__ = [
    "DEFAULT_MAX_PENDING",
    "DEFAULT_MAX_SENDS",
    "EXPIRY_GRACE_S",
    "MAX_ATTEMPTS",
    "MAX_TTL_S",
    "SEND_TIMEOUT_S",
    "Answer",
    "AnswerTimeout",
    "Client",
    "ClientClosed",
    "Request",
    "Signer",
    "answer_of",
    "call_tool_result_bytes",
    "result_record",
]
