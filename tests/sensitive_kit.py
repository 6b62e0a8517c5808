"""Secrets and personal data for the tests and the bench: a generated corpus and a contract.

``detect``: well-formed values of every class (valid card numbers and IBANs with their
check digits, tokens of each credential format), each embedded in a line of text;
``benign``: what tool results carry all day and must be left alone (UUIDs, git SHAs,
SHA-256 digests, base64 images, ISO dates, version strings, request ids, ...). Both are
generated from a fixed seed and committed under ``tests/corpus/sensitive/``; a test holds
the committed files to the generator (``python -m tests.sensitive_kit`` writes them).

:func:`write_notes` writes the ``notes`` contract: free text in ``data`` (a string, an
array of strings, an array of objects) and a display text, with a ``sensitive`` section.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import textwrap
import uuid
from pathlib import Path
from typing import Any

from tests import ROOT

CORPUS = ROOT / "tests" / "corpus" / "sensitive"
SEED = 46
_ALNUM = string.ascii_letters + string.digits
_B32 = string.ascii_uppercase + "234567"


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def luhn_complete(rng: random.Random, prefix: str, length: int) -> str:
    """A card number of ``length`` digits starting with ``prefix``, its Luhn digit last."""
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


def iban(rng: random.Random, country: str, length: int) -> str:
    """An IBAN of ``country`` with ``length`` characters and its check digits."""
    bban = "".join(rng.choice(string.digits) for _ in range(length - 4))
    number = int("".join(str(int(ch, 36)) for ch in bban + country + "00"))
    return f"{country}{98 - number % 97:02d}{bban}"


def _grouped(text: str, sep: str = " ") -> str:
    return sep.join(text[i : i + 4] for i in range(0, len(text), 4))


def _jwt(rng: random.Random) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    header = part({"alg": "HS256", "typ": "JWT"})
    body = part({"sub": _pick(rng, _ALNUM, 10), "iat": rng.randrange(1_600_000_000, 1_800_000_000)})
    return f"{header}.{body}.{_pick(rng, _ALNUM + '-_', 43)}"


def _pem(rng: random.Random, kind: str) -> str:
    lines = [_pick(rng, _ALNUM + "+/", 64) for _ in range(4)]
    return f"-----BEGIN {kind}PRIVATE KEY-----\n" + "\n".join(lines) + f"\n-----END {kind}PRIVATE KEY-----"


IBAN_COUNTRIES = (
    ("DE", 22),
    ("GB", 22),
    ("FR", 27),
    ("NL", 18),
    ("ES", 24),
    ("IT", 27),
    ("CH", 21),
    ("BE", 16),
)


def detect_corpus(seed: int = SEED, per_class: int = 12) -> list[dict[str, str]]:
    """Well-formed sensitive values, ``{"class", "value", "text"}``: ``text`` holds ``value``
    inside a sentence, as a tool's output would."""
    rng = random.Random(seed)
    makers: dict[str, Any] = {
        "aws-access-key": lambda: rng.choice(["AKIA", "ASIA"]) + _pick(rng, _B32, 16),
        "github-token": lambda: rng.choice(
            [
                f"gh{rng.choice('pousr')}_" + _pick(rng, _ALNUM, 36),
                "github_pat_" + _pick(rng, _ALNUM + "_", 82),
            ]
        ),
        "gitlab-token": lambda: "glpat-" + _pick(rng, _ALNUM + "_-", 20),
        "slack-token": lambda: (
            f"xox{rng.choice('bpa')}-{rng.randrange(10**11, 10**12)}-"
            + _pick(rng, string.ascii_letters + string.digits, 24)
        ),
        "slack-webhook": lambda: (
            "https://hooks.slack.com/services/T"
            + _pick(rng, string.ascii_uppercase + string.digits, 8)
            + "/B"
            + _pick(rng, string.ascii_uppercase + string.digits, 8)
            + "/"
            + _pick(rng, _ALNUM, 24)
        ),
        "stripe-key": lambda: rng.choice(["sk_live_", "rk_live_", "sk_test_"]) + _pick(rng, _ALNUM, 24),
        "google-api-key": lambda: "AIza" + _pick(rng, _ALNUM + "_-", 35),
        "jwt": lambda: _jwt(rng),
        "private-key": lambda: _pem(rng, rng.choice(["", "RSA ", "EC ", "OPENSSH "])),
        "connection-string": lambda: (
            rng.choice(["postgres", "mysql", "mongodb+srv", "redis", "amqp"])
            + "://"
            + _pick(rng, string.ascii_lowercase, 6)
            + ":"
            + _pick(rng, _ALNUM, 14)
            + "@db"
            + str(rng.randrange(1, 9))
            + ".internal:5432/app"
        ),
        "authorization": lambda: (
            rng.choice(["Authorization: Bearer ", "authorization: Basic "]) + _pick(rng, _ALNUM, 32)
        ),
        "card": lambda: (lambda n: rng.choice([n, _grouped(n), _grouped(n, "-")]))(
            rng.choice(
                [
                    luhn_complete(rng, "4", 16),
                    luhn_complete(rng, rng.choice(["51", "52", "55", "2221"]), 16),
                    luhn_complete(rng, rng.choice(["34", "37"]), 15),
                    luhn_complete(rng, "6011", 16),
                ]
            )
        ),
        "iban": lambda: (lambda c: (lambda v: rng.choice([v, _grouped(v)]))(iban(rng, *c)))(
            rng.choice(IBAN_COUNTRIES)
        ),
        "email": lambda: (
            _pick(rng, string.ascii_lowercase, 6)
            + rng.choice([".", "_", ""])
            + _pick(rng, string.ascii_lowercase, 5)
            + "@"
            + rng.choice(["example.com", "mail.example.org", "corp.example.co.uk"])
        ),
        "phone": lambda: rng.choice(
            [
                f"+44 20 {rng.randrange(7000, 8000)} {rng.randrange(1000, 10000)}",
                f"+1 ({rng.randrange(200, 999)}) {rng.randrange(200, 999)}-{rng.randrange(1000, 10000)}",
                f"+49 30 {rng.randrange(1000000, 9999999)}",
                f"+33 6 {rng.randrange(10, 99)} {rng.randrange(10, 99)} {rng.randrange(10, 99)} "
                f"{rng.randrange(10, 99)}",
            ]
        ),
    }
    sentences = ("deploy log: {} (copied from the job output)", "{}", "value={};", "see {}\nnext line")
    corpus = []
    for name, make in makers.items():
        for _ in range(per_class):
            value = make()
            corpus.append({"class": name, "value": value, "text": rng.choice(sentences).format(value)})
    return corpus


