"""The benches' shared measurement (ops/bench/measure.py) and the worker bench's targets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ops.bench.backlog import BASELINE, FLOOR
from ops.bench.measure import both, interleaved, lanes, percentiles, ratio
from ops.bench.summary import round_ratios, targets


class TestPercentiles:
    """Nearest rank over the sorted values, with the maximum; nothing for no values."""

    def test_nearest_rank(self) -> None:
        values = [float(v) for v in range(100, 0, -1)]
        assert percentiles(values) == {"p50": 51.0, "p90": 91.0, "p99": 100.0, "max": 100.0}

    def test_no_values_no_figures(self) -> None:
        assert percentiles([]) == {}

    def test_a_ratio_to_an_unknown_or_zero_floor_is_unknown(self) -> None:
        assert ratio(30.0, 10.0) == 3.0
        assert ratio(30.0, None) is None
        assert ratio(None, 10.0) is None
        assert ratio(30.0, 0.0) is None


class TestLanes:
    """The closed loop: ``concurrency`` lanes, each starting its next call when the last ended."""

    async def test_lanes_bound_the_calls_in_flight(self) -> None:
        in_flight, most = 0, 0

        async def call() -> None:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await asyncio.sleep(0)  # a yield to the other lanes, not a wait for time
            in_flight -= 1

        one = await lanes(call, 12, 1)
        assert (len(one), most) == (12, 1)
        most = 0
        three = await lanes(call, 12, 3)
        assert (len(three), most) == (12, 3)
        assert all(ms >= 0 for ms in three)

    async def test_a_call_that_gives_up_ends_its_lane_uncounted(self) -> None:
        answers = iter([True, True, False, True])

        async def call() -> bool:
            return next(answers)

        assert len(await lanes(call, 4, 1)) == 2

    async def test_interleaved_halves_alternate_the_paths(self) -> None:
        order: list[str] = []

        async def first() -> None:
            order.append("a")

        async def second() -> None:
            order.append("b")

        a, b = await interleaved(first, second, 4, 1)
        assert order == ["a", "a", "b", "b", "a", "a", "b", "b"]
        assert (len(a), len(b)) == (4, 4)


def _latency(one: tuple[float, float], total: tuple[float, float], others: float = 0.0) -> dict[str, Any]:
    return {
        "one_at_a_time": {"p50": one[0], "p90": one[1], "p99": one[1], "max": one[1]},
        "total": {"p50": total[0], "p90": total[1], "p99": total[1], "max": total[1]},
        "rate": 1000.0,
        "achieved_rate": 1000.0,
        "other_cpus": others,
    }


def _row(variant: str, rate: float, cpu: float) -> dict[str, Any]:
    return {
        "variant": variant,
        "results_per_s": rate,
        "min": rate,
        "max": rate,
        "cpu_us_per_result": cpu,
        "other_cpus": 0.0,
        "results_per_txn": 300.0,
        "broker_us_per_result": None,
        "intake_partitions": 3,
    }


def _verdicts(result: dict[str, Any]) -> dict[str, bool | None]:
    return {row["target"]: row["met"] for row in targets(result)}


class TestTargets:
    """The latency targets are judged against the floor of the same run, the rate against
    the baseline checkout's; a figure the run did not measure is not run, never met."""

    def test_one_at_a_time_against_the_floor(self) -> None:
        floor = _latency((10.0, 20.0), (10.0, 20.0))
        met = _verdicts(
            {"rows": [], "ratios": {}, "latency": _latency((15.0, 40.0), (10, 20)), "latency_floor": floor}
        )
        assert met["one result at a time: p50 / the floor's"] is True
        assert met["one result at a time: p99 / the floor's"] is True
        over = _verdicts(
            {"rows": [], "ratios": {}, "latency": _latency((15.1, 41.0), (10, 20)), "latency_floor": floor}
        )
        assert over["one result at a time: p50 / the floor's"] is False
        assert over["one result at a time: p99 / the floor's"] is False

    def test_half_rate_needs_both_the_absolute_and_the_floor_bound(self) -> None:
        result = {
            "rows": [],
            "ratios": {},
            "latency": _latency((1, 1), (20.0, 45.0)),
            "latency_floor": _latency((1, 1), (5.0, 10.0)),
        }
        met = _verdicts(result)
        assert met["half the sustained rate: p99, ms"] is True
        assert met["half the sustained rate: p99 / the floor's p99 at that rate"] is False

    def test_without_a_floor_nothing_floor_relative_is_met(self) -> None:
        met = _verdicts(
            {"rows": [], "ratios": {}, "latency": _latency((1, 1), (1, 1)), "latency_floor": None}
        )
        assert met["one result at a time: p50 / the floor's"] is None
        assert met["half the sustained rate: p99 / the floor's p99 at that rate"] is None
        assert met["half the sustained rate: p99, ms"] is True

    def test_the_rate_and_cpu_against_main_and_the_peer(self) -> None:
        rows = [_row("peer", 5000.0, 230.0), _row("worker", 900.0, 90.0), _row(BASELINE, 1000.0, 95.0)]
        ratios = {
            "worker/peer, per CPU-second": 230.0 / 90.0,
            "worker/baseline, throughput": 0.9,
            "worker/baseline, CPU per result": 90.0 / 95.0,
        }
        met = _verdicts({"rows": rows, "ratios": ratios, "latency": None, "latency_floor": None})
        assert met["worker/peer, results per CPU-second"] is True
        assert met["sustained rate / the baseline checkout's (side by side)"] is False
        assert met["worker CPU per result / the baseline checkout's"] is True

    def test_the_peer_target_is_two_and_a_half(self) -> None:
        """2.4x the peer per CPU-second is not met, 2.5x is."""
        rows = [_row("peer", 5000.0, 240.0), _row("worker", 900.0, 100.0)]
        for over, want in ((2.4, False), (2.5, True)):
            met = _verdicts({"rows": rows, "ratios": {"worker/peer, per CPU-second": over}, "latency": None})
            assert met["worker/peer, results per CPU-second"] is want

    def test_decide_in_the_worker_against_decide_batch_alone(self) -> None:
        """The worker's decide phase per result is judged against decide_batch alone on the same
        workload: within 1.5x met, above not, and not run without the figure alone."""
        worker = {**_row("worker", 900.0, 90.0), "phases_us_per_result": {"decide": 60.0}}
        result: dict[str, Any] = {"rows": [worker], "ratios": {}, "latency": None}
        name = "worker's decide per result / decide_batch alone, same workload"
        assert _verdicts({**result, "decide_batch_us": 40.0})[name] is True
        assert _verdicts({**result, "decide_batch_us": 39.0})[name] is False
        assert _verdicts(result)[name] is None

    def test_one_at_a_time_against_the_baseline_round_by_round(self) -> None:
        """One result at a time, the worker is judged against the baseline of the same round: the
        median of the rounds' ratios, so a slow round slows both sides alike."""
        runs = []
        for repeat, slow, mine in ((1, 1.0, 9.0), (2, 3.0, 33.0), (3, 1.0, 9.5)):
            runs.append({"variant": BASELINE, "repeat": repeat, **_latency((10 * slow, 20 * slow), (1, 1))})
            runs.append({"variant": "worker", "repeat": repeat, **_latency((mine, 18 * slow), (1, 1))})
        result = {
            "rows": [],
            "ratios": {},
            "latency": runs[3],  # round 2's: alone it would say 1.1, worse than the baseline
            "latency_baseline": runs[0],
            "latency_runs": runs,
        }
        by_name = {row["target"]: row for row in targets(result)}
        p50 = by_name["one result at a time: p50 / the baseline checkout's"]
        assert p50["measured"] == 0.95
        assert p50["met"] is True
        assert by_name["one result at a time: p99 / the baseline checkout's"]["measured"] == 0.9
        assert (
            _verdicts({"rows": [], "ratios": {}, "latency": runs[1]})[
                "one result at a time: p50 / the baseline checkout's"
            ]
            is None
        )

    def test_both_parts_or_not_run(self) -> None:
        assert both(True, True) is True
        assert both(True, False) is False
        assert both(True, None) is None

    def test_several_rounds_take_the_median_of_each_rounds_ratio_to_its_own_floor(self) -> None:
        runs = []
        # Round 2's machine was twice as slow for both: its ratio is the same as round 1's.
        for repeat, slow, worker_p99 in ((1, 1.0, 25.0), (2, 2.0, 50.0), (3, 1.0, 40.0)):
            runs.append({"variant": FLOOR, "repeat": repeat, **_latency((10 * slow, 10 * slow), (1, 1))})
            runs.append({"variant": "worker", "repeat": repeat, **_latency((12 * slow, worker_p99), (1, 1))})
        assert round_ratios(runs)["one p99"] == [2.5, 2.5, 4.0]
        result = {
            "rows": [],
            "ratios": {},
            "latency": runs[5],  # the run the report shows: any one round
            "latency_floor": runs[4],
            "latency_runs": runs,
        }
        by_name = {row["target"]: row for row in targets(result)}
        assert by_name["one result at a time: p99 / the floor's"]["measured"] == 2.5
        assert by_name["one result at a time: p99 / the floor's"]["met"] is False
        assert by_name["one result at a time: p50 / the floor's"]["measured"] == 1.2


