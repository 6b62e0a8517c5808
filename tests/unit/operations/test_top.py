"""``toolgate top``: parsing the exposition text, rates between scrapes, quantiles, the screen."""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from toolgate import cli
from toolgate._errors import ConfigError
from toolgate.operations._top import (
    CLEAR,
    default_url,
    delta,
    histogram,
    parse,
    quantile,
    rate,
    rejections_by_code,
    render,
    run,
    scrape,
)

FIRST = """\
# HELP toolgate_results_total Results decided.
# TYPE toolgate_results_total counter
toolgate_results_total{outcome="success",tool="job_status"} 100.0
toolgate_results_total{outcome="rejected",tool="job_status"} 10.0
toolgate_results_total{outcome="success",tool="review_status"} 0.0
toolgate_results_created{outcome="success",tool="job_status"} 1.7e9
# HELP toolgate_rejections_total Rejected results.
# TYPE toolgate_rejections_total counter
toolgate_rejections_total{code="BAD_SIGNATURE",stage="semantic",tool="job_status"} 6.0
toolgate_rejections_total{code="SCHEMA_VIOLATION",stage="schema",tool="job_status"} 4.0
# HELP toolgate_evaluation_seconds Gate time.
# TYPE toolgate_evaluation_seconds histogram
toolgate_evaluation_seconds_bucket{le="1e-06",stage="project"} 0.0
toolgate_evaluation_seconds_bucket{le="2e-06",stage="project"} 50.0
toolgate_evaluation_seconds_bucket{le="4e-06",stage="project"} 100.0
toolgate_evaluation_seconds_bucket{le="+Inf",stage="project"} 100.0
toolgate_evaluation_seconds_count{stage="project"} 100.0
toolgate_evaluation_seconds_sum{stage="project"} 0.0002
# HELP toolgate_consumer_lag Lag.
# TYPE toolgate_consumer_lag gauge
toolgate_consumer_lag{partition="0"} 5.0
toolgate_consumer_lag{partition="1"} 7.0
# HELP toolgate_transactions_total Transactions.
# TYPE toolgate_transactions_total counter
toolgate_transactions_total{result="committed"} 20.0
toolgate_transactions_total{result="aborted"} 1.0
# HELP toolgate_outstanding_requests Held.
# TYPE toolgate_outstanding_requests gauge
toolgate_outstanding_requests 42.0
# HELP toolgate_ready Ready.
# TYPE toolgate_ready gauge
toolgate_ready 1.0
"""

# Two seconds later: 20 more successes, 4 more BAD_SIGNATURE, the project stage's new
# observations all in the 2-4 µs bucket, 2 more commits.
SECOND = (
    FIRST.replace('tool="job_status"} 100.0', 'tool="job_status"} 120.0')
    .replace('outcome="rejected",tool="job_status"} 10.0', 'outcome="rejected",tool="job_status"} 14.0')
    .replace('stage="semantic",tool="job_status"} 6.0', 'stage="semantic",tool="job_status"} 10.0')
    .replace('le="4e-06",stage="project"} 100.0', 'le="4e-06",stage="project"} 124.0')
    .replace('le="+Inf",stage="project"} 100.0', 'le="+Inf",stage="project"} 124.0')
    .replace('result="committed"} 20.0', 'result="committed"} 22.0')
)


def _no_sleep(seconds: float) -> None:
    pytest.fail(f"slept {seconds} s where no wait was due")


class TestParse:
    """The Prometheus text exposition becomes samples by name and labels."""

    def test_samples_by_name_and_labels(self) -> None:
        """Each sample is kept under its own name (with _total) and its labels."""
        snap = parse(FIRST, 1.0)
        assert snap.value("toolgate_results_total", tool="job_status", outcome="success") == 100.0
        assert snap.value("toolgate_consumer_lag", partition="1") == 7.0
        assert snap.value("toolgate_ready") == 1.0

    def test_series_lists_every_label_set(self) -> None:
        """series() returns each label set of one sample name."""
        snap = parse(FIRST, 1.0)
        partitions = sorted(labels["partition"] for labels, _ in snap.series("toolgate_consumer_lag"))
        assert partitions == ["0", "1"]

    def test_not_prometheus_text(self) -> None:
        """Text that is not the exposition format is a ValueError."""
        with pytest.raises(ValueError):  # noqa: PT011 - the parser's messages vary by input
            parse("<html><body>502 Bad Gateway</body></html>\n", 1.0)


