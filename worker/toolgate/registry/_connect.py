"""A registry client and source from the configuration (TOOLGATE_REGISTRY_*)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.gate._signing import Keyring
from toolgate.registry._client import SOURCE_PREFIX, RegistryClient, parse_source
from toolgate.registry._snapshot import RegistrySource

__all__ = ["attach", "attached", "client_of", "from_snapshot_on_disk", "publishers_keyring"]

# The source of this process's contracts, when they come from a registry (one per process).
_ATTACHED: list[RegistrySource] = []


def client_of(url: str, config: Config) -> RegistryClient:
    """A client of the registry at ``url`` with the configured credentials and CA file."""
    settings = config.registry
    return RegistryClient(
        url,
        basic_auth_file=settings.basic_auth_file,
        bearer_token_file=settings.bearer_token_file,
        ca_file=settings.ca_file,
        timeout=settings.timeout_seconds,
    )


def publishers_keyring(config: Config, what: str) -> Keyring:
    """The keyring (TOOLGATE_KEYRING) whose ``[publishers]`` a registry's sets must be signed by.

    Raises:
        ConfigError: no keyring, or one without a publisher key, naming ``what`` needs it.
    """
    if not config.keyring:
        raise ConfigError(
            f"{what}: set TOOLGATE_KEYRING (or --keyring) to a keyring whose [publishers.<id>] keys "
            "sign the registry's contracts (docs/security.md)"
        )
    keyring = Keyring.load(config.keyring)
    if not keyring.publishers:
        raise ConfigError(
            f"{what}: the keyring {config.keyring} has no [publishers.<id>] key: it would trust no "
            "contract (docs/security.md)"
        )
    return keyring


def attach(config: Config, on_state: Callable[[bool], None] | None = None) -> Config:
    """For ``--contracts registry+URL``: the first snapshot (or the last one on disk), polling
    started, and the configuration pointed at the snapshot with its watch on.

    The worker's contract watch (``contracts_watch_seconds``, set to ``poll_seconds`` when
    unset) reloads each new snapshot between two batches.

    Raises:
        ConfigError: the registry is unreachable and no snapshot is on disk, or refused.
    """
    if not config.contracts_dir.startswith(SOURCE_PREFIX):
        return config
    url = parse_source(config.contracts_dir)
    settings = config.registry
    keyring = publishers_keyring(config, f"--contracts {config.contracts_dir}")
    source = RegistrySource(
        client_of(url, config),
        Path(settings.snapshot_dir),
        settings.poll_seconds,
        keyring,
        set_name=settings.set_name,
        keyring_file=Path(config.keyring) if config.keyring else None,
        on_state=on_state,
    )
    current = source.start()
    source.run_in_background()
    _ATTACHED.append(source)
    watch = config.contracts_watch_seconds or settings.poll_seconds
    return msgspec.structs.replace(config, contracts_dir=str(current), contracts_watch_seconds=watch)


def attached() -> RegistrySource | None:
    """The registry source of this process, if its contracts come from one."""
    return _ATTACHED[-1] if _ATTACHED else None


def from_snapshot_on_disk() -> bool:
    """True while this process runs on the snapshot on disk because the registry was down at start."""
    source = attached()
    return source is not None and source.from_disk
