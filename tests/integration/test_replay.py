"""Quarantine -> fix -> dry run -> apply: exactly the fixed results reach the agent, once."""

from __future__ import annotations

import io
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import generate_latest
from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.operations._quarantine import Filters, format_summary, summary
from toolgate.operations._replay import Selection, apply, read_quarantine, run_replay
from toolgate.service._service import Worker, WorkerOptions

from ops.bench.reviews import review_headers, review_request, review_result
from tests.integration.test_worker import run_until
from tests.integration.worker_kit import (
    CONTRACTS,
    KEYRING,
    high_watermarks,
    read_all,
    topic_partitions,
)


def contracts_with_v2(root: Path, status: str) -> Path:
    """The bundled contracts plus review_status v2 (serving adapters 1.5.x) allowing `comment`."""
    shutil.copytree(CONTRACTS, root)
    folder = root / "review_status" / "v2"
    shutil.copytree(root / "review_status" / "v1", folder)
    shutil.rmtree(folder / "fixtures")
    spec = (folder / "contract.yaml").read_text().replace("version: 1", "version: 2")
    spec = spec.replace("status: active", f"status: {status}").replace('["1.*"]', '["1.5.*"]')
    (folder / "contract.yaml").write_text(spec)
    schema = json.loads((folder / "schema.json").read_text())
    schema["$defs"]["reviewStatus"]["properties"]["comment"] = {"type": "string", "maxLength": 200}
    (folder / "schema.json").write_text(json.dumps(schema))
    return root


async def quarantine_offsets(config: Config) -> int:
    """The offsets the quarantine topic holds (its partitions' high watermarks, from offset 0)."""
    tps = await topic_partitions(config, config.topics.quarantine)
    return sum((await high_watermarks(config, tps)).values())


def gate_for(root: Path) -> Gate:
    return Gate(ContractSet.load(root), Keyring.load(KEYRING, environ={}))


async def publish_reviews(config: Config, count: int, *, comment_every: int) -> dict[str, bool]:
    """Review results from an adapter at 1.5.0; every n-th carries the new `comment` field."""
    now = datetime.now(UTC)
    producer = AIOKafkaProducer(bootstrap_servers=config.bootstrap, acks="all")
    await producer.start()
    has_comment: dict[str, bool] = {}
    try:
        for i in range(count):
            rid, change = f"req.rp{now:%H%M%S}{i:05d}", f"CR-{i + 1}"
            request = review_request(
                rid, now, change, lifetime=timedelta(minutes=30), attempt=1, max_attempts=2
            )
            await producer.send(config.topics.requests, json.dumps(request).encode(), key=rid.encode())
            has_comment[rid] = i % comment_every == 0
            value = review_result(rid, change, comment="LGTM" if has_comment[rid] else None)
            await producer.send(
                config.topics.intake,
                json.dumps(value).encode(),
                key=rid.encode(),
                headers=review_headers(rid),
            )
        await producer.flush()
    finally:
        await producer.stop()
    return has_comment


async def decide_all(config: Config, gate: Gate, count: int) -> Worker:
    """Run a worker until ``count`` more results are decided, then stop it."""
    worker = Worker(config, gate, options=WorkerOptions(handle_signals=False, metrics_port=0))
    await run_until(worker, count, 90)
    return worker


async def assert_delivered(config: Config, expected: set[str]) -> None:
    """Exactly ``expected`` got a success envelope; on failure, each request's audited codes."""
    delivered = set(successes(await read_all(config, config.topics.agent)))
    if delivered != expected:
        codes: dict[str, list[str]] = {}
        for record in await read_all(config, config.topics.audit):
            event = json.loads(record.value or b"{}")
            codes.setdefault(str(event.get("request_id")), []).append(str(event.get("code") or "-"))
        wrong = {rid: codes.get(rid) for rid in sorted(delivered ^ expected)}
        raise AssertionError(f"delivered differs from expected; audited codes of the difference: {wrong}")


