"""Builders for gate tests: the bundled contracts, a request, a message, a changed contract copy."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from toolgate.gate._records import Message, RequestRecord

from tests import ROOT

CONTRACTS = ROOT / "contracts"
PROBES = ROOT / "tests" / "corpus" / "probes"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
REQUEST_ID = "req.J7q94MkP"


def review_request(**changes: Any) -> RequestRecord:
    """A review_status request for CR-1042, issued a minute ago."""
    fields: dict[str, Any] = {
        "request_id": REQUEST_ID,
        "tool": "review_status",
        "issued_at": NOW - timedelta(minutes=1),
        "expires_at": NOW + timedelta(minutes=5),
        "bind": {"change_id": "CR-1042"},
        "attempt": 1,
        "max_attempts": 3,
    }
    fields.update(changes)
    return RequestRecord(**fields)


def review_value(**data_changes: Any) -> dict[str, Any]:
    """An accepted review_status success envelope, with ``data`` fields changed."""
    data = {"change_id": "CR-1042", "decision": "approved", "reviewed_by": "alice@example.com"}
    data.update(data_changes)
    return {"tool": "review_status", "request_id": REQUEST_ID, "outcome": "success", "data": data}


def message(
    value: Any = None,
    *,
    raw: bytes | None = None,
    key: bytes | None = REQUEST_ID.encode(),
    tool: str = "review_status",
    **headers: str | None,
) -> Message:
    """An intake message; keyword headers use underscores (tg_adapter -> tg-adapter)."""
    hdrs: dict[str, str | None] = {
        "tg-tool": tool,
        "tg-request-id": REQUEST_ID,
        "tg-adapter": "review-adapter",
        "tg-adapter-version": "1.0.0",
    }
    hdrs.update({k.replace("_", "-"): v for k, v in headers.items()})
    body = raw if raw is not None else msgspec.json.encode(value if value is not None else review_value())
    return Message(key=key, value=body, headers=[(k, v.encode()) for k, v in hdrs.items() if v is not None])


Evaluate = Callable[..., Any]


def copy_tool(root: Path, tool: str, **changes: str) -> Path:
    """contracts/<tool>/v1 copied under root, contract.yaml keys replaced or added."""
    folder = root / tool / "v1"
    shutil.copytree(CONTRACTS / tool / "v1", folder)
    path = folder / "contract.yaml"
    lines: list[str] = []
    dropping = False
    for line in path.read_text().splitlines():
        if not line.startswith((" ", "#")):
            dropping = line.split(":")[0] in changes
        if not dropping:
            lines.append(line)
    lines += [f"{key}: {value}" for key, value in changes.items()]
    path.write_text("\n".join(lines) + "\n")
    return folder


def pairs(msg: Message, *extra: tuple[str, str]) -> Message:
    """The message with (name, value) headers added after its own."""
    return msgspec.structs.replace(msg, headers=[*msg.headers, *((k, v.encode()) for k, v in extra)])


def without(msg: Message, name: str) -> Message:
    """The message without any header called ``name``."""
    return msgspec.structs.replace(msg, headers=[(k, v) for k, v in msg.headers if k != name])
