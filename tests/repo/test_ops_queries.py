"""Panels and rules query only what the worker exports, and the dashboard answers its questions.

The worker's exports come from ``Metrics()`` itself (tests/ops_catalog.py: ``exported``),
so renaming a metric or a label without updating the dashboard and the rules fails here.
"""

from __future__ import annotations

import re

import pytest

from tests.ops_catalog import (
    TARGET_LABELS,
    Query,
    alerts,
    concrete,
    dashboard_queries,
    exported,
    grouping_labels,
    load_dashboard,
    load_rules,
    rule_queries,
    selectors,
    watched,
)


@pytest.fixture(scope="module")
def catalog() -> dict[str, set[str]]:
    return exported()


def problems(query: Query, catalog: dict[str, set[str]], records: set[str]) -> list[str]:
    """What ``query`` references that the worker does not export (empty when all is well)."""
    out = []
    for metric, labels in selectors(query.expr):
        if metric not in catalog:
            out.append(f"{query.source}: metric {metric} is not exported")
            continue
        unknown = labels - catalog[metric] - TARGET_LABELS
        if unknown:
            out.append(f"{query.source}: {metric} has no label {sorted(unknown)}")
    every_label = set().union(*catalog.values()) | TARGET_LABELS
    unknown_groups = grouping_labels(query.expr) - every_label
    if unknown_groups:
        out.append(f"{query.source}: grouping by unexported labels {sorted(unknown_groups)}")
    for name in re.findall(r"\btoolgate:[a-z0-9_]+:[a-z0-9_]+", query.expr):
        if name not in records:
            out.append(f"{query.source}: recorded series {name} is not recorded by any rule")
    return out


def _annotation_queries() -> list[Query]:
    return [
        Query(f"{rule['alert']} {key}", text)
        for rule in alerts()
        for key, text in rule["annotations"].items()
    ]


def _records() -> set[str]:
    return {rule["record"] for rule in load_rules() if "record" in rule}


class TestReferences:
    """Every metric and label a panel or rule names exists on a worker's /metrics."""

    def test_dashboard_queries(self, catalog: dict[str, set[str]]) -> None:
        """Panel queries and the tool variable name exported metrics and labels only."""
        dashboard = load_dashboard()
        variables = [Query(f"variable {v['name']}", v["definition"]) for v in dashboard["templating"]["list"]]
        found = [p for q in [*dashboard_queries(), *variables] for p in problems(q, catalog, _records())]
        assert found == []

    def test_rule_expressions(self, catalog: dict[str, set[str]]) -> None:
        """Rule expressions name exported metrics and labels, and recorded series that exist."""
        found = [p for q in rule_queries() for p in problems(q, catalog, _records())]
        assert found == []

    def test_alert_annotations(self, catalog: dict[str, set[str]]) -> None:
        """Queries inside alert annotation templates name exported metrics and labels only."""
        found = [p for q in _annotation_queries() for p in problems(q, catalog, _records())]
        assert found == []

    def test_the_check_catches_a_wrong_name(self, catalog: dict[str, set[str]]) -> None:
        """A misspelt metric, a label the metric lacks and an unknown grouping label are reported."""
        bad = Query(
            "bad",
            'sum by (adapter) (rate(toolgate_result_total{tool="x"}[5m])) '
            '+ on() toolgate_consumer_lag{tool="x"} + toolgate:nothing:here',
        )
        assert len(problems(bad, catalog, _records())) == 4

    def test_every_exported_metric_has_a_panel(self, catalog: dict[str, set[str]]) -> None:
        """Each metric family the worker exports is shown by at least one panel."""
        shown = {metric for q in dashboard_queries() for metric, _ in selectors(q.expr)}
        families = {re.sub(r"_(bucket|sum|count|total|created)$", "", name) for name in catalog}
        shown_families = {re.sub(r"_(bucket|sum|count|total|created)$", "", name) for name in shown}
        assert families - shown_families == set()


class TestDashboard:
    """The dashboard answers the operators' questions."""

    def test_every_panel_describes_its_question(self) -> None:
        """Each panel has a description that asks the question it answers."""
        for panel in load_dashboard()["panels"]:
            assert "?" in panel.get("description", ""), panel["title"]

    def test_panel_ids_are_unique(self) -> None:
        """No two panels share an id."""
        ids = [panel["id"] for panel in load_dashboard()["panels"]]
        assert len(ids) == len(set(ids))

    def test_rejections_by_stage_and_code_are_stacked(self) -> None:
        """The rejections panel stacks its series by stage and code."""
        (panel,) = [p for p in load_dashboard()["panels"] if p["title"] == "Rejections by stage and code"]
        assert panel["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
        assert "by (stage, code)" in panel["targets"][0]["expr"]

    def test_top_rejected_tools_uses_topk(self) -> None:
        """The top rejected tools panel ranks tools with topk over the rejections counter."""
        (panel,) = [p for p in load_dashboard()["panels"] if p["title"] == "Top rejected tools"]
        assert re.search(
            r"topk\(\d+, sum by \(tool\) \(increase\(toolgate_rejections_total", panel["targets"][0]["expr"]
        )

    def test_latency_quantiles_per_stage(self) -> None:
        """Gate latency is shown as histogram quantiles per stage."""
        exprs = [q.expr for q in dashboard_queries()]
        for q in ("0.5", "0.99"):
            assert any(
                e.startswith(
                    f"histogram_quantile({q}, sum by (stage, le) (rate(toolgate_evaluation_seconds_bucket"
                )
                for e in exprs
            ), q

    def test_queries_become_concrete(self) -> None:
        """Every panel query is free of Grafana variables once they are substituted."""
        for query in dashboard_queries():
            assert "$" not in concrete(query.expr), query.source

    def test_rate_windows_follow_grafana(self) -> None:
        """Range panels take their rate window from $__rate_interval, not a fixed one."""
        for query in dashboard_queries():
            for window in re.findall(r"\[([^\]]+)\]", query.expr):
                assert window in {"$__rate_interval", "$__range"}, query.source


class TestWatchedForm:
    """The form of an alert that returns its series whether or not it fires."""

    def test_comparisons_become_bool(self) -> None:
        """Comparisons with numbers keep their series as 0/1; label matchers are left alone."""
        expr = 'x{code!="A"} > 0.25 and on (tool) y >= 20 or z == 0'
        assert watched(expr) == 'x{code!="A"} > bool 0.25 and on (tool) y >= bool 20 or z == bool 0'

    def test_absent_becomes_the_series(self) -> None:
        """absent(X) becomes X."""
        assert watched('absent(up{job="toolgate"})') == '(up{job="toolgate"})'

    def test_bool_is_not_doubled(self) -> None:
        """An expression already using bool is unchanged."""
        assert watched("x > bool 1") == "x > bool 1"
