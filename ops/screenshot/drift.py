"""Prometheus's own graphs of a drifting connector, as a PNG (``make screenshot``).

Starts, on private topics of the broker at TOOLGATE_BOOTSTRAP (127.0.0.1:19092 by default):

1. a worker (``toolgate run``) on the bundled contracts, metrics on a free port;
2. Debian's ``prometheus`` scraping it every second and evaluating ops/prometheus/rules;
3. sample traffic (mostly good results, a few hostile ones) for ``--seconds``; from
   ``--drift-at`` on, the deploy adapter's version 3.2.0 sends ``state: "Healthy"``
   (capitalised, outside the contract's enum) for most deploy_status results: a connector
   that drifted after an upgrade;

then takes a headless-Chromium screenshot of Prometheus's graph page with two panels, the
rejection ratio by tool (the recording rule the drift alert reads) and rejections by code,
and stops everything it started (the broker is left as it was). Needs ``chromium`` and
``prometheus`` on PATH (``make screenshot`` installs them from Debian's packages).

    .venv/bin/python ops/screenshot/drift.py --out docs/drift-graphs.png
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from toolgate._config import Config, Partitions, Topics, load_config
from toolgate.gate._records import Message
from toolgate.gate._signing import Keyring, signed_message
from toolgate.operations._traffic import Sample, TrafficGenerator
from toolgate.service._kafka import AiokafkaClients, delete_topics, ensure_topics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "rules" / "toolgate.yml"
CONTRACTS = ROOT / "contracts"
KEYRING = CONTRACTS / "fixtures-keyring.toml"

RATIO = "toolgate:rejection_ratio:ratio5m"
BY_CODE = "sum by (code) (rate(toolgate_rejections_total[1m]))"


def say(text: str) -> None:
    print(f"screenshot: {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshot: {what} within {seconds:g} s")
        time.sleep(0.25)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def drifting(port: int) -> bool:
    """The recording rule the drift alert reads shows deploy_status above the 25% threshold."""
    query = urllib.parse.urlencode({"query": f'{RATIO}{{tool="deploy_status"}} > 0.25'})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5) as r:
            return bool(json.loads(r.read())["data"]["result"])
    except (OSError, ValueError, KeyError):
        return False


def graph_url(port: int, minutes: int) -> str:
    """Prometheus's graph page with the two panels, over the last ``minutes``."""
    params: dict[str, str] = {}
    for i, expr in enumerate((RATIO, BY_CODE)):
        params.update(
            {
                f"g{i}.expr": expr,
                f"g{i}.tab": "0",  # the Graph tab
                f"g{i}.stacked": "0",
                f"g{i}.show_exemplars": "0",
                f"g{i}.range_input": f"{minutes}m",
            }
        )
    return f"http://127.0.0.1:{port}/graph?" + urllib.parse.urlencode(params)


def drifted(generator: TrafficGenerator, now: datetime) -> Sample:
    """A deploy_status result from adapter 3.2.0: ``state`` capitalised, correctly signed."""
    sample = generator.kinds["deploy.healthy"](now)
    value = json.loads(sample.message.value or b"{}")
    value["data"]["state"] = "Healthy"
    raw = json.dumps(value, separators=(",", ":")).encode()
    headers = [
        (name, b"3.2.0" if name == "tg-adapter-version" else data)
        for name, data in sample.message.headers
        if name != "tg-signature"
    ]
    key = generator.keyring.get("deploy-adapter-2026")
    if key is not None:
        signature = base64.b64encode(key.sign(signed_message(sample.request_id, raw))).decode()
        headers.append(("tg-signature", signature.encode()))
    message = Message(key=sample.message.key, value=raw, headers=headers)
    return Sample("deploy.drifted", "deploy_status", sample.request_id, sample.request, message, None)


