"""The toolgate command line: a table of handlers, an example in every --help, one line per error."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from toolgate import cli
from toolgate._codes import CODES, STAGES
from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli import _contracts

from tests import ROOT
from tests.unit.builders import CONTRACTS


def _subcommands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command of the parser, walked from argparse itself rather than the table."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*words, name), sub
                yield from _subcommands(sub, (*words, name))


PATHS = sorted(words for words, _ in _subcommands(cli.build_parser()))
LEAVES = sorted(
    words
    for words, sub in _subcommands(cli.build_parser())
    if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _examples(help_text: str) -> list[str]:
    """The command lines of a help text's example section (comments after two spaces dropped)."""
    match = re.search(r"^examples?:\n((?:  .*\n?)+)", help_text, re.MULTILINE)
    assert match, "no example section"
    return [re.split(r"\s{2,}", line.strip())[0] for line in match.group(1).splitlines()]


def _closed_port() -> int:
    """A loopback port nothing listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestTable:
    """Commands come from one table; shared options are declared once."""

    def test_the_walk_finds_every_command(self) -> None:
        """The parser offers every command of the table, and only those."""
        assert sorted(command.words for command in cli.COMMANDS) == PATHS
        assert ("contracts", "diff") in PATHS
        assert ("quarantine", "tail") in PATHS

    @pytest.mark.parametrize("words", LEAVES, ids=" ".join)
    def test_every_leaf_has_a_handler(self, words: tuple[str, ...]) -> None:
        """Each runnable command maps to a handler function of the table."""
        (command,) = [c for c in cli.COMMANDS if c.words == words]
        assert callable(command.handler)

    @pytest.mark.parametrize("option", ["--contracts", "--keyring", "--config", "--bootstrap", "--now"])
    def test_shared_options_are_declared_once(self, option: str) -> None:
        """Each shared option is added in one place of the cli package (a parent parser), not per command."""
        trees = [
            ast.parse(path.read_text(encoding="utf-8")) for path in Path(cli.__file__).parent.glob("*.py")
        ]
        adds = [
            node
            for tree in trees
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and any(isinstance(a, ast.Constant) and a.value == option for a in node.args)
        ]
        # --config and --keyring also exist once more: on the top level, and demo's signing keys.
        assert len(adds) == {"--config": 2, "--keyring": 2}.get(option, 1)

    def test_shared_option_reaches_several_commands(self) -> None:
        """The one --contracts declaration is offered by every command that loads contracts."""
        parser = cli.build_parser()
        for words in (["check", "x"], ["contracts", "test"], ["run"], ["replay"], ["demo"]):
            assert parser.parse_args([*words, "--contracts", "elsewhere"]).contracts == "elsewhere"


class TestHelp:
    """Every command and sub-command explains itself and shows an example."""

    @pytest.mark.parametrize("words", PATHS, ids=" ".join)
    def test_help_ends_with_an_example(
        self, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--help exits 0 and its last section is an example of this very command."""
        code, out, _ = _run([*words, "--help"], capsys)
        assert code == 0
        last = out.rstrip().split("\n\n")[-1]
        assert re.match(r"examples?:\n", last)
        for example in _examples(last):
            assert example.split("toolgate ", 1)[1].startswith(" ".join(words))

    @pytest.mark.parametrize("words", PATHS, ids=" ".join)
    def test_examples_parse(self, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
        """Every example in a --help is a command line the parser accepts."""
        _run([*words, "--help"], capsys)
        cli.main([*words, "--help"])
        for example in _examples(capsys.readouterr().out):
            argv = shlex.split(example.split("toolgate ", 1)[1])
            cli.build_parser().parse_args(argv)

    def test_top_level_help_lists_examples(self, capsys: pytest.CaptureFixture[str]) -> None:
        """toolgate --help has examples too, and names the exit codes."""
        code, out, _ = _run(["--help"], capsys)
        assert code == 0
        assert "examples:" in out
        assert "Exit codes" in out

    def test_the_example_check_can_fail(self) -> None:
        """A help text without an example section is caught."""
        with pytest.raises(AssertionError):
            _examples("usage: toolgate x\n\noptions:\n  -h, --help\n")


def _bad_contracts(tmp_path: Path) -> Path:
    folder = tmp_path / "contracts" / "broken_tool" / "v1"
    folder.mkdir(parents=True)
    (folder / "contract.yaml").write_text("tool: broken_tool\nlimits: [unclosed\n", encoding="utf-8")
    return tmp_path / "contracts"


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    """(argv, a fragment the one error line must hold) for inputs every command must refuse."""
    bad_toml = tmp / "bad.toml"
    bad_toml.write_text("bootstrap = \n", encoding="utf-8")
    unknown_key = tmp / "unknown.toml"
    unknown_key.write_text('no_such_setting = "x"\n', encoding="utf-8")
    not_json = tmp / "not.json"
    not_json.write_text("{", encoding="utf-8")
    array = tmp / "array.json"
    array.write_text("[]", encoding="utf-8")
    request = tmp / "request.json"
    request.write_text('{"request_id": "r"}', encoding="utf-8")
    keyring = tmp / "keyring.toml"
    keyring.write_text("[keys\n", encoding="utf-8")
    result = tmp / "result.json"
    result.write_text("{}", encoding="utf-8")
    missing = str(tmp / "missing")
    broken = str(_bad_contracts(tmp))
    good = str(CONTRACTS)
    return [
        (["check", missing], "missing"),
        (["check", "--contracts", missing, str(result)], "missing"),
        (["check", "--contracts", broken, str(result)], "contract.yaml"),
        (["check", "--contracts", good, "--request", missing, str(result)], "missing"),
        (["check", "--contracts", good, "--request", str(not_json), str(result)], "not.json"),
        (["check", "--contracts", good, "--request", str(request), str(result)], "request.json"),
        (["check", "--contracts", good, "--header", "no-equals", str(result)], "--header"),
        (["check", "--contracts", good, "--now", "yesterday", str(result)], "--now"),
        (["check", "--contracts", good, "--now", "2026-05-01T12:00:00", str(result)], "offset"),
        (["check", "--contracts", good, "--keyring", missing, str(result)], "missing"),
        (["check", "--contracts", good, "--keyring", str(keyring), str(result)], "keyring.toml"),
        (["--config", missing, "check", str(result)], "missing"),
        (["check", "--config", str(bad_toml), str(result)], "bad.toml"),
        (["check", "--config", str(unknown_key), str(result)], "no_such_setting"),
        (["contracts", "test", "--contracts", missing], "missing"),
        (["contracts", "test", "--contracts", broken], "contract.yaml"),
        (["contracts", "test", "--contracts", good, "--keyring", missing], "missing"),
        (["contracts", "lint", "--contracts", broken], "contract.yaml"),
        (["contracts", "history", "--contracts", missing], "missing"),
        (["contracts", "diff", missing, missing], "missing"),
        (["contracts", "diff", str(not_json), str(not_json)], "not valid JSON"),
        (["contracts", "diff", str(array), str(array)], "JSON object"),
        (
            ["contracts", "import-mcp", "--server", "s", "--tools-list", missing, "--contracts", str(tmp)],
            "missing",
        ),
        (
            [
                "contracts",
                "import-mcp",
                "--server",
                "s",
                "--tools-list",
                str(not_json),
                "--contracts",
                str(tmp),
            ],
            "JSON",
        ),
        (["contracts", "diff", f"{broken}/broken_tool/v1", f"{good}/job_status/v1"], "contract.yaml"),
        (["demo", "--keyring", missing], "missing"),
        (["replay", "--since", "soon"], "--since"),
        (["replay", "--origin", "two"], "--origin"),
        (["replay", "--contracts", broken], "contract.yaml"),
        (["topics", "ensure", "--config", str(unknown_key)], "no_such_setting"),
        (["acls", "plan", "--config", str(bad_toml)], "bad.toml"),
        (["top", "--interval", "0"], "--interval"),
        (["top", "--once", "--url", "ftp://127.0.0.1/metrics"], "http"),
        (["quarantine", "tail", "--config", missing], "missing"),
        (["run", "--batch-size", "0"], "--batch-size"),
        (["demo", "--count", "many"], "--count"),
        (["quarantine", "tail", "-n", "0"], "-n"),
        (["acls", "plan", "--format", "yaml"], "--format"),
        (["contracts"], "required"),
        (["nonsense"], "invalid choice"),
    ]


class TestBadInput:
    """Bad input gives exit 2 and one line naming the problem, never a traceback."""

    def test_every_bad_input_is_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Missing and malformed files, bad TOML, a broken contracts folder, bad values."""
        for name in [n for n in os.environ if n.startswith("TOOLGATE_")]:
            monkeypatch.delenv(name)
        for argv, fragment in _bad_inputs(tmp_path):
            code, out, err = _run(argv, capsys)
            lines = err.splitlines()
            assert (code, len(lines)) == (2, 1), (argv, err)
            assert lines[0].startswith("toolgate"), (argv, err)
            assert fragment in lines[0], (argv, err)
            assert "Traceback" not in out + err

    @pytest.mark.parametrize("words", LEAVES, ids=" ".join)
    def test_unknown_option(self, words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
        """Every command refuses an option it does not know, in one line."""
        positionals = {
            ("check",): ["r.json"],
            ("contracts", "diff"): ["a", "b"],
            ("contracts", "pull"): ["pulled"],
            ("contracts", "publish"): ["--publisher-key", "p"],
            ("contracts", "import-mcp"): ["--server", "s", "--tools-list", "t.json"],
            ("contracts", "rebound"): ["folder"],
            ("mcp-proxy",): ["--server", "s", "--upstream-url", "http://127.0.0.1:1/mcp"],
            ("topics", "grow"): ["--partitions", "6"],
        }.get(words, [])
        code, _, err = _run([*words, *positionals, "--no-such-option"], capsys)
        assert code == 2
        assert len(err.splitlines()) == 1
        assert "--no-such-option" in err

    def test_bad_environment(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A TOOLGATE_* variable of the wrong type is named in one line."""
        monkeypatch.setenv("TOOLGATE_METRICS_PORT", "lots")
        code, _, err = _run(["contracts", "history", "--contracts", str(CONTRACTS)], capsys)
        assert code == 2
        assert len(err.splitlines()) == 1
        assert "metrics_port" in err

    def test_a_multi_line_message_is_folded(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An error whose text spans lines (a YAML parser's) still prints as one line."""

        def broken(args: argparse.Namespace, config: Config) -> int:
            raise ConfigError("contract.yaml: while parsing\n  in line 2\nexpected ']'")

        monkeypatch.setattr(_contracts, "_contracts_history", broken)
        monkeypatch.setattr(
            cli,
            "COMMANDS",
            tuple(
                cli.Command(c.words, c.help, c.description, c.examples, broken, c.shared, c.arguments)
                if c.words == ("contracts", "history")
                else c
                for c in cli.COMMANDS
            ),
        )
        code, _, err = _run(["contracts", "history"], capsys)
        assert code == 2
        assert err == "toolgate: contract.yaml: while parsing in line 2 expected ']'\n"

    def test_a_bug_is_one_line_too(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An unexpected exception is reported in one line with exit 1, not a traceback."""

        def buggy(args: argparse.Namespace, config: Config) -> int:
            raise KeyError("oops")

        monkeypatch.setattr(
            cli,
            "COMMANDS",
            tuple(
                cli.Command(c.words, c.help, c.description, c.examples, buggy, c.shared, c.arguments)
                if c.words == ("contracts", "history")
                else c
                for c in cli.COMMANDS
            ),
        )
        code, _, err = _run(["contracts", "history"], capsys)
        assert code == 1
        assert err.startswith("toolgate: unexpected error: KeyError")
        assert len(err.splitlines()) == 1


BROKER_COMMANDS = [
    ["topics", "ensure"],
    ["acls", "apply"],
    ["acls", "list"],
    ["quarantine", "tail"],
    ["quarantine", "summary"],
    ["acls", "apply", "--adapter", "User:connector-7"],
    ["replay"],
    ["replay", "--apply"],
    ["demo", "--count", "2", "--wait", "5"],
]


def _toolgate(argv: list[str], port: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env["TOOLGATE_BOOTSTRAP"] = f"127.0.0.1:{port}"
    env["TOOLGATE_METRICS_PORT"] = "0"  # a free port: 9464 may be make run's demo worker's
    return subprocess.run(
        [sys.executable, "-m", "toolgate.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
        check=False,
    )


class TestBrokerDown:
    """With nothing listening at the bootstrap address every Kafka command says so in one line."""

    @pytest.mark.parametrize("argv", BROKER_COMMANDS, ids=" ".join)
    def test_one_line_exit_2(self, argv: list[str]) -> None:
        """Exit 2 and one line naming the address, as a user sees it (a fresh process)."""
        port = _closed_port()
        done = _toolgate(argv, port)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"toolgate: cannot reach the Kafka broker at 127.0.0.1:{port} "
            "(is it running? --bootstrap or TOOLGATE_BOOTSTRAP names it)"
        ]

    def test_run_logs_it_as_json(self) -> None:
        """The worker's output stays JSON: every line parses, one error names the address."""
        port = _closed_port()
        done = _toolgate(["run", "--burst", "--keyring", "contracts/fixtures-keyring.toml"], port)
        assert done.returncode == 2, done.stderr
        lines = [json.loads(line) for line in done.stderr.splitlines()]
        errors = [line for line in lines if line["logger"] == "toolgate" and line["level"] == "error"]
        assert [e["event"] for e in errors] == [
            f"cannot reach the Kafka broker at 127.0.0.1:{port} "
            "(is it running? --bootstrap or TOOLGATE_BOOTSTRAP names it)"
        ]
        assert "Traceback" not in done.stderr

    def test_run_while_the_default_metrics_port_is_held(self) -> None:
        """Another process on 127.0.0.1:9464 (make run's demo worker) changes nothing here."""
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", 9464))  # held by this test, or by someone else already
            holder.listen()
        except OSError:
            pass
        try:
            done = _toolgate(
                ["run", "--burst", "--keyring", "contracts/fixtures-keyring.toml"], _closed_port()
            )
        finally:
            holder.close()
        assert done.returncode == 2, done.stderr
        assert "address already in use" not in done.stderr
        assert "cannot reach the Kafka broker" in done.stderr

    @pytest.mark.parametrize("case", ["contracts", "config", "keyring"])
    def test_run_bad_input_is_one_json_line(self, case: str, tmp_path: Path) -> None:
        """The worker refuses a broken contracts folder, bad TOML or a missing keyring in one
        JSON error line (run is not called in-process: it configures the process's logging)."""
        bad_toml = tmp_path / "bad.toml"
        bad_toml.write_text("bootstrap = \n", encoding="utf-8")
        argv, fragment = {
            "contracts": (["--contracts", str(_bad_contracts(tmp_path))], "contract.yaml"),
            "config": (["--config", str(bad_toml)], "bad.toml"),
            "keyring": (["--keyring", str(tmp_path / "missing"), "--contracts", str(CONTRACTS)], "missing"),
        }[case]
        done = _toolgate(["run", *argv], _closed_port())
        assert done.returncode == 2, done.stderr
        (line,) = [json.loads(text) for text in done.stderr.splitlines()]
        assert line["level"] == "error"
        assert fragment in line["event"]

    def test_bootstrap_flag_wins_over_the_environment(self) -> None:
        """--bootstrap names the broker in the error, over TOOLGATE_BOOTSTRAP."""
        port, other = _closed_port(), _closed_port()
        done = _toolgate(["topics", "ensure", "--bootstrap", f"127.0.0.1:{other}"], port)
        assert done.returncode == 2
        assert f"127.0.0.1:{other}" in done.stderr


class TestTopDown:
    """toolgate top, the one command that reads HTTP: a closed port is one line too."""

    def test_closed_port(self) -> None:
        """Exit 2 and one line naming the URL."""
        port = _closed_port()
        done = _toolgate(["top", "--once", "--url", f"http://127.0.0.1:{port}/metrics"], port)
        assert done.returncode == 2
        (line,) = done.stderr.splitlines()
        assert f"http://127.0.0.1:{port}/metrics" in line


FILTERED = [["replay"], ["quarantine", "tail"], ["quarantine", "summary"]]


class TestFilters:
    """replay and quarantine refuse a code or stage that does not exist, listing the valid ones."""

    @pytest.mark.parametrize("words", FILTERED, ids=" ".join)
    def test_unknown_code(self, words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        """Exit 2 and one line holding every valid code."""
        code, _, err = _run([*words, "--code", "SCHEMA_VIOLATON"], capsys)
        assert code == 2
        (line,) = err.splitlines()
        assert "'SCHEMA_VIOLATON' is not a rejection code" in line
        assert [c for c in CODES if c not in line] == []

    @pytest.mark.parametrize("words", FILTERED, ids=" ".join)
    def test_unknown_stage(self, words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
        """Exit 2 and one line holding every stage."""
        code, _, err = _run([*words, "--stage", "semantics"], capsys)
        assert code == 2
        (line,) = err.splitlines()
        assert "'semantics' is not a stage" in line
        assert [s for s in STAGES if s not in line] == []

    @pytest.mark.parametrize("words", FILTERED, ids=" ".join)
    def test_any_case_is_read(self, words: list[str]) -> None:
        """A code or stage typed in another case is the same filter."""
        args = cli.build_parser().parse_args([*words, "--code", "bad_signature", "--stage", "Semantic"])
        codes = args.code if isinstance(args.code, list) else [args.code]
        stages = args.stage if isinstance(args.stage, list) else [args.stage]
        assert (codes, stages) == (["BAD_SIGNATURE"], ["semantic"])

    @pytest.mark.parametrize("words", FILTERED, ids=" ".join)
    def test_unknown_tool_warns_and_goes_on(
        self, words: list[str], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unknown --tool is a warning naming the known tools; the command still runs (here it
        then finds no broker)."""
        port = _closed_port()
        code, _, err = _run(
            [
                *words,
                "--tool",
                "review_statu",
                "--bootstrap",
                f"127.0.0.1:{port}",
                "--contracts",
                str(CONTRACTS),
            ],
            capsys,
        )
        warning, failure = err.splitlines()
        assert warning.startswith("toolgate: warning: --tool 'review_statu' is not a tool")
        assert "review_status" in warning
        assert "cannot reach the Kafka broker" in failure
        assert code == 2

    def test_known_tool_does_not_warn(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A tool that a contract names passes without a warning."""
        port = _closed_port()
        _, _, err = _run(
            ["quarantine", "tail", "--tool", "review_status", "--bootstrap", f"127.0.0.1:{port}"], capsys
        )
        assert "warning" not in err


class TestRunConfigurationLog:
    """The worker logs the configuration in force at start-up, flags included."""

    def test_flags_show_in_the_configuration_line(self) -> None:
        """--bootstrap, --contracts and --batch-size appear with the values given."""
        port = _closed_port()
        done = _toolgate(
            [
                "run",
                "--burst",
                "--batch-size",
                "7",
                "--contracts",
                str(CONTRACTS),
                "--keyring",
                str(CONTRACTS / "fixtures-keyring.toml"),
                "--metrics-host",
                "127.0.0.2",
            ],
            port,
        )
        first = json.loads(done.stderr.splitlines()[0])
        assert first["event"] == "configuration"
        assert first["config"]["bootstrap"] == f"127.0.0.1:{port}"
        assert first["config"]["contracts_dir"] == str(CONTRACTS)
        assert first["config"]["metrics_host"] == "127.0.0.2"
        assert first["options"]["batch_size"] == 7
        assert first["options"]["burst"] is True
        assert "review_status@v1" in first["contracts"]
