"""Every name check matches the whole name: a trailing newline is never a valid name."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from toolgate._errors import ConfigError, ContractError
from toolgate.gate._contracts import load_contract
from toolgate.gate._records import request_key
from toolgate.mcp._import import import_listing

from tests import ROOT

PACKAGE = ROOT / "worker" / "toolgate"
_COMPILED = re.compile(r"""^(\w+)\s*=\s*re\.compile\(\s*r?["'](\^[^"']*\$)["']""", re.MULTILINE)


def _anchored_patterns() -> list[tuple[Path, str]]:
    """Every module-level ``NAME = re.compile(r"^...$")`` in the package."""
    return [
        (path, match[1]) for path in PACKAGE.rglob("*.py") for match in _COMPILED.finditer(path.read_text())
    ]


class TestEveryNameCheckIsAFullMatch:
    """No anchored name pattern of the package is used with match() or search()."""

    def test_the_scan_finds_the_name_patterns(self) -> None:
        """The scan sees the name checks it is meant to police (it cannot pass by finding none)."""
        names = {name for _, name in _anchored_patterns()}
        assert {"_TOOL_NAME", "MCP_SERVER_NAME", "MCP_TOOL_NAME", "_ERROR_CODE", "SAFE_ID"} <= names

    def test_anchored_patterns_are_only_full_matched(self) -> None:
        """``$`` admits a trailing newline under match() and search(): only fullmatch() is used."""
        uses = [
            f"{path.relative_to(ROOT)}: {name}.{how}("
            for path, name in _anchored_patterns()
            for other in PACKAGE.rglob("*.py")
            for how in re.findall(rf"\b{re.escape(name)}\.(match|search)\(", other.read_text())
        ]
        assert uses == []

    def test_no_inline_anchored_match(self) -> None:
        """No re.match/re.search with a ``^...$`` pattern written in place."""
        inline = re.compile(r"""re\.(match|search)\(\s*r?["']\^[^"']*\$["']""")
        found = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py") if inline.search(p.read_text())]
        assert found == []


def _contract(tmp_path: Path, **changes: object) -> Path:
    """A copy of the bundled job_status v1 with ``changes`` applied to its contract.yaml."""
    source = next((ROOT / "contracts" / "job_status").glob("v*"))
    folder = tmp_path / "job_status" / source.name
    shutil.copytree(source, folder)
    spec = yaml.safe_load((folder / "contract.yaml").read_text())
    for key, value in changes.items():
        target = spec
        *path, last = key.split(".")
        for token in path:
            target = target.setdefault(token, {})
        target[last] = value
    (folder / "contract.yaml").write_text(yaml.safe_dump(spec))
    return folder


class TestTrailingNewlines:
    """Each place a name is checked refuses the name followed by a newline."""

    def test_the_unchanged_copy_loads(self, tmp_path: Path) -> None:
        """The helper's contract is valid as it is: the refusals below are the newline's."""
        load_contract(_contract(tmp_path))

    @pytest.mark.parametrize(
        ("changes", "where"),
        [
            ({"tool": "job_status\n"}, "$.tool"),
            ({"retry.retryable_codes": ["UPSTREAM_UNAVAILABLE\n"]}, "$.retry"),
            (
                {"tool": "srv.job_status", "mcp": {"server": "srv\n", "tool": "job_status"}},
                "$.mcp.server",
            ),
            ({"tool": "srv.job_status", "mcp": {"server": "srv", "tool": "job_status\n"}}, "$.mcp.tool"),
            (
                {
                    "tool": "srv.job_status",
                    "mcp": {"server": "srv", "tool": "job_status", "error_code": "E\n"},
                },
                "$.mcp.error_code",
            ),
        ],
    )
    def test_contract_names(self, tmp_path: Path, changes: dict[str, object], where: str) -> None:
        """Tool, MCP server, MCP tool and error code names in contract.yaml."""
        with pytest.raises(ContractError) as caught:
            load_contract(_contract(tmp_path, **changes))
        assert caught.value.path.startswith(where), caught.value

    def test_request_ids_in_kafka_keys(self) -> None:
        """A key with a trailing newline names no request."""
        assert request_key(b"req.1") == "req.1"
        assert request_key(b"req.1\n") == ""

    def test_import_mcp_names(self, tmp_path: Path) -> None:
        """--server and a listed tool's name."""
        with pytest.raises(ConfigError, match="--server"):
            import_listing(tmp_path, "srv\n", [], out=lambda _line: None)
        lines: list[str] = []
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
        import_listing(tmp_path, "srv", [{"name": "deploy\n", "outputSchema": schema}], out=lines.append)
        assert lines[0].startswith("refused: tool 'deploy\\n': not an MCP tool name")
