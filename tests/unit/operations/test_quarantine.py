"""``toolgate quarantine tail``: what one quarantine record prints as, and which records a filter keeps."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from toolgate.operations._quarantine import VALUE_CHARS, Filters, describe, headers_of, matches, tool_of


@dataclass
class Record:
    partition: int = 0
    offset: int = 7
    timestamp: int = 1_777_000_000_000
    key: bytes | None = b"req.1"
    value: bytes | None = b'{"tool":"job_status"}'
    headers: Sequence[tuple[str, bytes]] = field(default_factory=list)


DETAIL = {
    "stage": "schema",
    "code": "SCHEMA_VIOLATION",
    "instance_path": "/data",
    "keyword": "additionalProperties",
}


def record(**headers: str) -> Record:
    base = {
        "tg-tool": "job_status",
        "tg-adapter": "jobs-adapter",
        "tg-error-stage": "schema",
        "tg-error-code": "SCHEMA_VIOLATION",
        "tg-error-detail": json.dumps(DETAIL),
        "tg-contract": "job_status@v1",
        "tg-replay-count": "0",
    }
    base.update(headers)
    return Record(headers=[(k, v.encode()) for k, v in base.items()])


class TestDescribe:
    """A quarantine record prints as one JSON object with its diagnostics."""

    def test_position_tool_stage_code_and_headers(self) -> None:
        """A record prints its position, tool, stage, code, size and every header."""
        line = describe("q", record())
        assert {
            k: line[k] for k in ("topic", "partition", "offset", "key", "tool", "stage", "code", "size")
        } == {
            "topic": "q",
            "partition": 0,
            "offset": 7,
            "key": "req.1",
            "tool": "job_status",
            "stage": "schema",
            "code": "SCHEMA_VIOLATION",
            "size": 21,
        }
        assert line["headers"]["tg-adapter"] == "jobs-adapter"
        assert line["timestamp"].startswith("2026-")

    def test_detail_is_decoded(self) -> None:
        """tg-error-detail is printed as the JSON object it holds."""
        assert describe("q", record())["headers"]["tg-error-detail"] == DETAIL

    def test_undecodable_detail_stays_text(self) -> None:
        """A detail that is not JSON is printed as text, not dropped."""
        assert describe("q", record(**{"tg-error-detail": "{oops"}))["headers"]["tg-error-detail"] == "{oops"

    def test_value_left_out_unless_asked(self) -> None:
        """The hostile value is printed only with --value."""
        assert "value" not in describe("q", record())
        assert describe("q", record(), with_value=True)["value"] == '{"tool":"job_status"}'

    def test_value_is_bounded(self) -> None:
        """A long value is cut and marked truncated."""
        line = describe("q", Record(value=b"x" * (VALUE_CHARS + 10)), with_value=True)
        assert (len(line["value"]), line["value_truncated"]) == (VALUE_CHARS, True)

    def test_repeated_header_keeps_every_value(self) -> None:
        """A header the adapter sent twice maps to the list of its values."""
        rec = Record(headers=[("tg-tool", b"a"), ("tg-tool", b"b"), ("tg-tool", b"c")])
        assert headers_of(rec)["tg-tool"] == ["a", "b", "c"]

    def test_invalid_utf8_is_replaced(self) -> None:
        """Bytes that are not UTF-8 print with replacement characters."""
        assert headers_of(Record(headers=[("tg-source", b"\xff")]))["tg-source"] == "\ufffd"


class TestTool:
    """A record's tool is the contract's, else the adapter's claim."""

    def test_tool_from_the_contract(self) -> None:
        """The tool is the contract's tool, as the metrics label it."""
        assert tool_of(headers_of(record(**{"tg-contract": "deploy_status@v2"}))) == "deploy_status"

    def test_claimed_tool_without_a_contract(self) -> None:
        """No contract reached: the tool is the one the adapter named in tg-tool."""
        assert tool_of(headers_of(record(**{"tg-contract": "", "tg-tool": "shell_exec"}))) == "shell_exec"

    def test_unknown_without_either(self) -> None:
        """Neither a contract nor a tg-tool header: the tool is 'unknown'."""
        assert tool_of(headers_of(Record(headers=[("tg-error-code", b"HEADER_MISMATCH")]))) == "unknown"


