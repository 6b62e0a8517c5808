"""The worker bench's workload: the bench-only contract and the results of a backlog.

``bench_listing`` results of about 1.2 KB (a few bounded strings and an array of small
closed objects; no signature, so crypto does not dominate); every tenth has an extra
property and is rejected at the ``schema`` stage, so quarantine records are written too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from toolgate._config import Config

from ops.bench.measure import gate_knows

PARTITIONS = 3  # intake partitions of every run but the partition sweep's
TOOL = "bench_listing"
REJECT_EVERY = 10  # every tenth result is rejected (schema, extra property)
VARIANTS = ("peer", "copier", "relay", "worker", "worker-pyjsonschema", "worker x2")
BASELINE = "baseline worker"  # the variant run from --baseline-worktree
FLOOR = "floor"  # the latency cases' floor (ops.bench.floor)

# ------------------------------------------------------------------ bench contract

CONTRACT_YAML = f"""\
tool: {TOOL}
version: 1
status: active
description: Benchmark only. A listing of up to 20 small closed items, about 1 KB.
adapter_versions: ["1.*"]
schema: schema.json
limits:
  max_bytes: 8192
  max_depth: 6
rules:
  - kind: bind
    pointer: /data/query
    request_key: query
  - kind: freshness
    pointer: /data/observed_at
    max_age_seconds: 86400
    max_future_skew_seconds: 60
    issued_skew_seconds: 60
projection:
  - /data/query
  - /data/project
  - /data/status
  - /data/count
  - /data/observed_at
  - /data/labels
display_text:
  - pointer: /data/title
    max_length: 120
retry:
  retryable_codes: [UPSTREAM_UNAVAILABLE]
"""

_ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$"}
# One closed item of a listing: the bench contracts' repeated part (here and gate_bench.py's).
ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "state", "score", "owner"],
    "properties": {
        "id": {"type": "string", "pattern": "^IT-[0-9]{1,8}$"},
        "name": {"type": "string", "maxLength": 64},
        "state": {"enum": ["open", "closed", "blocked"]},
        "score": {"type": "number", "minimum": 0, "maximum": 100},
        "owner": {"type": "string", "maxLength": 64},
    },
    "additionalProperties": False,
}


def _envelope(tool: str, outcome: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
    """One closed result envelope: ``tool``, ``request_id``, ``outcome`` and ``member`` (``body``)."""
    return {
        "type": "object",
        "required": ["tool", "request_id", "outcome", member],
        "properties": {
            "tool": {"const": tool},
            "request_id": _ID,
            "outcome": {"const": outcome},
            member: body,
        },
        "additionalProperties": False,
    }


def listing_schema(tool: str, data: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A bench contract's result schema: the success envelope with the closed object ``data``
    (its ``required`` members), or the failure envelope, as ``oneOf`` (Draft 2020-12)."""
    closed = {"type": "object", "required": required, "properties": data, "additionalProperties": False}
    error = {
        "type": "object",
        "required": ["code", "retryable"],
        "properties": {
            "code": {"enum": ["NOT_FOUND", "UPSTREAM_UNAVAILABLE"]},
            "retryable": {"type": "boolean"},
        },
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "oneOf": [_envelope(tool, "success", "data", closed), _envelope(tool, "failure", "error", error)],
    }


SCHEMA = listing_schema(
    TOOL,
    {
        "query": {"type": "string", "pattern": "^Q-[0-9]{1,10}$"},
        "project": {"type": "string", "pattern": "^[a-z][a-z0-9-]{1,31}$"},
        "title": {"type": "string", "maxLength": 200},
        "status": {"enum": ["complete", "partial", "empty"]},
        "observed_at": {
            "type": "string",
            "maxLength": 40,
            "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
            "(\\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$",
        },
        "count": {"type": "integer", "minimum": 0, "maximum": 20},
        "labels": {
            "type": "array",
            "maxItems": 8,
            "items": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,23}$"},
        },
        "items": {"type": "array", "maxItems": 20, "items": ITEM_SCHEMA},
    },
    ["query", "project", "title", "status", "observed_at", "count", "labels", "items"],
)
ITEMS = 8  # about 1 KB per result