class TestProxyBreakdown:
    """Each proxied call's steps: the request record's acknowledgement beside the upstream call,
    the wait for it after the upstream answered, and the call's time outside its steps."""

    def test_overlap_wait_and_rest(self) -> None:
        from ops.bench.mcp_proxy_bench import Breakdown, CallSteps

        call = CallSteps(
            {
                "request record ack": (0.000, 0.012),  # acknowledged 2 ms after the upstream answered
                "upstream call": (0.000, 0.010),
                "result ack": (0.012, 0.015),
                "answer read": (0.015, 0.030),
                "proxied call": (0.000, 0.034),  # 4 ms outside the steps
            }
        )
        breakdown = Breakdown.__new__(Breakdown)
        breakdown.calls = [call]
        steps = breakdown.take()
        assert steps["ack after upstream"]["p50"] == pytest.approx(2.0)
        assert steps["rest"]["p50"] == pytest.approx(4.0)
        assert steps["answer read"]["p50"] == pytest.approx(15.0)
        assert breakdown.calls == []


class TestRawRelay:
    """The raw relay passes JSON-RPC lines on unchanged, both ways, and the bench calls through it
    as one more path beside the bare MCP relay."""

    def test_lines_pass_unchanged(self) -> None:
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        echo = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"
        lines = b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}\n{"x": "\\u00e9 \xc3\xa9",  "y": [1, 2]}\n'
        done = subprocess.run(
            [sys.executable, "-m", "ops.bench.raw_relay", "--", sys.executable, "-c", echo],
            input=lines,
            stdout=subprocess.PIPE,
            cwd=root,
            timeout=30,
            check=True,
        )
        assert done.stdout == lines

    def test_the_raw_path_runs_the_upstream_behind_the_relay(self) -> None:
        from ops.bench.mcp_proxy_bench import ROOT, raw_relay_server, upstream_server

        env = {"PATH": "/bin"}
        upstream = upstream_server(env)
        raw = raw_relay_server(env)
        assert raw.args == ["-m", "ops.bench.raw_relay", "--", upstream.command, *upstream.args]
        assert (raw.env, raw.cwd) == (env, str(ROOT))

    def test_the_report_shows_the_raw_path(self, capsys: pytest.CaptureFixture[str]) -> None:
        from ops.bench.mcp_proxy_bench import print_report

        def p(ms: float) -> dict[str, float]:
            return {"p50": ms, "p90": ms, "p99": 2 * ms, "max": 2 * ms}

        paths = {"direct": 1.0, "raw": 1.5, "relay": 3.0, "proxy": 5.0, "worker": 20.0}
        figures = {
            1: {
                **{name: p(ms) for name, ms in paths.items()},
                "cpu": {name: 2 * ms for name, ms in paths.items()},
                "steps": {},
                "others": 0.1,
            }
        }
        print_report(figures, "shape", 20, 200, (1000.0, 2000.0), {"produce": p(0.5), "transaction": p(2.0)})
        out = capsys.readouterr().out
        head = next(line for line in out.splitlines() if line.lstrip().startswith("concurrent"))
        assert head.split()[1:7] == ["direct", "p50", "direct", "p99", "raw", "p50"]
        row = next(line for line in out.splitlines() if line.split()[:1] == ["1"])
        assert row.split()[3:5] == ["1.5ms", "3.0ms"]  # raw p50, p99
        assert "raw 3.00, relay 6.00" in out  # CPU per call
        assert "the raw relay (no SDK): added p50 0.5, p99 1.0 ms" in out