async def traffic(config: Config, seconds: float, drift_at: float, rate: int, seed: int) -> int:
    """Publish ``rate`` results a second for ``seconds``; deploy_status drifts from ``drift_at``."""
    generator = TrafficGenerator(Keyring.load(KEYRING), seed=seed, run_id=uuid.uuid4().hex[:8])
    rng = random.Random(seed)
    # Hostile samples of known tools (results naming no tool would add an "unknown" line at 100%).
    hostile = [k for k in generator.kinds if k not in generator.accepting and k != "unknown_tool"]
    producer = AiokafkaClients(config).producer(acks="all", linger_ms=5)
    await producer.start()
    sent = 0
    started = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            now = datetime.now(UTC)
            for _ in range(rate):
                kind = rng.choice(hostile) if rng.random() < 0.06 else rng.choice(generator.accepting)
                if kind == "deploy.healthy" and elapsed >= drift_at and rng.random() < 0.8:
                    sample = drifted(generator, now)
                else:
                    sample = generator.kinds[kind](now)
                raw = sample.request_bytes()
                if raw is not None:
                    await producer.send(config.topics.requests, raw, key=sample.request_id.encode())
                message = sample.message
                await producer.send(
                    config.topics.intake, message.value, key=message.key, headers=list(message.headers)
                )
                sent += 1
            await producer.flush()
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started - elapsed)))
    finally:
        await producer.stop()
    return sent


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "drift-graphs.png", help="the PNG")
    parser.add_argument("--seconds", type=float, default=240, help="traffic duration (240)")
    parser.add_argument("--drift-at", type=float, default=90, help="seconds until the drift starts (90)")
    parser.add_argument("--rate", type=int, default=20, help="results a second (20)")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    # SIGTERM (make interrupted, a killed job) still runs the clean-up below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for binary in ("prometheus", "chromium"):
        if shutil.which(binary) is None:
            say(f"{binary} is not on PATH (make screenshot installs it from Debian's packages)")
            return 2

    base = load_config(None)
    tag = uuid.uuid4().hex[:8]
    topics = Topics.under(f"tg-shot-{tag}")
    config = Config(
        bootstrap=base.bootstrap,
        security=base.security,
        group_id=f"tg-shot-{tag}",
        topics=topics,
        partitions=Partitions(requests=3, intake=3, agent=3, quarantine=1, audit=3),
    )
    asyncio.run(ensure_topics(config))
    worker_port, prom_port = free_port(), free_port()
    env = {
        **os.environ,
        "TOOLGATE_BOOTSTRAP": config.bootstrap,
        "TOOLGATE_GROUP_ID": config.group_id,
        "TOOLGATE_METRICS_PORT": str(worker_port),
        **topics.env(),
    }
    work = Path(tempfile.mkdtemp(prefix="toolgate-screenshot-"))
    worker = prometheus = None
    try:
        say(f"worker on :{worker_port}, topics tg-shot-{tag}.*")
        worker = subprocess.Popen(
            [str(Path(sys.executable).with_name("toolgate")), "run", "--contracts", str(CONTRACTS),
             "--keyring", str(KEYRING)],
            env=env, stdout=subprocess.DEVNULL, stderr=(work / "worker.log").open("wb"),
        )  # fmt: skip
        wait_for(lambda: answers(f"http://127.0.0.1:{worker_port}/readyz"), 120, "the worker was not ready")
        (work / "prometheus.yml").write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            "job_name": "toolgate",
                            "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}],
                        }
                    ],
                }
            ),
            encoding="utf-8",
        )
        say(f"prometheus on :{prom_port}")
        prometheus = subprocess.Popen(
            ["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=(work / "prometheus.log").open("wb"),
        )  # fmt: skip
        wait_for(lambda: answers(f"http://127.0.0.1:{prom_port}/-/ready"), 60, "prometheus was not ready")
        say(
            f"{args.rate} results/s for {args.seconds:g} s; "
            f"deploy adapter 3.2.0 drifts from {args.drift_at:g} s"
        )
        sent = asyncio.run(traffic(config, args.seconds, args.drift_at, args.rate, args.seed))
        say(f"{sent} results sent")
        wait_for(
            lambda: drifting(prom_port), 60, "prometheus did not see deploy_status above the 25% threshold"
        )
        minutes = max(1, int(args.seconds // 60) + 1)
        url = graph_url(prom_port, minutes)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shot = subprocess.run(
            ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", f"--user-data-dir={work / 'chromium'}", "--window-size=1280,1960",
             "--virtual-time-budget=20000", f"--screenshot={args.out}", url],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        if shot.returncode != 0 or not args.out.exists():
            say(f"chromium failed ({shot.returncode}): {shot.stderr[-1500:]}")
            return 1
        say(f"wrote {args.out} ({args.out.stat().st_size} bytes) from {url}")
        return 0
    finally:
        stop(prometheus)
        stop(worker)
        asyncio.run(delete_topics(config))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
