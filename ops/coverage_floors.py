"""Print line coverage per layer of toolgate and hold each layer to its floor.

Reads the combined data of the last measured run (`make test`: one pytest run with
``--cov``, the worker and CLI processes it starts included; see ``[tool.coverage.run]``
in pyproject.toml) and prints one row per layer: the pure gate, the Kafka service, the
rooms of contract authors, MCP integrators and operators, the CLI with the shared modules,
and the total. Exit 1 when a layer is below its floor.

    .venv/bin/python ops/coverage_floors.py [--data-file .coverage] [--report-only]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "worker" / "toolgate"

# Layer -> the lowest line coverage (percent) `make test` accepts. The gate is pure and
# tested without a broker, so nearly all of it is reachable; the total keeps the rest honest.
FLOORS: dict[str, float] = {"gate": 95.0, "service": 80.0, "total": 85.0}
LAYERS = ("gate", "service", "registry", "authoring", "mcp", "operations", "cli+shared")


@dataclass
class Row:
    """Statements and missed statements of one layer."""

    statements: int = 0
    missed: int = 0

    @property
    def percent(self) -> float:
        return 100.0 * (self.statements - self.missed) / self.statements if self.statements else 100.0


def layer_of(path: Path) -> str:
    """The layer a source file of the package belongs to."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else "cli+shared"


def measure(data_file: Path) -> dict[str, Row]:
    """Rows per layer and the total, from a coverage data file. Files never imported count as 0%."""
    cov = coverage.Coverage(data_file=str(data_file), config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    rows = {name: Row() for name in (*LAYERS, "total")}
    for path in sorted(PACKAGE.rglob("*.py")):
        _, statements, _, missing, _ = cov.analysis2(str(path))
        for name in (layer_of(path), "total"):
            rows[name].statements += len(statements)
            rows[name].missed += len(missing)
    return rows


def table(rows: dict[str, Row]) -> tuple[list[str], list[str]]:
    """The printed table and the layers below their floor."""
    lines = [f"{'layer':<12} {'statements':>10} {'missed':>7} {'cover':>7} {'floor':>6}"]
    failed = []
    for name, row in rows.items():
        floor = FLOORS.get(name)
        ok = floor is None or row.percent >= floor
        mark = "" if ok else "  BELOW FLOOR"
        shown = f"{floor:.0f}%" if floor is not None else "-"
        lines.append(f"{name:<12} {row.statements:>10} {row.missed:>7} {row.percent:>6.1f}% {shown:>6}{mark}")
        if not ok:
            failed.append(name)
    return lines, failed


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when a layer is below its floor, 2 without data."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-file", type=Path, default=ROOT / ".coverage", help="combined coverage data")
    parser.add_argument(
        "--report-only", action="store_true", help="print the table, exit 0 below a floor (a partial run)"
    )
    args = parser.parse_args(argv)
    if not args.data_file.is_file():
        print(f"coverage_floors: {args.data_file}: no coverage data (run make test first)", file=sys.stderr)
        return 2
    lines, failed = table(measure(args.data_file))
    print("\n".join(lines))
    if failed and args.report_only:
        print(f"below its floor in this partial run: {', '.join(failed)}", file=sys.stderr)
    elif failed:
        print(f"coverage below its floor: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
