"""The dashboard and the rules under a real Prometheus scraping a real worker.

A Prometheus server (Debian's ``prometheus`` binary, ``make tools``) scrapes a live
in-process worker every second and evaluates the rules file every second, while sample
traffic keeps flowing. Then every panel query (Grafana's variables made concrete:
``$tool`` = every tool, ``$__rate_interval`` = 1m, ``$__range`` = 5m) and every rule
expression goes through Prometheus's HTTP API, and each must return data. An alert's
expression is asked in its watched form (comparisons as ``bool``, ``absent(X)`` as ``X``):
a healthy worker does not fire alerts, but the series each alert watches must exist.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.live import LiveWorker
from tests.ops_catalog import RULES_FILE, Query, concrete, dashboard_queries, rule_queries, watched

START_SECONDS = 60
DATA_SECONDS = 120


def _prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        reason = "the prometheus binary is not on PATH (make tools installs Debian's prometheus package)"
        if os.environ.get("TOOLGATE_REQUIRE_KAFKA") == "1":
            pytest.fail(f"TOOLGATE_REQUIRE_KAFKA=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """A Prometheus server on a free loopback port with its own storage; its HTTP API."""

    def __init__(self, binary: str, workdir: Path, target: str) -> None:
        self.port = _free_port()
        self.log = workdir / "prometheus.log"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES_FILE)],
            "scrape_configs": [
                {"job_name": "toolgate", "scrape_interval": "1s", "static_configs": [{"targets": [target]}]}
            ],
        }
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.loads(response.read())

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (HTTP API /api/v1/query)."""
        body = self.get("/api/v1/query", query=expr)
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def log_tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def has_data(result: list[dict[str, Any]]) -> bool:
    """At least one series with a finite value."""
    return any(math.isfinite(float(series["value"][1])) for series in result)


def panel_queries() -> list[Query]:
    return [Query(q.source, concrete(q.expr), q.instant) for q in dashboard_queries()]


def watched_rule_queries() -> list[Query]:
    return [Query(q.source, watched(q.expr)) for q in rule_queries()]


@pytest.fixture(scope="module")
def prometheus(live: LiveWorker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """A Prometheus that has scraped the live worker and evaluated the rules long enough for
    every query to have data (bounded wait; the tests report what is still missing)."""
    binary = _prometheus_binary()
    assert live.worker is not None
    server = Prometheus(
        binary, tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{live.worker.metrics_port}"
    )
    try:
        live.wait_until(
            lambda: server.process.poll() is not None or server.ready(),
            START_SECONDS,
            "seeing Prometheus ready",
        )
        assert server.process.poll() is None, server.log_tail()
        queries = [q.expr for q in [*panel_queries(), *watched_rule_queries()]]
        seed = 100

        def all_have_data() -> bool:
            nonlocal seed
            seed += 1
            live.feed(30, seed=seed)  # keep counters moving so rates and quantiles are finite
            return all(has_data(server.query(expr)) for expr in queries)

        # Polls Prometheus (bounded); a time-out is left to the tests, which name what is missing.
        live.poll(all_have_data, DATA_SECONDS)
        yield server
    finally:
        server.stop()


class TestUnderPrometheus:
    """Every panel and rule returns data from a real Prometheus."""

    def test_prometheus_scrapes_the_worker(self, prometheus: Prometheus) -> None:
        """The worker's scrape target is up."""
        result = prometheus.query('up{job="toolgate"}')
        assert [float(series["value"][1]) for series in result] == [1.0]

    def test_rules_load_and_evaluate(self, prometheus: Prometheus) -> None:
        """Prometheus loads every rule of the rules file and evaluates each without error."""
        groups = prometheus.get("/api/v1/rules")["data"]["groups"]
        rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
        assert set(rules) == {q.source for q in rule_queries()}
        failing = {name: rule.get("lastError") for name, rule in rules.items() if rule["health"] != "ok"}
        assert failing == {}

    @pytest.mark.parametrize("query", panel_queries(), ids=lambda q: q.source)
    def test_panel_query_returns_data(self, prometheus: Prometheus, query: Query) -> None:
        """The panel's query returns at least one series with a finite value."""
        result = prometheus.query(query.expr)
        assert has_data(result), f"{query.expr} -> {result}\n{prometheus.log_tail()}"

    @pytest.mark.parametrize("query", watched_rule_queries(), ids=lambda q: q.source)
    def test_rule_expression_returns_data(self, prometheus: Prometheus, query: Query) -> None:
        """The rule's expression (an alert's in its watched form) returns data."""
        result = prometheus.query(query.expr)
        assert has_data(result), f"{query.expr} -> {result}\n{prometheus.log_tail()}"

    def test_alert_expressions_are_valid_as_written(self, prometheus: Prometheus) -> None:
        """Every alert expression, unchanged, is accepted and evaluated by Prometheus."""
        for query in rule_queries():
            prometheus.query(query.expr)  # raises on an error status
