"""Secrets and personal data on a live worker and a real broker: the generated corpus redacted or
rejected as the contract says, the quarantine sealed at rest, replay with the key delivering the
fixed result once; a mixed group (workers with and without a quarantine key) loses nothing."""

from __future__ import annotations

import base64
import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiokafka import AIOKafkaProducer
from toolgate._config import Config
from toolgate.gate import ContractSet, Gate, Keyring
from toolgate.operations._replay import Selection, run_replay
from toolgate.service._service import Worker, WorkerOptions

from tests.integration.test_worker import run_until
from tests.integration.worker_kit import Record, read_all
from tests.sensitive_kit import load_corpus, write_notes

PERSONAL = ("card", "iban", "email", "phone")


def quarantine_keyring(folder: Path) -> Keyring:
    folder.mkdir(parents=True, exist_ok=True)
    secret = base64.b64encode(os.urandom(32)).decode()
    path = folder / "keyring.toml"
    path.write_text(f'[quarantine.q1]\ncreated = "2026-12-01"\nsecret = "{secret}"\n')
    return Keyring.load(path)


def notes_gate(root: Path, sensitive: str, keyring: Keyring | None) -> Gate:
    write_notes(root, sensitive)
    return Gate(ContractSet.load(root), keyring)


async def publish_notes(config: Config, texts: list[str], prefix: str) -> list[str]:
    """One request and one notes result per text (its body); the request ids, in order."""
    now = datetime.now(UTC)
    producer = AIOKafkaProducer(bootstrap_servers=config.bootstrap, acks="all")
    await producer.start()
    ids = []
    try:
        for i, text in enumerate(texts):
            rid = f"req.{prefix}{i:05d}"
            ids.append(rid)
            request = {
                "request_id": rid,
                "tool": "notes",
                "issued_at": now.isoformat(),
                "expires_at": (now + timedelta(minutes=30)).isoformat(),
                "max_attempts": 2,
            }
            await producer.send(config.topics.requests, json.dumps(request).encode(), key=rid.encode())
            value = {"tool": "notes", "request_id": rid, "outcome": "success", "data": {"body": text}}
            headers = [("tg-tool", b"notes"), ("tg-request-id", rid.encode())]
            await producer.send(
                config.topics.intake, json.dumps(value).encode(), key=rid.encode(), headers=headers
            )
        await producer.flush()
    finally:
        await producer.stop()
    return ids


async def decide(config: Config, gate: Gate, count: int) -> None:
    worker = Worker(config, gate, options=WorkerOptions(handle_signals=False, metrics_port=0))
    await run_until(worker, count, 120)


def raw_bytes(records: list[Record]) -> bytes:
    """Every byte a plain consumer sees: keys, values, header values."""
    parts: list[bytes] = []
    for record in records:
        parts += [record.key.encode(), record.value or b"", *record.headers.values()]
    return b"\x00".join(parts)


def bodies(records: list[Record]) -> dict[str, str]:
    out = {}
    for record in records:
        envelope = json.loads(record.value or b"{}")
        if envelope.get("outcome") == "success":
            out[record.key] = envelope["data"]["body"]
    return out


class TestLiveWorker:
    """A worker decides the corpus as the contract says; nothing of a secret is stored in clear."""

    async def test_corpus_through_a_worker(self, config: Config, tmp_path: Path) -> None:
        """Secrets rejected and sealed, personal data redacted, benign text untouched; no value in
        the quarantine, agent or audit topics, read raw."""
        detect, benign = load_corpus("detect"), load_corpus("benign")
        secrets = [e for e in detect if e["class"] not in PERSONAL]
        personal = [e for e in detect if e["class"] in PERSONAL]
        texts = [e["text"] for e in secrets + personal + benign]
        gate = notes_gate(tmp_path / "c", "personal: redact\n", quarantine_keyring(tmp_path / "k"))
        ids = await publish_notes(config, texts, "cp")
        await decide(config, gate, len(texts))

        agent = await read_all(config, config.topics.agent, isolation="read_uncommitted")
        passed = bodies(agent)
        secret_ids = ids[: len(secrets)]
        personal_ids = ids[len(secrets) : len(secrets) + len(personal)]
        benign_ids = ids[len(secrets) + len(personal) :]
        assert not set(secret_ids) & set(passed)
        assert all("[redacted:" in passed[rid] for rid in personal_ids)
        assert [passed[rid] for rid in benign_ids] == [e["text"] for e in benign]

        quarantine = await read_all(config, config.topics.quarantine, isolation="read_uncommitted")
        assert sorted(r.key for r in quarantine) == sorted(secret_ids)
        assert {r.headers["tg-error-code"] for r in quarantine} == {b"SENSITIVE_DATA"}
        audit = await read_all(config, config.topics.audit, isolation="read_uncommitted")
        for topic_bytes in (raw_bytes(quarantine), raw_bytes(agent), raw_bytes(audit)):
            for entry in detect:
                assert entry["value"].encode() not in topic_bytes, entry["class"]


