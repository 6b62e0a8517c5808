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
