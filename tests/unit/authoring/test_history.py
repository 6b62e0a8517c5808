"""Version history: a breaking change needs a new major version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from toolgate.authoring._contract_diff import contract_history
from toolgate.gate._contracts import ContractSet

from tests.unit.builders import CONTRACTS


def add_version(root: Path, folder: str, version: int, minor: int, narrow: bool) -> None:
    """review_status at ``folder``; ``narrow`` drops the `pending` decision (breaking)."""
    target = root / "review_status" / folder
    shutil.copytree(CONTRACTS / "review_status" / "v1", target)
    spec = (target / "contract.yaml").read_text().replace("version: 1", f"version: {version}")
    if minor:
        spec += f"minor: {minor}\n"
    (target / "contract.yaml").write_text(spec)
    if narrow:
        schema = json.loads((target / "schema.json").read_text())
        schema["$defs"]["reviewStatus"]["properties"]["decision"]["enum"] = ["approved", "rejected"]
        (target / "schema.json").write_text(json.dumps(schema))


class TestHistory:
    def test_bundled_contracts_pass(self) -> None:
        """Every bundled version step is compatible or comes with a new major version."""
        steps = contract_history(ContractSet.load(CONTRACTS))
        assert steps
        assert all(step.ok for step in steps)

    def test_breaking_minor_fails(self, tmp_path: Path) -> None:
        """Narrowing an enum in v1.1 is a breaking change without a new major: it fails."""
        add_version(tmp_path, "v1", 1, 0, narrow=False)
        add_version(tmp_path, "v1.1", 1, 1, narrow=True)
        (step,) = contract_history(ContractSet.load(tmp_path))
        assert (step.old, step.new, step.ok) == ("review_status@v1", "review_status@v1.1", False)
        assert any(c.kind == "enum-narrowed" for c in step.changes)

    def test_breaking_major_passes(self, tmp_path: Path) -> None:
        """The same narrowing in v2 is allowed: it is a new major version."""
        add_version(tmp_path, "v1", 1, 0, narrow=False)
        add_version(tmp_path, "v2", 2, 0, narrow=True)
        (step,) = contract_history(ContractSet.load(tmp_path))
        assert step.ok
        assert step.new_major
