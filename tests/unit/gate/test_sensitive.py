"""Secrets and personal data in what reaches the agent (gate/_sensitive.py): found under RE2,
then rejected or redacted as the contract says."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import re2
from toolgate._errors import ContractError
from toolgate.gate import ContractSet, Gate
from toolgate.gate._contracts import contract_digest
from toolgate.gate._records import Verdict
from toolgate.gate._sensitive import DETECTORS, find, iban_valid, luhn, redact

from tests.sensitive_kit import (
    CORPUS,
    benign_corpus,
    detect_corpus,
    load_corpus,
    write_notes,
)
from tests.unit.builders import NOW, REQUEST_ID, message, review_request

AWS = "AKIAIOSFODNN7EXAMPLE"
CARD = "4111 1111 1111 1111"


def notes_gate(root: Path, sensitive: str = "") -> Gate:
    write_notes(root, sensitive)
    return Gate(ContractSet.load(root))


def evaluate(gate: Gate, data: dict[str, Any]) -> Verdict:
    value = {"tool": "notes", "request_id": REQUEST_ID, "outcome": "success", "data": data}
    return gate.evaluate(message(value, tool="notes"), review_request(tool="notes"), NOW)


def agent(verdict: Verdict) -> dict[str, Any]:
    assert verdict.accepted, verdict.diagnostics
    decoded: dict[str, Any] = json.loads(verdict.agent)
    return decoded


class TestDetectors:
    """Every detector compiles under RE2 and finds its class, with its checksum where one exists."""

    def test_every_pattern_compiles_under_re2(self) -> None:
        """Each detector's pattern compiles under RE2 on its own (no backtracking engine)."""
        for detector in DETECTORS:
            assert re2.compile(detector.pattern) is not None, detector.name

    def test_luhn(self) -> None:
        """A card number passes Luhn; one digit changed does not."""
        assert luhn("4111111111111111")
        assert not luhn("4111111111111112")

    def test_iban_check_digits(self) -> None:
        """An IBAN passes with its check digits and country length; a changed digit or length fails."""
        assert iban_valid("DE89 3704 0044 0532 0130 00")
        assert not iban_valid("DE88 3704 0044 0532 0130 00")
        assert not iban_valid("DE89 3704 0044 0532 0130 0")

    def test_card_failing_luhn_is_left_alone(self) -> None:
        """Sixteen digits that fail Luhn are not a card."""
        assert find("order 4111 1111 1111 1112") == []

    def test_committed_corpus_is_the_generated_one(self) -> None:
        """The corpus under tests/corpus/sensitive is what ``python -m tests.sensitive_kit`` writes."""
        assert load_corpus("detect") == detect_corpus()
        assert load_corpus("benign") == benign_corpus()
        assert (CORPUS / "detect.json").exists()

    @pytest.mark.parametrize("entry", load_corpus("detect"), ids=lambda e: e["class"])
    def test_detects_each_generated_value(self, entry: dict[str, str]) -> None:
        """Each generated value is found as its class, and redacting it leaves none of it."""
        found = find(entry["text"])
        assert entry["class"] in [f.detector.name for f in found]
        redacted = redact(entry["text"], found)
        assert f"[redacted:{entry['class']}]" in redacted
        value = entry["value"]
        core = value.split("://")[1].split("@")[0] if entry["class"] == "connection-string" else value
        assert core not in redacted

    @pytest.mark.parametrize("entry", load_corpus("benign"), ids=lambda e: e["class"])
    def test_leaves_benign_values_alone(self, entry: dict[str, str]) -> None:
        """UUIDs, git SHAs, digests, base64 images, dates, versions and request ids are not findings."""
        assert find(entry["text"]) == []

    def test_overlapping_matches_become_one_span(self) -> None:
        """A JWT inside an Authorization value is one redacted span, the first class named."""
        jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
        text = f"Authorization: Bearer {jwt}"
        found = find(text)
        assert len(found) == 1
        assert redact(text, found) == "[redacted:authorization]"


