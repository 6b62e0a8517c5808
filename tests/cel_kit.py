"""A refund tool whose contract carries ``cel`` rules: the classes of policy a schema cannot say.

Used by the gate's, the CLI's, the worker's and the simulation's tests of rules: each rule
below is one class of check (a result bounded by its request, every item owned by the
request's tenant, one field ordered after another, a timestamp recent by the decision's
clock).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from toolgate.gate._records import Message, RequestRecord

TOOL = "refund"
REQUEST_ID = "req.Rf4kT9mQ2x"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
RULES = ("within_request", "accounts_of_tenant", "ended_after_started", "started_recently")

CONTRACT = """\
tool: refund
version: 1
status: active
description: One refund, at most what the agent asked for, on accounts of the requesting tenant.
adapter_versions: ["1.*"]
schema: schema.json
limits:
  max_bytes: 4096
  max_depth: 6
rules:
  - kind: cel
    name: within_request
    expr: data.amount <= request.bind.max_amount
    description: a refund is at most what the agent asked for
  - kind: cel
    name: accounts_of_tenant
    expr: data.accounts.all(a, a.tenant == request.bind.tenant)
  - kind: cel
    name: ended_after_started
    expr: timestamp(data.ended_at) >= timestamp(data.started_at)
  - kind: cel
    name: started_recently
    expr: now - timestamp(data.started_at) <= duration('1h')
projection:
  - /data/refund_id
  - /data/amount
  - /data/started_at
  - /data/ended_at
"""

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "oneOf": [
        {
            "type": "object",
            "required": ["tool", "request_id", "outcome", "data"],
            "properties": {
                "tool": {"const": "refund"},
                "request_id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$"},
                "outcome": {"const": "success"},
                "data": {"$ref": "#/$defs/refund"},
            },
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["tool", "request_id", "outcome", "error"],
            "properties": {
                "tool": {"const": "refund"},
                "request_id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$"},
                "outcome": {"const": "failure"},
                "error": {
                    "type": "object",
                    "required": ["code", "retryable"],
                    "properties": {"code": {"enum": ["NOT_FOUND"]}, "retryable": {"type": "boolean"}},
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
    ],
    "$defs": {
        "refund": {
            "type": "object",
            "required": ["refund_id", "amount", "accounts", "started_at", "ended_at"],
            "properties": {
                "refund_id": {"type": "string", "pattern": "^rf_[a-z0-9]{4,32}$"},
                "amount": {"type": "integer", "minimum": 0, "maximum": 1000000},
                "accounts": {
                    "type": "array",
                    "maxItems": 20,
                    "items": {
                        "type": "object",
                        "required": ["id", "tenant"],
                        "properties": {
                            "id": {"type": "string", "pattern": "^acc_[a-z0-9]{4,16}$"},
                            "tenant": {"type": "string", "pattern": "^[a-z]{2,16}$"},
                        },
                        "additionalProperties": False,
                    },
                },
                "started_at": {"type": "string", "format": "date-time", "maxLength": 35},
                "ended_at": {"type": "string", "format": "date-time", "maxLength": 35},
            },
            "additionalProperties": False,
        }
    },
}


def write_contract(root: Path, contract: str = CONTRACT, schema: dict[str, Any] | None = None) -> Path:
    """The refund contract under ``root`` (``root/refund/v1``); returns ``root``."""
    folder = root / TOOL / "v1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "contract.yaml").write_text(contract)
    (folder / "schema.json").write_text(json.dumps(SCHEMA if schema is None else schema, indent=2))
    return root


def data(**changes: Any) -> dict[str, Any]:
    """A refund every rule accepts, with fields changed."""
    value: dict[str, Any] = {
        "refund_id": "rf_9k2m",
        "amount": 1200,
        "accounts": [{"id": "acc_a1b2", "tenant": "acme"}, {"id": "acc_c3d4", "tenant": "acme"}],
        "started_at": "2026-05-01T11:40:00Z",
        "ended_at": "2026-05-01T11:41:30Z",
    }
    value.update(changes)
    return value


def envelope(**changes: Any) -> dict[str, Any]:
    return {"tool": TOOL, "request_id": REQUEST_ID, "outcome": "success", "data": data(**changes)}


def request(request_id: str = REQUEST_ID, issued: datetime = NOW, **bind: Any) -> RequestRecord:
    """A refund request of tenant acme for at most 1500 (``bind`` changes it)."""
    return RequestRecord(
        request_id=request_id,
        tool=TOOL,
        issued_at=issued - timedelta(seconds=30),
        expires_at=issued + timedelta(minutes=5),
        bind={"max_amount": 1500, "tenant": "acme", **bind},
        attempt=1,
        max_attempts=1,
    )


def message(value: Any, request_id: str = REQUEST_ID) -> Message:
    headers = {
        "tg-tool": TOOL,
        "tg-request-id": request_id,
        "tg-adapter": "refunds",
        "tg-adapter-version": "1.0",
    }
    return Message(
        key=request_id.encode(),
        value=msgspec.json.encode(value),
        headers=[(k, v.encode()) for k, v in headers.items()],
    )
