"""A contract that cannot be used fails at load time, naming its file and the path of the mistake."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from toolgate._errors import ContractError
from toolgate.gate._contracts import ContractSet, load_contract, parse_pointer, resolve

from tests.unit.builders import CONTRACTS


def _copy(tmp_path: Path, tool: str) -> Path:
    folder = tmp_path / tool / "v1"
    shutil.copytree(CONTRACTS / tool / "v1", folder)
    return folder


def _edit(folder: Path, old: str, new: str) -> None:
    path = folder / "contract.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


# (tool, text in contract.yaml, its replacement, the path the error must name, a word of the message)
SPEC_MISTAKES = [
    ("job_status", "tool: job_status", "tool: Job-Status", "$.tool", "must match"),
    ("job_status", "version: 1", "version: 2", "$.version", "sits in folder"),
    ("job_status", "max_bytes: 4096", "max_bytes: 0", "$.limits.max_bytes", "must be in"),
    ("job_status", "max_depth: 4", "max_depth: 100000", "$.limits.max_depth", "must be in"),
    ("job_status", "[UPSTREAM_UNAVAILABLE]", "[upstream down]", "$.retry.retryable_codes[0]", "error code"),
    ("job_status", "max_length: 200", "max_length: 0", "$.display_text[0].max_length", "must be in"),
    (
        "job_status",
        "  - /data/observed_at\n",
        "  - /data/observed_at\n  - /data/summary\n",
        "$.display_text[0].pointer",
        "projected",
    ),
    ("job_status", "max_age_seconds: 900", "max_age_seconds: 0", "$.rules[1]", "positive"),
    ("job_status", "  - /data/project_id\n", "  - /project_id\n", "$.projection[0]", "inside /data"),
    ("job_status", "  - /data/project_id\n", "  - data/project_id\n", "$.projection[0]", "start with '/'"),
    (
        "job_status",
        "  - pointer: /data/summary",
        "  - pointer: /data/~2",
        "$.display_text[0].pointer",
        "escape",
    ),
    ("job_status", "    pointer: /data/run_id", "    pointer: /run_id", "$.rules[2].pointer", "inside /data"),
    ("job_status", "schema: schema.json", "schema: ../schema.json", "$.schema", "beside"),
    ("job_status", "schema: schema.json", "schema: absent.json", "$.schema", "cannot read"),
    (
        "service_state",
        "text_pattern: '(?P<state>",
        "text_pattern: '(?P<state",
        "$.text_pattern",
        "regular expression",
    ),
    ("service_state", "(?P<state>active", "(active", "$.text_pattern", "named groups"),
    (
        "service_state",
        "content_type: text/plain\n",
        "content_type: application/json\n",
        "$.text_pattern",
        "only text/plain",
    ),
    ("service_state", "text_pattern: '", "other: x\ntext_pattern: '", "", "unknown field `other`"),
]


class TestSpecMistakes:
    """Every rule of the contract file is checked, each with its own message and path."""

    @pytest.mark.parametrize(("tool", "old", "new", "path", "word"), SPEC_MISTAKES, ids=lambda v: str(v)[:30])
    def test_mistake_is_named(
        self, tmp_path: Path, tool: str, old: str, new: str, path: str, word: str
    ) -> None:
        """The error names contract.yaml, the path of the mistake and what is wrong."""
        folder = _copy(tmp_path, tool)
        _edit(folder, old, new)
        with pytest.raises(ContractError) as caught:
            load_contract(folder)
        assert caught.value.path == path
        assert word in str(caught.value)
        assert caught.value.file.endswith("contract.yaml")

    def test_text_contract_without_pattern(self, tmp_path: Path) -> None:
        """A text/plain contract must say how to extract its fields."""
        folder = _copy(tmp_path, "service_state")
        path = folder / "contract.yaml"
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if "text_pattern" not in line]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with pytest.raises(ContractError, match="need text_pattern"):
            load_contract(folder)

    def test_the_unchanged_copy_loads(self, tmp_path: Path) -> None:
        """The copies the cases start from are valid contracts."""
        for tool in ("job_status", "service_state"):
            assert load_contract(_copy(tmp_path, tool)).spec.tool == tool


class TestFiles:
    """Unreadable or malformed files are named."""

    def test_missing_contract_file(self, tmp_path: Path) -> None:
        """A version folder without contract.yaml cannot be read."""
        (tmp_path / "job_status" / "v1").mkdir(parents=True)
        with pytest.raises(ContractError, match="cannot read"):
            load_contract(tmp_path / "job_status" / "v1")

    def test_yaml_that_does_not_parse(self, tmp_path: Path) -> None:
        """Broken YAML is reported as such."""
        folder = _copy(tmp_path, "job_status")
        (folder / "contract.yaml").write_text("tool: [job_status\n", encoding="utf-8")
        with pytest.raises(ContractError, match="not valid YAML"):
            load_contract(folder)

    @pytest.mark.parametrize(("content", "word"), [("{", "not valid JSON"), ("[]", "JSON object")])
    def test_bad_schema_file(self, tmp_path: Path, content: str, word: str) -> None:
        """The schema file must hold a JSON object; the error names the schema file."""
        folder = _copy(tmp_path, "job_status")
        (folder / "schema.json").write_text(content, encoding="utf-8")
        with pytest.raises(ContractError, match=word) as caught:
            load_contract(folder)
        assert caught.value.file.endswith("schema.json")

    def test_schema_that_does_not_compile(self, tmp_path: Path) -> None:
        """A schema the validator refuses is a contract error, not a crash at the first message."""
        folder = _copy(tmp_path, "job_status")
        (folder / "schema.json").write_text('{"type": 12}', encoding="utf-8")
        with pytest.raises(ContractError, match="does not compile"):
            load_contract(folder)

    def test_folder_without_contracts(self, tmp_path: Path) -> None:
        """A folder with no <tool>/v<N>/contract.yaml says what it expected."""
        with pytest.raises(ContractError, match="no contracts found"):
            ContractSet.load(tmp_path)


class TestPointers:
    """JSON Pointers resolve through objects and arrays, and a miss is MISSING, not an error."""

    def test_through_an_array(self) -> None:
        """An index token walks into a list."""
        assert resolve({"a": [{"b": 1}, {"b": 2}]}, parse_pointer("/a/1/b")) == 2

    @pytest.mark.parametrize("pointer", ["/a/5/b", "/a/x", "/a/0/b/c", "/z"])
    def test_a_miss(self, pointer: str) -> None:
        """Past the end, a name into a list, into a scalar, or an absent member: MISSING."""
        from toolgate.gate._contracts import MISSING

        assert resolve({"a": [{"b": 1}]}, parse_pointer(pointer)) is MISSING

    def test_escapes(self) -> None:
        """~1 is a slash and ~0 a tilde inside a token; the empty pointer is the whole document."""
        assert parse_pointer("/a~1b/c~0d") == ("a/b", "c~d")
        assert parse_pointer("") == ()


class TestSelection:
    """Which version decides, and the selection cache's bound."""

    def test_retired_version_does_not_decide_without_adapter_version(self, tmp_path: Path) -> None:
        """With no tg-adapter-version, a retired version is skipped."""
        folder = _copy(tmp_path, "job_status")
        _edit(folder, "status: active", "status: retired")
        contracts = ContractSet.load(tmp_path)
        assert contracts.select("job_status", None) is None
        assert contracts.select("job_status", "2.0.1") is not None

    def test_cache_stays_bounded(self, contracts: ContractSet) -> None:
        """Many distinct adapter versions never grow the selection cache past its bound."""
        for i in range(5000):
            contracts.select("review_status", f"9.{i}")
        assert len(contracts._selected) <= 4096
        assert contracts.select("review_status", "1.4.2") is not None
