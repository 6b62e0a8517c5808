"""What the operations artefacts query, and what the worker exports: shared by the static
checks (tests/repo) and the runs against a real Prometheus (tests/integration)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from toolgate.gate._contracts import ContractSet, version_label
from toolgate.service._metrics import Metrics, rule_series

from tests import ROOT

RULES_FILE = ROOT / "ops" / "prometheus" / "rules" / "toolgate.yml"
RULE_TESTS_DIR = ROOT / "ops" / "prometheus" / "tests"
DASHBOARD_FILE = ROOT / "ops" / "grafana" / "dashboards" / "toolgate.json"
RUNBOOK_FILE = ROOT / "ops" / "RUNBOOK.md"
CONTRACTS = ROOT / "contracts"

# What Grafana substitutes before a query reaches Prometheus, made concrete.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__range": "5m",
    "${__range}": "5m",
    "$__interval": "15s",
    "${__interval}": "15s",
    "${tool:regex}": ".*",
    "${tool}": ".*",
    "$tool": ".*",
}
# Labels Prometheus adds to every scraped series, and the histogram bucket label.
TARGET_LABELS = {"job", "instance", "le", "__name__"}

_SELECTOR = re.compile(r"\b(toolgate_[a-z_]+)\b\s*(\{[^}]*\})?")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(?!\s*bool\b)(\s*)(?=[-+]?[0-9.])")


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it comes from."""

    source: str
    expr: str
    instant: bool = False


def load_rules() -> list[dict[str, Any]]:
    """Every rule of the rules file (alerting and recording)."""
    data = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    """The alerting rules."""
    return [rule for rule in load_rules() if "alert" in rule]


def rule_queries() -> list[Query]:
    """Every rule's expression, named after the alert or the recorded series."""
    return [Query(str(rule.get("alert") or rule.get("record")), str(rule["expr"])) for rule in load_rules()]


def load_dashboard() -> dict[str, Any]:
    """The toolgate dashboard."""
    return json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def dashboard_queries() -> list[Query]:
    """Every panel target's expression, as Grafana sends it (variables still in it)."""
    out = []
    for panel in load_dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append(
                Query(
                    f"{panel['title']} [{target.get('refId', '?')}]",
                    target["expr"],
                    bool(target.get("instant")),
                )
            )
    return out


def concrete(expr: str) -> str:
    """``expr`` with Grafana's variables replaced by concrete values (``$tool``: every tool)."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    if "$" in expr:
        raise ValueError(f"unknown Grafana variable left in {expr!r}")
    return expr


def watched(expr: str) -> str:
    """The series an alert watches, whether or not it fires now: every comparison with a
    number becomes a ``bool`` comparison (keeps the series, value 0 or 1) and ``absent(X)``
    becomes ``X``. A quiet system must still return data for this form."""
    return _COMPARISON.sub(r"\1 bool\2", expr).replace("absent(", "(")


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched in its braces) for each toolgate_ metric in ``expr``."""
    return [(m.group(1), set(_MATCHER.findall(m.group(2) or ""))) for m in _SELECTOR.finditer(expr)]


def grouping_labels(expr: str) -> set[str]:
    """Label names used in by/without/on/ignoring/group_left/group_right clauses."""
    names: set[str] = set()
    for group in _GROUPING.findall(expr):
        names.update(name.strip() for name in group.split(",") if name.strip())
    return names


def exported() -> dict[str, set[str]]:
    """Sample name -> label names, for every sample a worker's /metrics serves.

    A fresh ``Metrics`` initialised with the bundled contracts (as the worker does at
    start-up), with one decision, one partition's lag and one partition's restore so every
    labelled metric has a series.
    """
    metrics = Metrics()
    contracts = ContractSet.load(CONTRACTS)
    metrics.initialise(
        [(c.spec.tool, version_label(c.spec), c.spec.status, c.digest) for c in contracts],
        rule_series(contracts),
    )
    metrics.contract_set(contracts.generation, contracts.label, contracts.digest)
    metrics.decided("review_status", "rejected", "parse", "DUPLICATE_KEY", 100, 1e-6)
    metrics.lag.labels("0").set(0)
    metrics.restore_last.labels("0").set(0.1)
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        if not family.samples:
            raise AssertionError(f"{family.name} exports no series")
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


_FENCE = re.compile(r"^\s*```(\w*)\s*$")
_INLINE = re.compile(r"`([^`\n]+)`")
COMMAND_PREFIXES = ("toolgate ", "curl ")


def runbook_commands() -> list[str]:
    """Every command the runbook gives: the lines of its ``sh`` blocks and the inline code
    spans that start with ``toolgate `` or ``curl ``, in order, without duplicates."""
    out: list[str] = []
    fence: str | None = None
    for line in RUNBOOK_FILE.read_text(encoding="utf-8").splitlines():
        match = _FENCE.match(line)
        if match:
            fence = None if fence is not None else match.group(1)
            continue
        if fence is not None:
            command = line.strip()
            if fence == "sh" and command and not command.startswith("#"):
                out.append(command)
            continue
        out += [span for span in _INLINE.findall(line) if span.startswith(COMMAND_PREFIXES)]
    return list(dict.fromkeys(out))
