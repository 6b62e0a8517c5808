"""An in-process worker on private topics, running on its own event loop in a thread.

Tests of the operator tools (``toolgate top``, ``toolgate quarantine tail``, the
runbook, the dashboard under a real Prometheus) need a worker that keeps serving
``/metrics`` while the test itself blocks on a subprocess or an HTTP call: the
worker's loop therefore runs in a thread of its own, and the test stays synchronous.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from toolgate._config import Config
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.operations._traffic import Sample
from toolgate.service._service import Worker, WorkerOptions, WorkerStats

from tests import ROOT
from tests.integration.worker_kit import (
    KEYRING,
    drop_topics,
    private_config,
    publish,
    samples,
    worker_env,
)

VENV_BIN = Path(sys.executable).parent


class LiveWorker:
    """Start with :meth:`start`, feed with :meth:`feed`, always :meth:`stop` (drops the topics)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.config: Config | None = None
        self.worker: Worker | None = None
        self.fed: list[Sample] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        self._stats: WorkerStats | None = None

    def start(self, seconds: float = 60) -> None:
        """Create private topics, start the worker and return once it is ready."""
        self.config = asyncio.run(private_config(self.bootstrap))
        gate = Gate(ContractSet.load(self.config.contracts_dir), Keyring.load(KEYRING, environ={}))
        options = WorkerOptions(handle_signals=False, metrics_port=0)
        self.worker = Worker(self.config, gate, options=options)
        self._thread = threading.Thread(target=self._main, name="live-worker", daemon=True)
        self._thread.start()
        self._wait(lambda w: w.ready() and w.metrics_port is not None, seconds, "ready")

    def _main(self) -> None:
        async def main() -> None:
            assert self.worker is not None
            self._loop = asyncio.get_running_loop()
            self._stats = await self.worker.run()

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the test thread
            self._error = exc

    def poll(self, check: Callable[[], bool], seconds: float) -> bool:
        """Call ``check`` every 0.1 s (bounded) while the worker runs: True once it holds,
        False when time is up. Raises if the worker failed or stopped."""
        assert self._thread is not None
        for _ in range(max(1, int(seconds * 10))):
            if self._error is not None:
                raise AssertionError(f"the worker failed: {self._error!r}") from self._error
            if not self._thread.is_alive():
                raise AssertionError("the worker stopped")
            if check():
                return True
            self._thread.join(0.1)  # bounded poll of the worker thread
        return False

    def _wait(self, done: Callable[[Worker], bool], seconds: float, what: str) -> None:
        worker = self.worker
        assert worker is not None
        if not self.poll(lambda: done(worker), seconds):
            raise AssertionError(f"the worker was not {what} within {seconds:g} s")

    def feed(self, count: int, *, seed: int = 11) -> list[Sample]:
        """Publish ``count`` fresh samples (requests first) and return them."""
        assert self.config is not None
        items = samples(count, seed=seed)
        asyncio.run(publish(self.config, items))
        self.fed += items
        return items

    def wait_until(self, check: Callable[[], bool], seconds: float, what: str) -> None:
        """Poll ``check`` (bounded) while the worker runs; fail naming ``what`` on time-out."""
        if not self.poll(check, seconds):
            raise AssertionError(f"not {what} within {seconds:g} s")

    def wait_decided(self, count: int | None = None, seconds: float = 60) -> None:
        """Return once the worker has decided ``count`` results (default: all fed)."""
        target = len(self.fed) if count is None else count
        self._wait(lambda w: w.stats.decided >= target, seconds, f"done deciding {target} results")

    @property
    def metrics_url(self) -> str:
        """The worker's /metrics URL."""
        assert self.worker is not None
        assert self.worker.metrics_port is not None
        return f"http://127.0.0.1:{self.worker.metrics_port}/metrics"

    def env(self) -> dict[str, str]:
        """Environment for a ``toolgate`` subprocess: private topics, this worker's metrics port,
        the venv's ``toolgate`` on PATH."""
        assert self.config is not None
        assert self.worker is not None
        env = worker_env(self.config)
        env["TOOLGATE_METRICS_PORT"] = str(self.worker.metrics_port)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(ROOT)
        return env

    def run(
        self, *command: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``command`` (``toolgate ...``, ``bash -c ...``) in :meth:`env` plus ``env``, from the
        repository's root, to its end (at most ``timeout`` seconds); its output captured."""
        return subprocess.run(
            command,
            env={**self.env(), **(env or {})},
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def stop(self) -> None:
        """Stop the worker cleanly and drop its topics."""
        try:
            if self._thread is not None and self._loop is not None and self.worker is not None:
                self._loop.call_soon_threadsafe(self.worker.request_stop)
                self._thread.join(60)
        finally:
            if self.config is not None:
                asyncio.run(drop_topics(self.config))
        if self._error is not None:
            raise AssertionError(f"the worker failed: {self._error!r}") from self._error
