"""A batch's histogram observations, counted per bucket at once: the same series as one by one."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from toolgate.service._metrics import observe_many


def _samples(histogram: Histogram) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for m in histogram.collect()
        for s in m.samples
        if "_created" not in s.name
    ]


def _pair() -> tuple[Histogram, Histogram]:
    buckets = (0.001, 0.01, 0.1, 1.0)
    one = Histogram("h", "h", ["stage"], buckets=buckets, registry=CollectorRegistry())
    many = Histogram("h", "h", ["stage"], buckets=buckets, registry=CollectorRegistry())
    return one, many


class TestObserveMany:
    def test_the_series_equal_observing_each_value(self) -> None:
        """Values below, on and between the bounds and above the last one: bucket for bucket,
        count and sum as observe() one value at a time gives them."""
        values = [0.0, 0.001, 0.0005, 0.01, 0.02, 0.1, 0.5, 1.0, 3.0, 0.02, 0.001]
        one, many = _pair()
        for value in values:
            one.labels("parse").observe(value)
        observe = observe_many(many.labels("parse"))
        observe(values[:4])
        observe(values[4:])
        assert _samples(one) == _samples(many)
        counts = {s[0]: s[2] for s in _samples(many) if s[0] == "h_count"}
        assert counts == {"h_count": len(values)}

    def test_without_the_bucket_layout_each_value_is_observed(self) -> None:
        """A child whose internals are not the expected ones is observed value by value."""
        seen: list[float] = []

        class Other:
            def observe(self, value: float) -> None:
                seen.append(value)

        child: Any = Other()
        observe_many(child)([0.5, 2.0])
        assert seen == [0.5, 2.0]
