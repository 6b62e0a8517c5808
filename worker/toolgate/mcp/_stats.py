"""What ``toolgate mcp-proxy`` counts: calls by how they ended, tools withdrawn, and the
Prometheus registry that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ProxyStats:
    """Calls by how they ended, and the definitions found changed (a counter per tool)."""

    calls: int = 0
    by_code: dict[str, int] = field(default_factory=dict)
    tool_changed: dict[str, int] = field(default_factory=dict)  # <server>.<tool> -> times withdrawn

    def count(self, code: str) -> None:
        """One more call that ended with ``code`` (or ``success``/``failure``)."""
        self.by_code[code] = self.by_code.get(code, 0) + 1


def stats_registry(stats: ProxyStats, server: str) -> Any:
    """A Prometheus registry reading ``stats`` at each scrape: ``toolgate_mcp_proxy_calls_total
    {server, code}`` and ``toolgate_mcp_proxy_tool_changed_total{server, tool}`` (a tool's live
    definition found different from the pinned one)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily
    from prometheus_client.registry import Collector

    class _Stats(Collector):
        def collect(self) -> Any:
            calls = CounterMetricFamily(
                "toolgate_mcp_proxy_calls", "tools/call answers by code", labels=["server", "code"]
            )
            for code, count in sorted(stats.by_code.items()):
                calls.add_metric([server, code], count)
            changed = CounterMetricFamily(
                "toolgate_mcp_proxy_tool_changed",
                "times a tool was withdrawn: its live definition differs from the pinned one",
                labels=["server", "tool"],
            )
            for tool, count in sorted(stats.tool_changed.items()):
                changed.add_metric([server, tool], count)
            yield calls
            yield changed

    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Stats())
    return registry
