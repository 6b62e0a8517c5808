"""The repository stands on its own: docs/design.md is the design, and citations of it resolve."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests import ROOT

DESIGN = ROOT / "docs" / "design.md"


def _sections() -> set[str]:
    return {
        m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", DESIGN.read_text(encoding="utf-8"), re.M)
    }


def _grep(pattern: str) -> list[str]:
    """`git grep -n -E` (case-sensitive) over tracked files: file:line:text of every match."""
    done = subprocess.run(
        ["git", "grep", "-n", "-E", pattern],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: no match
    return done.stdout.splitlines()


def _cited(lines: list[str]) -> set[str]:
    """The section names cited as `docs/design.md, <Section>` in the lines."""
    cited: set[str] = set()
    for line in lines:
        cited.update(m.group(1) for m in re.finditer(r"docs/design\.md, ([A-Z][a-z]+(?: [a-z]+)*)", line))
    return cited


def _uncited(lines: list[str], sections: set[str]) -> set[str]:
    """The cited section names that are not sections of the document."""
    return {c for c in _cited(lines) if c not in sections}


class TestDesignDocument:
    """What the design document holds."""

    @pytest.mark.parametrize(
        "section",
        [
            "Hazards",
            "Topics and trust boundaries",
            "Intake headers",
            "Stages and codes",
            "State model",
            "Exactly once",
            "Decisions and why",
        ],
    )
    def test_has_section(self, section: str) -> None:
        """Each part of the design has its section."""
        assert section in _sections()

    def test_contents_lists_every_section(self) -> None:
        """The contents list links every top-level section, in order, with working anchors."""
        text = DESIGN.read_text(encoding="utf-8")
        sections = [s for s in re.findall(r"^## (.+)$", text, re.M) if s != "Contents"]
        links = re.findall(r"^\d+\. \[(.+?)\]\(#(.+?)\)$", text, re.M)
        assert [title for title, _ in links] == sections
        anchors = [re.sub(r"[^a-z0-9 -]", "", s.lower()).replace(" ", "-") for s in sections]
        assert [anchor for _, anchor in links] == anchors

    def test_every_code_is_documented(self) -> None:
        """Every rejection code the gate can give appears in the design's code table."""
        from toolgate._codes import CODES, STAGES

        text = DESIGN.read_text(encoding="utf-8")
        assert [code for code in CODES if f"`{code}`" not in text] == []
        assert [stage for stage in STAGES if f"`{stage}`" not in text] == []

    def test_hazards_are_named(self) -> None:
        """The hazards behind the rules are described in the project's own words."""
        text = DESIGN.read_text(encoding="utf-8").split("## Hazards", 1)[1].split("\n## ", 1)[0]
        named = ("error page", "admin_override", "Instruction text", "Duplicate keys", "banner", "Stale")
        assert [words for words in named if words not in text] == []


class TestCitations:
    """Docs, code and tests cite the repository's own design, by sections that exist."""

    def test_no_outside_design_is_cited(self) -> None:
        """Nothing names a design file outside the repository or an unexplained origin document."""
        hits = [
            line
            for line in _grep(r"DESIGN\.md|[Tt]he seed\b|[Ss]eed's")
            if not line.startswith("tests/repo/test_design_doc.py")
        ]
        assert hits == []

    def test_cited_sections_exist(self) -> None:
        """Every `docs/design.md, <Section>` citation names a section of the document."""
        lines = [
            line
            for line in _grep(r"docs/design\.md, [A-Z]")
            if not line.startswith("tests/repo/test_design_doc.py")
        ]
        assert _cited(lines)
        assert _uncited(lines, _sections()) == set()

    def test_a_citation_of_a_missing_section_is_reported(self) -> None:
        """A line citing a section the document lacks is reported, one citing a real section is not."""
        lines = [
            "worker/toolgate/x.py:1:# see docs/design.md, Exactly once",
            "worker/toolgate/y.py:2:# docs/design.md, Sharding rules",
        ]
        assert _uncited(lines, _sections()) == {"Sharding rules"}
