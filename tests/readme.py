"""The README's runnable examples: a section's Python block and the output block after it."""

from __future__ import annotations

import re

from tests import ROOT

README = ROOT / "README.md"


def example(section: str) -> tuple[str, str]:
    """The Python block of README section ``section`` and the output block that follows it."""
    text = README.read_text(encoding="utf-8")
    assert section in text, f"README.md has no {section!r} section"
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```.*?```\n(.*?)```", body, re.DOTALL)
    assert match, "the section needs a ```python block followed by its output block"
    return match.group(1), match.group(2)
