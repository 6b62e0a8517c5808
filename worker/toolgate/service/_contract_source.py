"""Where a worker's contracts come from, and how it catches up on them before deciding.

Three sources (docs/design.md, One contract set for the group):

* a folder (``--contracts DIR``): caught up by rescanning it;
* a schema registry (``--contracts registry+URL``): caught up by fetching it now;
* the contracts topic (``--contracts kafka:``): a compacted topic of signed
  :class:`~toolgate.gate._published.PublishedVersion` records (key ``version/<tool>/<version>``)
  and one :class:`~toolgate.gate._published.SetMarker` (key ``set``) written last by each
  publish. It is read like the requests topic (:class:`~toolgate.service._store.TopicReader`);
  caught up means read to the end offsets seen now, so a contract published before a result
  was produced is visible once the reader reaches them. A set is loaded only when every
  version its marker names is present with that digest, each verified against the keyring's
  publishers.

:class:`CatchUp` is the seam the worker calls before deciding a batch that holds an unknown
tool or adapter version, or names a newer generation than its set's
(``tg-contract-generation``). The simulation plants bugs through subclasses of it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import msgspec

from toolgate._errors import ConfigError, ContractTrustError
from toolgate.gate._contracts import ContractSet
from toolgate.gate._published import (
    PublishedVersion,
    SetMarker,
    missing_versions,
    set_key,
    verify_marker,
    verify_version,
    write_version,
)
from toolgate.gate._records import CONTRACT_GENERATION_HEADER, Message
from toolgate.gate._signing import Keyring
from toolgate.service._control import Refusals, decode_control
from toolgate.service._kafka import KafkaClients
from toolgate.service._startup import fingerprint
from toolgate.service._store import TopicReader

log = logging.getLogger("toolgate.contracts")

TOPIC_PREFIX: Final = "kafka:"
"""``--contracts kafka:`` reads the configured contracts topic; ``kafka:NAME`` names another."""
SET_KEY: Final = b"set"
VERSION_KEY_PREFIX: Final = "version/"

_version_decoder = msgspec.json.Decoder(PublishedVersion)
_marker_decoder = msgspec.json.Decoder(SetMarker)
_MARKERS_HELD: Final = 16  # verified markers held, the newest generations
_DIGESTS_HELD: Final = 4  # verified digests held per version
_MAX_HELD: Final = 10_000  # versions held, and refused keys remembered


def is_topic_source(contracts: str) -> bool:
    """Whether a ``--contracts`` value names the contracts topic."""
    return contracts.startswith(TOPIC_PREFIX)


def topic_of(contracts: str, configured: str) -> str:
    """The topic a ``kafka:`` value names: its own, or the configured contracts topic."""
    return contracts[len(TOPIC_PREFIX) :] or configured


def version_key(tool: str, version: str) -> bytes:
    """The contracts topic key of one version: ``version/<tool>/<version>``."""
    return f"{VERSION_KEY_PREFIX}{tool}/{version}".encode()


def published_or_hinted(message: Message, published: int | None) -> bool:
    """Whether waiting on the source may let a CONTRACTS_BEHIND ``message`` decide: not when
    its ``tg-contract-generation`` names a generation above ``published``, the highest the
    source has published (None: not known), which no wait brings."""
    if published is None:
        return True
    for name, value in message.headers:
        if name.lower() == CONTRACT_GENERATION_HEADER:
            text = value.decode("ascii", "replace")
            if text.isdigit() and len(text) <= 18 and int(text) > published:
                return False
    return True


class ContractSource:
    """A folder: caught up by rescanning it (a mounted ConfigMap that the kubelet has not
    synced yet stays behind whatever the worker does)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._seen = fingerprint(paths)

    async def start(self, wait_seconds: float) -> None:
        """Nothing to read ahead: a folder is loaded as it is."""

    def published_generation(self) -> int | None:
        """The highest generation this source has published (None: not known). A folder
        publishes none (its sets are generation 0): a result naming a generation above it,
        or a member claiming one, is not waited for."""
        return 0

    def refusal(self) -> str:
        """Why the newest set of the source is not loaded (empty: nothing refused)."""
        return ""

    async def refresh(self, wait_seconds: float) -> bool:
        """Bring the source to its end now; True when the contracts changed since the last
        load (the caller reloads)."""
        current = fingerprint(self.paths)
        if current == self._seen:
            return False
        self._seen = current
        return True

    def changed(self) -> bool:
        """The source moved since the last load, fetching nothing (the files on disk): the
        caller then catches up (:meth:`refresh`) and reloads. A registry's snapshots are
        written by its background poll, so this sees a newer set once it is on disk."""
        return fingerprint(self.paths) != self._seen

    async def stop(self) -> None:
        """Release what the source holds."""


