"""The documentation holds together: links resolve, and every setting and command has one reference row."""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from toolgate import _config, cli

from tests import ROOT

README = ROOT / "README.md"
README_LIMIT = 10_000  # bytes: one screenful per question, reference material in docs/
PACKAGE = ROOT / "worker" / "toolgate"


def _documents() -> list[Path]:
    """Every Markdown file of the repository (README, CONTRIBUTING, docs/, the runbook, contracts/, ...)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return [ROOT / name for name in out.stdout.splitlines() if (ROOT / name).exists()]


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (duplicates numbered as GitHub does)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(path: Path) -> list[str]:
    """Each relative link of the file whose target file or anchor does not exist."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", _prose(text)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked offline
            continue
        name, _, anchor = target.partition("#")
        file = (path.parent / name).resolve() if name else path
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file.read_text(encoding="utf-8"))):
            broken.append(f"{target}: no such heading")
    return broken


def table_rows(text: str) -> Iterator[str]:
    """The first cell of every body row of every table in a Markdown text."""
    in_table = False
    for line in text.splitlines():
        if re.match(r"^\|(?:\s*:?-+:?\s*\|)+$", line):
            in_table = True
            continue
        if in_table and line.startswith("|"):
            yield re.split(r"(?<!\\)\|", line)[1]
        else:
            in_table = False


def _expand(name: str) -> list[str]:
    """`TOOLGATE_TOPIC_{A,B}` as `TOOLGATE_TOPIC_A`, `TOOLGATE_TOPIC_B`."""
    match = re.fullmatch(r"(\w+)\{([A-Z_,]+)\}(\w*)", name)
    if not match:
        return [name]
    return [f"{match.group(1)}{part}{match.group(3)}" for part in match.group(2).split(",")]


def documented_settings(rows: list[tuple[Path, str]]) -> list[str]:
    """The `TOOLGATE_*` names the first cells of reference rows define, once per row naming them."""
    out = []
    for _, cell in rows:
        for code in re.findall(r"`(TOOLGATE_[A-Z_{},]+)`", cell):
            out.extend(_expand(code))
    return out


def documented_commands(rows: list[tuple[Path, str]]) -> list[tuple[str, ...]]:
    """The command words the first cells of reference rows define (`acls plan \\| apply` is two)."""
    out: list[tuple[str, ...]] = []
    for _, cell in rows:
        match = re.fullmatch(r"\s*`toolgate ([^`]+)`\s*", cell)
        if not match:
            continue
        words: list[str] = []
        alternatives: list[tuple[str, ...]] = []
        tokens = match.group(1).split()
        i = 0
        while i < len(tokens) and re.fullmatch(r"[a-z][a-z-]*", tokens[i]):
            words.append(tokens[i])
            i += 1
        alternatives.append(tuple(words))
        while i + 1 < len(tokens) and tokens[i] == "\\|" and re.fullmatch(r"[a-z][a-z-]*", tokens[i + 1]):
            alternatives.append((*words[:-1], tokens[i + 1]))
            i += 2
        out.extend(alternatives)
    return out


def _rows() -> list[tuple[Path, str]]:
    return [(path, cell) for path in _documents() for cell in table_rows(path.read_text(encoding="utf-8"))]


def settings_in_code() -> set[str]:
    """Every `TOOLGATE_*` setting the package reads.

    The configuration loader's fields (flat names as `_config._from_env` maps them), and every
    `TOOLGATE_*` name read with `environ.get(...)`, `env.get(...)` or `environ[...]` anywhere in
    the package. The local broker script's knobs (`TOOLGATE_KAFKA_*`) are not the package's.
    """
    names: set[str] = set()
    nested = {section: prefix for prefix, section in _config._NESTED.items()}
    for field in msgspec.structs.fields(_config.Config):
        if field.name in nested:
            struct = field.default_factory
            names.update(
                f"TOOLGATE_{nested[field.name]}{inner.name.upper()}"
                for inner in msgspec.structs.fields(struct)
            )
        else:
            names.add(f"TOOLGATE_{field.name.upper()}")
    for source in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            key: ast.expr | None = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
            ):
                key = node.args[0] if node.args else None
            elif isinstance(node, ast.Subscript):
                key = node.slice
            if (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and re.fullmatch(r"TOOLGATE_[A-Z_]+", key.value)
                and not key.value.startswith("TOOLGATE_KAFKA_")
            ):
                names.add(key.value)
    return names


