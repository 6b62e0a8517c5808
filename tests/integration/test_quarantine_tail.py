"""``toolgate quarantine tail`` on the real broker: the latest rejections and their diagnostics."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.integration.live import LiveWorker
from tests.integration.worker_kit import Record, read_all


def tail(live: LiveWorker, *args: str, **env: str) -> tuple[int, list[dict[str, Any]], str]:
    result = live.run("toolgate", "quarantine", "tail", *args, env=env)
    return result.returncode, [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def quarantine(live: LiveWorker) -> list[Record]:
    assert live.config is not None
    records = asyncio.run(read_all(live.config, live.config.topics.quarantine))
    return sorted(records, key=lambda r: (r.partition, r.offset))


class TestQuarantineTail:
    """quarantine tail prints the latest matching quarantine records."""

    def test_last_records_oldest_first(self, live: LiveWorker) -> None:
        """-n 5 prints the last five quarantine records, oldest first."""
        code, lines, err = tail(live, "-n", "5")
        assert code == 0, err
        assert [line["offset"] for line in lines] == [r.offset for r in quarantine(live)[-5:]]

    def test_filter_by_code(self, live: LiveWorker) -> None:
        """--code keeps exactly the records rejected with that code."""
        expected = [r.offset for r in quarantine(live) if r.headers["tg-error-code"] == b"BAD_SIGNATURE"]
        code, lines, err = tail(live, "--code", "BAD_SIGNATURE", "-n", "1000")
        assert code == 0, err
        assert expected
        assert [line["offset"] for line in lines] == expected

    def test_no_match_says_so(self, live: LiveWorker) -> None:
        """A filter that matches nothing prints no JSON line and says so on stderr, with the
        warning that no contract names the tool."""
        code, lines, err = tail(live, "--tool", "no_such_tool")
        assert code == 0, err
        assert lines == []
        assert "warning: --tool 'no_such_tool' is not a tool" in err
        assert "no records matched" in err

    def test_filter_by_tool(self, live: LiveWorker) -> None:
        """--tool keeps the tool's records, rejected before or after its contract was found."""
        expected = [
            r.offset
            for r in quarantine(live)
            if (r.headers["tg-contract"] or r.headers["tg-tool"]).split(b"@")[0] == b"review_status"
        ]
        code, lines, err = tail(live, "--tool", "review_status", "-n", "1000")
        assert code == 0, err
        assert [line["offset"] for line in lines] == expected
        assert {"parse", "schema"} <= {line["stage"] for line in lines}

    def test_filter_by_a_tool_without_contract(self, live: LiveWorker) -> None:
        """--tool with a tool no contract knows keeps its UNKNOWN_TOOL rejections."""
        code, lines, err = tail(live, "--tool", "shell_exec", "-n", "1000")
        assert code == 0, err
        assert lines
        assert {(line["tool"], line["code"]) for line in lines} == {("shell_exec", "UNKNOWN_TOOL")}

    def test_diagnostics_headers(self, live: LiveWorker) -> None:
        """Each line carries the original headers and the decoded diagnostics of its record."""
        code, lines, err = tail(live, "-n", "20")
        assert code == 0, err
        by_offset = {r.offset: r for r in quarantine(live)}
        for line in lines:
            record = by_offset[line["offset"]]
            headers = line["headers"]
            assert headers["tg-error-detail"] == json.loads(record.headers["tg-error-detail"])
            assert headers["tg-error-detail"]["code"] == line["code"]
            assert headers["tg-origin"] == record.headers["tg-origin"].decode()
            assert headers["tg-tool"] == record.headers["tg-tool"].decode()
            assert line["size"] == len(record.value or b"")
            assert "value" not in line

    def test_value_on_request(self, live: LiveWorker) -> None:
        """--value adds the rejected bytes as text."""
        code, lines, err = tail(live, "--value", "-n", "1", "--tool", "review_status")
        assert code == 0, err
        (line,) = lines
        record = {r.offset: r for r in quarantine(live)}[line["offset"]]
        assert line["value"] == (record.value or b"").decode("utf-8", errors="replace")[:4096]

    def test_missing_topic_exits_2(self, live: LiveWorker) -> None:
        """A quarantine topic that does not exist is a usage error naming it."""
        code, lines, err = tail(live, TOOLGATE_TOPIC_QUARANTINE="tg-t-no-such-quarantine")
        assert (code, lines) == (2, [])
        assert "tg-t-no-such-quarantine" in err
