"""cel rules on a live worker and the real broker: each result decided as its contract's rules say."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import AIOKafkaProducer
from toolgate._config import Config
from toolgate.gate import ContractSet, Gate
from toolgate.service._kafka import client_settings
from toolgate.service._service import Worker, WorkerOptions

from tests import cel_kit
from tests.integration.worker_kit import read_all


def _at(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class TestLiveRules:
    """A live worker rejects by rule (RULE_FAILED, quarantined with the rule) and accepts the rest."""

    async def test_three_rules_decide_on_the_real_broker(self, config: Config, tmp_path: Path) -> None:
        """One accepted refund and one per rule false: agent envelopes, quarantine and metrics agree."""
        contracts = ContractSet.load(cel_kit.write_contract(tmp_path))
        now = datetime.now(UTC)
        started, ended = _at(now - timedelta(minutes=5)), _at(now - timedelta(minutes=4))
        cases: dict[str, tuple[dict[str, Any], str | None]] = {
            "ok": ({}, None),
            "over": ({"amount": 1501}, "within_request"),
            "tenant": ({"accounts": [{"id": "acc_zz99", "tenant": "evil"}]}, "accounts_of_tenant"),
            "order": ({"ended_at": _at(now - timedelta(minutes=6))}, "ended_after_started"),
        }
        producer = AIOKafkaProducer(**client_settings(config), acks="all")
        await producer.start()
        try:
            for name, (changes, _) in cases.items():
                request_id = f"req.cel{name}0000"
                record = cel_kit.request(request_id, issued=now)
                await producer.send(
                    config.topics.requests, msgspec.json.encode(record), key=request_id.encode()
                )
                value = cel_kit.envelope(**({"started_at": started, "ended_at": ended} | changes))
                value["request_id"] = request_id
                message = cel_kit.message(value, request_id)
                await producer.send(
                    config.topics.intake, message.value, key=message.key, headers=list(message.headers)
                )
            await producer.flush()
        finally:
            await producer.stop()
        options = WorkerOptions(handle_signals=False, metrics_port=0)
        worker = Worker(config, Gate(contracts), options=options)
        task = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(60):
                while worker.stats.decided < len(cases):
                    await asyncio.wait({task}, timeout=0.1)
            metrics = worker.metrics.registry
            failures = {
                s.labels["rule"]: s.value
                for m in metrics.collect()
                for s in m.samples
                if s.name == "toolgate_rule_failures_total"
            }
        finally:
            worker.request_stop()
            await task
        agent = {r.key: json.loads(r.value or b"") for r in await read_all(config, config.topics.agent)}
        quarantine = {r.key: r for r in await read_all(config, config.topics.quarantine)}
        for name, (_, rule) in cases.items():
            key = f"req.cel{name}0000"
            if rule is None:
                assert agent[key]["outcome"] == "success"
                assert key not in quarantine
                continue
            assert agent[key]["error"] == {"code": "INVALID_RESPONSE", "retryable": False}
            headers = quarantine[key].headers
            assert headers["tg-error-code"] == b"RULE_FAILED"
            detail = json.loads(headers["tg-error-detail"])
            assert (detail["schema_path"], detail["message"]) == (rule, f"rule {rule!r} is false")
        assert failures == {rule: 1.0 for rule in cel_kit.RULES if rule != "started_recently"} | {
            "started_recently": 0.0
        }
