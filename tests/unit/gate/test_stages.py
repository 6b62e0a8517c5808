"""The gate by stage: stage and code names, the request key read once, replay's dry run
deciding through the worker's batch decision."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import toolgate.gate._batch as batch_module
import toolgate.gate._gate as gate_module
import toolgate.gate._records as records_module
from toolgate._codes import CODES, STAGES, is_code, is_stage
from toolgate._config import Topics
from toolgate._errors import ContractError
from toolgate.authoring._fixtures import fixtures_keyring, load_cases
from toolgate.gate._batch import AcceptedView, decide_batch
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.operations._replay import Quarantined, dry_run
from toolgate.service._store import RequestTable

from tests import ROOT
from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, message, review_request, review_value

DESIGN = ROOT / "docs" / "design.md"


class TestNames:
    def test_stages_in_order(self) -> None:
        """The stage names are the design's, in the order its stage table says the gate runs them."""
        section = DESIGN.read_text(encoding="utf-8").split("## Stages and codes")[1].split("\n## ")[0]
        rows = re.findall(r"^\| `([a-z]+)` \|", section, re.M)
        assert tuple(rows) == STAGES

    def test_every_code_is_in_the_stage_table(self) -> None:
        """Each rejection code is documented in the design's stage table."""
        section = DESIGN.read_text(encoding="utf-8").split("## Stages and codes")[1].split("\n## ")[0]
        table = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
        missing = [code for code in CODES if f"`{code}`" not in table]
        assert missing == []

    def test_guards(self) -> None:
        """is_stage / is_code accept the names and nothing else."""
        assert is_stage("schema")
        assert not is_stage("Schema")
        assert not is_stage(None)
        assert is_code("SCHEMA_VIOLATION")
        assert not is_code("SCHEMA_VIOLATIONS")

    @pytest.mark.parametrize(
        ("expect", "field"),
        [
            ({"stage": "scheme", "code": "SCHEMA_VIOLATION"}, "$.expect.stage"),
            ({"stage": "schema", "code": "SCHEMA_VOILATION"}, "$.expect.code"),
        ],
    )
    def test_fixture_with_unknown_stage_or_code_is_refused(
        self, tmp_path: Path, expect: dict[str, str], field: str
    ) -> None:
        """A reject fixture naming a stage or code that does not exist fails to load, naming the field."""
        root = tmp_path / "contracts"
        shutil.copytree(CONTRACTS / "review_status", root / "review_status")
        bad = root / "review_status" / "v1" / "fixtures" / "reject" / "typo.json"
        bad.write_text(json.dumps({"value": review_value(), "expect": expect}))
        contracts = ContractSet.load(root)
        with pytest.raises(ContractError) as caught:
            load_cases(contracts.contracts[0], fixtures_keyring(CONTRACTS))
        assert caught.value.path == field
        assert "typo.json" in str(caught.value)


class TestRequestKey:
    def test_read_once_per_message(self, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
        """decide_batch reads the request id from the Kafka key once per message, shadows included."""
        calls: list[bytes | None] = []
        real = records_module.request_key

        def counting(key: bytes | None) -> str:
            calls.append(key)
            return real(key)

        monkeypatch.setattr(batch_module, "request_key", counting)
        monkeypatch.setattr(gate_module, "request_key", counting)
        deploy = message(tool="deploy_status", tg_adapter_version="3.1.0")  # has a shadow version
        batch = decide_batch(
            gate,
            [message(), message(review_value(admin_override=True)), deploy],
            {REQUEST_ID: review_request()}.get,
            AcceptedView(lambda r, a: False),
            NOW,
            topics=Topics(),
            max_record_bytes=1 << 20,
        )
        assert len(batch.decisions) == 3
        assert len(calls) == 3

    def test_evaluate_alone_reads_the_key(self, gate: Gate) -> None:
        """Without a key from the caller the gate reads it itself."""
        assert gate.evaluate(message(), review_request(), NOW).accepted
        assert gate.evaluate(message(), review_request(), NOW, key=REQUEST_ID).accepted


def quarantined(value: Any, offset: int, replays: int = 0, code: str = "SCHEMA_VIOLATION") -> Quarantined:
    msg = message(value)
    raw_headers = [*msg.headers, ("tg-error-code", code.encode()), ("tg-replay-count", str(replays).encode())]
    return Quarantined(
        0,
        offset,
        msg.key,
        msg.value,
        list(raw_headers),
        {n: v.decode() for n, v in raw_headers},
    )


class TestReplayDryRun:
    def requests(self) -> RequestTable:
        table = RequestTable()
        table.apply(
            REQUEST_ID.encode(),
            json.dumps(
                {
                    "request_id": REQUEST_ID,
                    "tool": "review_status",
                    "issued_at": "2026-05-01T11:59:00Z",
                    "expires_at": "2026-05-01T12:05:00Z",
                    "bind": {"change_id": "CR-1042"},
                }
            ).encode(),
        )
        return table

    def test_same_decisions_as_the_worker(self, gate: Gate) -> None:
        """The dry run decides as decide_batch does: a second pass for one attempt is a
        duplicate, also across its internal batches; the loop guard refuses before deciding."""
        records = [
            quarantined(review_value(), 1),
            quarantined(review_value(admin_override=True), 2),
            quarantined(review_value(), 3),
            quarantined(review_value(), 4, replays=3),
        ]
        for chunk in (1, 1000):
            report = dry_run(records, gate, self.requests(), lambda r, a: False, NOW, 3, chunk=chunk)
            assert (report.would_pass, report.same_code, report.other_code, report.guarded) == (1, 1, 1, 1)
            assert report.rows[("review_status", "SCHEMA_VIOLATION", "other code", "DUPLICATE_RESULT")] == 1

    def test_ledger_counts(self, gate: Gate) -> None:
        """An attempt the ledger holds as accepted is a duplicate in the dry run too."""
        report = dry_run([quarantined(review_value(), 1)], gate, self.requests(), lambda r, a: True, NOW, 3)
        assert (report.would_pass, report.other_code) == (0, 1)