class TestHostileText:
    """Hostile text costs time linear in its length: RE2 never backtracks."""

    @pytest.mark.parametrize(
        "text",
        [
            "4" * 100_000,
            "AKIA" * 2_000_000,  # 8 MiB of near-matches
            ("eyJ" + "a" * 7 + ".") * 400_000,
            "-----BEGIN PRIVATE KEY" * 300_000,
            "a:b@" * 1_000_000,
            "A" * 10_000_000,  # a 10 MB base64 blob
        ],
        ids=["digits", "aws-bait", "jwt-bait", "pem-bait", "userinfo-bait", "base64"],
    )
    def test_bounded_time(self, text: str) -> None:
        """Each bait string is screened in well under a few seconds, with a bounded list of findings."""
        started = time.perf_counter()
        found = find(text)
        assert time.perf_counter() - started < 10
        assert len(found) <= 64 * len(DETECTORS)

    def test_hundred_thousand_digits_is_no_card(self) -> None:
        """A run of 100,000 digits holds no card number (no word boundary inside it)."""
        assert find("4" * 100_000) == []


class TestPolicy:
    """The contract's ``sensitive`` section decides: secrets rejected by default, redact on request."""

    def test_secret_rejected_by_default(self, tmp_path: Path) -> None:
        """Without a section, a secret is SENSITIVE_DATA at semantic, naming class and pointer."""
        verdict = evaluate(notes_gate(tmp_path), {"body": f"key {AWS}"})
        assert not verdict.accepted
        assert (verdict.stage, verdict.code) == ("semantic", "SENSITIVE_DATA")
        assert verdict.diagnostics is not None
        assert verdict.diagnostics.message == "secret (aws-access-key) at /data/body"
        assert verdict.diagnostics.instance_path == "/data/body"
        assert AWS not in verdict.diagnostics.message

    def test_personal_allowed_by_default(self, tmp_path: Path) -> None:
        """Without a section, personal data passes as it came."""
        assert (
            agent(evaluate(notes_gate(tmp_path), {"body": f"card {CARD}"}))["data"]["body"] == f"card {CARD}"
        )

    def test_redact_in_every_place(self, tmp_path: Path) -> None:
        """Redaction reaches data strings, arrays of strings, arrays of objects and untrusted_text."""
        gate = notes_gate(tmp_path, "secrets: redact\npersonal: redact\n")
        out = agent(
            evaluate(
                gate,
                {
                    "title": "x@example.com",
                    "lines": ["ok", f"id {AWS}"],
                    "entries": [{"text": f"pay {CARD}"}],
                    "summary": "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
                },
            )
        )
        assert out["data"]["title"] == "[redacted:email]"
        assert out["data"]["lines"] == ["ok", "id [redacted:aws-access-key]"]
        assert out["data"]["entries"] == [{"text": "pay [redacted:card]"}]
        assert out["untrusted_text"]["summary"] == "[redacted:private-key]"

    def test_personal_reject(self, tmp_path: Path) -> None:
        """personal: reject names the item's pointer."""
        verdict = evaluate(
            notes_gate(tmp_path, "personal: reject\n"), {"lines": ["a", "DE89370400440532013000"]}
        )
        assert verdict.code == "SENSITIVE_DATA"
        assert verdict.diagnostics is not None
        assert verdict.diagnostics.message == "personal (iban) at /data/lines/1"

    def test_allow_pointer(self, tmp_path: Path) -> None:
        """An allowed pointer is not screened; the others still are."""
        gate = notes_gate(
            tmp_path,
            "personal: redact\nallow:\n  - pointer: /data/author\n    reason: the author is what is asked\n",
        )
        out = agent(evaluate(gate, {"author": "a@example.com", "title": "b@example.com"}))
        assert out["data"] == {"author": "a@example.com", "title": "[redacted:email]"}

    def test_allow_every_item(self, tmp_path: Path) -> None:
        """``*`` in an allow pointer stands for every item of an array of objects."""
        gate = notes_gate(
            tmp_path,
            "personal: reject\nallow:\n  - pointer: /data/entries/*/text\n    reason: contact cards\n",
        )
        out = agent(evaluate(gate, {"entries": [{"text": "a@example.com"}, {"text": "+44 20 7946 0958"}]}))
        assert out["data"]["entries"][1]["text"] == "+44 20 7946 0958"

    def test_allow_display_text_by_its_pointer(self, tmp_path: Path) -> None:
        """A display text is allowed by its contract pointer."""
        gate = notes_gate(
            tmp_path,
            "secrets: reject\nallow:\n  - pointer: /data/summary\n    reason: a key rotation log\n",
        )
        assert (
            agent(evaluate(gate, {"summary": f"rotated {AWS}"}))["untrusted_text"]["summary"]
            == f"rotated {AWS}"
        )

    def test_secret_split_across_fields(self, tmp_path: Path) -> None:
        """A PEM block cut across two fields is still found by the half that keeps its header."""
        verdict = evaluate(
            notes_gate(tmp_path),
            {
                "title": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0",
                "body": "BAQEFAASC\n-----END PRIVATE KEY-----",
            },
        )
        assert verdict.code == "SENSITIVE_DATA"
        assert verdict.diagnostics is not None
        assert verdict.diagnostics.instance_path == "/data/title"

    def test_redaction_bounded_to_the_field(self, tmp_path: Path) -> None:
        """A redacted string longer than its field's limit is cut to it, and the envelope still passes."""
        gate = notes_gate(tmp_path, "personal: redact\n")
        out = agent(evaluate(gate, {"lines": ["a@b.co " * 580]}))
        assert len(out["data"]["lines"][0]) == 4096

    def test_many_findings_named_once(self, tmp_path: Path) -> None:
        """A rejection names the first finding and counts the others, never a value."""
        verdict = evaluate(notes_gate(tmp_path), {"lines": [AWS, AWS, AWS]})
        assert verdict.diagnostics is not None
        assert verdict.diagnostics.message == "secret (aws-access-key) at /data/lines/0; 2 more finding(s)"


