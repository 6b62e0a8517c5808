"""Contracts from a registry, through a complete snapshot on disk, as their publisher signed them.

:func:`fetch_set` reads the newest set marker of a set (``<set>-set-value``) whose publisher's
signature holds against the readers' keyring, then the registrations of the subjects it names
(``<tool>-v<N>-value``), and keeps the signed versions they carry
(:class:`toolgate.gate._published.PublishedVersion`) that verify. It refuses, with one
:class:`Problem` naming the subject and version each, a registration whose signature fails or
whose content changed under the generation this reader read it at (``seen``: the digests per
subject and version and the generation of the marker they were read under, kept on disk; a
newer verified marker may bring other content, as a publish does after a registry lost its
contents), and notes one without ``x-toolgate`` (or without signed versions) as
ignored. A set is returned only when complete: every version the marker names is there with
its digest (:class:`IncompleteSet` otherwise).

:func:`write_snapshot` writes the signed files as a contracts folder (``<tool>/v<N>[.<M>]/``),
loads it with the gate's own loader and only then makes it current: ``<dir>/current`` is a
symbolic link swapped in one rename, so a reader sees the old set or the new one, never a part.
A registry that fails mid-way, or holds part of a set, leaves the current snapshot as it was.

:class:`RegistrySource` is what the worker and the MCP proxy use: the first snapshot at
start-up (with the registry down, the last complete one on disk, said in one line), then a
check every ``poll_seconds`` that writes a new snapshot when a newer complete set is there; the
worker's contract watch reloads it between two batches. A set older than the loaded one (a
marker of a lower generation) never replaces it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, NamedTuple

from toolgate._errors import ConfigError, ContractTrustError
from toolgate.gate._contracts import ContractSet
from toolgate.gate._published import (
    PublishedVersion,
    SetMarker,
    verify_marker,
    verify_version,
    write_version,
)
from toolgate.gate._signing import Keyring
from toolgate.registry._client import RegistryClient, RegistryError
from toolgate.registry._layout import (
    DEFAULT_SET,
    KEYWORD,
    parse_marker,
    parse_published,
    parse_subject,
    set_subject,
    subject_of,
)

__all__ = [
    "MANIFEST",
    "EmptyRegistry",
    "IncompleteSet",
    "OlderSet",
    "Problem",
    "RegistrySource",
    "SignedSet",
    "fetch_set",
    "load_contracts",
    "snapshot_generation",
    "write_snapshot",
]

log = logging.getLogger("toolgate.registry")

MANIFEST: Final = "registry.json"
CURRENT: Final = "current"
SEEN: Final = "registrations.json"  # digests per subject/version this reader has read
_KEEP: Final = 2  # the current snapshot and the one before (a reader may still be in it)
_MAX_SAID: Final = 10_000

Versions = tuple[tuple[str, tuple[int, ...]], ...]


class Seen(NamedTuple):
    """What a reader read of one registration: its versions' digests, and the generation of
    the verified marker it was read under."""

    digests: list[str]
    generation: int


class EmptyRegistry(ConfigError):
    """The registry answered but holds no signed set (one restarted empty, in memory)."""


class IncompleteSet(ConfigError):
    """The newest set marker names versions the registry lacks (or that were refused)."""


class OlderSet(ConfigError):
    """The newest set marker is of a lower generation than the set already loaded."""


class Problem(NamedTuple):
    """A registration a reader refused or ignored: said once per ``key`` (subject/version)."""

    key: str
    level: int
    message: str


class SignedSet:
    """A complete, verified set: its marker and versions, and the registry state it was read at."""

    def __init__(
        self, marker: SetMarker, subject: str, versions: list[PublishedVersion], registry: Versions
    ) -> None:
        self.marker = marker
        self.subject = subject
        self.versions = versions
        self.registry = registry


def registry_versions(client: RegistryClient, marker_subject: str) -> Versions:
    """Each toolgate subject and the set's marker subject with their version numbers."""
    subjects = sorted(s for s in client.subjects() if parse_subject(s) is not None or s == marker_subject)
    return tuple((s, tuple(client.versions(s))) for s in subjects)


def _newest_marker(
    client: RegistryClient, subject: str, numbers: Iterable[int], keyring: Keyring, problems: list[Problem]
) -> SetMarker | None:
    for number in sorted(numbers, reverse=True):
        where = f"schema registry subject {subject} version {number}"
        try:
            marker = parse_marker(client.schema(subject, number), subject, number)
            verify_marker(marker, keyring)
        except RegistryError:
            raise
        except ConfigError as exc:
            problems.append(Problem(f"{subject}/{number}", logging.ERROR, f"{where}: refused: {exc}"))
            continue
        return marker
    return None


