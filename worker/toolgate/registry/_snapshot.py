"""Contracts from a registry, through a complete snapshot on disk.

:func:`fetch_contracts` reads every toolgate subject (``<tool>-v<N>-value``) and
:func:`write_snapshot` writes the versions as a contracts folder (``<tool>/v<N>[.<M>]/``
with ``contract.yaml``, ``schema.json`` and an MCP tool's pinned input schema), loads it
with the gate's own loader and only then makes it current: ``<dir>/current`` is a symbolic
link swapped in one rename, so a reader sees the old set or the new one, never a part. A
registry that fails mid-way leaves the current snapshot as it was.

:class:`RegistrySource` is what the worker and the MCP proxy use: the first snapshot at
start-up (with the registry down, the last complete one on disk, said in one line), then a
check every ``poll_seconds`` that writes a new snapshot when a version was registered; the
worker's contract watch reloads it between two batches.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from toolgate._errors import ConfigError
from toolgate.gate._contracts import ContractSet
from toolgate.registry._client import RegistryClient, RegistryError
from toolgate.registry._layout import Entry, check_statuses, parse_entry, parse_subject

__all__ = ["MANIFEST", "EmptyRegistry", "RegistrySource", "Snapshot", "fetch_contracts", "write_snapshot"]

log = logging.getLogger("toolgate.registry")

MANIFEST: Final = "registry.json"
CURRENT: Final = "current"
_KEEP: Final = 2  # the current snapshot and the one before (a reader may still be in it)

Versions = tuple[tuple[str, tuple[int, ...]], ...]


class EmptyRegistry(ConfigError):
    """The registry answered but holds no contract version (one restarted empty, in memory)."""


class Snapshot:
    """Every toolgate version of one registry at one moment.

    Attributes:
        entries: (entry, status it has now) per contract version.
        versions: each toolgate subject with its registry version numbers (what a poll compares).
    """

    def __init__(self, entries: list[tuple[Entry, str]], versions: Versions) -> None:
        self.entries = entries
        self.versions = versions


def registry_versions(client: RegistryClient) -> Versions:
    """Each toolgate subject and its registered version numbers (two kinds of request)."""
    subjects = sorted(s for s in client.subjects() if parse_subject(s) is not None)
    return tuple((s, tuple(client.versions(s))) for s in subjects)


def fetch_contracts(client: RegistryClient, versions: Versions | None = None) -> Snapshot:
    """Every contract version the registry holds, each with the status its major's newest
    registration gives it.

    Raises:
        RegistryError: the registry failed or refused a request.
        ConfigError: a registration's metadata does not decode (naming subject and version).
    """
    versions = registry_versions(client) if versions is None else versions
    entries: list[tuple[Entry, str]] = []
    for subject, numbers in versions:
        by_minor: dict[int, Entry] = {}
        newest: Entry | None = None
        for number in numbers:
            entry = parse_entry(client.schema(subject, number), subject, number)
            if entry is None:
                continue  # a registration without toolgate metadata: not a contract version
            by_minor[entry.spec.minor] = entry
            newest = entry
        if newest is None:
            continue
        where = f"schema registry subject {subject} version {numbers[-1]}"
        check_statuses(newest.statuses, where)
        for minor, entry in sorted(by_minor.items()):
            entries.append((entry, newest.statuses.get(minor, entry.spec.status)))
    return Snapshot(entries, versions)


def write_snapshot(snapshot: Snapshot, root: Path, source: str) -> Path:
    """Write ``snapshot`` as a contracts folder under ``root`` and make it ``root/current``.

    Returns:
        ``root/current``.

    Raises:
        ConfigError: the versions do not load as a contract set (the current one stays).
    """
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.time_ns()
    final = root / f"snapshot-{stamp}"
    work = root / f".snapshot-{stamp}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    try:
        for entry, status in snapshot.entries:
            folder = work / entry.spec.tool / entry.key.partition("@")[2]
            folder.mkdir(parents=True)
            for name, data in entry.files(status).items():
                (folder / name).write_bytes(data)
        if not snapshot.entries:
            raise EmptyRegistry(
                f"schema registry {source}: no contract versions (subjects <tool>-v<N>-value)"
            )
        ContractSet.load(work)  # the gate's own loader: a set that fails is never current
        digests = {e.key: e.digest for e, _ in snapshot.entries}
        manifest = {
            "source": source,
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp / 1e9)),
            "subjects": {s: list(v) for s, v in snapshot.versions},
            "contracts": sorted(digests),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        work.rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    link = root / f".{CURRENT}.{stamp}"
    link.symlink_to(final.name)
    os.replace(link, root / CURRENT)
    _prune(root, keep=final.name)
    return root / CURRENT


def _prune(root: Path, keep: str) -> None:
    snapshots = sorted((p for p in root.glob("snapshot-*") if p.is_dir()), key=lambda p: p.name)
    for old in snapshots[:-_KEEP]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


def read_manifest(current: Path) -> dict[str, Any] | None:
    """The manifest of a complete snapshot, None when there is none."""
    try:
        manifest = json.loads((current / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


class RegistrySource:
    """The registry behind ``--contracts registry+...``, seen through snapshots in ``root``.

    Args:
        client: the registry.
        root: where snapshots are kept (TOOLGATE_REGISTRY_SNAPSHOT_DIR).
        poll_seconds: seconds between two checks for new versions.
        on_state: called with True while the loaded set is the snapshot on disk because the
            registry was unreachable at start-up, False once a fresh one was written.
    """

    def __init__(
        self,
        client: RegistryClient,
        root: Path,
        poll_seconds: float,
        on_state: Callable[[bool], None] | None = None,
    ) -> None:
        if not 0 < poll_seconds <= 3600:
            raise ConfigError(f"TOOLGATE_REGISTRY_POLL_SECONDS={poll_seconds}: expected 0 < seconds <= 3600")
        self.client = client
        self.root = root
        self.poll_seconds = poll_seconds
        self.on_state = on_state
        self.from_disk = False
        self._seen: Versions | None = None
        self._down = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> Path:
        """The folder the gate loads (a link to the newest complete snapshot)."""
        return self.root / CURRENT

    def start(self) -> Path:
        """The first snapshot: fresh from the registry, or the last complete one on disk when
        the registry is unreachable or holds no version (one warning line).

        Raises:
            ConfigError: the registry is unreachable (or empty) and no snapshot is on disk; or it answered
                with versions that do not load.
        """
        try:
            self._sync()
        except (RegistryError, EmptyRegistry) as exc:
            if isinstance(exc, RegistryError) and exc.refused:
                raise
            manifest = read_manifest(self.current)
            if manifest is None:
                raise ConfigError(f"{exc}; and no snapshot of it in {self.root} to start from") from exc
            self.from_disk = True
            self._down = True
            log.warning(
                "schema registry unreachable or empty at start-up; using the last complete snapshot, "
                f"fetched {manifest.get('fetched_at')}, in {self.current.resolve()}",
                extra={"error": str(exc)[:300]},
            )
            self._state(True)
        return self.current

    def poll(self) -> bool:
        """One check; True when a new snapshot was written. Failures keep the current one."""
        try:
            changed = self._sync()
        except ConfigError as exc:
            if not self._down:
                log.error(
                    "schema registry check failed; keeping the loaded contracts",
                    extra={"error": str(exc)[:300]},
                )
            self._down = True
            return False
        if self._down:
            log.info("schema registry reachable again")
            self._down = False
        if self.from_disk:
            self.from_disk = False
            self._state(False)
        return changed

    def _sync(self) -> bool:
        versions = registry_versions(self.client)
        if versions == self._seen and read_manifest(self.current) is not None:
            return False
        snapshot = fetch_contracts(self.client, versions)
        write_snapshot(snapshot, self.root, self.client.url)
        self._seen = versions
        return True

    def _state(self, from_disk: bool) -> None:
        if self.on_state is not None:
            self.on_state(from_disk)

    def run_in_background(self) -> None:
        """Poll every ``poll_seconds`` on a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            return

        def loop() -> None:
            while not self._stop.wait(self.poll_seconds):
                self.poll()

        self._thread = threading.Thread(target=loop, name="toolgate-registry-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the background polling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
