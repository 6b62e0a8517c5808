"""Results of ordinary size: the reviewer sets each bound of an imported closure as the tool
needs (``toolgate contracts rebound``), and a result over one names the bound and the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from toolgate._errors import ConfigError
from toolgate.authoring._fixtures import Outcome, fixtures_keyring, iter_outcomes
from toolgate.authoring._lint import lint_contracts
from toolgate.authoring._rebound import rebound
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import import_listing

from tests import mcp_kit

SERVER = "srv"
LISTING: list[dict[str, Any]] = [
    {
        "name": "read_file",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "type": "object",
            "properties": {"content": {"type": "string"}},
            "required": ["content"],
        },
    },
    {
        "name": "list_dir",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "type": "object",
            "properties": {"entries": {"type": "array", "items": {"type": "string", "maxLength": 64}}},
            "required": ["entries"],
        },
    },
]
FILE = {"content": [], "structuredContent": {"content": "x" * 3000}}
FOLDER = {"content": [], "structuredContent": {"entries": [f"f{i}.txt" for i in range(120)]}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    import_listing(tmp_path, SERVER, LISTING, out=lambda _line: None)
    mcp_kit.review(tmp_path)
    for tool, name, value in (("read_file", "file", FILE), ("list_dir", "folder", FOLDER)):
        path = tmp_path / f"{SERVER}.{tool}" / "v1" / "fixtures" / "accept" / f"{name}.json"
        path.write_text(json.dumps({"description": f"a {name} of ordinary size", "value": value}))
    return tmp_path


def _outcomes(root: Path) -> dict[str, Outcome]:
    contracts = ContractSet.load(root)
    return {o.case.path.name: o for o in iter_outcomes(contracts, fixtures_keyring(root))}


class TestTheOperatorSeesTheBound:
    """A result over the closure's bound is rejected with the bound it crossed and the command to set it."""

    def test_the_diagnostics_name_the_bound_and_the_command(self, root: Path) -> None:
        """3,000 characters over max_string 1024, 120 entries over max_items 100: each says which and how."""
        outcomes = _outcomes(root)
        for name, bound, flag in (
            ("file.json", "max_string", "--max-string"),
            ("folder.json", "max_items", "--max-items"),
        ):
            diagnostics = outcomes[name].verdict.diagnostics
            assert diagnostics is not None
            assert diagnostics.code == "SCHEMA_VIOLATION"
            assert f"the closure's {bound} bound" in diagnostics.message
            assert f"toolgate contracts rebound <its version folder> {flag} N" in diagnostics.message

    def test_an_upstream_bound_names_no_closure_bound(self, root: Path) -> None:
        """An entry over the upstream's own maxLength 64 is the tool's schema, not the closure's bound."""
        path = root / f"{SERVER}.list_dir" / "v1" / "fixtures" / "accept" / "folder.json"
        long_name = {"content": [], "structuredContent": {"entries": ["n" * 65]}}
        path.write_text(json.dumps({"description": "a long name", "value": long_name}))
        diagnostics = _outcomes(root)["folder.json"].verdict.diagnostics
        assert diagnostics is not None
        assert "rebound" not in diagnostics.message


