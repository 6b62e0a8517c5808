"""The quarantine at rest (gate/_sealing.py): each record sealed with a fresh data key, wrapped
by the newest quarantine key, bound to the record; opened only with the key, never guessed."""

from __future__ import annotations

import base64
import io
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from toolgate._config import Topics
from toolgate._errors import ConfigError
from toolgate.gate import ContractSet, Gate, Keyring
from toolgate.gate._batch import AcceptedView, decide_batch
from toolgate.gate._outputs import OutRecord, outputs
from toolgate.gate._records import Message, Origin
from toolgate.gate._sealing import KEY_HEADER, WRAPPED_HEADER, Sealer, SealError, sealer_for
from toolgate.operations._quarantine import describe
from toolgate.operations._replay import Quarantined, open_sealed

from tests.sensitive_kit import write_notes
from tests.unit.builders import CONTRACTS, NOW, REQUEST_ID, message, review_request

AWS = "AKIAIOSFODNN7EXAMPLE"
KEY_A, KEY_B = os.urandom(32), os.urandom(32)


def keyring_file(folder: Path, **keys: tuple[str, bytes]) -> Path:
    """A keyring TOML with one [quarantine.<id>] per keyword: (created, 32-byte secret)."""
    lines = []
    for key_id, (created, secret) in keys.items():
        encoded = base64.b64encode(secret).decode()
        lines += [f"[quarantine.{key_id}]", f'created = "{created}"', f'secret = "{encoded}"']
    path = folder / "keyring.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def leaking_gate(root: Path, keyring: Keyring | None = None) -> Gate:
    """The notes contract with its default policy: a secret is rejected (and quarantined)."""
    write_notes(root)
    return Gate(ContractSet.load(root), keyring)


def leaking_message(origin: str = "intake/0/5") -> Message:
    value = {"tool": "notes", "request_id": REQUEST_ID, "outcome": "success", "data": {"body": f"key {AWS}"}}
    topic, partition, offset = origin.split("/")
    return Message(
        key=REQUEST_ID.encode(),
        value=json.dumps(value).encode(),
        headers=message(value, tool="notes").headers,
        origin=Origin(topic, int(partition), int(offset)),
    )


def quarantined(gate: Gate, msg: Message | None = None) -> OutRecord:
    """The quarantine record the worker's batch decision writes for ``msg``."""
    msg = msg or leaking_message()
    batch = decide_batch(
        gate,
        [msg],
        lambda key: review_request(tool="notes"),
        AcceptedView(lambda rid, attempt: False),
        NOW,
        topics=Topics(),
        max_record_bytes=1024 * 1024,
    )
    [record] = [r for r in batch.records if r.topic == Topics().quarantine]
    return record


def everything(record: OutRecord) -> bytes:
    """Every byte a plain consumer reads of a record: key, value, header names and values."""
    parts = [record.key or b"", record.value or b""]
    for name, value in record.headers:
        parts += [name.encode(), value]
    return b"\x00".join(parts)


def sealed_keyring(tmp_path: Path) -> Keyring:
    return Keyring.load(keyring_file(tmp_path, qa=("2026-01-01", KEY_A)))


class TestSeal:
    """A sealed record holds none of the result's bytes; what summaries read stays clear."""

    def test_no_byte_of_the_secret_in_clear(self, tmp_path: Path) -> None:
        """Read raw, the sealed quarantine record holds none of the planted secret's bytes."""
        record = quarantined(leaking_gate(tmp_path / "c", sealed_keyring(tmp_path)))
        assert AWS.encode() not in everything(record)
        assert b"key AKIA" not in everything(record)

    def test_clear_without_a_quarantine_key(self, tmp_path: Path) -> None:
        """A keyring without a quarantine key writes the record clear, as before."""
        record = quarantined(leaking_gate(tmp_path))
        assert AWS.encode() in (record.value or b"")
        assert KEY_HEADER not in dict(record.headers)

    def test_summary_fields_stay_clear(self, tmp_path: Path) -> None:
        """Code, stage, pointers, tool, versions, hashes and times are readable without the key."""
        headers = dict(quarantined(leaking_gate(tmp_path / "c", sealed_keyring(tmp_path))).headers)
        assert headers["tg-error-code"] == b"SENSITIVE_DATA"
        assert headers["tg-error-stage"] == b"semantic"
        assert json.loads(headers["tg-error-detail"]) == {
            "stage": "semantic",
            "code": "SENSITIVE_DATA",
            "instance_path": "/data/body",
            "keyword": "aws-access-key",
        }
        for name in ("tg-raw-sha256", "tg-contract", "tg-rejected-at", "tg-origin", "tg-adapter-version"):
            assert headers[name]
        assert headers[KEY_HEADER] == b"qa"
        assert headers["__connect.errors.exception.message"] == b""

    def test_opens_to_what_a_clear_worker_writes(self, tmp_path: Path) -> None:
        """Opened with the key, a sealed record is the record a worker without a key writes."""
        keyring = sealed_keyring(tmp_path)
        clear = quarantined(leaking_gate(tmp_path / "a"))
        sealed = quarantined(leaking_gate(tmp_path / "b", keyring))
        sealer = sealer_for(keyring)
        assert sealer is not None
        value, headers = sealer.open(sealed.key, sealed.value, sealed.headers)
        assert value == clear.value
        assert headers == list(clear.headers)

    def test_fresh_data_key_per_record(self, tmp_path: Path) -> None:
        """The same result sealed twice gives two different ciphertexts and wrapped keys."""
        gate = leaking_gate(tmp_path / "c", sealed_keyring(tmp_path))
        one, two = quarantined(gate), quarantined(gate)
        assert one.value != two.value
        assert dict(one.headers)[WRAPPED_HEADER] != dict(two.headers)[WRAPPED_HEADER]

    def test_newest_key_seals_older_still_opens(self, tmp_path: Path) -> None:
        """New records use the newest key by created; a record of the older key still opens."""
        (tmp_path / "old").mkdir()
        old_ring = Keyring.load(keyring_file(tmp_path / "old", qa=("2026-01-01", KEY_A)))
        both = Keyring.load(keyring_file(tmp_path, qb=("2026-06-01", KEY_B), qa=("2026-01-01", KEY_A)))
        old = quarantined(leaking_gate(tmp_path / "c1", old_ring))
        new = quarantined(leaking_gate(tmp_path / "c2", both))
        assert dict(new.headers)[KEY_HEADER] == b"qb"
        sealer = sealer_for(both)
        assert sealer is not None
        opened = [sealer.open(r.key, r.value, r.headers).value for r in (old, new)]
        assert opened[0] == opened[1]