def _walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and words:
        yield words
    for action in subs:
        for name, sub in action.choices.items():
            yield from _walk(sub, (*words, name))


def commands_in_code() -> set[tuple[str, ...]]:
    """Every runnable command of the argparse parser, as its words."""
    return set(_walk(cli.build_parser()))


class TestReadme:
    """The README stays one screenful per question."""

    def test_at_most_ten_kilobytes(self) -> None:
        """README.md is at most 10,000 bytes; reference material lives in docs/."""
        size = len(README.read_bytes())
        assert size <= README_LIMIT, f"README.md is {size} bytes; move reference material to docs/"


class TestLinks:
    """Every relative link and anchor of the Markdown files resolves."""

    @pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
    def test_links_resolve(self, path: Path) -> None:
        """Each link names an existing file, and each #anchor a heading of its file."""
        assert broken_links(path) == []

    def test_the_main_documents_are_checked(self) -> None:
        """README, the docs folder, the runbook and the contract format are among the files checked."""
        names = {str(p.relative_to(ROOT)) for p in _documents()}
        assert {"README.md", "docs/design.md", "ops/RUNBOOK.md", "contracts/README.md"} <= names

    def test_a_missing_file_or_anchor_is_reported(self, tmp_path: Path) -> None:
        """A link to a file that is not there, or to a heading that is not there, is reported."""
        (tmp_path / "other.md").write_text("# Other\n\n## Local SASL/SCRAM broker\n", encoding="utf-8")
        page = tmp_path / "page.md"
        page.write_text(
            "# Page\n\n## `toolgate top`\n\n[a](other.md#local-saslscram-broker) [b](#toolgate-top)"
            " [c](missing.md) [d](other.md#nowhere) [e](#nowhere) [f](https://example.com/x)\n"
            "`[g](not-a-link.md)`\n\n```\n[h](in-code.md)\n```\n",
            encoding="utf-8",
        )
        assert broken_links(page) == [
            "missing.md: no such file",
            "other.md#nowhere: no such heading",
            "#nowhere: no such heading",
        ]

    def test_duplicate_headings_get_numbered_anchors(self) -> None:
        """Two headings of one name give `name` and `name-1`, as GitHub renders them."""
        assert anchors("## Replay\n\ntext\n\n## Replay\n") == {"replay", "replay-1"}