def successes(records: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for record in records:
        if json.loads(record.value or b"")["outcome"] == "success":
            out[record.key] = out.get(record.key, 0) + 1
    return out


async def replay_schema_violations(config: Config, gate: Gate, *, apply_it: bool, out: io.StringIO) -> int:
    """``toolgate replay`` of the SCHEMA_VIOLATION rejections (a result replayed 3 times at most), now."""
    selection = Selection(codes=frozenset({"SCHEMA_VIOLATION"}))
    now = datetime.now(UTC)
    return await run_replay(config, gate, selection, apply_it=apply_it, max_replays=3, now=now, out=out)


class TestReplay:
    async def test_fix_dry_run_apply_once(self, config: Config, tmp_path: Path) -> None:
        """After a fix, dry run names the now-passing records, apply delivers each exactly once."""
        has_comment = await publish_reviews(config, 60, comment_every=3)
        commented = {rid for rid, flag in has_comment.items() if flag}
        await decide_all(config, gate_for(CONTRACTS), 60)
        await assert_delivered(config, set(has_comment) - commented)

        fixed = gate_for(contracts_with_v2(tmp_path / "fixed", "active"))
        out = io.StringIO()
        assert await replay_schema_violations(config, fixed, apply_it=False, out=out) == 0
        assert f"would now pass: {len(commented)}" in out.getvalue()
        assert len(await read_all(config, config.topics.intake)) == 60  # the dry run wrote nothing

        await replay_schema_violations(config, fixed, apply_it=True, out=io.StringIO())
        await decide_all(config, fixed, len(commented))
        delivered = successes(await read_all(config, config.topics.agent))
        assert set(delivered) == set(has_comment)
        assert set(delivered.values()) == {1}

        # Replaying the same quarantine again: apply skips what an earlier replay got accepted,
        # and says so; nothing is sent.
        again = io.StringIO()
        await replay_schema_violations(config, fixed, apply_it=True, out=again)
        assert f"skipped {len(commented)} records: an earlier replay of the same result was accepted" in (
            again.getvalue()
        )
        assert f"replayed 0 records to {config.topics.intake}" in again.getvalue()
        assert len(await read_all(config, config.topics.intake)) == 60 + len(commented)

        # Sent anyway (below the skip), duplicates are refused: nothing new reaches the agent,
        # and they count as replays, not as live DUPLICATE_RESULT rejections.
        selected, _ = await read_quarantine(config, Selection(codes=frozenset({"SCHEMA_VIOLATION"})))
        forced = [r for r in selected if (r.key or b"").decode() in commented]
        assert len(forced) == len(commented)
        await apply(config, forced, 3)
        worker = await decide_all(config, fixed, len(commented))
        assert successes(await read_all(config, config.topics.agent)) == delivered
        quarantine, _ = await read_quarantine(config, Selection(codes=frozenset({"DUPLICATE_RESULT"})))
        assert len(quarantine) == len(commented)
        assert {r.headers["tg-replay-count"] for r in quarantine} == {"1"}
        metrics = generate_latest(worker.metrics.registry).decode()
        assert (
            "toolgate_replayed_rejections_total"
            '{code="DUPLICATE_RESULT",stage="semantic",tool="review_status"} '
            f"{float(len(commented))}"
        ) in metrics
        assert 'toolgate_rejections_total{code="DUPLICATE_RESULT"' not in metrics
        audit = [json.loads(r.value or b"") for r in await read_all(config, config.topics.audit)]
        replays = [e for e in audit if e.get("replay")]
        assert len(replays) == 2 * len(commented)  # the accepted replays and the refused ones
        assert all(e["replay_of"].startswith(f"{config.topics.quarantine}/") for e in replays)
        assert all(e["replay"] == 0 for e in audit if e not in replays)

    async def test_progress_counts_records_not_offsets(
        self, config: Config, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The quarantine, written in transactions, has markers between its records: the
        progress line ends with the records read, not the offsets."""
        await publish_reviews(config, 6, comment_every=1)
        await decide_all(config, gate_for(CONTRACTS), 6)
        capsys.readouterr()
        records, read = await read_quarantine(config, Selection())
        err = capsys.readouterr().err
        assert read == len(records) == 6
        offsets = await quarantine_offsets(config)  # records and the transactions' commit markers
        assert offsets > read
        assert err.splitlines()[-1].startswith("reading quarantine: 6 records in ")
        assert f"/{offsets}" not in err

    async def test_no_match_says_so(self, config: Config) -> None:
        """A selection that matches nothing says so instead of stopping silently."""
        await publish_reviews(config, 2, comment_every=1)
        await decide_all(config, gate_for(CONTRACTS), 2)
        out = io.StringIO()
        selection = Selection(tools=frozenset({"no_such_tool"}))
        code = await run_replay(
            config,
            gate_for(CONTRACTS),
            selection,
            apply_it=False,
            max_replays=3,
            now=datetime.now(UTC),
            out=out,
        )
        assert code == 0
        assert "selected 0 of 2 quarantine records" in out.getvalue()
        assert "no records matched: nothing to replay" in out.getvalue()

    async def test_loop_guard(self, config: Config) -> None:
        """A record replayed max_replays times already is refused."""
        await publish_reviews(config, 6, comment_every=1)
        gate = gate_for(CONTRACTS)  # never fixed: every replay is quarantined again
        await decide_all(config, gate, 6)
        for decided in (6, 12):  # quarantine: 6 at count 0, then +6 at 1, then +6 at 1 and +6 at 2
            await run_replay(
                config,
                gate,
                Selection(),
                apply_it=True,
                max_replays=2,
                now=datetime.now(UTC),
                out=io.StringIO(),
            )
            await decide_all(config, gate, decided)
        records, _ = await read_quarantine(config, Selection())
        assert sorted(r.replays for r in records) == [0] * 6 + [1] * 12 + [2] * 6
        out = io.StringIO()
        await run_replay(
            config, gate, Selection(), apply_it=True, max_replays=2, now=datetime.now(UTC), out=out
        )
        assert "replayed 18 records" in out.getvalue()
        assert "6 refused by the loop guard" in out.getvalue()

    async def test_expired_request_needs_fresh_call(self, config: Config, tmp_path: Path) -> None:
        """A dry run after the request expired says replay cannot help."""
        has_comment = await publish_reviews(config, 3, comment_every=1)
        await decide_all(config, gate_for(CONTRACTS), 3)
        fixed = gate_for(contracts_with_v2(tmp_path / "fixed", "active"))
        out = io.StringIO()
        later = datetime.now(UTC) + timedelta(hours=1)
        await run_replay(config, fixed, Selection(), apply_it=False, max_replays=3, now=later, out=out)
        assert "REQUEST_EXPIRED" in out.getvalue()
        assert f"{len(has_comment)} answer requests that have expired" in out.getvalue()


class TestSummaryMarks:
    async def test_replayed_resolved_and_unreplayed(self, config: Config, tmp_path: Path) -> None:
        """summary marks a replay rejected again as replayed, an accepted one as resolved;
        --unreplayed counts what is left: the untouched record and the new copy of the failed replay."""
        started = datetime.now(UTC) - timedelta(minutes=1)
        await publish_reviews(config, 6, comment_every=2)  # 3 results with `comment`: quarantined
        await decide_all(config, gate_for(CONTRACTS), 6)
        quarantined, _ = await read_quarantine(config, Selection())
        assert len(quarantined) == 3
        first, second, _ = sorted(quarantined, key=lambda r: (r.partition, r.offset))
        await apply(config, [first], 3)
        await decide_all(config, gate_for(CONTRACTS), 1)  # not fixed: quarantined again
        await apply(config, [second], 3)
        await decide_all(config, gate_for(contracts_with_v2(tmp_path / "fixed", "active")), 1)

        rows, read = await summary(config, filters=Filters(), replays_since=started)
        assert read == 4
        assert [(r.count, r.replayed, r.resolved) for r in rows] == [(4, 2, 1)]
        title = format_summary(rows, read, config.topics.quarantine)[0]
        assert title.endswith("4 of 4 quarantine records matched (2 replayed, 1 resolved by a replay)")

        left, _ = await summary(config, filters=Filters(unreplayed=True), replays_since=started)
        assert [(r.count, r.replayed, r.resolved) for r in left] == [(2, 0, 0)]


class TestShadowLive:
    async def test_shadow_counts_and_audits_while_active_decides(
        self, config: Config, tmp_path: Path
    ) -> None:
        """A shadow version's disagreements are counted and audited; the active one decides."""
        has_comment = await publish_reviews(config, 30, comment_every=2)
        worker = await decide_all(config, gate_for(contracts_with_v2(tmp_path / "c", "shadow")), 30)
        commented = {rid for rid, flag in has_comment.items() if flag}
        await assert_delivered(config, set(has_comment) - commented)
        audit = [json.loads(r.value or b"") for r in await read_all(config, config.topics.audit)]
        shadow = [e for e in audit if e.get("kind") == "shadow"]
        assert {e["request_id"] for e in shadow} == commented
        assert {e["shadow"]["contract"] for e in shadow} == {"review_status@v2"}
        value = worker.metrics.shadow_disagreements.labels("review_status", "2")._value.get()
        assert value == len(commented)
