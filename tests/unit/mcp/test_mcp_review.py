"""Reviewing imported MCP contracts: what lint makes a person settle, and what the review accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from toolgate.authoring._fixtures import fixtures_keyring, iter_outcomes
from toolgate.authoring._lint import lint_contracts
from toolgate.gate._contracts import ContractSet
from toolgate.mcp._import import fetch_listing, import_listing

from tests import mcp_kit


@pytest.fixture(scope="module")
def tools() -> list[dict[str, Any]]:
    """The tools/list answer of the in-process server, fetched by the import's own client."""
    return anyio.run(fetch_listing, mcp_kit.server())


def _import(root: Path, tools: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    lines: list[str] = []
    import_listing(root, mcp_kit.SERVER, tools, out=lines.append, **kwargs)
    return lines


def _set_status(root: Path, status: str) -> None:
    for path in root.glob("*/v*/contract.yaml"):
        text = path.read_text()
        assert "\nstatus: draft\n" in text, path
        path.write_text(text.replace("\nstatus: draft\n", f"\nstatus: {status}\n"))


class TestDisabled:
    """status: disabled is reviewed and deliberately not served: loaded, tested, never live, lint-clean."""

    def test_a_disabled_version_is_lint_clean_where_a_draft_is_not(
        self, tmp_path: Path, tools: list[dict[str, Any]]
    ) -> None:
        """The same text-only import: a finding as a draft, none once disabled."""
        _import(tmp_path, tools, only=["echo"])
        assert "draft-version" in {f.rule for f in lint_contracts(ContractSet.load(tmp_path))}
        _set_status(tmp_path, "disabled")
        contracts = ContractSet.load(tmp_path)
        assert [c.spec.status for c in contracts] == ["disabled"]
        assert [(f.pointer, f.rule) for f in lint_contracts(contracts)] == []

    def test_a_disabled_version_never_decides_nor_shadows_and_its_fixtures_run(
        self, tmp_path: Path, tools: list[dict[str, Any]]
    ) -> None:
        """The gate selects no disabled version; contracts test still runs every fixture of it."""
        _import(tmp_path, tools)
        _set_status(tmp_path, "disabled")
        contracts = ContractSet.load(tmp_path)
        for tool in contracts.tools:
            assert contracts.select(tool, "1.0.0") is None
            assert contracts.shadows(tool, "1.0.0") == []
        outcomes = list(iter_outcomes(contracts, fixtures_keyring(tmp_path)))
        assert len(outcomes) >= 3 * len(contracts.tools)
        assert [o.case.name for o in outcomes if not o.ok] == []