class TestRates:
    """Rates are increases between two scrapes over the time between them."""

    def test_rate_between_two_scrapes(self) -> None:
        """The rate is the increase divided by the time between the scrapes."""
        first, second = parse(FIRST, 10.0), parse(SECOND, 12.0)
        labels = {"tool": "job_status", "outcome": "success"}
        assert rate(second, first, "toolgate_results_total", labels) == 10.0

    def test_no_rate_without_a_previous_scrape(self) -> None:
        """The first screen has totals only: rate is None."""
        assert (
            rate(
                parse(FIRST, 10.0),
                None,
                "toolgate_results_total",
                {"tool": "job_status", "outcome": "success"},
            )
            is None
        )

    def test_counter_reset_counts_the_new_value(self) -> None:
        """A counter that went down restarted: its whole current value is the increase."""
        assert delta(3.0, 100.0) == 3.0
        assert delta(105.0, 100.0) == 5.0

    def test_series_new_since_the_last_scrape(self) -> None:
        """A series absent from the previous scrape counts from zero."""
        assert delta(4.0, None) == 4.0

    def test_rejections_ranked_by_rate(self) -> None:
        """With two scrapes, codes are ranked by rate, not by total."""
        first, second = parse(FIRST, 10.0), parse(SECOND, 12.0)
        rows = rejections_by_code(second, first)
        assert [(r.code, r.rate) for r in rows] == [("BAD_SIGNATURE", 2.0), ("SCHEMA_VIOLATION", 0.0)]

    def test_rejections_ranked_by_total_first(self) -> None:
        """Without a previous scrape, codes are ranked by total, with their stages and tools."""
        rows = rejections_by_code(parse(SECOND.replace("} 10.0\n", "} 1.0\n"), 12.0), None)
        assert [(r.code, r.total, r.stages, r.tools) for r in rows] == [
            ("SCHEMA_VIOLATION", 4.0, {"schema"}, {"job_status"}),
            ("BAD_SIGNATURE", 1.0, {"semantic"}, {"job_status"}),
        ]


class TestQuantile:
    """Quantiles are interpolated in the histogram buckets like histogram_quantile."""

    def test_interpolates_inside_the_bucket(self) -> None:
        """The rank's bucket is interpolated linearly, as histogram_quantile does."""
        buckets = [(1.0, 0.0), (2.0, 10.0), (math.inf, 10.0)]
        assert quantile(0.5, buckets) == 1.5

    def test_lowest_bucket_starts_at_zero(self) -> None:
        """A rank in the first bucket interpolates from 0."""
        assert quantile(0.5, [(4.0, 10.0), (math.inf, 10.0)]) == 2.0

    def test_rank_in_the_inf_bucket(self) -> None:
        """A rank above every finite bucket gives the highest finite bound."""
        assert quantile(0.99, [(1.0, 5.0), (2.0, 5.0), (math.inf, 10.0)]) == 2.0

    def test_empty_histogram(self) -> None:
        """No observation, no quantile."""
        assert quantile(0.5, [(1.0, 0.0), (math.inf, 0.0)]) is None

    def test_histogram_over_the_last_interval(self) -> None:
        """With a previous scrape the buckets are the interval's increases."""
        first, second = parse(FIRST, 10.0), parse(SECOND, 12.0)
        buckets = histogram(second, first, "toolgate_evaluation_seconds", stage="project")
        assert buckets == [(1e-06, 0.0), (2e-06, 0.0), (4e-06, 24.0), (math.inf, 24.0)]
        assert quantile(0.5, buckets) == pytest.approx(3e-06)

    def test_histogram_since_start(self) -> None:
        """Without a previous scrape the buckets are cumulative since start."""
        buckets = histogram(parse(FIRST, 10.0), None, "toolgate_evaluation_seconds")
        assert quantile(0.5, buckets) == pytest.approx(2e-06)


