"""``review_status`` requests and results as the platform and an adapter at 1.5.0 write them.

The replay bench fills its topics with them, and the replay tests publish them on the real
broker (``tests/integration/test_replay.py``): the same record shapes the bundled contract
``contracts/review_status`` decides, built in one place.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

TOOL = "review_status"
ADAPTER = ("review-adapter", "1.5.0")  # the adapter and the version its results carry


def review_request(
    rid: str, now: datetime, change_id: str, *, lifetime: timedelta, **more: Any
) -> dict[str, Any]:
    """The request record ``rid`` for ``change_id``, issued ``now``, expiring ``lifetime`` later;
    ``more``: further fields (``attempt``, ``max_attempts``)."""
    return {
        "request_id": rid,
        "tool": TOOL,
        "issued_at": now.isoformat(),
        "expires_at": (now + lifetime).isoformat(),
        "bind": {"change_id": change_id},
        **more,
    }


def review_result(rid: str, change_id: str, *, comment: str | None = "LGTM") -> dict[str, Any]:
    """An approved review of ``change_id`` answering ``rid``; ``comment`` left out when None
    (v1 of the contract refuses it, v2 allows it)."""
    data: dict[str, Any] = {
        "change_id": change_id,
        "decision": "approved",
        "reviewed_by": "alice@example.com",
    }
    if comment is not None:
        data["comment"] = comment
    return {"tool": TOOL, "request_id": rid, "outcome": "success", "data": data}


def review_headers(rid: str) -> list[tuple[str, bytes]]:
    """The headers the adapter sends with a result for ``rid``."""
    adapter, version = ADAPTER
    return [
        ("tg-tool", TOOL.encode()),
        ("tg-request-id", rid.encode()),
        ("tg-adapter", adapter.encode()),
        ("tg-adapter-version", version.encode()),
    ]
