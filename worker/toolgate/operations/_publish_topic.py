"""``toolgate contracts publish --to topic``: a signed contract set onto the contracts topic.

Each version is one record keyed ``version/<tool>/<version>`` (a
:class:`~toolgate.gate._published.PublishedVersion`); the set marker (key ``set``) is
written last, after every version was acknowledged, so a reader that sees the marker finds
every version it names (docs/design.md, One contract set for the group).

The topic is read back first and held to the publisher's keyring: a version is left as it
is only when the topic's newest record of its key is the very record this publish would
write (files, digest, publisher and signature); anything else (a record written by hand and
kept by compaction, another publisher's) is written again. The marker's generation is above
the highest generation of a marker that verifies (forged markers do not count) and above the
generation any live member of the group decides with (the members topic): a generation the
running workers would take for an older one is never written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError, ContractTrustError
from toolgate.gate._published import (
    MAX_GENERATION,
    PublishedVersion,
    SetMarker,
    sign_marker,
    verify_marker,
)
from toolgate.gate._signing import Key, Keyring
from toolgate.service._contract_source import SET_KEY, VERSION_KEY_PREFIX, version_key
from toolgate.service._control import Refusals, decode_control
from toolgate.service._kafka import AiokafkaClients, KafkaClients, partitions_of
from toolgate.service._members import MemberRecord, live_members, read_members
from toolgate.service._store import restore_partitions

log = logging.getLogger("toolgate.contracts")
_version_decoder = msgspec.json.Decoder(PublishedVersion)
_marker_decoder = msgspec.json.Decoder(SetMarker)


@dataclass
class TopicPublish:
    """What a publish wrote: the set's generation, the versions written and those unchanged,
    and how many live members of the group trust its publisher."""

    generation: int
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    members: int = 0


@dataclass
class TopicState:
    """The contracts topic as a publisher reads it back: each key's newest version record
    that decodes, the highest generation of a marker that verifies, and the keys whose newest
    record does not decode or (a marker) does not verify."""

    versions: dict[str, PublishedVersion] = field(default_factory=dict)
    generation: int = 0
    marker: SetMarker | None = None
    refused: list[str] = field(default_factory=list)


async def read_published(
    config: Config, clients: KafkaClients, keyring: Keyring | None = None, wait_seconds: float = 30.0
) -> TopicState:
    """The contracts topic as it is, markers held to ``keyring``'s publishers (none: no
    marker counts).

    Raises:
        ConfigError: the topic is missing.
        BrokerError: it was not read to its end within ``wait_seconds``.
    """
    topic = config.topics.contracts
    if not await partitions_of(clients, topic):
        raise ConfigError(f"topic {topic!r} does not exist (run: toolgate topics ensure)")
    keyring = keyring or Keyring()
    state = TopicState()
    refused: dict[str, bool] = {}
    refusals = Refusals(log, topic, "contracts topic record refused")

    def apply(key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        name = key.decode("utf-8", "replace")
        if key == SET_KEY and value is not None:
            marker = decode_control(_marker_decoder, value, key, refusals)
            try:
                if marker is not None:
                    verify_marker(marker, keyring)
            except ContractTrustError as exc:
                refusals.refuse(key, str(exc))
                marker = None
            refused[name] = marker is None
            if marker is not None and marker.generation > state.generation:
                state.generation, state.marker = marker.generation, marker
        elif key.startswith(VERSION_KEY_PREFIX.encode()):
            version = name[len(VERSION_KEY_PREFIX) :]
            pv = None if value is None else decode_control(_version_decoder, value, key, refusals)
            refused[name] = value is not None and pv is None
            if pv is None:
                state.versions.pop(version, None)
            else:
                state.versions[version] = pv

    if not await restore_partitions(clients, topic, {0}, apply, wait_seconds):
        raise BrokerError(f"topic {topic!r}: not read to its end within {wait_seconds} s", retriable=True)
    state.refused = sorted(k for k, bad in refused.items() if bad)
    return state


async def _live_members(config: Config, clients: KafkaClients) -> list[MemberRecord]:
    """The group's live members (none when the members topic is missing)."""
    try:
        records = await read_members(config, clients, wait_seconds=10.0)
    except ConfigError:
        return []
    return live_members(records, config.group_id, datetime.now(UTC))


async def publish_to_topic(
    config: Config,
    versions: list[PublishedVersion],
    key: Key,
    *,
    generation: int | None = None,
    clients: KafkaClients | None = None,
    keyring: Keyring | None = None,
) -> TopicPublish:
    """Write every version whose record on the topic is not the one this publish would
    write, then the set marker.

    Args:
        versions: every version of the set, signed.
        key: the publisher key that signs the marker.
        generation: the marker's (default: one above the topic's highest verified marker
            and every live member's generation); above both.
        keyring: the publishers a marker on the topic is verified with (default: ``key``).

    Raises:
        ConfigError: the topic is missing, or ``generation`` is not above the topic's
            highest verified marker or a live member's generation.
        BrokerError: the cluster did not take the records.
    """
    clients = clients or AiokafkaClients(config)
    topic = config.topics.contracts
    keyring = keyring or Keyring(publishers={key.key_id: key})
    state = await read_published(config, clients, keyring)
    members = await _live_members(config, clients)
    ahead = max(members, key=lambda m: m.generation, default=None)
    newest = state.generation
    if generation is not None and generation <= newest:
        raise ConfigError(
            f"--generation {generation}: {topic} already holds generation {newest}; give a higher one"
        )
    if generation is not None and ahead is not None and generation <= ahead.generation:
        raise ConfigError(
            f"--generation {generation}: member {ahead.member} of group {config.group_id} decides with "
            f"generation {ahead.generation} ({config.topics.members}) and would never load a lower one; "
            f"give --generation {ahead.generation + 1} or more"
        )
    chosen = generation or max(newest, ahead.generation if ahead is not None else 0) + 1
    if chosen > MAX_GENERATION:
        raise ConfigError(f"generation {chosen}: above {MAX_GENERATION}, the highest a reader takes")
    untrusting = [m for m in members if m.publishers is not None and key.key_id not in m.publishers]
    if untrusting:
        shown = ", ".join(f"{m.member} ({', '.join(m.publishers or ()) or 'none'})" for m in untrusting[:5])
        raise ConfigError(
            f"--publisher-key {key.key_id}: {len(untrusting)} live members of group {config.group_id} do not "
            f"trust this publisher and would refuse the set (their keyrings' [publishers]: {shown}); add "
            f"[publishers.{key.key_id}] to the workers' keyring first (nothing was written)"
        )
    marker = sign_marker(chosen, {pv.key: pv.digest for pv in versions}, key)
    done = TopicPublish(marker.generation, members=len(members))
    producer = clients.producer(acks="all", enable_idempotence=True, linger_ms=5)
    try:
        await producer.start()
    except BaseException:
        await producer.stop()
        raise
    try:
        for pv in versions:
            if state.versions.get(pv.key) == pv:
                done.unchanged.append(pv.key)
                continue
            await producer.send(topic, msgspec.json.encode(pv), key=version_key(pv.tool, pv.version))
            done.written.append(pv.key)
        await producer.flush()  # every version acknowledged before the marker is sent
        await producer.send(topic, msgspec.json.encode(marker), key=SET_KEY)
        await producer.flush()
    finally:
        await producer.stop()
    return done
