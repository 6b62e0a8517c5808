"""The ``peer`` variant: what a user would run instead of toolgate, side by side.

A Benthos pipeline (its ``json_schema`` processor on the bench contract's schema, a
``switch`` output to a valid and an invalid topic) over franz-go clients, no transactions,
no binding or projection, one record out per record in. Built with Go from the peer's
sources (``shared/peer`` beside or above the checkout, or ``--peer-source``) into
``~/.cache/toolgate/bench-peer/<digest>/`` once and reused; skipped with one line where Go
is missing. Its CPU is ``/proc/<pid>/stat`` utime + stime from the backlog's commit until
its output topics hold every result (its wall time includes the 20 ms polls of their end
offsets). Its validator (gojsonschema, Drafts 4-7) checks less than toolgate's, so the
ratio compares CPU per result of work that is not the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

from ops.bench.backlog import PARTITIONS, TOOL, run_topics
from ops.bench.measure import ROOT, cpu_snapshot, process_cpu

if TYPE_CHECKING:
    from ops.bench.harness import Bench


# What a user would run instead: a Benthos pipeline (its json_schema processor, a switch output
# to a valid and an invalid topic) over franz-go clients, no transactions. Its sources come
# with the project's shared material (README there: build with Go, run with the template).
PEER_FILES = ("README.md", "go.mod", "go.sum", "main.go", "pipeline.yaml.template")
PEER_ASSIGNED = re.compile(rb"assigned (\d+) partitions")


def peer_source(given: str | None) -> Path | None:
    """The peer's source folder: ``given``, else ``shared/peer`` beside the checkout or above it."""
    candidates = (
        [Path(given)] if given else [base / "shared" / "peer" for base in (ROOT.parent, ROOT.parent.parent)]
    )
    return next((c for c in candidates if all((c / f).is_file() for f in PEER_FILES)), None)