class RegistryContractSource(ContractSource):
    """A schema registry: caught up by fetching its subjects now.

    Args:
        poll: one check of the registry (True: a new snapshot was written).
        paths: the snapshot's folder and the keyring, rescanned.
        published: the highest generation of a verified marker the registry held at the
            last check (None: not known, as before the first answer).
    """

    def __init__(
        self,
        poll: Callable[[], bool],
        paths: list[Path],
        published: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__(paths)
        self._poll = poll
        self._published = published

    def published_generation(self) -> int | None:
        """The highest generation the registry has published, as of its last check."""
        return self._published()

    async def refresh(self, wait_seconds: float) -> bool:
        """Fetch now (off the event loop); True when a new snapshot was written."""
        try:
            fetched = await asyncio.wait_for(asyncio.to_thread(self._poll), wait_seconds)
        except TimeoutError:
            fetched = False
        return await super().refresh(wait_seconds) or fetched


class TopicContractSource(ContractSource):
    """The contracts topic, read to its end at start-up and tailed; sets written to ``root``.

    Every record is decoded strictly and verified against the keyring's publishers; one that
    does not decode or verify is refused (one log line, rate-limited per key and reason) and
    never replaces what was verified before it. The reader keeps the verified versions by
    name and digest and the verified markers by generation (both bounded), and loads the
    newest generation it can verify completely: a hand-written record that compaction kept
    in place of a marker or a version leaves the sets verified before it loadable.

    Args:
        topic: the compacted contracts topic (TOOLGATE_TOPIC_CONTRACTS).
        clients: builds the reader's consumers.
        keyring: its ``[publishers]`` verify every version and marker.
        root: where complete sets are written (``g<generation>/``); a temporary folder if None.
        monotonic: the refusal log's clock.
    """

    def __init__(
        self,
        topic: str,
        clients: KafkaClients,
        keyring: Keyring,
        root: Path | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self.keyring = keyring
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="toolgate-contracts-")) if root is None else root
        super().__init__([])
        self._reader = TopicReader(topic, self._apply, clients)
        self._versions: dict[str, dict[str, PublishedVersion]] = {}  # tool/version -> digest -> verified
        self._markers: dict[int, SetMarker] = {}  # generation -> verified marker
        self.refusals = Refusals(log, topic, "contracts topic record refused", clock=monotonic)
        self.refused: dict[str, str] = {}  # key -> why its newest record was refused
        self.generation = 0
        self.published = 0  # the highest generation of a verified marker read
        self.folder: Path | None = None
        self._loaded_generation = 0
        self._fresh = False  # the last catch-up read to the end offsets it saw

    async def start(self, wait_seconds: float) -> None:
        """Read the topic to its end.

        Raises:
            ConfigError: the topic is missing, not read within ``wait_seconds``, or holds no
                complete signed set.
        """
        await self._reader.start()
        if not await self._reader.catch_up(wait_seconds):
            raise ConfigError(f"contracts topic {self.topic!r}: not read to its end within {wait_seconds} s")
        self._fresh = True
        if self.folder is None:
            raise ConfigError(
                f"contracts topic {self.topic!r} holds no complete contract set{self._why()}; publish one: "
                "toolgate contracts publish --to topic"
            )
        self._loaded_generation = self.generation

    def _why(self) -> str:
        """What keeps the newest verified marker's set from loading, and the records refused."""
        parts = []
        if self._markers:
            newest = self._markers[max(self._markers)]
            missing = missing_versions(newest, self._digests(newest))
            if missing:
                parts.append(f"the marker of generation {newest.generation} lacks {', '.join(missing)}")
        if self.refused:
            shown = "; ".join(f"{k}: {why}" for k, why in sorted(self.refused.items())[:5])
            more = f" and {len(self.refused) - 5} more" if len(self.refused) > 5 else ""
            parts.append(f"records refused: {shown}{more}")
        return f" ({'; '.join(parts)})" if parts else ""

    def refusal(self) -> str:
        """Why the newest set on the topic is not loaded (empty: it is): a ``set`` record
        refused, or a verified marker above the loaded generation whose versions are not
        all there verified (said on the members topic, read by ``contracts status``)."""
        if "set" in self.refused:
            return f"contracts topic record 'set' refused: {self.refused['set']}"[:500]
        if self.published > self.generation:
            return f"set generation {self.published} not loaded{self._why()}"[:500]
        return ""

    def published_generation(self) -> int | None:
        """The highest generation a verified marker on the topic names, as of the last
        catch-up that read to the end offsets it saw (None: that catch-up did not)."""
        return self.published if self._fresh else None

    def load(self) -> ContractSet:
        """The newest complete set, with its generation."""
        assert self.folder is not None
        contracts = ContractSet.load(self.folder, generation=self.generation)
        self._loaded_generation = self.generation
        return contracts

    async def refresh(self, wait_seconds: float) -> bool:
        """Read to the end offsets seen now; True when a newer complete set arrived."""
        self._fresh = await self._reader.catch_up(wait_seconds)
        return self.generation > self._loaded_generation

    def changed(self) -> bool:
        """A newer complete set arrived since the last load (the loop reloads it)."""
        return self.generation > self._loaded_generation

    async def stop(self) -> None:
        """Stop reading; remove the sets written to a temporary folder."""
        await self._reader.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    # --- the records -----------------------------------------------------------------------

    def _digests(self, marker: SetMarker) -> dict[str, str]:
        """The digests of ``marker``'s versions that are held verified."""
        return {
            name: digest for name, digest in marker.versions.items() if digest in self._versions.get(name, {})
        }

    def _refuse(self, key: bytes, reason: str) -> None:
        self._held_refused(key, reason)
        self.refusals.refuse(key, reason)

    def _held_refused(self, key: bytes, reason: str) -> None:
        name = key.decode("utf-8", "replace")[:200]
        if name in self.refused or len(self.refused) < _MAX_HELD:
            self.refused[name] = reason[:300]

    def _accepted(self, key: bytes) -> None:
        self.refused.pop(key.decode("utf-8", "replace")[:200], None)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return self.refusals.refuse(None, "a record without a key")
        if key == SET_KEY:
            if value is None:
                return self._refuse(key, "a tombstone for the set marker")
            self._apply_marker(key, value)
        elif key.startswith(VERSION_KEY_PREFIX.encode()):
            self._apply_version(key, value)
        else:
            return self._refuse(key, "neither 'set' nor 'version/<tool>/<version>'")
        self._complete()
        return None

    def _apply_marker(self, key: bytes, value: bytes) -> None:
        marker = decode_control(_marker_decoder, value, key, self.refusals)
        if marker is None:
            return self._held_refused(key, "does not decode")
        try:
            verify_marker(marker, self.keyring)
        except ContractTrustError as exc:
            return self._refuse(key, str(exc))
        self._accepted(key)
        self._markers[marker.generation] = marker
        self.published = max(self.published, marker.generation)
        for old in sorted(self._markers)[:-_MARKERS_HELD]:  # bounded: the newest generations stay
            del self._markers[old]
        return None

    def _apply_version(self, key: bytes, value: bytes | None) -> None:
        name = key[len(VERSION_KEY_PREFIX) :].decode("utf-8", "replace")
        if value is None:
            self._versions.pop(name, None)
            self._accepted(key)
            return None
        pv = decode_control(_version_decoder, value, key, self.refusals)
        if pv is None:
            return self._held_refused(key, "does not decode")
        try:
            verify_version(pv, self.keyring)
        except ContractTrustError as exc:
            return self._refuse(key, str(exc))
        if set_key(pv.tool, pv.version) != name:
            return self._refuse(key, f"the record holds {pv.tool}/{pv.version}")
        self._accepted(key)
        held = self._versions.setdefault(name, {})
        held.pop(pv.digest, None)
        held[pv.digest] = pv
        while len(held) > _DIGESTS_HELD:  # bounded: the digests read longest ago go first
            del held[next(iter(held))]
        if len(self._versions) > _MAX_HELD:
            del self._versions[next(iter(self._versions))]
        return None

    def _complete(self) -> None:
        """Write the newest verified marker's set that is complete and newer than the loaded one."""
        for generation in sorted(self._markers, reverse=True):
            if generation <= self.generation:
                return None
            marker = self._markers[generation]
            if not missing_versions(marker, self._digests(marker)):
                return self._write(marker)
        return None

    def _write(self, marker: SetMarker) -> None:
        target = self.root / f"g{marker.generation}"
        staging = self.root / f".g{marker.generation}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for name, digest in marker.versions.items():
                write_version(self._versions[name][digest], staging)
        except (OSError, ContractTrustError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            self._markers.pop(marker.generation, None)
            return self._refuse(SET_KEY, f"generation {marker.generation} cannot be written: {exc}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        previous = self.folder
        self.folder, self.generation = target, marker.generation
        log.info("contract set complete", extra={"topic": self.topic, "generation": marker.generation})
        if previous is not None and previous != target:
            shutil.rmtree(previous, ignore_errors=True)
        return None


class CatchUp:
    """The worker's catch-up on its contract source (docs/design.md, One contract set for the group).

    Args:
        source: the contract source.
        reload: swaps in a freshly loaded gate; False when the set failed to load.
        current: the contract set the worker decides with now.
        clock: monotonic seconds (the deadline's).
        sleep: the wait between two refreshes of a source still behind.
        poll_seconds: how often a source still behind is refreshed before the deadline.
    """

    def __init__(
        self,
        source: ContractSource,
        reload: Callable[[], bool],
        current: Callable[[], ContractSet],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        poll_seconds: float = 0.1,
    ) -> None:
        self.source = source
        self._reload = reload
        self._current = current
        self.clock = clock
        self._sleep = sleep
        self.poll_seconds = poll_seconds

    async def catch_up(
        self, deadline: float, *, behind: Callable[[ContractSet], bool] | None = None
    ) -> ContractSet:
        """Bring the source to its end and reload what changed; while ``behind`` says the set
        is still behind, refresh again until ``deadline`` (monotonic seconds). The set the
        worker decides with afterwards.

        Raises:
            KafkaError: the contracts topic's cluster did not answer (decide nothing now).
        """
        while True:
            left = max(deadline - self.clock(), 0.0)
            if await self.source.refresh(max(left, 0.05)):
                self._reload()
            contracts = self._current()
            if behind is None or not behind(contracts) or self.clock() >= deadline:
                return contracts
            await self._sleep(min(self.poll_seconds, max(deadline - self.clock(), 0.0)))
