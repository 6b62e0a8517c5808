"""docs/mcp.md's **Conformance.** paragraph, read: the one place that says what the official MCP
conformance suite gives against server-everything bare and through the proxy. The conformance test
(tests/integration/test_mcp_conformance.py) compares its runs with it; tests/repo checks it holds together
and names the versions ops/mcp/package.json pins."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests import ROOT

PAGE = ROOT / "docs" / "mcp.md"


def paragraph() -> str:
    """The Conformance paragraph's text, up to the next paragraph that is not about it."""
    text = PAGE.read_text(encoding="utf-8")
    assert "**Conformance.**" in text, f"{PAGE} has no **Conformance.** paragraph"
    return text.split("**Conformance.**", 1)[1].split("\n## ", 1)[0].split("\nWhat it adds", 1)[0]


@dataclass(frozen=True)
class Documented:
    """What docs/mcp.md says of the two runs."""

    scenarios: int
    bare: tuple[int, int, int]
    proxy: tuple[int, int, int]
    proxy_passes: set[str]
    refused: set[str]


def documented() -> Documented:
    """The Conformance paragraph of docs/mcp.md: its table, its list of the scenarios that pass
    through the proxy and its one-line-each list of the scenarios refused by design."""
    section = paragraph()
    total = re.search(r"\| scenarios passed \(of (\d+)\) \|", section)
    assert total, "the Conformance table names the scenarios run: 'scenarios passed (of N)'"

    def row(label: str) -> tuple[int, int, int]:
        found = re.search(rf"^\| {re.escape(label)} \| (\d+) \| (\d+) \| (\d+) \|$", section, re.MULTILINE)
        assert found, f"the Conformance table has no row {label!r}"
        passed, failed, scenarios = (int(n) for n in found.groups())
        return passed, failed, scenarios

    passes = re.search(r"^Through the proxy these pass: (.*?)\.$", section, re.MULTILINE | re.DOTALL)
    assert passes, "the Conformance paragraph lists 'Through the proxy these pass: `...`.'"
    refused = re.findall(r"^- `([a-z0-9-]+)`: refused by design", section, re.MULTILINE)
    return Documented(
        scenarios=int(total.group(1)),
        bare=row("server-everything itself"),
        proxy=row("through the proxy"),
        proxy_passes=set(re.findall(r"`([a-z0-9-]+)`", passes.group(1))),
        refused=set(refused),
    )