def peer_cache() -> Path:
    """Where built peers are kept between runs (never in the checkout)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toolgate" / "bench-peer"


def build_peer(source: Path, go: str) -> tuple[Path, bool]:
    """The peer binary built from ``source`` and whether it was built now (else reused).

    Kept in :func:`peer_cache` under a digest of its sources and of ``go version``, so a
    second run reuses it and a changed source or toolchain builds afresh (about 3.5 minutes
    with a cold Go module cache, seconds with a warm one).
    """
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode())
    for name in PEER_FILES:
        digest.update(name.encode() + b"\0" + (source / name).read_bytes())
    folder = peer_cache() / digest.hexdigest()[:16]
    binary = folder / "peer"
    if binary.is_file():
        return binary, False
    src = folder / "src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "cmd" / "peer").mkdir(parents=True)
    for name in PEER_FILES:
        shutil.copyfile(source / name, src / "cmd" / "peer" / name if name == "main.go" else src / name)
    partial = folder / f"peer.{os.getpid()}.partial"
    built = subprocess.run(
        [go, "build", "-o", str(partial), "./cmd/peer"],
        cwd=src,
        env=os.environ | {"GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(f"building the peer in {src} failed:\n{built.stderr[-2000:]}")
    partial.replace(binary)
    return binary, True


def peer_pipeline(template: str, values: dict[str, str], http_port: int) -> str:
    """The pipeline template with its ``{placeholders}`` filled and its HTTP server on ``http_port``."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", value)
    code = "\n".join(line for line in template.splitlines() if not line.lstrip().startswith("#"))
    left = re.findall(r"\{[a-z_]+\}", code)
    if left:
        raise RuntimeError(f"peer pipeline template: placeholders not filled: {sorted(set(left))}")
    return template.replace("127.0.0.1:4195", f"127.0.0.1:{http_port}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_peer(given: str | None) -> tuple[tuple[Path, Path] | None, str]:
    """(the peer's binary and source folder, "") or (None, why it is skipped), building it
    into the cache when it is not there yet."""
    go = shutil.which("go")
    if go is None:
        return None, "no Go toolchain on PATH (the peer is built with go build)"
    source = peer_source(given)
    if source is None:
        where = given or f"{ROOT.parent}/shared/peer or {ROOT.parent.parent}/shared/peer"
        return None, f"no peer sources at {where} (--peer-source PATH)"
    started = time.monotonic()
    binary, built = build_peer(source, go)
    if built:
        print(f"peer: built {binary} in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return (binary, source), ""


async def peer_run(bench: Bench, repeat: int) -> dict[str, Any]:
    """The peer on the same backlog: valid results to the agent topic, invalid ones to
    quarantine; its CPU from /proc from the backlog's commit until both topics hold all."""
    assert bench.peer is not None
    binary, source = bench.peer
    config = bench.config(f"peer.{repeat}")
    await bench.create(config)
    t = config.topics
    pipeline = bench.tmp / f"peer-{repeat}.yaml"
    pipeline.write_text(
        peer_pipeline(
            (source / "pipeline.yaml.template").read_text(),
            {
                "boot": bench.bootstrap,
                "intake": t.intake,
                "group": config.group_id,
                "schema_path": str(bench.contracts_dir / TOOL / "v1" / "schema.json"),
                "valid": t.agent,
                "invalid": t.quarantine,
            },
            free_port(),
        )
    )
    log_path = bench.tmp / f"peer-{repeat}.log"
    fill, per_partition = await bench.open_fill(config, f"peer.{repeat}", PARTITIONS)
    watcher = bench.clients.consumer(group_id=None, enable_auto_commit=False)
    proc: asyncio.subprocess.Process | None = None
    problems: list[str] = []
    try:
        with log_path.open("wb") as log_file:
            proc = await asyncio.create_subprocess_exec(
                str(binary), "-c", str(pipeline), stdout=log_file, stderr=subprocess.STDOUT
            )
        await watcher.start()
        deadline = time.monotonic() + 60
        while True:  # it owns every intake partition before the backlog is committed
            text = log_path.read_bytes()
            if any(int(n) == PARTITIONS for n in PEER_ASSIGNED.findall(text)):
                break
            if proc.returncode is not None or time.monotonic() > deadline:
                tail = text.decode(errors="replace")[-2000:]
                raise RuntimeError(f"peer did not take its {PARTITIONS} partitions:\n{tail}")
            await asyncio.sleep(0.05)
        outputs = {
            topic: [TopicPartition(topic, p) for p in range(count)]
            for topic, count in (
                (t.agent, config.partitions.agent),
                (t.quarantine, config.partitions.quarantine),
            )
        }
        every = [tp for tps in outputs.values() for tp in tps]
        before = cpu_snapshot(bench.broker_pid)
        own_before = time.process_time()
        peer_before = process_cpu(proc.pid)
        first = time.time()
        await fill.commit_transaction()
        seen, stalled = 0, time.monotonic() + 30  # no new output for 30 s: give up
        while True:
            ends = await watcher.end_offsets(every)
            total = sum(ends.values())
            if total >= bench.messages or time.monotonic() > stalled:
                break
            if total > seen:
                seen, stalled = total, time.monotonic() + 30
            await asyncio.sleep(0.02)
        last = time.time()
        after = cpu_snapshot(bench.broker_pid)
        peer_cpu = process_cpu(proc.pid) - peer_before
        own = time.process_time() - own_before
    finally:
        if proc is not None and proc.returncode is None:
            # Its output is counted: no need to wait out its shutdown timeout (20 s).
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 3)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await watcher.stop()
        await fill.stop()
    valid = sum(ends[tp] for tp in outputs[t.agent])
    invalid = sum(ends[tp] for tp in outputs[t.quarantine])
    expected_rejected = sum(r.rejected for r in bench.backlog)
    if (valid, invalid) != (bench.messages - expected_rejected, expected_rejected):
        problems.append(
            f"peer wrote {valid} valid and {invalid} invalid, expected "
            f"{bench.messages - expected_rejected} and {expected_rejected}; its log ends:\n"
            + log_path.read_text(errors="replace")[-1500:]
        )
    await bench.delete(run_topics(config) - {config.topics.requests})
    wall = last - first
    window = after[2] - before[2]
    broker_cpu = after[1] - before[1]
    return {
        "variant": "peer",
        "repeat": repeat,
        "workers": 1,
        "intake_partitions": PARTITIONS,
        "broker_cpus": broker_cpu / window if bench.broker_pid else None,
        "other_cpus": max(0.0, after[0] - before[0] - peer_cpu - broker_cpu - own) / window,
        "broker_us_per_result": broker_cpu / bench.messages * 1e6 if bench.broker_pid else None,
        "seconds": wall,
        "results": bench.messages,
        "results_per_s": bench.messages / wall,
        "cpu_us_per_result": peer_cpu / bench.messages * 1e6,
        "phases_us_per_result": {},
        "gc_us_per_result": 0.0,
        "audit_span_seconds": wall,
        "transactions": 0,
        "aborted": 0,
        "partitions": per_partition,
        "problems": problems,
    }
