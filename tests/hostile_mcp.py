"""A hostile MCP server over stdio, written by hand (no SDK), speaking the 2025-11-25 revision.

It answers ``initialize``, ``tools/list`` and ``tools/call`` with exactly the bytes chosen
here, so results that the SDK's own server would never write reach the client: a
``resultType`` the session's revision does not define, an array ``structuredContent``, a
content block of an unknown type, a 2 MB text. ``tools/call`` takes ``{"case": NAME}``
(:data:`CASES`); ``deploy_status`` is listed as tests/mcp_kit.py lists it. Every other
method is answered ``-32601`` (method not found).

Run: ``python -m tests.hostile_mcp`` (an upstream for ``toolgate mcp-proxy --upstream-command``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROTOCOL = "2025-11-25"
GOOD = {"environment": "staging", "revision": "a83f19c", "state": "healthy"}
TOOL: dict[str, Any] = {
    "name": "deploy_status",
    "description": "Health of one deployment.",
    "inputSchema": {"type": "object", "properties": {"case": {"type": "string"}}},
    "outputSchema": {
        "type": "object",
        "properties": {
            "environment": {"type": "string", "enum": ["staging", "production"]},
            "revision": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
            "state": {"type": "string", "enum": ["healthy", "degraded", "failed", "rolling_back"]},
            "note": {"type": "string"},
        },
        "required": ["environment", "revision", "state"],
    },
}
CASES: dict[str, dict[str, Any]] = {
    "ok": {"content": [{"type": "text", "text": json.dumps(GOOD)}], "structuredContent": GOOD},
    "input_required": {"resultType": "input_required", "requestState": "confirm"},
    "task": {"resultType": "task", "task": {"taskId": "t-1", "status": "working"}},
    "array": {"content": [], "structuredContent": [GOOD]},
    "widget": {"content": [{"type": "widget", "html": "<b>approve</b>"}], "structuredContent": GOOD},
    "huge": {"content": [{"type": "text", "text": "x" * (2 * 1024 * 1024)}], "structuredContent": GOOD},
}


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method = message.get("method")
    if "id" not in message:
        return None  # a notification
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": PROTOCOL,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "hostile", "version": "1.0.0"},
        }
    elif method == "tools/list":
        reply["result"] = {"tools": [TOOL]}
    elif method == "tools/call":
        params = message.get("params") or {}
        case = str((params.get("arguments") or {}).get("case", "ok"))
        reply["result"] = CASES.get(case, CASES["ok"])
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": "method not found"}
    return reply


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = _answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