def _marker_subjects(marker: SetMarker) -> set[str] | None:
    subjects = set()
    for key in marker.versions:
        tool, _, label = key.partition("/")
        major = label.partition(".")[0]
        if not tool or not major.isdigit():
            return None
        subjects.add(subject_of(tool, int(major)))
    return subjects


def _signed_versions(
    client: RegistryClient,
    subject: str,
    number: int,
    keyring: Keyring,
    seen: dict[str, Seen],
    problems: list[Problem],
    generation: int,
) -> list[PublishedVersion]:
    """The verified versions one registration carries (none when refused or ignored), read
    under the verified marker of ``generation``."""
    key = f"{subject}/{number}"
    where = f"schema registry subject {subject} version {number}"
    try:
        document: Any = json.loads(client.schema(subject, number))
    except ValueError:
        problems.append(Problem(key, logging.WARNING, f"{where}: not JSON; ignored"))
        return []
    if not isinstance(document, dict) or KEYWORD not in document:
        problems.append(
            Problem(key, logging.WARNING, f"{where}: a registration without {KEYWORD} metadata; ignored")
        )
        return []
    try:
        published = parse_published(document, subject, number)
    except ConfigError as exc:
        problems.append(Problem(key, logging.ERROR, f"{where}: refused: {exc}"))
        return []
    if published is None:
        problems.append(
            Problem(
                key,
                logging.WARNING,
                f"{where}: no signed versions ({KEYWORD}.published); ignored "
                "(publish it again with toolgate contracts publish --publisher-key ID)",
            )
        )
        return []
    digests = sorted(pv.digest for pv in published)
    was = seen.get(key)
    if was is not None and was.digests != digests and generation <= was.generation:
        problems.append(
            Problem(
                key,
                logging.ERROR,
                f"{where}: refused: its content changed since this reader first read it under set "
                f"generation {was.generation} (digests {','.join(d[:12] for d in was.digests)}, now "
                f"{','.join(d[:12] for d in digests)}); a newer set generation may change it",
            )
        )
        return []
    for pv in published:
        try:
            verify_version(pv, keyring)
        except ContractTrustError as exc:
            problems.append(Problem(key, logging.ERROR, f"{where}: refused: {exc}"))
            return []
    seen[key] = Seen(digests, max(generation, was.generation if was is not None else 0))
    return published


def fetch_set(
    client: RegistryClient,
    keyring: Keyring,
    *,
    set_name: str = DEFAULT_SET,
    seen: dict[str, Seen] | None = None,
    problems: list[Problem] | None = None,
    floor: int = 0,
    versions: Versions | None = None,
    on_marker: Callable[[int], None] | None = None,
) -> SignedSet:
    """The newest complete set the readers' keyring trusts.

    Args:
        seen: what was read before per ``subject/version`` (updated with the new ones):
            other content is refused unless the marker is of a newer generation.
        problems: where refused and ignored registrations are added.
        floor: the generation already loaded; an older marker raises :class:`OlderSet`.
        on_marker: called with the generation of the newest marker that verifies.

    Raises:
        RegistryError: the registry failed or refused a request.
        EmptyRegistry: no set marker of ``set_name`` verifies.
        OlderSet: the newest marker that verifies is older than ``floor``.
        IncompleteSet: a version the marker names is absent, refused or of another digest.
    """
    seen = {} if seen is None else seen
    problems = [] if problems is None else problems
    subject = set_subject(set_name)
    versions = registry_versions(client, subject) if versions is None else versions
    numbers = dict(versions)
    marker = _newest_marker(client, subject, numbers.get(subject, ()), keyring, problems)
    if marker is None:
        raise EmptyRegistry(
            f"schema registry {client.url}: no signed contract set in subject {subject} "
            "(publish one with toolgate contracts publish --publisher-key ID)"
        )
    if on_marker is not None:
        on_marker(marker.generation)
    if marker.generation < floor:
        raise OlderSet(
            f"schema registry {client.url}: the newest set in {subject} is generation {marker.generation}, "
            f"older than the loaded generation {floor}; keeping the loaded set"
        )
    needed = _marker_subjects(marker)
    if needed is None:
        raise IncompleteSet(
            f"schema registry {client.url}: set generation {marker.generation} names a bad version"
        )
    pool: dict[tuple[str, str], PublishedVersion] = {}
    for name in sorted(needed):
        for number in numbers.get(name, ()):
            for pv in _signed_versions(client, name, number, keyring, seen, problems, marker.generation):
                pool[(pv.key, pv.digest)] = pv
    missing = sorted(k for k, digest in marker.versions.items() if (k, digest) not in pool)
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise IncompleteSet(
            f"schema registry {client.url}: set generation {marker.generation} is incomplete: "
            f"{', '.join(missing[:5])}{more} absent or refused; keeping the loaded set"
        )
    chosen = [pool[(k, d)] for k, d in sorted(marker.versions.items())]
    return SignedSet(marker, subject, chosen, versions)


