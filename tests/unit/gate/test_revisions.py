"""Contract revisions (v<N>.<M>): how they are written, how metrics label them, what happens to
the fixtures of a retired version, and a version without fixtures."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from toolgate import cli
from toolgate._config import Config, Topics
from toolgate._errors import ContractError
from toolgate.authoring._fixtures import iter_outcomes, without_fixtures
from toolgate.gate._batch import AcceptedView, decide_batch
from toolgate.gate._contracts import ContractSet, load_contract
from toolgate.gate._gate import Gate
from toolgate.service._service import Worker, WorkerOptions

from tests.unit.builders import CONTRACTS, message, review_request, review_value


def copy_version(root: Path, tool: str, source: str, folder: str, **changes: str) -> Path:
    """contracts/<tool>/<source> copied to root/<tool>/<folder>, contract.yaml keys replaced/added."""
    target = root / tool / folder
    shutil.copytree(CONTRACTS / tool / source, target)
    spec = (target / "contract.yaml").read_text()
    for key, value in changes.items():
        line = re.compile(rf"^{key}:.*$", re.MULTILINE)
        spec = line.sub(f"{key}: {value}", spec) if line.search(spec) else spec + f"{key}: {value}\n"
    (target / "contract.yaml").write_text(spec)
    return target


class TestWritingARevision:
    """`minor:` is how a revision is written; `version: 1.1` says so."""

    @pytest.mark.parametrize("written", ["1.1", '"1.1"'])
    def test_decimal_version_says_how_to_write_a_revision(self, tmp_path: Path, written: str) -> None:
        """version: 1.1 fails naming the file and $.version, and tells to write version 1, minor 1."""
        folder = copy_version(tmp_path, "review_status", "v1", "v1.1", version=written)
        with pytest.raises(ContractError) as caught:
            load_contract(folder)
        text = str(caught.value)
        assert str(folder / "contract.yaml") in text
        assert "$.version" in text
        assert "'version: 1' and 'minor: 1', in folder v1.1" in text

    def test_the_cli_prints_one_line_and_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """toolgate contracts lint on such a set: exit 2, one line, no traceback."""
        copy_version(tmp_path, "review_status", "v1", "v1")
        copy_version(tmp_path, "review_status", "v1", "v1.12", version="1.12")
        assert cli.main(["contracts", "lint", "--contracts", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "'version: 1' and 'minor: 12', in folder v1.12" in err

    def test_minor_in_its_folder_loads(self, tmp_path: Path) -> None:
        """version: 1 with minor: 1 in folder v1.1 is a revision: key review_status@v1.1."""
        folder = copy_version(tmp_path, "review_status", "v1", "v1.1", minor="1")
        assert load_contract(folder).key == "review_status@v1.1"


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


class TestMetricLabels:
    """The version label carries the minor version: v1 and v1.1 are two series."""

    def test_contract_info_has_the_minor_version_and_a_digest(self, tmp_path: Path) -> None:
        """toolgate_contract_info labels v1 as "1" and v1.1 as "1.1", each with its own digest."""
        copy_version(tmp_path, "review_status", "v1", "v1", status="retired")
        copy_version(tmp_path, "review_status", "v1", "v1.1", minor="1", adapter_versions='["1.5.*"]')
        contracts = ContractSet.load(tmp_path)
        worker = Worker(Config(), Gate(contracts), options=WorkerOptions(handle_signals=False))
        text = generate_latest(worker.metrics.registry).decode()
        info = _series(text, "toolgate_contract_info")
        digests = {c.key: c.digest for c in contracts}
        assert sorted(info) == sorted(
            [
                f'toolgate_contract_info{{digest="{digests["review_status@v1"]}",status="retired",'
                'tool="review_status",version="1"} 1.0',
                f'toolgate_contract_info{{digest="{digests["review_status@v1.1"]}",status="active",'
                'tool="review_status",version="1.1"} 1.0',
            ]
        )
        assert digests["review_status@v1"] != digests["review_status@v1.1"]  # minor and globs differ

    def test_shadow_disagreements_name_the_minor_version(self, tmp_path: Path) -> None:
        """A disagreeing shadow v1.1 is counted under version "1.1", not "1"."""
        copy_version(tmp_path, "review_status", "v1", "v1")
        shadow = copy_version(tmp_path, "review_status", "v1", "v1.1", minor="1", status="shadow")
        schema = (shadow / "schema.json").read_text()
        (shadow / "schema.json").write_text(schema.replace('"pending"', '"pending", "stale"'))
        gate = Gate(ContractSet.load(tmp_path))
        now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
        request = review_request()
        msg = message(review_value(decision="stale"), request_id=request.request_id)
        batch = decide_batch(
            gate,
            [msg],
            lambda _: request,
            AcceptedView(lambda _r, _a: False),
            now,
            topics=Topics(),
            max_record_bytes=1 << 20,
        )
        assert [(d.tool, d.version) for d in batch.disagreements] == [("review_status", "1.1")]


class TestFixturesOfRetiredVersions:
    """A retired version keeps its fixtures; they run against the version as it decided."""

    def test_retired_version_fixtures_pass(self, tmp_path: Path) -> None:
        """review_status v1 retired beside an active v2: v1's own fixtures, kept, still pass."""
        copy_version(tmp_path, "review_status", "v1", "v1", status="retired")
        copy_version(tmp_path, "review_status", "v1", "v2", version="2")
        shutil.copy(CONTRACTS / "fixtures-keyring.toml", tmp_path)
        outcomes = list(iter_outcomes(ContractSet.load(tmp_path), Gate(ContractSet.load(tmp_path)).keyring))
        retired = [o for o in outcomes if o.case.contract.key == "review_status@v1"]
        assert retired
        assert {o.case.kind for o in retired} == {"accept", "reject"}
        assert [o.problem for o in outcomes if not o.ok] == []
        accepted = [o for o in retired if o.case.kind == "accept"]
        assert all(o.verdict.contract == "review_status@v1" for o in accepted)

    def test_contracts_test_passes_with_a_retired_version(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """toolgate contracts test exits 0 on a set whose retired version kept its fixtures."""
        copy_version(tmp_path, "review_status", "v1", "v1", status="retired")
        copy_version(tmp_path, "review_status", "v1", "v2", version="2")
        assert cli.main(["contracts", "test", "--contracts", str(tmp_path)]) == 0
        assert "0 failed" in capsys.readouterr().out

    def test_the_live_selection_still_refuses_the_retired_version(self, tmp_path: Path) -> None:
        """Keeping the fixtures changes nothing for traffic: v1 alone and retired rejects."""
        copy_version(tmp_path, "review_status", "v1", "v1", status="retired")
        gate = Gate(ContractSet.load(tmp_path))
        request = review_request()
        verdict = gate.evaluate(
            message(review_value(), request_id=request.request_id),
            request,
            datetime(2026, 5, 1, 12, 0, tzinfo=UTC),
        )
        assert (verdict.accepted, verdict.code) == (False, "UNKNOWN_CONTRACT_VERSION")


class TestWideningAfterDrift:
    """A revision that takes an active version's adapters over: contracts test says what to do."""

    def test_the_failure_names_retiring_and_the_shadow_route(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """v1.1 beside an active v1 with the same adapters: v1's accepts fail, naming both ways out."""
        old = copy_version(tmp_path, "review_status", "v1", "v1")
        new = copy_version(tmp_path, "review_status", "v1", "v1.1", minor="1")
        assert cli.main(["contracts", "test", "--contracts", str(tmp_path)]) == 1
        fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
        assert fails
        for line in fails:
            assert (
                "accepted by review_status@v1.1, not by review_status@v1: review_status@v1.1 now decides"
                in line
            )
            assert f"set `status: retired` in {old / 'contract.yaml'}" in line
            assert f"set `status: shadow` in {new / 'contract.yaml'}" in line

    @pytest.mark.parametrize(("folder", "status"), [("v1", "retired"), ("v1.1", "shadow")])
    def test_either_way_out_passes(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: str, status: str
    ) -> None:
        """Following the advice, v1 retired or v1.1 a shadow, makes contracts test pass."""
        copy_version(tmp_path, "review_status", "v1", "v1", **({"status": status} if folder == "v1" else {}))
        copy_version(
            tmp_path,
            "review_status",
            "v1",
            "v1.1",
            minor="1",
            **({"status": status} if folder == "v1.1" else {}),
        )
        assert cli.main(["contracts", "test", "--contracts", str(tmp_path)]) == 0, capsys.readouterr().out

    def test_an_older_decider_gets_no_such_advice(self, tmp_path: Path) -> None:
        """When an older version accepts a newer one's fixture, retiring the newer one is not suggested."""
        copy_version(tmp_path, "review_status", "v1", "v1", adapter_versions='["*"]')
        copy_version(tmp_path, "review_status", "v1", "v1.1", minor="1", adapter_versions='["9.*"]')
        shutil.copy(CONTRACTS / "fixtures-keyring.toml", tmp_path)
        contracts = ContractSet.load(tmp_path)
        problems = [o.problem for o in iter_outcomes(contracts, Gate(contracts).keyring) if not o.ok]
        assert problems
        assert all(p.startswith("accepted by review_status@v1, not by review_status@v1.1") for p in problems)
        assert not any("retired" in p or "shadow" in p for p in problems)


class TestVersionWithoutFixtures:
    """contracts test fails a version that has no fixture at all."""

    def test_listed_and_failed(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A version with an empty fixtures folder is a FAIL line naming it; exit 1."""
        copy_version(tmp_path, "review_status", "v1", "v1")
        bare = copy_version(tmp_path, "review_status", "v1", "v1.1", minor="1", adapter_versions='["9.*"]')
        shutil.rmtree(bare / "fixtures")
        assert [c.key for c in without_fixtures(ContractSet.load(tmp_path))] == ["review_status@v1.1"]
        assert cli.main(["contracts", "test", "--contracts", str(tmp_path)]) == 1
        out = capsys.readouterr().out
        assert f"FAIL review_status@v1.1 ({bare}): no fixtures" in out
        assert out.splitlines()[-1].endswith("1 failed")

    def test_bundled_versions_all_have_fixtures(self) -> None:
        """Every bundled contract version ships fixtures."""
        assert without_fixtures(ContractSet.load(CONTRACTS)) == []
