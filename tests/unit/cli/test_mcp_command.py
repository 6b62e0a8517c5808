"""``toolgate mcp-proxy``'s wiring: what the command reads of the group's view."""

from __future__ import annotations


class TestProxyServingView:
    """With --decide worker, a tool counts as served only when a live worker decides it: a
    proxy deciding in process is listed on the members topic but decides nothing of intake."""

    def test_a_proxy_member_serves_nothing_for_the_workers(self) -> None:
        """A proxy member's tools are left out; with only a proxy live, nothing is known."""
        from datetime import UTC, datetime

        from toolgate.cli._mcp import workers_tools
        from toolgate.service._members import MemberRecord

        now = datetime(2026, 7, 28, 12, 0, tzinfo=UTC)

        def member(name: str, tools: list[str]) -> MemberRecord:
            return MemberRecord(
                group="g", member=name, generation=2, digest="d", label="g2-d", tools=tools, at=now,
                refresh_seconds=10,
            )  # fmt: skip

        worker = member("worker-0", ["a.one"])
        proxy = member("mcp-proxy:time@host-1-abc", ["a.one", "time.get_current_time"])
        assert workers_tools([worker, proxy], "g", now) == frozenset({"a.one"})
        assert workers_tools([proxy], "g", now) is None