class TestReferenceTables:
    """Every setting the code reads and every command the parser accepts has exactly one reference row."""

    def test_settings_are_found_in_the_code(self) -> None:
        """The loader's fields and the package's environment reads are both found."""
        found = settings_in_code()
        assert {"TOOLGATE_BOOTSTRAP", "TOOLGATE_TOPIC_STATE", "TOOLGATE_SECURITY_SSL_KEYFILE"} <= found
        assert {"TOOLGATE_CONFIG", "TOOLGATE_WORKERS"} <= found
        assert not any(name.startswith("TOOLGATE_KAFKA_") for name in found)

    def test_every_setting_has_one_row(self) -> None:
        """Each `TOOLGATE_*` setting is the first cell of exactly one table row in all the docs."""
        documented = documented_settings(_rows())
        counts = {name: documented.count(name) for name in settings_in_code()}
        assert {name: n for name, n in counts.items() if n != 1} == {}

    def test_no_row_documents_a_setting_the_code_lacks(self) -> None:
        """No reference row names a `TOOLGATE_*` setting that nothing reads."""
        assert set(documented_settings(_rows())) - settings_in_code() == set()

    def test_every_command_has_one_row(self) -> None:
        """Each command of the parser is the first cell of exactly one table row in all the docs."""
        documented = documented_commands(_rows())
        counts = {words: documented.count(words) for words in commands_in_code()}
        assert {" ".join(w): n for w, n in counts.items() if n != 1} == {}

    def test_no_row_documents_a_command_the_parser_lacks(self) -> None:
        """No reference row names a command the parser does not have."""
        assert set(documented_commands(_rows())) - commands_in_code() == set()

    def test_rows_are_read_as_a_reader_would(self) -> None:
        """Brace lists expand to one setting each; `a \\| b` alternatives are commands of their own."""
        rows = [
            (README, " `TOOLGATE_TOPIC_{INTAKE,AGENT}` "),
            (README, " `toolgate acls plan \\| apply \\| list` "),
            (README, " `toolgate check [--request FILE] FILE...` "),
            (README, " the wrong CA (`_SSL_CAFILE`) "),
        ]
        assert documented_settings(rows) == ["TOOLGATE_TOPIC_INTAKE", "TOOLGATE_TOPIC_AGENT"]
        assert documented_commands(rows) == [
            ("acls", "plan"),
            ("acls", "apply"),
            ("acls", "list"),
            ("check",),
        ]

    def test_table_rows_skip_headers_and_prose(self) -> None:
        """Only body rows of tables count: not their header, not a line of prose naming a setting."""
        text = "`TOOLGATE_X` in prose\n\n| variable | default |\n|---|---|\n| `TOOLGATE_Y` | 1 |\n\nafter\n"
        assert list(table_rows(text)) == [" `TOOLGATE_Y` "]


_COUNTS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def topic_counts(text: str) -> list[str]:
    """Every count of topics a text states in words: "the eight topics", "the six Kafka topics"."""
    pattern = rf"\bthe ({'|'.join(_COUNTS)}) (?:Kafka |toolgate )?topics\b"
    return [match.lower() for match in re.findall(pattern, text, re.IGNORECASE)]


class TestTopicCounts:
    """Where the docs and the help count toolgate's topics, the count is the code's, and the MCP quick
    start's advice for a shared broker names every topic's variable."""

    def test_every_stated_count_is_the_codes(self) -> None:
        """Each "the <n> topics" of the Markdown files and the package's texts says how many there are."""
        expected = _COUNTS[len(_config.Topics.__struct_fields__) - 1]
        files = [*_documents(), *PACKAGE.rglob("*.py")]
        wrong = [
            f"{path.relative_to(ROOT)}: the {count} topics"
            for path in files
            for count in topic_counts(path.read_text(encoding="utf-8"))
            if count != expected
        ]
        assert not wrong, f"there are {expected} topics: {wrong}"

    def test_a_wrong_count_is_found(self) -> None:
        """The check reads counts as they are written in prose."""
        assert topic_counts("ensure the six Kafka topics; The Eight topics") == ["six", "eight"]

    def test_the_shared_broker_advice_names_every_topic(self) -> None:
        """docs/mcp.md's shared-broker sentence names the topic prefix first, then lists each
        TOOLGATE_TOPIC_* variable, as many as there are."""
        text = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
        start = text.index("On a broker others use")
        advice = " ".join(text[start : text.index("every command above reads them", start)].split())
        assert advice.index("TOOLGATE_TOPIC_PREFIX") < advice.index("TOOLGATE_TOPIC_REQUESTS")
        missing = [name for name in _config.Topics().env() if name not in advice]
        assert not missing, f"docs/mcp.md's shared-broker advice does not name {missing}"
        count = _COUNTS[len(_config.Topics.__struct_fields__) - 1]
        assert f"for each of the {count}" in advice