class TestFilters:
    """Filters keep the records whose tool, code and stage match."""

    def test_no_filter_keeps_everything(self) -> None:
        """Without filters every record matches."""
        assert matches(headers_of(record()), Filters())

    def test_code_and_stage(self) -> None:
        """--code and --stage compare with the diagnostics headers."""
        headers = headers_of(record())
        assert matches(headers, Filters(code="SCHEMA_VIOLATION", stage="schema"))
        assert not matches(headers, Filters(code="BAD_SIGNATURE"))
        assert not matches(headers, Filters(stage="semantic"))

    def test_tool(self) -> None:
        """--tool compares with the record's tool."""
        claimed = headers_of(record(**{"tg-contract": "", "tg-tool": "shell_exec"}))
        assert matches(claimed, Filters(tool="shell_exec"))
        assert not matches(claimed, Filters(tool="job_status"))
        assert not matches(headers_of(record()), Filters(tool="shell_exec"))


class TestSummary:
    """quarantine summary groups by tool, code, adapter version and schema path."""

    def test_groups_with_first_and_last_seen(self) -> None:
        """Records of one group are counted once each; first and last come from tg-rejected-at."""
        from datetime import UTC, datetime

        from toolgate.operations._quarantine import format_summary, summarise

        path = json.dumps({**DETAIL, "schema_path": "/$defs/job/additionalProperties"})
        records = [
            record(**{"tg-adapter-version": "2.0.1", "tg-error-detail": path, "tg-rejected-at": at})
            for at in ("2026-05-01T10:00:00+00:00", "2026-05-01T09:00:00+00:00", "2026-05-01T11:30:00+02:00")
        ]
        records.append(record(**{"tg-adapter-version": "2.0.2", "tg-error-detail": path}))
        records.append(record(**{"tg-error-code": "BAD_SIGNATURE", "tg-error-stage": "semantic"}))
        rows = summarise(records, Filters())
        assert [(r.tool, r.code, r.adapter_version, r.schema_path, r.count) for r in rows] == [
            ("job_status", "SCHEMA_VIOLATION", "2.0.1", "/$defs/job/additionalProperties", 3),
            ("job_status", "BAD_SIGNATURE", "-", "-", 1),
            ("job_status", "SCHEMA_VIOLATION", "2.0.2", "/$defs/job/additionalProperties", 1),
        ]
        assert rows[0].first_seen == datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
        assert rows[0].last_seen == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)  # 11:30+02:00 is 09:30Z
        # without tg-rejected-at: the record's timestamp
        assert rows[2].first_seen == datetime.fromtimestamp(1_777_000_000, UTC)
        lines = format_summary(rows, 9, "toolgate.quarantine")
        assert lines[0] == "toolgate.quarantine: 5 of 9 quarantine records matched"
        assert lines[1].split()[5:8] == ["count", "replayed", "resolved"]  # "schema path" is two words
        assert lines[2].split() == [
            "job_status", "SCHEMA_VIOLATION", "2.0.1", "/$defs/job/additionalProperties", "3", "0", "0",
            "2026-05-01", "09:00:00", "2026-05-01", "10:00:00",
        ]  # fmt: skip

    def test_a_rule_failure_groups_by_its_rule(self) -> None:
        """RULE_FAILED records count by the cel rule their detail names, shown as ``rule <name>``."""
        from toolgate.operations._quarantine import summarise

        def failed(rule: str) -> Record:
            detail = {"stage": "semantic", "code": "RULE_FAILED", "keyword": "rule", "schema_path": rule}
            return record(**{"tg-error-code": "RULE_FAILED", "tg-error-stage": "semantic",
                             "tg-error-detail": json.dumps(detail)})  # fmt: skip

        rows = summarise([failed("a_rule"), failed("b_rule"), failed("a_rule")], Filters())
        assert [(r.code, r.schema_path, r.count) for r in rows] == [
            ("RULE_FAILED", "rule a_rule", 2),
            ("RULE_FAILED", "rule b_rule", 1),
        ]

    def test_filters_apply(self) -> None:
        """Only records passing the filters are counted."""
        from toolgate.operations._quarantine import summarise

        records = [record(), record(**{"tg-error-code": "BAD_SIGNATURE"})]
        rows = summarise(records, Filters(code="BAD_SIGNATURE"))
        assert [(r.code, r.count) for r in rows] == [("BAD_SIGNATURE", 1)]


