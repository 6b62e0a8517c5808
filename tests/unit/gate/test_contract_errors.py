"""A contract that cannot be used fails at load time, naming its file and the path of the mistake."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate._errors import ContractError
from toolgate.gate._contracts import ContractSet, compile_text_pattern, load_contract, parse_pointer, resolve
from toolgate.gate._gate import Gate

from tests import ROOT
from tests.properties import DERANDOMIZED
from tests.unit.builders import (
    CONTRACTS,
    NOW,
    PROBES,
    REQUEST_ID,
    copy_tool,
    message,
    review_request,
    review_value,
)


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

    def test_a_relative_folder_not_found_is_named_whole(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A relative path that is not there: the absolute path, the working directory it was
        taken from, and the settings that name another folder."""
        monkeypatch.chdir(tmp_path)
        with pytest.raises(ContractError) as caught:
            ContractSet.load("contracts")
        text = str(caught.value)
        assert text.startswith(f"{tmp_path / 'contracts'}: contracts folder not found")
        assert f"relative to the working directory {tmp_path}" in text
        assert "--contracts DIR or TOOLGATE_CONTRACTS_DIR" in text

    def test_a_file_is_not_a_contracts_folder(self, tmp_path: Path) -> None:
        """A path naming a file says so, with the same hint."""
        (tmp_path / "c.yaml").write_text("x")
        with pytest.raises(ContractError, match="is a file, not a folder; name the contracts folder"):
            ContractSet.load(tmp_path / "c.yaml")


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


CATASTROPHIC = [r"(?P<t>(a|aa)+)", r"(?P<t>(a+)+)", r"(?P<t>(a|a)*)", r"(?P<t>(a*)*b?)", r"(?P<t>(\w+\s?)*)"]