class TestContractSection:
    """The section is checked when the contract loads, and leaves old digests alone."""

    def test_unknown_allow_pointer(self, tmp_path: Path) -> None:
        """An allow pointer naming nothing projected fails, naming the path."""
        write_notes(tmp_path, "allow:\n  - pointer: /data/nothing\n    reason: no such field at all\n")
        with pytest.raises(ContractError, match=r"sensitive.allow\[0\].pointer"):
            ContractSet.load(tmp_path)

    def test_short_reason(self, tmp_path: Path) -> None:
        """An allow entry needs a reason."""
        write_notes(tmp_path, "allow:\n  - pointer: /data/body\n    reason: x\n")
        with pytest.raises(ContractError, match=r"sensitive.allow\[0\].reason"):
            ContractSet.load(tmp_path)

    def test_unknown_action(self, tmp_path: Path) -> None:
        """secrets: allow is refused: a secret is rejected or redacted."""
        write_notes(tmp_path, "secrets: allow\n")
        with pytest.raises(ContractError, match=r"sensitive.secrets"):
            ContractSet.load(tmp_path)

    def test_digest_unchanged_without_a_section(self, tmp_path: Path) -> None:
        """A version without the section keeps the digest it had before the section existed."""
        contract = next(iter(ContractSet.load(write_notes(tmp_path).parent.parent)))
        assert contract_digest(contract.spec, contract.schema) == contract.digest
        import hashlib

        import msgspec

        builtins = msgspec.to_builtins(contract.spec)
        del builtins["sensitive"]
        canonical = json.dumps(
            {"contract": builtins, "schema": contract.schema}, sort_keys=True, separators=(",", ":")
        )
        assert contract.digest == hashlib.sha256(canonical.encode()).hexdigest()[:16]