class TestReplaySealed:
    """Replay opens sealed records with the key, delivers the fixed result once, and says in one
    line what it cannot open."""

    async def test_replay_with_and_without_the_key(self, config: Config, tmp_path: Path) -> None:
        """Without the key nothing is replayed (one line); with it the fixed contract delivers once;
        a second replay delivers nothing more."""
        keyring = quarantine_keyring(tmp_path / "k")
        leak = "token AKIAIOSFODNN7EXAMPLE in the deploy log"
        [rid] = await publish_notes(config, [leak], "rs")
        await decide(config, notes_gate(tmp_path / "a", "", keyring), 1)
        assert bodies(await read_all(config, config.topics.agent)) == {}

        selection = Selection(codes=frozenset({"SENSITIVE_DATA"}))
        now = datetime.now(UTC)
        out = io.StringIO()
        no_key = notes_gate(tmp_path / "b", "secrets: redact\n", None)
        assert (
            await run_replay(config, no_key, selection, apply_it=True, max_replays=3, now=now, out=out) == 0
        )
        assert "left out 1 quarantine records: sealed with quarantine key 'q1'" in out.getvalue()
        assert "no records matched" in out.getvalue()

        fixed = notes_gate(tmp_path / "c", "secrets: redact\n", keyring)
        out = io.StringIO()
        await run_replay(config, fixed, selection, apply_it=True, max_replays=3, now=now, out=out, force=True)
        assert "replayed 1 records" in out.getvalue(), out.getvalue()
        await decide(config, fixed, 1)
        assert bodies(await read_all(config, config.topics.agent)) == {
            rid: "token [redacted:aws-access-key] in the deploy log"
        }
        out = io.StringIO()
        await run_replay(config, fixed, selection, apply_it=True, max_replays=3, now=now, out=out, force=True)
        assert "skipped 1 records" in out.getvalue(), out.getvalue()

    async def test_mixed_group_loses_nothing(self, config: Config, tmp_path: Path) -> None:
        """Records written clear (a worker without a key) and sealed (one with) all replay."""
        keyring = quarantine_keyring(tmp_path / "k")
        leaks = [f"key AKIA{c * 16} here" for c in "ABCDEFGH"]
        ids = await publish_notes(config, leaks[:4], "mx")
        await decide(config, notes_gate(tmp_path / "a", "", None), 4)
        ids += await publish_notes(config, leaks[4:], "my")
        await decide(config, notes_gate(tmp_path / "b", "", keyring), 4)
        quarantine = await read_all(config, config.topics.quarantine)
        assert sorted("tg-quarantine-key" in r.headers for r in quarantine) == [False] * 4 + [True] * 4

        fixed = notes_gate(tmp_path / "c", "secrets: redact\n", keyring)
        out = io.StringIO()
        selection = Selection(codes=frozenset({"SENSITIVE_DATA"}))
        now = datetime.now(UTC)
        await run_replay(config, fixed, selection, apply_it=True, max_replays=3, now=now, out=out, force=True)
        assert "replayed 8 records" in out.getvalue(), out.getvalue()
        await decide(config, fixed, 8)
        assert sorted(bodies(await read_all(config, config.topics.agent))) == sorted(ids)