class TestLinearPatterns:
    """Patterns run in linear time: one that needs backtracking is refused at load."""

    @pytest.mark.parametrize("pattern", [r"(?P<a>(?=a)a)", r"(?P<a>a)(?P=a)", r"(?P<a>(?<!b)a)"])
    def test_text_pattern_needing_backtracking_is_refused(self, tmp_path: Path, pattern: str) -> None:
        """Look-around and back-references do not compile on RE2: refused, naming file and field."""
        folder = copy_tool(tmp_path, "service_state", text_pattern=json.dumps(pattern))
        with pytest.raises(ContractError) as caught:
            ContractSet.load(tmp_path)
        assert caught.value.file == str(folder / "contract.yaml")
        assert caught.value.path == "$.text_pattern"
        assert "\n" not in str(caught.value)

    @pytest.mark.parametrize(
        "schema_part",
        [
            {"pattern": "^(?=a)a$"},
            {"patternProperties": {"^(a)\\1$": {}}},
            {"propertyNames": {"pattern": "(?!x)"}},
        ],
    )
    def test_schema_pattern_needing_backtracking_is_refused(
        self, tmp_path: Path, schema_part: dict[str, Any]
    ) -> None:
        """Schema patterns run on jsonschema-rs's linear regex engine: one it cannot compile is
        refused at load, in one line naming the schema file."""
        folder = copy_tool(tmp_path, "review_status")
        schema = json.loads((folder / "schema.json").read_text())
        schema["$defs"]["reviewStatus"]["properties"]["reviewed_by"].update(schema_part)
        (folder / "schema.json").write_text(json.dumps(schema))
        with pytest.raises(ContractError) as caught:
            ContractSet.load(tmp_path)
        assert caught.value.file == str(folder / "schema.json")
        assert "\n" not in str(caught.value)

    @staticmethod
    def cost(run: Any, text: str) -> float:
        """The least CPU time of this thread over 7 runs: a bounded-work comparison, not a
        deadline. Thread CPU time leaves out the time other processes take on a loaded
        machine, and the least of several runs leaves out this thread's own interruptions."""
        samples = []
        for _ in range(7):
            started = time.thread_time()
            run(text)
            samples.append(time.thread_time() - started)
        return min(samples)

    @pytest.mark.parametrize("pattern", [*CATASTROPHIC, "BUNDLED"])
    def test_text_decision_cost_is_linear(self, pattern: str, tmp_path: Path) -> None:
        """Deciding 4x the input costs at most ~4x (bound 12: quadratic is 16, exponential
        never finishes), for the bundled text pattern and classic catastrophic ones."""
        if pattern == "BUNDLED":
            folder = tmp_path / "service_state"
            shutil.copytree(CONTRACTS / "service_state", folder)
        else:
            folder = copy_tool(tmp_path, "service_state", text_pattern=json.dumps(pattern))
        yaml = folder / "v1" / "contract.yaml" if pattern == "BUNDLED" else folder / "contract.yaml"
        yaml.write_text(yaml.read_text().replace("max_bytes: 64", "max_bytes: 65536"))
        gate = Gate(ContractSet.load(tmp_path))
        request = review_request(tool="service_state")

        def decide(text: str) -> None:
            msg = message(
                raw=text.encode(),
                tool="service_state",
                tg_content_type="text/plain",
                tg_adapter_version="1.0.3",
            )
            gate.evaluate(msg, request, NOW)

        small, large = (self.cost(decide, "a" * n + "!") for n in (4000, 16000))
        assert large / small < 12, (pattern, small, large)

    @pytest.mark.parametrize("pattern", ["^(a+)+$", "^(a|aa)+$", "^(a|a)*$", "^([a-z]+)*[0-9]$"])
    def test_schema_decision_cost_is_linear(self, pattern: str, tmp_path: Path) -> None:
        """The same bound for schema patterns, through the whole gate."""
        folder = copy_tool(tmp_path, "review_status")
        schema = json.loads((folder / "schema.json").read_text())
        field = schema["$defs"]["reviewStatus"]["properties"]["reviewed_by"]
        field.update(pattern=pattern, maxLength=20000)
        (folder / "schema.json").write_text(json.dumps(schema))
        (folder / "contract.yaml").write_text(
            (folder / "contract.yaml").read_text().replace("max_bytes: 2048", "max_bytes: 65536")
        )
        gate = Gate(ContractSet.load(tmp_path))

        def decide(text: str) -> None:
            gate.evaluate(message(review_value(reviewed_by=text)), review_request(), NOW)

        small, large = (self.cost(decide, "a" * n + "!") for n in (4000, 16000))
        assert large / small < 12, (pattern, small, large)

    def test_every_bundled_pattern_compiles_on_re2(self) -> None:
        """Every pattern in the bundled and corpus contracts is RE2 syntax (no backtracking)."""
        found = 0
        for root in (CONTRACTS, ROOT / "tests" / "corpus" / "contracts", PROBES):
            for contract in ContractSet.load(root):
                stack: list[Any] = [contract.schema]
                while stack:
                    node = stack.pop()
                    if isinstance(node, dict):
                        if isinstance(node.get("pattern"), str):
                            compile_text_pattern(node["pattern"], str(contract.schema_path), "pattern")
                            found += 1
                        stack.extend(node.values())
                    elif isinstance(node, list):
                        stack.extend(node)
        assert found > 10


