"""``toolgate top --once`` against a live worker: it names what the worker decided."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess

from tests.integration.live import LiveWorker
from tests.integration.worker_kit import read_all


def top(live: LiveWorker, *args: str) -> subprocess.CompletedProcess[str]:
    return live.run("toolgate", "top", "--once", *args, timeout=60)


def decided(live: LiveWorker) -> tuple[set[str], set[str], int]:
    """(tools, rejection codes, count) of the worker's decisions, from its audit topic."""
    assert live.config is not None
    audit = asyncio.run(read_all(live.config, live.config.topics.audit))
    events = [
        e for e in (json.loads(r.value or b"") for r in audit) if e.get("kind", "decision") == "decision"
    ]  # not the sampled shadow verdicts
    tools = {e["tool"] or "unknown" for e in events}
    codes = {e["code"] for e in events if e["outcome"] == "rejected"}
    return tools, codes, len(events)


class TestTopOnce:
    """toolgate top --once reports what a live worker decided."""

    def test_names_every_tool_and_code_decided(self, live: LiveWorker) -> None:
        """The snapshot lists every tool and every rejection code the audit topic records."""
        tools, codes, _ = decided(live)
        result = top(live, "--url", live.metrics_url, "--interval", "0.5", "--top", "50")
        assert result.returncode == 0, result.stderr
        missing = {name for name in tools | codes if not re.search(rf"\b{name}\b", result.stdout)}
        assert missing == set(), result.stdout
        assert "rates over the last" in result.stdout

    def test_totals_count_every_decision(self, live: LiveWorker) -> None:
        """With --interval 0 the 'all' line counts as many results as the audit topic holds."""
        _, _, count = decided(live)
        result = top(live, "--interval", "0")  # URL from TOOLGATE_METRICS_PORT
        assert result.returncode == 0, result.stderr
        line = next(li for li in result.stdout.splitlines() if li.startswith("all "))
        assert int(line.split()[1].replace(",", "")) == count
        assert "totals since the worker started" in result.stdout

    def test_lag_and_transactions_are_shown(self, live: LiveWorker) -> None:
        """The snapshot shows the worker's partitions under CONSUMER LAG and committed transactions."""
        result = top(live, "--interval", "0")
        assert result.returncode == 0, result.stderr
        assert re.search(r"^partition 0\s+\d+$", result.stdout, re.MULTILINE), result.stdout
        committed = re.search(r"^committed\s+([\d,]+)", result.stdout, re.MULTILINE)
        assert committed
        assert int(committed.group(1).replace(",", "")) >= 1

    def test_unreachable_endpoint_exits_2_naming_the_url(self, live: LiveWorker) -> None:
        """An endpoint nobody listens on: exit 2 and the URL in the error."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
        result = top(live, "--url", url)
        assert result.returncode == 2
        assert url in result.stderr


class TestPerToolOnALiveWorker:
    """The per-tool section counts what the audit topic records, with when each code began."""

    def test_ratio_per_tool_matches_the_audit_topic(self, live: LiveWorker) -> None:
        """Each tool's rejected and decided counts are the audit topic's; codes carry 'since'."""
        assert live.config is not None
        audit = asyncio.run(read_all(live.config, live.config.topics.audit))
        events = [e for e in (json.loads(r.value or b"") for r in audit) if e.get("kind") == "decision"]
        result = top(live, "--interval", "0", "--top", "50")
        assert result.returncode == 0, result.stderr
        assert max(len(line) for line in result.stdout.splitlines()) <= 80
        section = result.stdout.split("REJECTION RATIO BY TOOL (totals)")[1].split("REJECTIONS BY CODE")[0]
        rows = {line.split()[0]: line.split() for line in section.splitlines() if line[:1].isalpha()}
        for tool in {e["tool"] or "unknown" for e in events}:
            mine = [e for e in events if (e["tool"] or "unknown") == tool]
            rejected = sum(e["outcome"] == "rejected" for e in mine)
            assert rows[tool][1:3] == [str(rejected), str(len(mine))], (tool, section)
            assert rows[tool][3] == f"{rejected / len(mine):.1%}"
        code_lines = [line for line in section.splitlines() if line.startswith("  ") and "since" in line]
        assert code_lines, section
        assert all(re.search(r"since 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d$", line) for line in code_lines)
