"""Check a commit message's shape: a subject of at most 72 characters, then a blank line.

    .venv/bin/python ops/commit_msg.py .git/COMMIT_EDITMSG

The commit-msg hook of .pre-commit-config.yaml (``pre-commit install``) runs it on every commit, so
``git log --oneline`` stays readable in an 80-column terminal. Lines git itself adds as comments
(``#``, and everything below the ``>8`` scissors line of ``git commit -v``) are not part of the
message. Exit 0 when the message is well formed, 1 naming each problem, 2 when the file cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72  # git log --oneline with a short hash fits 80 columns
SCISSORS = "# ------------------------ >8 ------------------------"


def message_lines(text: str) -> list[str]:
    """The message as git will store it: comment lines and anything below the scissors left out."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(SCISSORS):
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def problems(text: str) -> list[str]:
    """What is wrong with the message's shape; empty when nothing is."""
    lines = message_lines(text)
    if not lines:
        return ["the message is empty"]
    found = []
    subject = lines[0]
    if len(subject) > MAX_SUBJECT:
        found.append(
            f"the subject is {len(subject)} characters, at most {MAX_SUBJECT}: "
            "keep the what in the subject and put the why in the body"
        )
    if len(lines) > 1 and lines[1]:
        found.append("the second line must be blank: the subject is one line, the body follows a blank line")
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: commit_msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    path = Path(args[0])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"commit_msg.py: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    found = problems(text)
    for problem in found:
        print(f"commit message ({path}): {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
