"""``make run`` on a machine where a Kafka broker of another checkout already serves
127.0.0.1:19092: it uses that broker (``kafka.sh ensure``) instead of refusing, leaves it
running, and the worker it starts decides the sample traffic."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid

import pytest
from toolgate._config import Config, Topics

from tests import ROOT
from tests.integration.broker_kit import free_port
from tests.integration.conftest import LOCAL_BOOTSTRAP
from tests.integration.worker_kit import drop_topics

KAFKA_SH = ROOT / "ops" / "kafka" / "kafka.sh"
MAKE = shutil.which("make")


def _ours() -> bool:
    """True when the broker on 19092 is this checkout's own (then the case is not shown)."""
    pid_file = ROOT / "ops" / "kafka" / ".data" / "kafka.pid"
    return pid_file.exists()


def test_kafka_sh_ensure_uses_a_broker_another_checkout_runs(bootstrap: str) -> None:
    if bootstrap != LOCAL_BOOTSTRAP or _ours():
        pytest.skip("needs a broker on 127.0.0.1:19092 that this checkout did not start")
    done = subprocess.run(
        ["bash", str(KAFKA_SH), "ensure"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "already serves 127.0.0.1:19092 (not started here): using it" in done.stderr
    assert not _ours()  # nothing started here
    # `start` still refuses a port another process holds, and names the command meant.
    refused = subprocess.run(
        ["bash", str(KAFKA_SH), "start"], capture_output=True, text=True, timeout=120, check=False
    )
    assert refused.returncode != 0
    assert "already serves 127.0.0.1:19092: `kafka.sh ensure` uses it" in refused.stderr


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_make_run_reuses_the_running_broker(bootstrap: str) -> None:
    """make run with a broker already serving 127.0.0.1:19092: another checkout's is used as it is
    (this one's, as in CI, is found running); either way the worker decides the sample traffic."""
    if bootstrap != LOCAL_BOOTSTRAP:
        pytest.skip("make run's broker is the local one")
    ours = _ours()
    tag = uuid.uuid4().hex[:10]
    port = free_port()
    topics = Topics.under(f"tg-mr-{tag}")
    env = {
        **os.environ,
        "TOOLGATE_BOOTSTRAP": LOCAL_BOOTSTRAP,
        "TOOLGATE_GROUP_ID": f"tg-mr-{tag}",
        "TOOLGATE_METRICS_PORT": str(port),
        **topics.env(),
    }
    env.pop("TOOLGATE_CONFIG", None)
    try:
        done = subprocess.run(
            [str(MAKE), "--no-print-directory", "-C", str(ROOT), "run"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-3000:]
        if ours:
            assert "kafka.sh: already running (pid" in output
        else:
            assert "already serves 127.0.0.1:19092 (not started here): using it" in output
            assert not _ours()  # nothing started here
        assert "worker.sh: worker ready" in output
        assert "200 results sent, 200 decided" in output
        # The closing line names the worker's metrics port, the one TOOLGATE_METRICS_PORT gave.
        assert f"The worker keeps running: curl -s 127.0.0.1:{port}/metrics" in output
    finally:
        subprocess.run(
            ["bash", str(ROOT / "ops" / "worker.sh"), "stop"], env=env, capture_output=True, timeout=60
        )
        asyncio.run(drop_topics(Config(bootstrap=LOCAL_BOOTSTRAP, topics=topics)))
