"""One answer per attempt (docs/design.md), each order on the real broker: after an attempt has its
accepted answer, nothing more reaches the agent for it; later results go to quarantine and audit only."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.operations._replay import Selection, apply, read_quarantine
from toolgate.service._kafka import client_settings
from toolgate.service._service import Worker, WorkerOptions

from tests.integration.test_replay import contracts_with_v2
from tests.integration.test_worker import run_until
from tests.integration.worker_kit import CONTRACTS, KEYRING, read_all


def _request(rid: str) -> bytes:
    now = datetime.now(UTC)
    return json.dumps(
        {
            "request_id": rid,
            "tool": "review_status",
            "issued_at": (now - timedelta(seconds=5)).isoformat(),
            "expires_at": (now + timedelta(minutes=30)).isoformat(),
            "bind": {"change_id": "CR-7"},
            "attempt": 1,
            "max_attempts": 3,
        }
    ).encode()


def success(rid: str, **extra: Any) -> bytes:
    data = {"change_id": "CR-7", "decision": "approved", "reviewed_by": "alice@example.com", **extra}
    return json.dumps(
        {"tool": "review_status", "request_id": rid, "outcome": "success", "data": data}
    ).encode()


def upstream_failure(rid: str) -> bytes:
    error = {"code": "UPSTREAM_UNAVAILABLE", "retryable": True}
    return json.dumps(
        {"tool": "review_status", "request_id": rid, "outcome": "failure", "error": error}
    ).encode()


def rejected(rid: str) -> bytes:
    return success(rid, admin_override=True)  # an unknown member: SCHEMA_VIOLATION


class Scenario:
    """One request on private topics; results sent one by one, each decided by a real worker."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.rid = f"req.ord{uuid.uuid4().hex[:10]}"
        self.decided = 0

    async def send(self, *values: bytes, request: bool = False, adapter_version: str = "1.0.0") -> None:
        producer = AIOKafkaProducer(**client_settings(self.config), acks="all")
        await producer.start()
        try:
            if request:
                await producer.send_and_wait(
                    self.config.topics.requests, _request(self.rid), key=self.rid.encode()
                )
            for value in values:
                headers = [
                    ("tg-tool", b"review_status"),
                    ("tg-request-id", self.rid.encode()),
                    ("tg-adapter", b"review-adapter"),
                    ("tg-adapter-version", adapter_version.encode()),
                ]
                await producer.send(self.config.topics.intake, value, key=self.rid.encode(), headers=headers)
            await producer.flush()
        finally:
            await producer.stop()

    async def decide(self, count: int, contracts: Path = CONTRACTS) -> None:
        """Run a worker until ``count`` more results of this scenario are decided."""
        gate = Gate(ContractSet.load(contracts), Keyring.load(KEYRING, environ={}))
        worker = Worker(self.config, gate, options=WorkerOptions(handle_signals=False, metrics_port=0))
        await run_until(worker, count)
        self.decided += count

    async def agent(self) -> list[dict[str, Any]]:
        """The agent envelopes of this request, in order."""
        records = await read_all(self.config, self.config.topics.agent)
        return [json.loads(r.value or b"") for r in records if r.key == self.rid]

    async def audit(self) -> list[dict[str, Any]]:
        """The decision events of this request, in decision order."""
        records = await read_all(self.config, self.config.topics.audit)
        events = [json.loads(r.value or b"") for r in records if r.key == self.rid]
        return sorted((e for e in events if e["kind"] == "decision"), key=lambda e: e["origin"])

    async def quarantined_codes(self) -> list[str]:
        records = await read_quarantine(self.config, Selection())
        return sorted(r.code for r in records[0] if (r.key or b"").decode() == self.rid)


def _outcomes(envelopes: list[dict[str, Any]]) -> list[str]:
    return [e["outcome"] if e["outcome"] == "success" else e["error"]["code"] for e in envelopes]