def benign_corpus(seed: int = SEED, per_class: int = 12) -> list[dict[str, str]]:
    """Values tool results carry that no detector may take: ``{"class", "text"}``."""
    rng = random.Random(seed + 1)
    png = base64.b64encode(bytes([0x89, 0x50, 0x4E, 0x47]) + rng.randbytes(600)).decode()
    makers: dict[str, Any] = {
        "uuid": lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "git-sha": lambda: hashlib.sha1(rng.randbytes(16)).hexdigest(),
        "sha256": lambda: hashlib.sha256(rng.randbytes(16)).hexdigest(),
        "sha256-prefixed": lambda: "sha256:" + hashlib.sha256(rng.randbytes(16)).hexdigest(),
        "base64-image": lambda: "data:image/png;base64," + png[: rng.randrange(200, 800)],
        "iso-date": lambda: (
            f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}T"
            f"{rng.randrange(0, 24):02d}:{rng.randrange(0, 60):02d}:00{rng.choice(['Z', '+01:00', '-05:30'])}"
        ),
        "version": lambda: (
            f"v{rng.randrange(0, 20)}.{rng.randrange(0, 50)}.{rng.randrange(0, 200)}"
            + rng.choice(["", "-rc.1", "+build.20261207"])
        ),
        "request-id": lambda: "req." + _pick(rng, _ALNUM, 12),
        "epoch-ms": lambda: str(rng.randrange(1_600_000_000_000, 1_900_000_000_000)),
        "url": lambda: "https://ci.example.com/runs/" + _pick(rng, _ALNUM, 10) + "?page=2",
        "run-id": lambda: "run_" + _pick(rng, _ALNUM, 16),
        "prose": lambda: rng.choice(
            [
                "Step integration-tests failed after 14m02s: 3 of 212 tests failed.",
                "Merged pull request #4512 into main; 23 files changed, 1,024 insertions.",
                "Disk usage at 81% on node-7; threshold is 90%.",
                "Build 2026.12.7 took 312.5 s (cache hit ratio 0.93).",
            ]
        ),
    }
    return [{"class": name, "text": make()} for name, make in makers.items() for _ in range(per_class)]


def write_corpus(folder: Path = CORPUS) -> None:
    """Write the generated corpus files (``python -m tests.sensitive_kit``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, corpus in (("detect.json", detect_corpus()), ("benign.json", benign_corpus())):
        (folder / name).write_text(json.dumps(corpus, indent=1) + "\n", encoding="utf-8")


def load_corpus(name: str) -> list[dict[str, str]]:
    """A committed corpus file: ``detect`` or ``benign``."""
    loaded: list[dict[str, str]] = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


NOTES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["tool", "request_id", "outcome"],
    "properties": {
        "tool": {"const": "notes"},
        "request_id": {"type": "string", "maxLength": 64},
        "outcome": {"enum": ["success", "failure"]},
        "data": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "title": {"type": "string", "maxLength": 200},
                "body": {"type": "string", "maxLength": 4096},
                "author": {"type": "string", "maxLength": 200},
                "lines": {"type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 4096}},
                "entries": {
                    "type": "array",
                    "maxItems": 50,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"text": {"type": "string", "maxLength": 4096}},
                    },
                },
                "summary": {"type": "string", "maxLength": 4096},
            },
        },
        "error": {
            "type": "object",
            "required": ["code", "retryable"],
            "properties": {"code": {"enum": ["NOT_FOUND"]}, "retryable": {"type": "boolean"}},
        },
    },
    "additionalProperties": False,
}


def write_notes(root: Path, sensitive: str = "", max_bytes: int = 1024 * 1024) -> Path:
    """The ``notes`` contract under ``root`` (``sensitive``: the section's YAML, indented
    two spaces under ``sensitive:``; empty: no section)."""
    folder = root / "notes" / "v1"
    folder.mkdir(parents=True)
    section = f"sensitive:\n{textwrap.indent(textwrap.dedent(sensitive), '  ')}" if sensitive else ""
    (folder / "contract.yaml").write_text(
        textwrap.dedent(
            f"""\
            tool: notes
            version: 1
            status: active
            schema: schema.json
            unversioned_adapters: true
            limits:
              max_bytes: {max_bytes}
              max_depth: 8
            projection:
              - /data/title
              - /data/body
              - /data/author
              - /data/lines
              - /data/entries/*/text
            display_text:
              - pointer: /data/summary
                max_length: 4096
            free_text:
              - pointer: /data/body
                reason: the note's text is what the tool is asked for
            """
        )
        + section,
        encoding="utf-8",
    )
    (folder / "schema.json").write_text(json.dumps(NOTES_SCHEMA), encoding="utf-8")
    return folder


if __name__ == "__main__":
    write_corpus()
