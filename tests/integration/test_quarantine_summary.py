"""``toolgate quarantine summary`` on the real broker: counts by tool, code, adapter version and
schema path, with first and last seen, equal to what the quarantine topic holds."""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
from datetime import UTC, datetime

from tests.integration.live import LiveWorker
from tests.integration.worker_kit import read_all


def summary(live: LiveWorker, *args: str) -> subprocess.CompletedProcess[str]:
    return live.run("toolgate", "quarantine", "summary", *args)


def expected(live: LiveWorker) -> dict[tuple[str, str, str, str], tuple[int, str, str]]:
    """(tool, code, adapter version, schema path) -> (count, first, last) from the topic itself."""
    assert live.config is not None
    records = asyncio.run(read_all(live.config, live.config.topics.quarantine))
    seen: dict[tuple[str, str, str, str], list[datetime]] = collections.defaultdict(list)
    for record in records:
        h = {name: value.decode() for name, value in record.headers.items()}
        contract = h.get("tg-contract", "")
        tool = contract.split("@")[0] if contract else h.get("tg-tool") or "unknown"
        detail = json.loads(h["tg-error-detail"])
        key = (tool, h["tg-error-code"], h.get("tg-adapter-version") or "-", detail.get("schema_path") or "-")
        seen[key].append(datetime.fromisoformat(h["tg-rejected-at"]).astimezone(UTC))
    fmt = "%Y-%m-%d %H:%M:%S"
    return {k: (len(v), min(v).strftime(fmt), max(v).strftime(fmt)) for k, v in seen.items()}


def rows(stdout: str) -> dict[tuple[str, str, str, str], tuple[int, str, str]]:
    """The table's rows (after its title and header), parsed back."""
    out = {}
    for line in stdout.split("\n\n", 1)[0].splitlines()[2:]:
        cells = line.split()
        # tool code adapter path count replayed resolved first-date first-time last-date last-time
        tool, code, adapter, path, count = cells[:5]
        out[(tool, code, adapter, path)] = (int(count), " ".join(cells[7:9]), " ".join(cells[9:11]))
    return out


class TestQuarantineSummary:
    """The summary counts every quarantine record once, in its group."""

    def test_counts_match_the_topic(self, live: LiveWorker) -> None:
        """Every group, count and first/last seen equals the quarantine topic's own records."""
        want = expected(live)
        assert len(want) >= 3  # the sample traffic rejects several tools with several codes
        result = summary(live)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        total = sum(count for count, _, _ in want.values())
        assert lines[0] == f"{live.config.topics.quarantine}: {total} of {total} quarantine records matched"  # type: ignore[union-attr]
        assert lines[1].split()[:5] == ["tool", "code", "adapter", "schema", "path"]
        assert rows(result.stdout) == want
        counts = [count for count, _, _ in rows(result.stdout).values()]
        assert counts == sorted(counts, reverse=True)  # most records first

    def test_filters_select_groups(self, live: LiveWorker) -> None:
        """--code keeps only that code's groups; the title counts what matched of what was read."""
        want = {k: v for k, v in expected(live).items() if k[1] == "SCHEMA_VIOLATION"}
        assert want
        result = summary(live, "--code", "SCHEMA_VIOLATION")
        assert result.returncode == 0, result.stderr
        assert rows(result.stdout) == want
        assert all(path.startswith("/") for _, _, _, path in want)  # schema paths are shown
        tool, code = result.stdout.splitlines()[2].split()[:2]  # the top row: most records
        assert result.stdout.splitlines()[-1] == (
            f"its values: toolgate quarantine tail --tool {tool} --code {code} --value -n 5"
        )

    def test_nothing_matched(self, live: LiveWorker) -> None:
        """A filter that matches nothing prints the title with 0 matched and no table."""
        result = summary(live, "--tool", "no_such_tool_here")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0].split(": ")[1].startswith("0 of ")
        assert len(result.stdout.splitlines()) == 1