# Contract fields an earlier checkout (--baseline-worktree) does not know: left out of its copy.
NEWER_FIELDS = ("issued_skew_seconds",)


def write_contract(root: Path, *, baseline: Path | None = None) -> Path:
    """Write ``bench_listing/v1`` under ``root``; return ``root`` (the contracts folder).

    ``baseline``: for that checkout, without the fields of :data:`NEWER_FIELDS` its gate does
    not know (a field it knows stays: without it the same results would be decided otherwise).
    """
    folder = root / TOOL / "v1"
    folder.mkdir(parents=True)
    text = CONTRACT_YAML
    if baseline is not None:
        unknown = {name for name in NEWER_FIELDS if not gate_knows(baseline, name)}
        text = "".join(line for line in text.splitlines(True) if line.split(":")[0].strip() not in unknown)
    (folder / "contract.yaml").write_text(text)
    (folder / "schema.json").write_text(json.dumps(SCHEMA, indent=1))
    return root


@dataclass(frozen=True)
class Result:
    """One intake record and the request record it answers."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    request: bytes
    rejected: bool


def run_tag(hex_ids: bool) -> str:
    """A fresh tag for request ids, topics and groups.

    Letters only by default. With ``hex_ids`` it carries a hex segment with a digit
    before an ``e`` (as UUIDs and commit hashes often do): the strict parse's cheap
    byte scan then cannot rule out an exponent and walks the whole parsed value.
    """
    letters = "".join("abcdfghijklmnopq"[int(c, 16)] for c in uuid.uuid4().hex[:12])
    return f"{letters}x3e9f" if hex_ids else letters


def results(tag: str, count: int, now: datetime) -> Iterator[Result]:
    """``count`` results with fresh request ids; every tenth has an extra property."""
    observed = (now - timedelta(seconds=30)).isoformat()
    issued = (now - timedelta(seconds=5)).isoformat()
    expires = (now + timedelta(hours=6)).isoformat()
    for i in range(count):
        rid = f"req.{tag}.{i:08d}"
        query = f"Q-{i}"
        items = [
            {
                "id": f"IT-{(i * 7 + n) % 10**8}",
                "name": f"nightly build step {n:02d} of run {i}",
                "state": ("open", "closed", "blocked")[(i + n) % 3],
                "score": round(((i + n) % 1000) / 10, 1),
                "owner": f"team-{(i + n) % 7}@example.com",
            }
            for n in range(ITEMS)
        ]
        data: dict[str, Any] = {
            "query": query,
            "project": "bluebird",
            "title": f"Open items of the nightly pipeline, run {i}",
            "status": "partial",
            "observed_at": observed,
            "count": len(items),
            "labels": ["ci", "nightly", "bluebird"],
            "items": items,
        }
        rejected = i % REJECT_EVERY == REJECT_EVERY - 1
        if rejected:
            data["admin_override"] = True
        value = {"tool": TOOL, "request_id": rid, "outcome": "success", "data": data}
        request = {
            "request_id": rid,
            "tool": TOOL,
            "issued_at": issued,
            "expires_at": expires,
            "bind": {"query": query},
            "attempt": 1,
            "max_attempts": 3,
        }
        headers = [
            ("tg-tool", TOOL.encode()),
            ("tg-request-id", rid.encode()),
            ("tg-adapter", b"bench-adapter"),
            ("tg-adapter-version", b"1.0.0"),
            ("tg-source", b"https://bench.invalid/listing"),
        ]
        yield Result(
            rid.encode(), msgspec.json.encode(value), headers, msgspec.json.encode(request), rejected
        )


def run_topics(config: Config) -> set[str]:
    """Every topic a run's configuration names (the state changelog too): all deleted after it."""
    t = config.topics
    return {t.requests, t.intake, t.agent, t.quarantine, t.audit, t.state}
