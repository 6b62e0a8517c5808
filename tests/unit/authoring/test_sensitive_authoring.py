"""Authors decide about secrets and personal data: lint asks for the decision, fixtures expect a
redaction, and ``toolgate check`` shows the corpus redacted or rejected as the contract says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from toolgate import cli
from toolgate._errors import ContractError
from toolgate.authoring._fixtures import load_cases, run_case
from toolgate.authoring._lint import lint_contracts
from toolgate.gate import ContractSet, Gate, Keyring

from tests.sensitive_kit import load_corpus, write_notes
from tests.unit.builders import NOW, REQUEST_ID

LEAK = "token ghp_R8d2XkQm4TzW9vLp3NsYb7HcJf6GaE1uKo5D in the log"


def rules(root: Path) -> list[str]:
    return [f.rule for f in lint_contracts(ContractSet.load(root))]


class TestLint:
    """A contract passing free text without a sensitive section is a lint finding."""

    def test_free_text_without_a_decision(self, tmp_path: Path) -> None:
        """free_text and display_text with no sensitive section: sensitive-undecided, naming the first."""
        write_notes(tmp_path)
        found = [f for f in lint_contracts(ContractSet.load(tmp_path)) if f.rule == "sensitive-undecided"]
        assert len(found) == 1
        assert found[0].pointer == "$.sensitive"
        assert found[0].message.startswith("/data/body (and ")

    def test_a_decision_settles_it(self, tmp_path: Path) -> None:
        """Any sensitive section, even the defaults spelt out, settles the finding."""
        write_notes(tmp_path, "secrets: reject\n")
        assert "sensitive-undecided" not in rules(tmp_path)

    def test_bundled_contracts_decide(self) -> None:
        """Every bundled contract that passes free text says what becomes of sensitive data."""
        from tests.unit.builders import CONTRACTS

        assert "sensitive-undecided" not in rules(CONTRACTS)


def write_fixture(root: Path, name: str, body: dict[str, Any]) -> None:
    folder = root / "notes" / "v1" / "fixtures" / "accept"
    folder.mkdir(parents=True, exist_ok=True)
    request = {
        "request_id": REQUEST_ID,
        "tool": "notes",
        "issued_at": "2026-04-30T00:00:00Z",
        "expires_at": "2099-01-01T00:00:00Z",
    }
    base = {"now": NOW.isoformat(), "request": request, "headers": {"tg-request-id": REQUEST_ID}}
    (folder / f"{name}.json").write_text(json.dumps({**base, **body}))


def leak_value() -> dict[str, Any]:
    return {"tool": "notes", "request_id": REQUEST_ID, "outcome": "success", "data": {"summary": LEAK}}


class TestFixtures:
    """An accept fixture can expect a redaction, and fails when it is not there."""

    def outcomes(self, root: Path) -> list[str]:
        contracts = ContractSet.load(root)
        gate = Gate(contracts)
        return [run_case(gate, case).problem for case in load_cases(next(iter(contracts)), Keyring())]

    def test_expected_redaction(self, tmp_path: Path) -> None:
        """expect.redacted names the pointer and class: the fixture passes when it is redacted."""
        write_notes(tmp_path, "secrets: redact\n")
        redacted = {"/untrusted_text/summary": ["github-token"]}
        write_fixture(tmp_path, "leak", {"value": leak_value(), "expect": {"redacted": redacted}})
        assert self.outcomes(tmp_path) == [""]

    def test_missing_redaction_fails(self, tmp_path: Path) -> None:
        """A class the envelope was not redacted for fails the fixture, naming pointer and class."""
        write_notes(tmp_path, "secrets: redact\n")
        redacted = {"/untrusted_text/summary": ["card"]}
        write_fixture(tmp_path, "leak", {"value": leak_value(), "expect": {"redacted": redacted}})
        shown = LEAK.replace(LEAK[6:46], "[redacted:github-token]")
        assert self.outcomes(tmp_path) == [
            f"expected /untrusted_text/summary to hold [redacted:card], got {shown!r}"
        ]

    def test_unknown_class(self, tmp_path: Path) -> None:
        """An expect.redacted that names no class is refused, naming the key."""
        write_notes(tmp_path, "secrets: redact\n")
        write_fixture(tmp_path, "leak", {"value": leak_value(), "expect": {"redacted": {"/data/x": ["pin"]}}})
        with pytest.raises(ContractError, match=r"expect.redacted"):
            self.outcomes(tmp_path)


class TestCheckCommand:
    """``toolgate check`` over the generated corpus: redacted or rejected as the contract says,
    the benign corpus untouched."""

    def run(
        self, tmp_path: Path, sensitive: str, texts: list[str], capsys: pytest.CaptureFixture[str]
    ) -> list[Any]:
        write_notes(tmp_path / "c", sensitive)
        request = tmp_path / "request.json"
        request.write_text(
            json.dumps(
                {
                    "request_id": REQUEST_ID,
                    "tool": "notes",
                    "issued_at": "2026-04-30T00:00:00Z",
                    "expires_at": "2099-01-01T00:00:00Z",
                }
            )
        )
        files = []
        for i, text in enumerate(texts):
            path = tmp_path / f"r{i}.json"
            value = {"tool": "notes", "request_id": REQUEST_ID, "outcome": "success", "data": {"body": text}}
            path.write_text(json.dumps(value))
            files.append(str(path))
        capsys.readouterr()
        cli.main(["check", "--contracts", str(tmp_path / "c"), "--request", str(request), *files])
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    def test_corpus_redacted(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """With redact for both kinds, every corpus value is replaced by its class's marker."""
        corpus = load_corpus("detect")
        lines = self.run(tmp_path, "secrets: redact\npersonal: redact\n", [e["text"] for e in corpus], capsys)
        for entry, line in zip(corpus, lines, strict=True):
            assert line["outcome"] == "accepted"
            assert "[redacted:" in line["agent"]["data"]["body"], entry

    def test_secrets_rejected_by_default(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Without a section, every secret is SENSITIVE_DATA and no value appears in the output."""
        corpus = [e for e in load_corpus("detect") if e["class"] not in ("card", "iban", "email", "phone")]
        lines = self.run(tmp_path, "", [e["text"] for e in corpus], capsys)
        for entry, line in zip(corpus, lines, strict=True):
            assert (line["stage"], line["code"]) == ("semantic", "SENSITIVE_DATA"), entry
            assert entry["value"] not in json.dumps(line)

    def test_benign_left_alone(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """With reject for both kinds, every benign value passes as it came."""
        corpus = load_corpus("benign")
        lines = self.run(tmp_path, "secrets: reject\npersonal: reject\n", [e["text"] for e in corpus], capsys)
        assert [line["agent"]["data"]["body"] for line in lines] == [e["text"] for e in corpus]