class TestRender:
    """The screen shows totals first, then rates, lag, codes and readiness."""

    def test_first_screen_shows_totals(self) -> None:
        """The first screen says it shows totals and prints no rates."""
        text = render(parse(FIRST, 10.0), None, url="http://w:9464/metrics")
        assert "totals since the worker started" in text
        assert "job_status      success            100           -" in text

    def test_second_screen_shows_rates(self) -> None:
        """With a previous scrape the screen shows per-second rates over the interval."""
        text = render(parse(SECOND, 12.0), parse(FIRST, 10.0), url="http://w:9464/metrics")
        assert "rates over the last 2.0 s" in text
        assert "job_status      success            120       10.00" in text
        assert "committed                 22        1.00" in text

    def test_idle_preinitialised_series_are_hidden(self) -> None:
        """A tool whose results are all zero is not listed."""
        text = render(parse(FIRST, 10.0), None, url="u")
        assert "review_status" not in text

    def test_lag_per_partition_and_total(self) -> None:
        """Consumer lag is listed per partition with the total."""
        text = render(parse(FIRST, 10.0), None, url="u")
        assert "partition 0                5" in text
        assert "total                     12" in text

    def test_top_limits_the_codes(self) -> None:
        """--top N shows N codes and says how many more there are."""
        text = render(parse(FIRST, 10.0), None, url="u", top=1)
        assert "BAD_SIGNATURE" in text
        assert "SCHEMA_VIOLATION" not in text
        assert "1 more codes" in text

    def test_not_ready_is_shouted(self) -> None:
        """A worker reporting toolgate_ready 0 shows NOT READY."""
        text = render(parse(FIRST.replace("toolgate_ready 1.0", "toolgate_ready 0.0"), 1.0), None, url="u")
        assert "NOT READY" in text.splitlines()[0]

    def test_control_characters_in_labels_are_neutralised(self) -> None:
        """Label values cannot send escape sequences to the terminal."""
        hostile = FIRST.replace('tool="job_status"} 100.0', 'tool="x\\u001b[2Jy"} 100.0').replace(
            "\\u001b", "\x1b"
        )
        text = render(parse(hostile, 1.0), None, url="u")
        assert "\x1b" not in text
        assert "x?[2Jy" in text


SHADOW_AND_REPLAYS = (
    FIRST
    + """\
# HELP toolgate_shadow_disagreements_total Shadow disagreements.
# TYPE toolgate_shadow_disagreements_total counter
toolgate_shadow_disagreements_total{tool="deploy_status",version="2"} 3.0
toolgate_shadow_disagreements_total{tool="job_status",version="1"} 0.0
# HELP toolgate_replayed_results_total Replayed.
# TYPE toolgate_replayed_results_total counter
toolgate_replayed_results_total{outcome="success",tool="deploy_status"} 4.0
toolgate_replayed_results_total{outcome="rejected",tool="deploy_status"} 1.0
toolgate_replayed_results_total{outcome="rejected",tool="job_status"} 1.0
"""
)


class TestMisrouted:
    """Results a producer put in the wrong partition are named on the screen, with the cause."""

    MISROUTED = (
        FIRST
        + "# HELP toolgate_misrouted_results_total Misrouted.\n"
        + "# TYPE toolgate_misrouted_results_total counter\n"
        + "toolgate_misrouted_results_total 3.0\n"
    )

    def test_misrouted_results_name_the_partitioner(self) -> None:
        """A non-zero count says misrouted, how many and the setting that fixes it, in 80 columns."""
        text = render(parse(self.MISROUTED, 1.0), None, url="u")
        assert "MISROUTED results" in text
        assert "partitioner=murmur2_random" in text
        assert all(len(line) <= 80 for line in text.splitlines())

    def test_nothing_said_without_misrouted_results(self) -> None:
        """No count, no line."""
        assert "MISROUTED" not in render(parse(FIRST, 1.0), None, url="u")


class TestShadowAndReplays:
    """The screen shows shadow disagreements and replays when there are any."""

    def test_shadow_versions_that_disagreed(self) -> None:
        """Shadow versions with disagreements are listed; versions at zero are not."""
        text = render(parse(SHADOW_AND_REPLAYS, 1.0), None, url="u")
        assert "deploy_status v2                     3           -" in text
        assert "job_status v1" not in text

    def test_replays_by_outcome(self) -> None:
        """Replayed results are summed by outcome over tools."""
        text = render(parse(SHADOW_AND_REPLAYS, 1.0), None, url="u")
        assert "REPLAYED FROM QUARANTINE  rejected 2, success 4" in text

    def test_none_when_nothing_happened(self) -> None:
        """Without disagreements or replays both sections say none."""
        text = render(parse(FIRST, 1.0), None, url="u")
        assert "REPLAYED FROM QUARANTINE  none" in text
        assert text.split("SHADOW DISAGREEMENTS")[1].splitlines()[1] == "none"


