"""Rejections by cel rule are counted by tool and rule, live and in shadow."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from toolgate._config import Topics
from toolgate.gate import ContractSet, Gate
from toolgate.gate._batch import AcceptedView, Decision, decide_batch
from toolgate.service._metrics import Metrics

from tests import cel_kit


def _exposition(metrics: Metrics) -> str:
    return generate_latest(metrics.registry).decode()


def _rules_of(contracts: ContractSet) -> list[tuple[str, str, str, str]]:
    return [(c.spec.tool, str(c.spec.version), c.spec.status, r.name) for c in contracts for r in c.cel_rules]


class TestRuleFailures:
    """toolgate_rule_failures_total{tool,rule}: one series per reviewed rule, counted per rejection."""

    def test_each_rule_is_exported_at_zero_then_counted(self, tmp_path: Path) -> None:
        """Every rule's series exists before its first rejection; a rejection counts under its rule."""
        contracts = ContractSet.load(cel_kit.write_contract(tmp_path))
        metrics = Metrics()
        metrics.initialise([("refund", "1", "active", "d")], _rules_of(contracts))
        text = _exposition(metrics)
        for rule in cel_kit.RULES:
            assert f'toolgate_rule_failures_total{{rule="{rule}",tool="refund"}} 0.0' in text
        gate = Gate(contracts)
        verdicts = [
            gate.evaluate(cel_kit.message(cel_kit.envelope(amount=9999)), cel_kit.request(), cel_kit.NOW),
            gate.evaluate(cel_kit.message(cel_kit.envelope()), cel_kit.request(), cel_kit.NOW),
        ]
        metrics.decided_batch([Decision(v, 10, 1e-5, 0) for v in verdicts])
        text = _exposition(metrics)
        assert 'toolgate_rule_failures_total{rule="within_request",tool="refund"} 1.0' in text
        assert 'toolgate_rejections_total{code="RULE_FAILED",stage="semantic",tool="refund"} 1.0' in text


class TestShadowRule:
    """A shadow version with a new rule counts what it would have rejected, and decides nothing."""

    def test_a_new_rule_in_shadow_is_counted_not_enforced(self, tmp_path: Path) -> None:
        """v1 without the amount rule decides; v2 in shadow with it reports the rule it failed."""
        without = cel_kit.CONTRACT.replace(
            "  - kind: cel\n    name: within_request\n    expr: data.amount <= request.bind.max_amount\n"
            "    description: a refund is at most what the agent asked for\n",
            "",
        )
        cel_kit.write_contract(tmp_path, without)
        shadow = cel_kit.CONTRACT.replace("version: 1", "version: 2").replace(
            "status: active", "status: shadow"
        )
        folder = tmp_path / "refund" / "v2"
        folder.mkdir()
        (folder / "contract.yaml").write_text(shadow)
        (folder / "schema.json").write_text((tmp_path / "refund" / "v1" / "schema.json").read_text())
        gate = Gate(ContractSet.load(tmp_path))
        batch = decide_batch(
            gate,
            [cel_kit.message(cel_kit.envelope(amount=9999))],
            {cel_kit.REQUEST_ID: cel_kit.request()}.get,
            AcceptedView(lambda _r, _a: False),
            cel_kit.NOW,
            topics=Topics(agent="a", quarantine="q", audit="au"),
            max_record_bytes=1 << 20,
        )
        assert [d.verdict.accepted for d in batch.decisions] == [True]
        assert [(d.tool, d.version, d.rule) for d in batch.disagreements] == [
            ("refund", "2", "within_request")
        ]