def write_snapshot(signed: SignedSet, root: Path, source: str) -> Path:
    """Write a verified set's files as a contracts folder under ``root`` and make it ``root/current``.

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
        if not signed.versions:
            raise EmptyRegistry(
                f"schema registry {source}: set generation {signed.marker.generation} is empty"
            )
        for pv in signed.versions:
            write_version(pv, work)
        ContractSet.load(work)  # the gate's own loader: a set that fails is never current
        manifest = {
            "source": source,
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp / 1e9)),
            "set_subject": signed.subject,
            "generation": signed.marker.generation,
            "publisher": signed.marker.publisher,
            "versions": signed.marker.versions,
            "subjects": {s: list(v) for s, v in signed.registry},
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


def load_contracts(folder: str | Path) -> ContractSet:
    """The contract set of a folder; a registry snapshot's (``current``) with the generation of
    its set marker, read from the very snapshot the link names when called."""
    path = Path(folder)
    if path.is_symlink():
        path = path.resolve()  # the manifest and the versions of one snapshot, however the link moves
    return ContractSet.load(path, snapshot_generation(path))


def snapshot_generation(folder: Path) -> int:
    """The set generation of a snapshot folder (its marker's), 0 when it has none."""
    manifest = read_manifest(folder)
    generation = manifest.get("generation") if manifest is not None else None
    return generation if isinstance(generation, int) and generation >= 0 else 0


class RegistrySource:
    """The registry behind ``--contracts registry+...``, seen through snapshots in ``root``.

    Args:
        client: the registry.
        root: where snapshots are kept (TOOLGATE_REGISTRY_SNAPSHOT_DIR), with the digests of
            every registration read (``registrations.json``).
        poll_seconds: seconds between two checks for new versions.
        keyring: the readers' keyring: its ``[publishers]`` are whose sets are loaded.
        set_name: the set (TOOLGATE_REGISTRY_SET_NAME): its markers are ``<set_name>-set-value``.
        keyring_file: the keyring's file, read again when it changes (a publisher added or
            revoked without a restart).
        on_state: called with True while the loaded set is the snapshot on disk because the
            registry was unreachable at start-up, False once a fresh one was written.
    """

    def __init__(
        self,
        client: RegistryClient,
        root: Path,
        poll_seconds: float,
        keyring: Keyring,
        *,
        set_name: str = DEFAULT_SET,
        keyring_file: Path | None = None,
        on_state: Callable[[bool], None] | None = None,
    ) -> None:
        if not 0 < poll_seconds <= 3600:
            raise ConfigError(
                f"TOOLGATE_REGISTRY_POLL_SECONDS={poll_seconds!r} (registry.poll_seconds): "
                "expected 0 < seconds <= 3600"
            )
        set_subject(set_name)  # a bad name fails here, naming the setting
        self.client = client
        self.root = root
        self.poll_seconds = poll_seconds
        self.keyring = keyring
        self.set_name = set_name
        self.on_state = on_state
        self.from_disk = False
        self._keyring_file = keyring_file
        self._keyring_stamp = _stamp(keyring_file)
        self._seen: Versions | None = None
        self._digests = _read_seen(root / SEEN, snapshot_generation(root / CURRENT))
        self._said: set[str] = set()
        self._down = False
        self.published = 0  # the highest generation of a verified marker read (0: none yet)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> Path:
        """The folder the gate loads (a link to the newest complete snapshot)."""
        return self.root / CURRENT

    @property
    def generation(self) -> int:
        """The generation of the loaded set (its marker's), 0 before one is loaded."""
        return snapshot_generation(self.current)

    def start(self) -> Path:
        """The first snapshot: fresh from the registry, or the last complete one on disk when
        the registry is unreachable, holds no signed set, only part of one, or an older one
        (one warning line).

        Raises:
            ConfigError: no snapshot on disk to fall back on; or the registry answered with
                versions that do not load.
        """
        try:
            with self._lock:
                self._sync_locked()
        except (RegistryError, EmptyRegistry, IncompleteSet, OlderSet) as exc:
            if isinstance(exc, RegistryError) and exc.refused:
                raise
            manifest = read_manifest(self.current)
            if manifest is None:
                raise ConfigError(f"{exc}; and no snapshot of it in {self.root} to start from") from exc
            self.from_disk = True
            self._down = isinstance(exc, RegistryError)
            log.warning(
                "schema registry unreachable or empty at start-up (or without a newer complete set); using "
                f"the last complete snapshot, generation {manifest.get('generation')}, fetched "
                f"{manifest.get('fetched_at')}, in {self.current.resolve()}",
                extra={"error": str(exc)[:300]},
            )
            self._state(True)
        return self.current

    def poll(self) -> bool:
        """One check; True when a new snapshot was written. Failures keep the current one."""
        return self._poll(locked=False)

    def refresh_now(self, deadline: float) -> bool:
        """Check the registry now, for a worker that must catch up before deciding: True when a
        newer complete set was written. Gives up (False, the current set kept) once
        ``time.monotonic()`` passes ``deadline``, each request bounded by what is left."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self._lock.acquire(timeout=remaining):
            return False
        try:
            with self.client.until(deadline):
                return self._poll(locked=True)
        finally:
            self._lock.release()

    def _poll(self, *, locked: bool) -> bool:
        try:
            if locked:
                changed = self._sync_locked()
            else:
                with self._lock:
                    changed = self._sync_locked()
        except (IncompleteSet, OlderSet, EmptyRegistry) as exc:
            self._say(Problem(str(exc), logging.WARNING, str(exc)))
            return False
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

    def _sync_locked(self) -> bool:
        self._reload_keyring()
        versions = registry_versions(self.client, set_subject(self.set_name))
        manifest = read_manifest(self.current)
        if versions == self._seen and manifest is not None and self._same_marker(versions, manifest):
            return False
        floor = snapshot_generation(self.current)
        problems: list[Problem] = []
        try:
            signed = fetch_set(
                self.client,
                self.keyring,
                set_name=self.set_name,
                seen=self._digests,
                problems=problems,
                floor=floor,
                versions=versions,
                on_marker=self._published,
            )
        except (IncompleteSet, OlderSet, EmptyRegistry):
            self._seen = versions if manifest is not None else None
            raise
        finally:
            for problem in problems:
                self._say(problem)
            _write_seen(self.root / SEEN, self._digests)
        self._seen = versions
        if (
            manifest is not None
            and signed.marker.generation == floor
            and manifest.get("versions") == signed.marker.versions
        ):
            return False
        write_snapshot(signed, self.root, self.client.url)
        return True

    def _same_marker(self, versions: Versions, manifest: dict[str, Any]) -> bool:
        """The set subject's newest registration still names the snapshot's generation: a
        registry that lost its contents and was published again may show the same subjects
        and version numbers as before, with another marker."""
        subject = set_subject(self.set_name)
        numbers = dict(versions).get(subject, ())
        if not numbers:
            return True
        try:
            marker = parse_marker(self.client.schema(subject, max(numbers)), subject, max(numbers))
        except ConfigError:
            return True  # a marker that does not parse: fetch_set says it when something changes
        return marker.generation == manifest.get("generation")

    def _published(self, generation: int) -> None:
        self.published = max(self.published, generation)

    def published_generation(self) -> int | None:
        """The highest generation of a verified set marker this reader read in the registry
        (None: the registry did not answer its last check, or never did)."""
        if self._down or self.published == 0:
            return None
        return self.published

    def _reload_keyring(self) -> None:
        stamp = _stamp(self._keyring_file)
        if self._keyring_file is None or stamp == self._keyring_stamp:
            return
        try:
            self.keyring = Keyring.load(self._keyring_file)
        except ConfigError as exc:
            self._say(Problem(f"keyring {stamp}", logging.ERROR, f"{exc}; keeping the keyring loaded before"))
            return
        self._keyring_stamp = stamp
        self._seen = None  # read the registry again against the new publishers

    def _say(self, problem: Problem) -> None:
        """Log a problem once per key (a bounded memory of what was said)."""
        if problem.key in self._said:
            return
        if len(self._said) >= _MAX_SAID:
            self._said.clear()
        self._said.add(problem.key)
        log.log(problem.level, problem.message)

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


def _stamp(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def _read_seen(path: Path, generation: int) -> dict[str, Seen]:
    """The registrations read before; an entry of the older format (digests only) counts as
    read under ``generation``, the loaded snapshot's."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning(
            f"{path}: cannot read the digests of the registrations read before ({exc}); starting afresh"
        )
        return {}
    if not isinstance(data, dict):
        return {}
    seen: dict[str, Seen] = {}
    for key, entry in data.items():
        if isinstance(entry, list) and all(isinstance(d, str) for d in entry):
            seen[key] = Seen(entry, generation)
        elif isinstance(entry, dict):
            digests, read_at = entry.get("digests"), entry.get("generation")
            if (
                isinstance(digests, list)
                and all(isinstance(d, str) for d in digests)
                and isinstance(read_at, int)
                and not isinstance(read_at, bool)
            ):
                seen[key] = Seen(digests, read_at)
    return seen


def _write_seen(path: Path, seen: dict[str, Seen]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    work = path.with_name(path.name + ".tmp")
    data = {key: {"digests": entry.digests, "generation": entry.generation} for key, entry in seen.items()}
    work.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(work, path)
