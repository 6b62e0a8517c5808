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
from toolgate.gate._signing import Keyring
from toolgate.service._kafka import KafkaClients
from toolgate.service._startup import fingerprint
from toolgate.service._store import TopicReader

log = logging.getLogger("toolgate.contracts")

TOPIC_PREFIX: Final = "kafka:"
"""``--contracts kafka:`` reads the configured contracts topic; ``kafka:NAME`` names another."""
SET_KEY: Final = b"set"
VERSION_KEY_PREFIX: Final = "version/"

_decode_version = msgspec.json.Decoder(PublishedVersion).decode
_decode_marker = msgspec.json.Decoder(SetMarker).decode


def is_topic_source(contracts: str) -> bool:
    """Whether a ``--contracts`` value names the contracts topic."""
    return contracts.startswith(TOPIC_PREFIX)


def topic_of(contracts: str, configured: str) -> str:
    """The topic a ``kafka:`` value names: its own, or the configured contracts topic."""
    return contracts[len(TOPIC_PREFIX) :] or configured


def version_key(tool: str, version: str) -> bytes:
    """The contracts topic key of one version: ``version/<tool>/<version>``."""
    return f"{VERSION_KEY_PREFIX}{tool}/{version}".encode()


class ContractSource:
    """A folder: caught up by rescanning it (a mounted ConfigMap that the kubelet has not
    synced yet stays behind whatever the worker does)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._seen = fingerprint(paths)

    async def start(self, wait_seconds: float) -> None:
        """Nothing to read ahead: a folder is loaded as it is."""

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
    """A schema registry: caught up by fetching its subjects now."""

    def __init__(self, poll: Callable[[], bool], paths: list[Path]) -> None:
        super().__init__(paths)
        self._poll = poll

    async def refresh(self, wait_seconds: float) -> bool:
        """Fetch now (off the event loop); True when a new snapshot was written."""
        try:
            fetched = await asyncio.wait_for(asyncio.to_thread(self._poll), wait_seconds)
        except TimeoutError:
            fetched = False
        return await super().refresh(wait_seconds) or fetched


class TopicContractSource(ContractSource):
    """The contracts topic, read to its end at start-up and tailed; sets written to ``root``.

    Args:
        topic: the compacted contracts topic (TOOLGATE_TOPIC_CONTRACTS).
        clients: builds the reader's consumers.
        keyring: its ``[publishers]`` verify every version and marker.
        root: where complete sets are written (``g<generation>/``); a temporary folder if None.
    """

    def __init__(self, topic: str, clients: KafkaClients, keyring: Keyring, root: Path | None = None) -> None:
        self.topic = topic
        self.keyring = keyring
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="toolgate-contracts-")) if root is None else root
        super().__init__([])
        self._reader = TopicReader(topic, self._apply, clients)
        self._versions: dict[str, PublishedVersion] = {}
        self._marker: SetMarker | None = None
        self._refused: set[tuple[bytes, str]] = set()  # said once each
        self.generation = 0
        self.folder: Path | None = None
        self._loaded_generation = 0

    async def start(self, wait_seconds: float) -> None:
        """Read the topic to its end.

        Raises:
            ConfigError: the topic is missing, not read within ``wait_seconds``, or holds no
                complete signed set.
        """
        await self._reader.start()
        if not await self._reader.catch_up(wait_seconds):
            raise ConfigError(f"contracts topic {self.topic!r}: not read to its end within {wait_seconds} s")
        if self.folder is None:
            marker = self._marker
            missing = missing_versions(marker, self._digests()) if marker is not None else []
            detail = ""
            if marker is not None and missing:
                detail = f" (the marker of generation {marker.generation} lacks {', '.join(missing)})"
            raise ConfigError(
                f"contracts topic {self.topic!r} holds no complete contract set{detail}; publish one: "
                "toolgate contracts publish --to topic"
            )
        self._loaded_generation = self.generation

    def load(self) -> ContractSet:
        """The newest complete set, with its generation."""
        assert self.folder is not None
        contracts = ContractSet.load(self.folder, generation=self.generation)
        self._loaded_generation = self.generation
        return contracts

    async def refresh(self, wait_seconds: float) -> bool:
        """Read to the end offsets seen now; True when a newer complete set arrived."""
        await self._reader.catch_up(wait_seconds)
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

    def _digests(self) -> dict[str, str]:
        return {key: pv.digest for key, pv in self._versions.items()}

    def _refuse(self, key: bytes, reason: str) -> None:
        if (key, reason) in self._refused:
            return
        if len(self._refused) > 1000:
            self._refused.clear()
        self._refused.add((key, reason))
        log.warning(
            "contracts topic record refused",
            extra={"topic": self.topic, "key": key.decode("utf-8", "replace")[:200], "reason": reason[:300]},
        )

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return self._refuse(b"", "a record without a key")
        if key == SET_KEY:
            if value is not None:
                self._apply_marker(key, value)
        elif key.startswith(VERSION_KEY_PREFIX.encode()):
            self._apply_version(key, value)
        else:
            return self._refuse(key, "neither 'set' nor 'version/<tool>/<version>'")
        self._complete()
        return None

    def _apply_marker(self, key: bytes, value: bytes) -> None:
        try:
            marker = _decode_marker(value)
            verify_marker(marker, self.keyring)
        except (msgspec.DecodeError, msgspec.ValidationError, ContractTrustError) as exc:
            return self._refuse(key, str(exc))
        if self._marker is not None and marker.generation < self._marker.generation:
            return self._refuse(
                key, f"generation {marker.generation} is older than {self._marker.generation}"
            )
        self._marker = marker
        return None

    def _apply_version(self, key: bytes, value: bytes | None) -> None:
        name = key[len(VERSION_KEY_PREFIX) :].decode("utf-8", "replace")
        if value is None:
            self._versions.pop(name, None)
            return None
        try:
            pv = _decode_version(value)
            verify_version(pv, self.keyring)
        except (msgspec.DecodeError, msgspec.ValidationError, ContractTrustError) as exc:
            return self._refuse(key, str(exc))
        if set_key(pv.tool, pv.version) != name:
            return self._refuse(key, f"the record holds {pv.tool}/{pv.version}")
        self._versions[name] = pv
        return None

    def _complete(self) -> None:
        """Write the marker's set once every version it names is here with its digest."""
        marker = self._marker
        if marker is None or marker.generation <= self.generation:
            return
        if missing_versions(marker, self._digests()):
            return
        target = self.root / f"g{marker.generation}"
        staging = self.root / f".g{marker.generation}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for name in marker.versions:
                write_version(self._versions[name], staging)
        except (OSError, ContractTrustError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
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