class TestTheReviewerSetsTheBound:
    """``contracts rebound`` derives the closure again with the bounds given, up to limits.max_bytes."""

    def test_raised_bounds_accept_results_of_ordinary_size(self, root: Path) -> None:
        """After rebound the file and the folder are accepted, with no closure-mismatch, the review kept."""
        line = rebound(root / f"{SERVER}.read_file" / "v1", max_string=4096, max_items=None)
        assert line.endswith("max_string 1024 -> 4096")
        rebound(root / f"{SERVER}.list_dir" / "v1", max_string=None, max_items=500)
        outcomes = _outcomes(root)
        assert outcomes["file.json"].problem == ""
        assert outcomes["folder.json"].problem == ""
        assert [o.problem for o in outcomes.values() if not o.ok] == []
        rules = {f.rule for f in lint_contracts(ContractSet.load(root))}
        assert "closure-mismatch" not in rules
        assert {c.spec.status for c in ContractSet.load(root)} == {"active"}

    def test_a_bound_past_max_bytes_is_refused(self, root: Path) -> None:
        """A string longer than limits.max_bytes could never fit: refused naming the option and the file."""
        folder = root / f"{SERVER}.read_file" / "v1"
        with pytest.raises(ConfigError, match=r"--max-string: must be in 1\.\.") as refused:
            rebound(folder, max_string=10**9, max_items=None)
        assert "contract.yaml" in str(refused.value)
        with pytest.raises(ConfigError, match="--max-items"):
            rebound(folder, max_string=None, max_items=0)

    def test_a_text_only_contract_has_no_closure(self, tmp_path: Path) -> None:
        """A contract import wrote without an outputSchema: refused, naming schema.json."""
        import_listing(tmp_path, SERVER, [{"name": "echo", "inputSchema": {"type": "object"}}], out=print)
        with pytest.raises(ConfigError, match="not a schema import-mcp closed"):
            rebound(tmp_path / f"{SERVER}.echo" / "v1", max_string=10, max_items=None)

    def test_the_command_line(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """``toolgate contracts rebound FOLDER --max-string N`` prints the change and exits 0."""
        from toolgate.cli import main

        folder = root / f"{SERVER}.read_file" / "v1"
        assert main(["contracts", "rebound", str(folder), "--max-string", "3000"]) == 0
        assert "max_string 1024 -> 3000" in capsys.readouterr().out
        assert main(["contracts", "rebound", str(folder)]) == 2
        assert "give --max-string, --max-items or both" in capsys.readouterr().err


FIVE_THOUSAND = {"content": [], "structuredContent": {"content": "x" * 5000}}


def _accept(root: Path, tool: str, name: str, value: dict[str, Any]) -> None:
    path = root / f"{SERVER}.{tool}" / "v1" / "fixtures" / "accept" / f"{name}.json"
    path.write_text(json.dumps({"description": f"{name}, a result of ordinary size", "value": value}))


def _check(root: Path, tmp: Path, value: dict[str, Any]) -> dict[str, Any]:
    """``toolgate check`` of one result of ``srv.read_file``: its JSON line."""
    return mcp_kit.toolgate_check(
        root, tmp, value, tool=f"{SERVER}.read_file", request_id="req.bounds0001", now="2026-05-01T09:15:00Z"
    )


class TestAFileOfFiveThousandCharacters:
    """A bound raised past 4,096 (up to limits.max_bytes) lets a result that long reach the agent:
    the agent envelope's leaf follows the bound the contract's schema sets there."""

    def test_rebound_past_4096_serves_the_file(self, root: Path) -> None:
        """After ``rebound --max-string 6000`` a file of 5,000 characters is accepted, all of it projected."""
        rebound(root / f"{SERVER}.read_file" / "v1", max_string=6000, max_items=None)
        _accept(root, "read_file", "file", FIVE_THOUSAND)
        outcome = _outcomes(root)["file.json"]
        assert outcome.problem == "", outcome.verdict.diagnostics
        assert json.loads(outcome.verdict.agent)["data"] == {"content": "x" * 5000}

    def test_import_with_a_larger_bound_serves_the_file(self, tmp_path: Path) -> None:
        """``--max-string 5000`` at import: the 5,000-character file passes, lint finds no envelope misfit."""
        import_listing(tmp_path, SERVER, LISTING, out=lambda _line: None, max_string=5000)
        mcp_kit.review(tmp_path)
        _accept(tmp_path, "read_file", "file", FIVE_THOUSAND)
        outcome = _outcomes(tmp_path)["file.json"]
        assert outcome.problem == "", outcome.verdict.diagnostics
        rules = {f.rule for f in lint_contracts(ContractSet.load(tmp_path))}
        assert "projection-exceeds-envelope" not in rules

    def test_toolgate_check_serves_the_file(self, root: Path, tmp_path: Path) -> None:
        """``toolgate check`` of the 5,000-character file against the rebound contract: success, whole."""
        rebound(root / f"{SERVER}.read_file" / "v1", max_string=6000, max_items=None)
        line = _check(root, tmp_path, FIVE_THOUSAND)
        assert line["outcome"] != "rejected", line
        assert line["agent"]["data"] == {"content": "x" * 5000}

    def test_a_folder_of_1500_entries(self, root: Path) -> None:
        """Past the old 1,000 items: ``rebound --max-items 2000`` serves a folder of 1,500 entries."""
        rebound(root / f"{SERVER}.list_dir" / "v1", max_string=None, max_items=2000)
        entries = [f"f{i}.txt" for i in range(1500)]
        _accept(root, "list_dir", "folder", {"content": [], "structuredContent": {"entries": entries}})
        outcome = _outcomes(root)["folder.json"]
        assert outcome.problem == "", outcome.verdict.diagnostics
        assert json.loads(outcome.verdict.agent)["data"] == {"entries": entries}

    def test_the_advertised_schema_says_the_bound(self, root: Path) -> None:
        """The proxy advertises maxLength 6000 for the content after the rebound, not 4096."""
        from toolgate.authoring._advertised import advertised_output_schema

        rebound(root / f"{SERVER}.read_file" / "v1", max_string=6000, max_items=None)
        (contract,) = [c for c in ContractSet.load(root) if c.spec.tool == f"{SERVER}.read_file"]
        schema = advertised_output_schema(contract)
        assert schema is not None
        assert schema["properties"]["content"]["maxLength"] == 6000


class TestOverTheContractsOwnBound:
    """A string past the bound the contract sets is still refused, naming that bound."""

    def test_one_character_over_names_the_bound(self, root: Path, tmp_path: Path) -> None:
        """6,001 characters over max_string 6000: refused by the schema, naming the bound and the command."""
        rebound(root / f"{SERVER}.read_file" / "v1", max_string=6000, max_items=None)
        over = {"content": [], "structuredContent": {"content": "x" * 6001}}
        line = _check(root, tmp_path, over)
        assert (line["outcome"], line["stage"], line["code"]) == ("rejected", "schema", "SCHEMA_VIOLATION")
        _accept(root, "read_file", "file", over)
        diagnostics = _outcomes(root)["file.json"].verdict.diagnostics
        assert diagnostics is not None
        assert "longer than 6000 characters" in diagnostics.message
        assert "the closure's max_string bound" in diagnostics.message


class TestImportTakesBoundsUpToMaxBytes:
    """``import-mcp --max-string`` goes up to --max-bytes, ``--max-items`` up to half of it."""

    def _import(self, tmp_path: Path, *flags: str) -> int:
        from toolgate.cli import main

        listing = tmp_path / "listing.json"
        listing.write_text(json.dumps({"tools": LISTING}))
        root = tmp_path / "contracts"
        root.mkdir(exist_ok=True)
        return main(
            [
                *("contracts", "import-mcp", "--contracts", str(root)),
                *("--tools-list", str(listing), "--server", SERVER, *flags),
            ]
        )

    def test_a_bound_past_4096(self, tmp_path: Path) -> None:
        """``--max-string 5000`` is taken: the closure names it."""
        assert self._import(tmp_path, "--max-string", "5000") == 1  # drafts left to review
        schema = json.loads(
            (tmp_path / "contracts" / f"{SERVER}.read_file" / "v1" / "schema.json").read_text()
        )
        assert '"max_string": 5000' in json.dumps(schema)

    def test_a_bound_past_max_bytes_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--max-string 5000 --max-bytes 4000`` is refused naming both; nothing is written."""
        assert self._import(tmp_path, "--max-string", "5000", "--max-bytes", "4000") == 2
        err = capsys.readouterr().err
        assert "--max-string must be in 1..4000" in err
        assert "--max-bytes 4000" in err
        assert not list((tmp_path / "contracts").iterdir())