class _Metrics(BaseHTTPRequestHandler):
    bodies: ClassVar[list[str]] = []
    served: ClassVar[int] = 0

    def do_GET(self) -> None:
        cls = type(self)
        body = cls.bodies[min(cls.served, len(cls.bodies) - 1)].encode()
        cls.served += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    """A /metrics endpoint serving FIRST, then SECOND."""
    _Metrics.bodies, _Metrics.served = [FIRST, SECOND], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _closed_port_url() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    port = server.server_address[1]
    server.server_close()
    return f"http://127.0.0.1:{port}/metrics"


class TestRun:
    """One snapshot or a live view redrawn in place, scraping over HTTP."""

    def test_once_with_interval_scrapes_twice(self, endpoint: str) -> None:
        """--once takes two scrapes --interval apart and prints one screen with rates."""
        out, waits = io.StringIO(), list[float]()
        assert run(endpoint, interval=2.0, once=True, top=10, out=out, sleep=waits.append) == 0
        assert waits == [2.0]
        assert _Metrics.served == 2
        assert "job_status      success            120" in out.getvalue()
        assert CLEAR not in out.getvalue()

    def test_once_with_zero_interval_scrapes_once(self, endpoint: str) -> None:
        """--once --interval 0 takes one scrape and prints totals."""
        out = io.StringIO()
        assert run(endpoint, interval=0, once=True, top=10, out=out, sleep=_no_sleep) == 0
        assert _Metrics.served == 1
        assert "totals since the worker started" in out.getvalue()

    def test_live_view_redraws_in_place(self, endpoint: str) -> None:
        """The live view clears and redraws each screen, with rates from the second one on."""
        out, calls = io.StringIO(), []

        def sleep(seconds: float) -> None:
            calls.append(seconds)
            if len(calls) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run(endpoint, interval=2.0, once=False, top=10, out=out, sleep=sleep)
        screens = out.getvalue().split(CLEAR)[1:]
        assert len(screens) == 2
        assert "totals since the worker started" in screens[0]
        assert "rates over the last" in screens[1]

    def test_live_view_survives_a_failed_scrape(self, endpoint: str) -> None:
        """A later scrape failure is shown on screen and retried, not fatal."""
        out, calls = io.StringIO(), []
        _Metrics.bodies = [FIRST, "not metrics {{{\n"]

        def sleep(seconds: float) -> None:
            calls.append(seconds)
            if len(calls) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run(endpoint, interval=1.0, once=False, top=10, out=out, sleep=sleep)
        assert "last scrape failed" in out.getvalue().split(CLEAR)[-1]

    def test_unreachable_endpoint_names_the_url(self) -> None:
        """An endpoint nobody listens on is a ConfigError naming the URL."""
        url = _closed_port_url()
        with pytest.raises(ConfigError, match=f"cannot reach {url}"):
            scrape(url)

    def test_default_url(self) -> None:
        """The default URL is the configured metrics port, on the loopback for a wildcard host."""
        assert default_url("127.0.0.1", 9464) == "http://127.0.0.1:9464/metrics"
        assert default_url("0.0.0.0", 9999) == "http://127.0.0.1:9999/metrics"