class TestOpenRefuses:
    """A record that cannot be opened is one line saying why; nothing is guessed."""

    def sealed(self, tmp_path: Path) -> tuple[Sealer, OutRecord]:
        keyring = sealed_keyring(tmp_path)
        sealer = sealer_for(keyring)
        assert sealer is not None
        return sealer, quarantined(leaking_gate(tmp_path / "c", keyring))

    def test_unknown_key_id(self, tmp_path: Path) -> None:
        """A key id the keyring lacks names the key and how to give it."""
        _, record = self.sealed(tmp_path)
        other = Sealer({"qz": KEY_B}, "qz")
        with pytest.raises(SealError, match=r"sealed with quarantine key 'qa', which the keyring lacks"):
            other.open(record.key, record.value, record.headers)

    def test_altered_ciphertext(self, tmp_path: Path) -> None:
        """One flipped bit of the ciphertext fails authentication."""
        sealer, record = self.sealed(tmp_path)
        value = bytearray(record.value or b"")
        value[-1] ^= 1
        with pytest.raises(SealError, match="altered or moved"):
            sealer.open(record.key, bytes(value), record.headers)

    def test_wrapped_key_of_another_record(self, tmp_path: Path) -> None:
        """A wrapped key (and ciphertext) moved from another record does not open here."""
        sealer, one = self.sealed(tmp_path)
        gate = leaking_gate(tmp_path / "d", sealed_keyring(tmp_path))
        two = quarantined(gate, leaking_message("intake/0/6"))
        wrapped = dict(one.headers)[WRAPPED_HEADER]
        moved = [(n, wrapped if n == WRAPPED_HEADER else v) for n, v in two.headers]
        with pytest.raises(SealError, match="altered or moved"):
            sealer.open(two.key, one.value, moved)
        with pytest.raises(SealError, match="altered or moved"):
            sealer.open(two.key, two.value, moved)

    def test_identity_header_changed(self, tmp_path: Path) -> None:
        """A record whose origin header was rewritten does not open."""
        sealer, record = self.sealed(tmp_path)
        moved = [(n, b"intake/9/9" if n == "tg-origin" else v) for n, v in record.headers]
        with pytest.raises(SealError, match="altered or moved"):
            sealer.open(record.key, record.value, moved)

    def test_garbage_wrapped_header(self, tmp_path: Path) -> None:
        """A wrapped key that is not base64 is the same one line."""
        sealer, record = self.sealed(tmp_path)
        broken = [(n, b"%%%" if n == WRAPPED_HEADER else v) for n, v in record.headers]
        with pytest.raises(SealError, match="altered or moved"):
            sealer.open(record.key, record.value, broken)


class TestKeyring:
    """Quarantine keys load from the keyring's [quarantine.<id>] table."""

    def test_wrong_length(self, tmp_path: Path) -> None:
        """A key that is not 32 bytes is refused, naming the table."""
        with pytest.raises(ConfigError, match=r"quarantine.qa.secret must be 32 bytes"):
            Keyring.load(keyring_file(tmp_path, qa=("2026-01-01", os.urandom(16))))

    def test_sources_name_no_secret(self, tmp_path: Path) -> None:
        """The start-up line names the key and where it came from, never the secret."""
        keyring = sealed_keyring(tmp_path)
        assert keyring.sources() == "quarantine qa=inline"

    def test_no_key_no_sealer(self) -> None:
        """A keyring without quarantine keys seals nothing."""
        assert sealer_for(Keyring()) is None


