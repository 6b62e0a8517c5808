"""Render the alert rules (and their promtool tests) with the runbook's absolute URL.

Every alert's ``runbook_url`` is ``<base>/ops/RUNBOOK.md#<alert name in lower case>``.
The committed files carry :data:`DEFAULT_BASE`; a deployment renders its own copy with
the address where operators read this repository (``make rules RUNBOOK_BASE_URL=...``):

    python ops/prometheus/render_rules.py --base-url https://git.acme.test/toolgate/blob/main --out DIR

writes ``DIR/rules/toolgate.yml`` and ``DIR/tests/toolgate_test.yml`` (the tests expect the
same URLs, so ``promtool test rules DIR/tests/*.yml`` checks the rendered rules). Exit 2 when
the base is not an absolute http(s) URL.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
DEFAULT_BASE = "https://git.example.com/toolgate/blob/main"
RUNBOOK_PATH = "ops/RUNBOOK.md"
# runbook_url: "<anything>/ops/RUNBOOK.md#anchor" (or the bare relative form), quoted.
_URL = re.compile(r'(runbook_url:\s*")(?:[^"#]*/)?' + re.escape(RUNBOOK_PATH) + r'(#[a-z0-9-]+")')


def check_base(base: str) -> str:
    """The base without a trailing slash; ValueError unless it is an absolute http(s) URL."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in base for c in '"#?\n '):
        raise ValueError(
            f"RUNBOOK_BASE_URL {base!r}: expected an absolute http(s) URL without ?, # or quotes"
        )
    return base.rstrip("/")


def render(text: str, base: str) -> str:
    """``text`` with every runbook_url pointing under ``base``."""
    return _URL.sub(lambda m: f"{m.group(1)}{check_base(base)}/{RUNBOOK_PATH}{m.group(2)}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--base-url", default=DEFAULT_BASE, help=f"where the repository is read (default {DEFAULT_BASE})"
    )
    parser.add_argument("--out", required=True, type=Path, help="output folder (rules/ and tests/ inside)")
    args = parser.parse_args(argv)
    try:
        check_base(args.base_url)
    except ValueError as exc:
        print(f"render_rules: {exc}", file=sys.stderr)
        return 2
    for folder in ("rules", "tests"):
        (args.out / folder).mkdir(parents=True, exist_ok=True)
        for source in sorted((HERE / folder).glob("*.yml")):
            # The tests name ../rules/toolgate.yml: the rendered copy beside them.
            text = source.read_text(encoding="utf-8")
            (args.out / folder / source.name).write_text(render(text, args.base_url), encoding="utf-8")
            print(f"rendered {args.out / folder / source.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
