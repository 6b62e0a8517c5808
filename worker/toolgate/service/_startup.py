"""What the worker checks and reports around start-up: readiness text, static membership, the
metrics port, and the watch that reloads contracts and keyring when their files change."""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgate._config import Config, Topics
from toolgate._errors import ConfigError
from toolgate.gate._contracts import NOT_LIVE
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.service._kafka import copartition_problem, partition_of
from toolgate.service._metrics import HealthServer
from toolgate.service._store import reading

log = logging.getLogger("toolgate.worker")
# The sample keyring beside the bundled contracts (their fixtures are signed with it).
FIXTURES_KEYRING = "fixtures-keyring.toml"
STANDBY = "ready: standby (owns no intake partition: more workers than partitions)"


def readiness_text(*, joined: bool, owned: int, restoring: bool, failing: bool) -> str:
    """What ``/readyz`` answers: ``ready``, the standby line, or why the worker is not ready."""
    if restoring:
        return "restoring"
    if not joined:
        return "joining the consumer group"
    if failing:
        return "not ready: a transaction failed or a partition is not taken over yet"
    return STANDBY if not owned else "ready"


def static_membership(config: Config) -> dict[str, Any]:
    """The consumer options of static membership (KIP-345), none for a dynamic member."""
    if not config.group_instance_id:
        return {}
    return {"group_instance_id": config.group_instance_id}


async def start_health(server: HealthServer, from_config: bool) -> None:
    """Start the metrics server; a port in use is a configuration error naming the setting."""
    try:
        await server.start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        where = "TOOLGATE_METRICS_PORT (metrics_port)" if from_config else "the metrics port option"
        raise ConfigError(
            f"{server.host}:{server.port}: address already in use: another process listens there; "
            f"stop it or choose another port with {where}"
        ) from exc


Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(paths: list[Path]) -> Fingerprint:
    """Every file under ``paths`` (symbolic links followed, as a mounted ConfigMap or Secret
    has them) by resolved path, size and modification time: a Kubernetes update swaps the
    mount's ``..data`` link, which changes every resolved path."""
    seen: list[tuple[str, int, int]] = []
    for root in paths:
        if root.is_file():
            files = [root]
        elif root.is_dir():
            files = []
            for folder, dirs, names in os.walk(root, followlinks=True):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".."))  # the mount's own copies
                files.extend(Path(folder) / n for n in sorted(names) if not n.startswith(".."))
        else:
            continue
        for file in files:
            try:
                real = file.resolve()
                info = real.stat()
            except OSError:
                continue  # removed meanwhile: the next check sees the new set
            seen.append((str(real), info.st_size, info.st_mtime_ns))
    return tuple(seen)


class ContractWatch:
    """Says when the contracts folder or the keyring changed, checking every ``interval`` seconds.

    Args:
        paths: the contracts folder and the keyring file.
        interval: seconds between two checks.
        clock: monotonic seconds (injected by tests).
    """

    def __init__(
        self, paths: list[Path], interval: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.paths = paths
        self.interval = interval
        self._clock = clock
        self._last = clock()
        self._seen = fingerprint(paths)

    @classmethod
    def of(cls, config: Config, clock: Callable[[], float] | None = None) -> ContractWatch | None:
        """The watch the configuration asks for (``contracts_watch_seconds``), or None (0)."""
        if config.contracts_watch_seconds <= 0:
            return None
        paths = [Path(config.contracts_dir)] + ([Path(config.keyring)] if config.keyring else [])
        return cls(paths, config.contracts_watch_seconds, clock or time.monotonic)

    def changed(self) -> bool:
        """True once per change, at the first check after it."""
        now = self._clock()
        if now - self._last < self.interval:
            return False
        self._last = now
        current = fingerprint(self.paths)
        if current == self._seen:
            return False
        self._seen = current
        return True


def check_signature_keys(gate: Gate, keyring_file: str | None) -> None:
    """Refuse to start when a signed contract names a key the keyring lacks (every such result
    would be ``BAD_SIGNATURE``): one line naming the contract, the key id and the keyring.

    Raises:
        ConfigError: the first contract version whose key is missing or of another algorithm.
    """
    where = f"TOOLGATE_KEYRING={keyring_file}" if keyring_file else "no keyring: TOOLGATE_KEYRING is not set"
    for contract in gate.contracts:
        signature = contract.spec.signature
        if signature is None or contract.spec.status in NOT_LIVE:
            continue  # a draft or disabled version never decides: it verifies nothing live
        key = gate.keyring.get(signature.key_id)
        if key is None:
            raise ConfigError(
                f"contract {contract.key} ({contract.path}) requires signature key {signature.key_id!r}, "
                f"which the keyring lacks ({where}); give the adapters' keys with --keyring FILE or "
                f"TOOLGATE_KEYRING{_sample_keys(contract.folder.parent.parent, signature.key_id)}"
            )
        if key.algorithm != signature.algorithm:
            raise ConfigError(
                f"contract {contract.key} ({contract.path}) requires a {signature.algorithm} key "
                f"{signature.key_id!r}; the keyring's is {key.algorithm} ({where})"
            )


def _sample_keys(contracts_dir: Path, key_id: str) -> str:
    """The hint to the contracts folder's sample keyring, when it holds ``key_id``: the bundled
    contracts' fixtures are signed with sample keys that are no secret, fit for a first run."""
    sample = contracts_dir / FIXTURES_KEYRING
    try:
        found = Keyring.load(sample, environ={}).get(key_id) is not None
    except ConfigError:
        return ""
    if not found:
        return ""
    return f" (the sample keys of these contracts, never for production: --keyring {sample.absolute()})"


def log_topics(counts: dict[str, int]) -> None:
    """The topics' real partition counts, as the cluster has them (0: the topic is missing)."""
    log.info("topics", extra={"partitions": counts})


def check_copartitioned(topics: Topics, counts: dict[str, int]) -> None:
    """Requests and the state changelog must exist with intake's partition count (a request id's
    request, accepted attempts and results then sit in the same partition number).

    Raises:
        ConfigError: naming the topic, both counts and the command that fixes it.
    """
    for name in (topics.intake, topics.requests, topics.state):
        if not counts.get(name):
            raise ConfigError(f"topic {name!r} does not exist (run: toolgate topics ensure)")
    intake = counts[topics.intake]
    for name in (topics.requests, topics.state):
        if counts[name] != intake:
            raise ConfigError(copartition_problem(name, counts[name], topics.intake, intake))


def at_home(key: bytes | None, count: int) -> bool:
    """The record being read (``_store.reading``) sits in its key's partition under ``count``.

    Growing the partitions (``toolgate topics grow``) copies each live request and accepted
    attempt to its key's new partition and tombstones the old copy; a record left where its
    key no longer belongs, a value or a tombstone, says nothing about the request and is
    skipped, whichever order a restore reads the partitions in.
    """
    where = reading.get()
    if key is None or where is None or not count:
        return True
    return partition_of(key, count) == where[1]
