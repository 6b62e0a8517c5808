"""Secrets and personal data: how well the detectors find them, and what screening and sealing cost.

Usage::

    .venv/bin/python ops/bench/sensitive_bench.py [--results 2000] [--repeat 7] [--per-class 200]

1. Detection rate and false-positive rate: the committed corpus (``tests/corpus/sensitive``)
   and a larger one generated from other seeds (``--per-class`` values per class): a value
   counts as detected when a finding of its class covers it; a benign value is a false
   positive when any detector finds anything in it.
2. Screening: CPU time per result of the worker's batch decision (``decide_batch``) of a
   result projecting 10 free strings (benign text, the common case), with the screen and with
   it replaced by one that does nothing, side by side in one run (the loops interleaved).
3. Sealing: CPU time per result of the batch decision of a rejected result (its quarantine
   record built), with a quarantine key in the keyring and without, side by side.

Prints the figures and whether each target is met; it is not a test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "worker"))

from toolgate.gate._contracts import ContractSet  # noqa: E402
from toolgate.gate._gate import Gate  # noqa: E402
from toolgate.gate._records import RequestRecord  # noqa: E402
from toolgate.gate._sensitive import find  # noqa: E402
from toolgate.gate._signing import Keyring  # noqa: E402

from ops.bench.decide_bench import batches, per_result  # noqa: E402
from ops.bench.measure import at_most, print_targets, target  # noqa: E402
from tests.sensitive_kit import benign_corpus, detect_corpus, load_corpus  # noqa: E402

FIELDS = 10


def rates(detect: list[dict[str, str]], benign: list[dict[str, str]]) -> tuple[float, float]:
    """(detection rate, false-positive rate) over two corpora."""
    hit = 0
    for entry in detect:
        text, value = entry["text"], entry["value"]
        at = text.index(value)
        found = find(text)
        # Found as its class, or inside a finding of another class that covers it whole.
        hit += any(f.detector.name == entry["class"] for f in found) or any(
            f.start <= at and f.end >= at + len(value) for f in found
        )
    false = sum(bool(find(entry["text"])) for entry in benign)
    return hit / len(detect), false / len(benign)


def write_ten(root: Path) -> None:
    """The ``ten`` contract: ten free strings projected into data."""
    folder = root / "ten" / "v1"
    folder.mkdir(parents=True)
    names = [f"s{i}" for i in range(FIELDS)]
    schema = {
        "type": "object",
        "required": ["tool", "request_id", "outcome"],
        "properties": {
            "tool": {"const": "ten"},
            "request_id": {"type": "string", "maxLength": 64},
            "outcome": {"const": "success"},
            "data": {
                "type": "object",
                "additionalProperties": False,
                "properties": {n: {"type": "string", "maxLength": 4096} for n in names},
            },
        },
        "additionalProperties": False,
    }
    (folder / "schema.json").write_text(json.dumps(schema))
    projection = "".join(f"  - /data/{n}\n" for n in names)
    (folder / "contract.yaml").write_text(
        textwrap.dedent(
            """\
            tool: ten
            version: 1
            status: active
            schema: schema.json
            unversioned_adapters: true
            limits: {max_bytes: 65536, max_depth: 8}
            sensitive: {secrets: reject, personal: redact}
            projection:
            """
        )
        + projection
    )


class _NoScreen:
    def apply(self, out: dict[str, Any]) -> None:
        return None


def workload(count: int, *, rejected: bool) -> tuple[list[tuple[bytes, bytes, list[tuple[str, bytes]]]], Any]:
    """``count`` ten results (benign text in each field; ``rejected``: an undeclared member)
    and their request lookup."""
    now = datetime.now(UTC)
    benign = [e["text"] for e in load_corpus("benign")]
    raw = []
    requests: dict[str, RequestRecord] = {}
    for i in range(count):
        rid = f"req.ten{i:06d}"
        data: dict[str, Any] = {f"s{j}": benign[(i * FIELDS + j) % len(benign)][:120] for j in range(FIELDS)}
        if rejected:
            data["extra"] = "x"
        value = {"tool": "ten", "request_id": rid, "outcome": "success", "data": data}
        headers = [("tg-tool", b"ten"), ("tg-request-id", rid.encode())]
        raw.append((rid.encode(), json.dumps(value).encode(), headers))
        requests[rid] = RequestRecord(
            request_id=rid,
            tool="ten",
            issued_at=now - timedelta(minutes=1),
            expires_at=now + timedelta(hours=1),
        )
    return raw, requests.get


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--per-class", type=int, default=200)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")

    committed = rates(load_corpus("detect"), load_corpus("benign"))
    generated = [
        rates(detect_corpus(seed, args.per_class), benign_corpus(seed, args.per_class)) for seed in (1, 2, 3)
    ]
    detect_rate = min(g[0] for g in generated)
    fp_rate = max(g[1] for g in generated)
    print(f"committed corpus: detection {committed[0]:.2%}, false positives {committed[1]:.2%}")
    print(
        f"generated corpora (seeds 1-3, {args.per_class} per class each): "
        f"detection at least {detect_rate:.2%}, false positives at most {fp_rate:.2%}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        write_ten(Path(tmp) / "c")
        contracts = ContractSet.load(Path(tmp) / "c")
        screened = Gate(contracts)
        unscreened = Gate(ContractSet.load(Path(tmp) / "c"))
        for contract in unscreened.contracts:
            contract.screen = _NoScreen()  # type: ignore[assignment]
        accepted, lookup = workload(args.results, rejected=False)
        keyring_file = Path(tmp) / "keyring.toml"
        secret = base64.b64encode(os.urandom(32)).decode()
        keyring_file.write_text(f'[quarantine.q1]\ncreated = "2026-12-01"\nsecret = "{secret}"\n')
        sealing = Gate(contracts, Keyring.load(keyring_file))
        rejected, lookup_rejected = workload(args.results, rejected=True)
        now = datetime.now(UTC)
        figures = dict(
            per_result(
                [
                    ("accepted, 10 strings, screened", batches(screened, accepted, lambda _k: lookup, now)),
                    (
                        "accepted, 10 strings, not screened",
                        batches(unscreened, accepted, lambda _k: lookup, now),
                    ),
                    (
                        "rejected, quarantine sealed",
                        batches(sealing, rejected, lambda _k: lookup_rejected, now),
                    ),
                    (
                        "rejected, quarantine clear",
                        batches(screened, rejected, lambda _k: lookup_rejected, now),
                    ),
                ],
                args.repeat,
            )
        )
    for label, micros in figures.items():
        print(f"{label:<40}{micros:>8.1f} us CPU per result")
    screen_ratio = figures["accepted, 10 strings, screened"] / figures["accepted, 10 strings, not screened"]
    seal_ratio = figures["rejected, quarantine sealed"] / figures["rejected, quarantine clear"]
    print()
    print_targets(
        [
            target("detection rate, generated corpora", detect_rate * 100, ">= 99 %", detect_rate >= 0.99),
            target("false-positive rate, generated benign corpora", fp_rate * 100, "<= 1 %", fp_rate <= 0.01),
            target(
                "screening: decision of 10 projected strings, x unscreened",
                screen_ratio,
                "<= 1.3x",
                at_most(screen_ratio, 1.3),
            ),
            target(
                "sealing: decision of a rejected result, x clear",
                seal_ratio,
                "<= 1.2x",
                at_most(seal_ratio, 1.2),
            ),
        ]
    )
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