class TestProjectionOverlaps:
    """Projected and displayed pointers never repeat, nest or share a display name."""

    @pytest.mark.parametrize(
        ("projection", "field"),
        [
            ("[/data/change_id, /data/change_id/b]", "$.projection[1]"),
            ("[/data/change_id/b, /data/change_id]", "$.projection[1]"),
            ("[/data/change_id, /data/change_id]", "$.projection[1]"),
        ],
    )
    def test_overlap_is_a_contract_error(self, tmp_path: Path, projection: str, field: str) -> None:
        """Pointers that repeat or nest are refused at load, naming file and field."""
        folder = copy_tool(tmp_path, "review_status", projection=projection)
        with pytest.raises(ContractError) as caught:
            ContractSet.load(tmp_path)
        assert (caught.value.file, caught.value.path) == (str(folder / "contract.yaml"), field)

    def test_display_names_collide(self, tmp_path: Path) -> None:
        """Two display texts with the same last token would share untrusted_text.<name>."""
        copy_tool(
            tmp_path,
            "review_status",
            projection="[/data/change_id]",
            display_text="[{pointer: /data/reviewed_by, max_length: 9},"
            " {pointer: /data/x/reviewed_by, max_length: 9}]",
        )
        with pytest.raises(ContractError) as caught:
            ContractSet.load(tmp_path)
        assert caught.value.path == "$.display_text[1].pointer"

    @settings(DERANDOMIZED, max_examples=60)
    @given(
        projection=st.lists(st.lists(st.sampled_from("abc"), min_size=1, max_size=3), min_size=1, max_size=4),
        display=st.lists(st.lists(st.sampled_from("abcd"), min_size=1, max_size=2), max_size=2),
    )
    def test_every_loaded_contract_evaluates(
        self, tmp_path_factory: pytest.TempPathFactory, projection: list[list[str]], display: list[list[str]]
    ) -> None:
        """Any contract shape: the loader refuses it with a ContractError naming the file, or
        the gate builds and accepts a result that fills every declared field."""
        root = tmp_path_factory.mktemp("shapes")
        folder = root / "shape" / "v1"
        folder.mkdir(parents=True)
        tree: dict[str, Any] = {}
        for tokens in projection + display:
            node = tree
            for token in tokens[:-1]:
                child = node.setdefault(token, {})
                node[token] = child if isinstance(child, dict) else {}
                node = node[token]
            node.setdefault(tokens[-1], "leaf")

        def schema_of(node: Any) -> dict[str, Any]:
            if not isinstance(node, dict):
                return {"type": "string", "pattern": "^[a-z]{1,8}$", "maxLength": 8}
            return {
                "type": "object",
                "properties": {k: schema_of(v) for k, v in node.items()},
                "additionalProperties": False,
            }

        def value_of(node: Any) -> Any:
            return {k: value_of(v) for k, v in node.items()} if isinstance(node, dict) else "abc"

        schema = {
            "type": "object",
            "required": ["tool", "request_id", "outcome", "data"],
            "properties": {
                "tool": {"const": "shape"},
                "request_id": {"type": "string", "maxLength": 64},
                "outcome": {"const": "success"},
                "data": schema_of(tree),
            },
            "additionalProperties": False,
        }
        (folder / "schema.json").write_text(json.dumps(schema))
        spec = {
            "tool": "shape",
            "version": 1,
            "status": "active",
            "schema": "schema.json",
            "limits": {"max_bytes": 4096, "max_depth": 8},
            "projection": ["/data/" + "/".join(t) for t in projection],
            "display_text": [{"pointer": "/data/" + "/".join(t), "max_length": 20} for t in display],
        }
        (folder / "contract.yaml").write_text(json.dumps(spec))
        try:
            contracts = ContractSet.load(root)
        except ContractError as exc:
            refused = str(exc)
            assert str(folder / "contract.yaml") in refused
            return
        gate = Gate(contracts)
        value = {"tool": "shape", "request_id": REQUEST_ID, "outcome": "success", "data": value_of(tree)}
        verdict = gate.evaluate(message(value, tool="shape"), review_request(tool="shape"), NOW)

        def holds_object(tokens: list[str]) -> bool:
            node: Any = tree
            for token in tokens:
                node = node[token]
            return isinstance(node, dict)

        if any(holds_object(t) for t in projection):
            # Projected leaves must be scalars: an object fails closed at the project stage.
            assert (verdict.stage, verdict.code) == ("project", "INTERNAL_ERROR"), verdict.diagnostics
        else:
            assert verdict.accepted, verdict.diagnostics


class TestIssuedAt:
    """The freshness rule's skew is a positive number of seconds."""

    def test_freshness_skew_must_be_positive(self, tmp_path: Path) -> None:
        folder = copy_tool(tmp_path, "job_status")
        path = folder / "contract.yaml"
        path.write_text(path.read_text().replace("issued_skew_seconds: 60", "issued_skew_seconds: -1"))
        with pytest.raises(ContractError):
            ContractSet.load(tmp_path)