class TestCommand:
    """toolgate top exits 0 with a snapshot and 2 on an unreachable endpoint."""

    def test_unreachable_exits_2(self, capsys: pytest.CaptureFixture[str]) -> None:
        """toolgate top --once on a dead endpoint exits 2 naming the URL."""
        url = _closed_port_url()
        assert cli.main(["top", "--once", "--url", url]) == 2
        assert f"cannot reach {url}" in capsys.readouterr().err

    def test_zero_interval_needs_once(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--interval 0 without --once is a usage error."""
        assert cli.main(["top", "--interval", "0", "--url", "http://127.0.0.1:1/metrics"]) == 2
        assert "--interval" in capsys.readouterr().err

    def test_once_prints_a_snapshot(self, endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
        """toolgate top --once --interval 0 prints the snapshot and exits 0."""
        assert cli.main(["top", "--once", "--interval", "0", "--url", endpoint]) == 0
        assert "REJECTIONS BY CODE" in capsys.readouterr().out


def _wide_metrics() -> str:
    """Many tools with long names, long codes in several stages, many contract versions."""
    lines = [
        "# HELP toolgate_results_total Results.",
        "# TYPE toolgate_results_total counter",
    ]
    rejections = ["# HELP toolgate_rejections_total Rej.", "# TYPE toolgate_rejections_total counter"]
    info = ["# HELP toolgate_contract_info Info.", "# TYPE toolgate_contract_info gauge"]
    for i in range(12):
        tool = f"a_rather_long_connector_name_for_tool_number_{i:02d}"
        lines.append(f'toolgate_results_total{{outcome="success",tool="{tool}"}} {1_000_000 + i}.0')
        lines.append(f'toolgate_results_total{{outcome="rejected",tool="{tool}"}} {12_345_678 * (i + 1)}.0')
        for j, (stage, code) in enumerate(
            [
                ("semantic", "BINDING_MISMATCH"),
                ("schema", "SCHEMA_VIOLATION"),
                ("correlate", "UNKNOWN_REQUEST"),
            ]
            + [("contract", f"SOME_VERY_LONG_FUTURE_REJECTION_CODE_{k}") for k in range(3)]
        ):
            labels = f'code="{code}",stage="{stage}",tool="{tool}"'
            rejections.append(f"toolgate_rejections_total{{{labels}}} {98_765_432 + j}.0")
            rejections.append(f"toolgate_rejections_created{{{labels}}} {1.79e9 + j}")
        for version in ("1", "1.1", "2", "2.13"):
            info.append(f'toolgate_contract_info{{status="active",tool="{tool}",version="{version}"}} 1.0')
    return "\n".join([*lines, *rejections, *info, "toolgate_ready 1.0", ""])


class TestEightyColumns:
    """Every screen fits an 80-column terminal, however wide its tables get."""

    @pytest.mark.parametrize("previous", [False, True])
    def test_wide_tables_fit_80_columns(self, previous: bool) -> None:
        """Long tool names, long codes, big numbers, many contracts and a long URL: no line over 80."""
        text = _wide_metrics()
        url = "http://a-very-long-host-name.of.a.worker.in.some.cluster.example:9464/metrics" * 2
        first = parse(text, 1.0) if previous else None
        screen = render(parse(text, 3.0), first, url=url, top=50)
        too_wide = [line for line in screen.splitlines() if len(line) > 80]
        assert too_wide == []
        assert "SOME_VERY_LONG_FUT…ON_CODE_2" in screen  # cut in the middle to its column
        # long tool names are cut in the middle: the end still tells them apart
        assert all(f"number_{i:02d} " in screen for i in range(12))

    def test_mcp_tool_names_stay_readable(self) -> None:
        """MCP names (server.tool) are whole in every table while they fit 80 columns; a longer one
        loses the end of its server, never its tool's name."""
        names = ["orders.lookup_order", "orders.lookup_order_history", "deployer.deploy_status_of_a_service"]
        longest = "a_server_with_a_name_of_32_chars." + "lookup_order_history_for_customer"
        text = "\n".join(
            [
                "# TYPE toolgate_results_total counter",
                *(f'toolgate_results_total{{outcome="success",tool="{n}"}} 5.0' for n in [*names, longest]),
                "# TYPE toolgate_rejections_total counter",
                *(
                    f'toolgate_rejections_total{{code="SCHEMA_VIOLATION",stage="schema",tool="{n}"}} 2.0'
                    for n in [*names, longest]
                ),
                "# TYPE toolgate_shadow_disagreements_total counter",
                *(
                    f'toolgate_shadow_disagreements_total{{tool="{n}",version="2"}} 1.0'
                    for n in [*names, longest]
                ),
                "",
            ]
        )
        screen = render(parse(text, 3.0), None, url="http://127.0.0.1:9464/metrics")
        assert [line for line in screen.splitlines() if len(line) > 80] == []
        for section in ("RESULTS", "REJECTION RATIO BY TOOL", "SHADOW DISAGREEMENTS"):
            body = screen.split(section, 1)[1].split("\n\n", 1)[0]
            for name in names:
                assert f"{name} " in body, (section, name)
            (row,) = [line for line in body.splitlines() if "….lookup_order_history_for_customer" in line]
            assert row.startswith("a_se"), section

    def test_names_cut_keeps_the_tool(self) -> None:
        """A qualified name keeps its tool whole as long as a bit of its server fits beside it."""
        from toolgate.operations._top import _name

        assert _name("orders.lookup_order", 19) == "orders.lookup_order"
        assert _name("orders.lookup_order", 16) == "or….lookup_order"
        assert _name("orders.lookup_order", 15) == "o….lookup_order"
        assert _name("orders.lookup_order", 14) == "orders.lo…rder"  # the tool no longer fits: the middle
        assert _name("a_rather_long_connector_name", 15) == "a_rather_l…name"

    def test_the_live_view_fits_80_columns(self, endpoint: str) -> None:
        """The refreshed screens (with their footer) fit too."""
        _Metrics.bodies = [_wide_metrics()]
        out, calls = io.StringIO(), []

        def sleep(seconds: float) -> None:
            calls.append(seconds)
            if len(calls) == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            run(endpoint, interval=2.0, once=False, top=10, out=out, sleep=sleep)
        lines = out.getvalue().replace(CLEAR, "\n").splitlines()
        assert max(len(line) for line in lines) <= 80


PER_TOOL = (
    FIRST
    + """\
toolgate_results_total{outcome="success",tool="deploy_status"} 30.0
toolgate_results_total{outcome="rejected",tool="deploy_status"} 70.0
toolgate_rejections_total{code="SCHEMA_VIOLATION",stage="schema",tool="deploy_status"} 50.0
toolgate_rejections_total{code="BINDING_MISMATCH",stage="semantic",tool="deploy_status"} 15.0
toolgate_rejections_total{code="STALE_RESULT",stage="semantic",tool="deploy_status"} 4.0
toolgate_rejections_total{code="BAD_SIGNATURE",stage="semantic",tool="deploy_status"} 1.0
# HELP toolgate_rejections_created Rejected results.
# TYPE toolgate_rejections_created gauge
toolgate_rejections_created{code="SCHEMA_VIOLATION",stage="schema",tool="deploy_status"} 1796080000.0
toolgate_rejections_created{code="BINDING_MISMATCH",stage="semantic",tool="deploy_status"} 1796083600.0
"""
)


class TestPerTool:
    """Per tool: the rejected share and its top codes, each with when it was first seen."""

    def test_ratio_and_top_codes_with_first_seen(self) -> None:
        """Tools are ranked by ratio; each shows its top three codes and when each first came."""
        screen = render(parse(PER_TOOL, 1.0), None, url="u")
        section = screen.split("REJECTION RATIO BY TOOL (totals)")[1].split("REJECTIONS BY CODE")[0]
        rows = [line for line in section.splitlines() if line.strip()]
        assert rows[2].split() == ["deploy_status", "70", "100", "70.0%"]
        assert rows[3].split() == ["SCHEMA_VIOLATION", "schema", "50", "since", "2026-11-30", "23:06:40"]
        assert rows[4].split() == ["BINDING_MISMATCH", "semantic", "15", "since", "2026-12-01", "00:06:40"]
        assert rows[5].split() == ["STALE_RESULT", "semantic", "4"]  # no _created sample
        assert rows[6].strip() == "... 1 more codes"
        assert rows[7].split() == ["job_status", "10", "110", "9.1%"]

    def test_ratio_over_the_last_interval(self) -> None:
        """With a previous scrape the ratio is the interval's; a tool idle in it shows '-'."""
        screen = render(parse(SECOND + PER_TOOL[len(FIRST) :], 12.0), parse(PER_TOOL, 10.0), url="u")
        section = screen.split("REJECTION RATIO BY TOOL (last interval)")[1]
        lines = section.splitlines()
        job = next(line for line in lines if line.startswith("job_status"))
        deploy = next(line for line in lines if line.startswith("deploy_status"))
        assert job.split() == ["job_status", "4", "24", "16.7%"]
        assert deploy.split() == ["deploy_status", "0", "0", "-"]