class TestOrders:
    async def test_rejected_then_success(self, config: Config) -> None:
        """A rejection does not answer the attempt: INVALID_RESPONSE, then the success."""
        s = Scenario(config)
        await s.send(rejected(s.rid), request=True)
        await s.decide(1)
        await s.send(success(s.rid))
        await s.decide(1)
        assert _outcomes(await s.agent()) == ["INVALID_RESPONSE", "success"]
        assert [e["envelope"] for e in await s.audit()] == [True, True]

    async def test_upstream_failure_then_success(self, config: Config) -> None:
        """A valid failure is the answer: the later success gets no envelope, is a quarantined duplicate."""
        s = Scenario(config)
        await s.send(upstream_failure(s.rid), request=True)
        await s.decide(1)
        await s.send(success(s.rid))
        await s.decide(1)
        assert _outcomes(await s.agent()) == ["UPSTREAM_UNAVAILABLE"]
        audit = await s.audit()
        assert [(e["outcome"], e["code"], e["envelope"]) for e in audit] == [
            ("failure", "UPSTREAM_UNAVAILABLE", True),
            ("rejected", "DUPLICATE_RESULT", False),
        ]
        assert await s.quarantined_codes() == ["DUPLICATE_RESULT"]

    async def test_success_then_duplicate_in_a_later_batch(self, config: Config) -> None:
        """The same success sent again later: one envelope, the duplicate quarantined and audited only."""
        s = Scenario(config)
        await s.send(success(s.rid), request=True)
        await s.decide(1)
        await s.send(success(s.rid))
        await s.decide(1)  # a new worker: the ledger comes from the audit topic
        assert _outcomes(await s.agent()) == ["success"]
        assert [(e["code"], e["envelope"]) for e in await s.audit()] == [
            (None, True),
            ("DUPLICATE_RESULT", False),
        ]
        assert await s.quarantined_codes() == ["DUPLICATE_RESULT"]

    async def test_at_least_once_adapter_sends_twice_in_one_batch(self, config: Config) -> None:
        """Two copies in one batch: the first is the answer, the second gets no envelope."""
        s = Scenario(config)
        await s.send(success(s.rid), success(s.rid), request=True)
        await s.decide(2)
        assert _outcomes(await s.agent()) == ["success"]
        assert [(e["code"], e["envelope"]) for e in await s.audit()] == [
            (None, True),
            ("DUPLICATE_RESULT", False),
        ]

    async def test_success_then_malformed_resend(self, config: Config) -> None:
        """Any rejection keyed to an answered attempt stays away from the agent, not only duplicates."""
        s = Scenario(config)
        await s.send(success(s.rid), request=True)
        await s.decide(1)
        await s.send(b"<html>502 Bad Gateway</html>")
        await s.decide(1)
        assert _outcomes(await s.agent()) == ["success"]
        assert [(e["code"], e["envelope"]) for e in await s.audit()] == [
            (None, True),
            ("MALFORMED_JSON", False),
        ]
        assert await s.quarantined_codes() == ["MALFORMED_JSON"]

    async def test_replay_of_a_rejected_one_after_a_fresh_success(
        self, config: Config, tmp_path: Path
    ) -> None:
        """Rejected (v1 refuses `comment`), then a fresh success; replaying the rejected one with the
        fixed contract (v2) is DUPLICATE_RESULT: no envelope, quarantine and audit (marked a replay)."""
        s = Scenario(config)
        await s.send(success(s.rid, comment="LGTM"), request=True, adapter_version="1.5.0")
        await s.decide(1)
        await s.send(success(s.rid), adapter_version="1.5.0")
        await s.decide(1)
        quarantined, _ = await read_quarantine(config, Selection(codes=frozenset({"SCHEMA_VIOLATION"})))
        assert len(quarantined) == 1
        await apply(config, quarantined, 3)
        await s.decide(1, contracts_with_v2(tmp_path / "fixed", "active"))
        assert _outcomes(await s.agent()) == ["INVALID_RESPONSE", "success"]
        audit = await s.audit()
        assert [(e["code"], e["envelope"], e["replay"]) for e in audit] == [
            ("SCHEMA_VIOLATION", True, 0),
            (None, True, 0),
            ("DUPLICATE_RESULT", False, 1),
        ]
        assert await s.quarantined_codes() == ["DUPLICATE_RESULT", "SCHEMA_VIOLATION"]