def as_quarantined(record: OutRecord, offset: int) -> Quarantined:
    raw = list(record.headers)
    return Quarantined(0, offset, record.key, record.value, raw, {n: v.decode() for n, v in raw})


class TestReadBack:
    """tail and replay open what they can and say in one line what they cannot."""

    def test_replay_reads_clear_and_sealed(self, tmp_path: Path) -> None:
        """A mixed quarantine (clear records and sealed ones) opens whole with the key."""
        keyring = sealed_keyring(tmp_path)
        clear = as_quarantined(quarantined(leaking_gate(tmp_path / "a")), 1)
        sealed = as_quarantined(quarantined(leaking_gate(tmp_path / "b", keyring)), 2)
        out = io.StringIO()
        opened = open_sealed([clear, sealed], sealer_for(keyring), out)
        assert [r.value for r in opened] == [clear.value, clear.value]
        assert opened[1].original().headers == clear.original().headers
        assert out.getvalue() == ""

    def test_replay_without_the_key_leaves_sealed_ones(self, tmp_path: Path) -> None:
        """Without the key, sealed records are left out with one line; clear ones go on."""
        keyring = sealed_keyring(tmp_path)
        clear = as_quarantined(quarantined(leaking_gate(tmp_path / "a")), 1)
        sealed = as_quarantined(quarantined(leaking_gate(tmp_path / "b", keyring)), 2)
        out = io.StringIO()
        assert open_sealed([clear, sealed, replace(sealed, offset=3)], None, out) == [clear]
        assert out.getvalue().count("\n") == 1
        assert "left out 2 quarantine records: sealed with quarantine key 'qa'" in out.getvalue()

    def test_tail_says_what_is_missing(self, tmp_path: Path) -> None:
        """tail without the key prints the clear diagnostics and one 'sealed' line, no value."""
        record = quarantined(leaking_gate(tmp_path / "c", sealed_keyring(tmp_path)))
        line = describe("q", _Tailed(record), with_value=True)
        assert line["code"] == "SENSITIVE_DATA"
        assert line["value"] is None
        assert "[quarantine.qa]" in line["sealed"]

    def test_tail_opens_with_the_key(self, tmp_path: Path) -> None:
        """tail with the key shows the value and the diagnostic message."""
        keyring = sealed_keyring(tmp_path)
        record = quarantined(leaking_gate(tmp_path / "c", keyring))
        line = describe("q", _Tailed(record), with_value=True, sealer=sealer_for(keyring))
        assert AWS in line["value"]
        assert line["headers"]["tg-error-detail"]["message"] == "secret (aws-access-key) at /data/body"
        assert "sealed" not in line


class _Tailed:
    """An OutRecord as a consumer reads it back."""

    def __init__(self, record: OutRecord) -> None:
        self.partition, self.offset, self.timestamp = 0, 1, 1_777_000_000_000
        self.key, self.value, self.headers = record.key, record.value, list(record.headers)


def test_outputs_unsealed_by_default() -> None:
    """outputs() without a sealer writes the quarantine record clear (its callers choose)."""
    gate = Gate(ContractSet.load(CONTRACTS))
    verdict = gate.evaluate(message(raw=b"{"), review_request(), NOW)
    records = outputs(
        message(raw=b"{"), verdict, agent_topic="a", quarantine_topic="q", audit_topic="u", decided_at=NOW
    )
    assert [r.value for r in records if r.topic == "q"] == [b"{"]


class TestWithoutTheKey:
    """What operators count needs no key: a sealed and a clear record summarise alike."""

    def test_summary_counts_sealed_like_clear(self, tmp_path: Path) -> None:
        """quarantine summary gives a sealed record the row its clear twin gets."""
        from toolgate.operations._quarantine import Filters, summarise

        clear = _Tailed(quarantined(leaking_gate(tmp_path / "a")))
        sealed = _Tailed(quarantined(leaking_gate(tmp_path / "b", sealed_keyring(tmp_path))))
        rows = [summarise([r], Filters()) for r in (clear, sealed)]
        assert [(r.tool, r.code, r.adapter_version, r.schema_path, r.count) for r in rows[0]] == [
            (r.tool, r.code, r.adapter_version, r.schema_path, r.count) for r in rows[1]
        ]
        assert rows[1][0].code == "SENSITIVE_DATA"


class TestContractDiff:
    """contracts diff classes a change of the sensitive section."""

    def test_stricter_is_breaking_looser_widens(self, tmp_path: Path) -> None:
        """allow -> redact is breaking, reject -> redact widens, an allow pointer added widens."""
        from toolgate.authoring._contract_diff import diff_contracts

        write_notes(tmp_path / "a")
        write_notes(
            tmp_path / "b",
            "secrets: redact\npersonal: redact\n"
            "allow:\n  - pointer: /data/author\n    reason: the author asked for\n",
        )
        old, new = (next(iter(ContractSet.load(tmp_path / x))) for x in ("a", "b"))
        changes = {c.kind: (c.breaking, c.widens) for c in diff_contracts(old, new)}
        assert changes == {
            "sensitive-secrets-changed": (False, True),
            "sensitive-personal-changed": (True, False),
            "sensitive-allow-added": (False, True),
        }
