"""CONTRIBUTING.md's layout matches the tree: every entry exists, and every part of the tree is named."""

from __future__ import annotations

import re
import subprocess

from tests import ROOT

# Files that describe or configure the repository itself rather than being part of its layout.
NOT_LISTED = {"README.md", ".gitignore", ".dockerignore"}
LAYOUT_FILE = ROOT / "CONTRIBUTING.md"


def _layout() -> list[str]:
    """The paths named in the layout block (the first word of each line)."""
    text = LAYOUT_FILE.read_text(encoding="utf-8")
    section = text.split("## Layout", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert block, "no layout block"
    return [line.split()[0] for line in block.group(1).splitlines() if line and not line.startswith(" ")]


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    )
    return out.stdout.splitlines()


class TestLayout:
    """The layout block and the tree agree."""

    def test_every_listed_path_exists(self) -> None:
        """Each path of the block is a file or folder of the repository."""
        missing = [path for path in _layout() if not (ROOT / path).exists()]
        assert missing == []

    def test_every_top_level_entry_is_listed(self) -> None:
        """Each tracked top-level file or folder appears in the block (README and ignore files aside)."""
        listed = {path.split("/")[0].rstrip("/") for path in _layout()}
        top = {path.split("/")[0] for path in _tracked()} - NOT_LISTED
        assert top - listed == set()

    def test_every_part_of_the_package_is_listed(self) -> None:
        """Each subpackage and each top-level module of worker/toolgate appears in the block."""
        listed = set(_layout())
        parts = set()
        for path in _tracked():
            if path.startswith("worker/toolgate/") and path.endswith(".py"):
                rest = path.removeprefix("worker/toolgate/").split("/")
                parts.add(f"worker/toolgate/{rest[0]}/" if len(rest) > 1 else path)
        assert parts - listed == set()