def audit(**fields: object) -> bytes:
    event: dict[str, object] = {"kind": "decision", "outcome": "rejected", "raw_sha256": "s", "replay": 0}
    event.update(fields)
    return json.dumps(event).encode()


class TestReplayMarks:
    """summary marks replayed and resolved records from the audit topic's replay decisions."""

    def quarantine(self) -> list[Record]:
        """Three quarantined results of three requests, at offsets 0, 1, 2 of partition 0."""
        out = []
        for offset in range(3):
            rec = record(**{"tg-raw-sha256": f"sha{offset}"})
            out.append(Record(offset=offset, key=f"req.{offset}".encode(), headers=rec.headers))
        return out

    def test_replayed_resolved_and_left(self) -> None:
        """A replay rejected again marks its record replayed; an accepted replay resolves its result."""
        from toolgate.operations._quarantine import ReplayMarks, format_summary, summarise

        marks = ReplayMarks()
        marks.apply(b"req.0", audit(request_id="req.0", replay=1, replay_of="q/0/0"))  # rejected again
        marks.apply(b"req.1", audit(request_id="req.1", replay=1, replay_of="q/0/1", outcome="success",
                                    raw_sha256="sha1"))  # fmt: skip
        marks.apply(
            b"req.2", audit(request_id="req.2", replay=0, outcome="success", raw_sha256="sha2")
        )  # live
        (row,) = summarise(self.quarantine(), Filters(), marks, "q")
        assert (row.count, row.replayed, row.resolved) == (3, 2, 1)
        lines = format_summary([row], 3, "q")
        assert lines[0] == "q: 3 of 3 quarantine records matched (2 replayed, 1 resolved by a replay)"
        assert lines[2].split()[4:7] == ["3", "2", "1"]
        assert (
            lines[-1]
            == "its values: toolgate quarantine tail --tool job_status --code SCHEMA_VIOLATION --value -n 5"
        )

    def test_the_values_command_quotes_what_the_adapter_chose(self) -> None:
        """A made-up tool name reaches the suggested command quoted and printable, never as shell."""
        from toolgate.operations._quarantine import format_summary, summarise

        (row,) = summarise([record(**{"tg-contract": "", "tg-tool": "x; rm -rf ~\x1b[2J"})], Filters())
        hint = format_summary([row], 1, "q")[-1]
        assert (
            hint == "its values: toolgate quarantine tail --tool 'x; rm -rf ~?[2J' --code SCHEMA_VIOLATION"
            " --value -n 5"
        )

    def test_unreplayed_leaves_them_out(self) -> None:
        """--unreplayed counts only the records no replay decided or resolved."""
        from toolgate.operations._quarantine import ReplayMarks, summarise

        marks = ReplayMarks()
        marks.apply(None, audit(request_id="req.0", replay=1, replay_of="q/0/0"))
        marks.apply(None, audit(request_id="req.1", replay=2, outcome="failure", raw_sha256="sha1"))
        (row,) = summarise(self.quarantine(), Filters(unreplayed=True), marks, "q")
        assert (row.count, row.replayed, row.resolved) == (1, 0, 0)

    def test_a_resolved_result_marks_every_copy(self) -> None:
        """Two quarantine copies of one result (a replay rejected, then one accepted) are both resolved."""
        from toolgate.operations._quarantine import ReplayMarks, summarise

        first, _, _ = self.quarantine()
        copy = Record(offset=9, key=first.key, headers=first.headers)
        marks = ReplayMarks()
        marks.apply(None, audit(request_id="req.0", replay=2, replay_of="q/0/9", outcome="success",
                                raw_sha256="sha0"))  # fmt: skip
        (row,) = summarise([first, copy], Filters(), marks, "q")
        assert (row.count, row.replayed, row.resolved) == (2, 1, 2)

    def test_other_audit_events_are_ignored(self) -> None:
        """Shadow events, events of live traffic, tombstones and garbage mark nothing."""
        from toolgate.operations._quarantine import ReplayMarks

        marks = ReplayMarks()
        marks.apply(None, None)
        marks.apply(None, b"not json")
        marks.apply(None, audit(kind="shadow", replay=1, replay_of="q/0/0", request_id="req.0"))
        marks.apply(None, audit(replay=0, outcome="success", request_id="req.0"))
        assert (marks.replayed, marks.resolved) == (set(), set())
