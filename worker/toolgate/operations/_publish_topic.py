"""``toolgate contracts publish --to topic``: a signed contract set onto the contracts topic.

Each version is one record keyed ``version/<tool>/<version>`` (a
:class:`~toolgate.gate._published.PublishedVersion`); the set marker (key ``set``) is
written last, after every version was acknowledged, so a reader that sees the marker finds
every version it names (docs/design.md, One contract set for the group). Versions already on
the topic with the same digest are not written again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from toolgate._config import Config
from toolgate._errors import BrokerError, ConfigError
from toolgate.gate._published import PublishedVersion, SetMarker, sign_marker
from toolgate.gate._signing import Key
from toolgate.service._contract_source import SET_KEY, VERSION_KEY_PREFIX, version_key
from toolgate.service._kafka import AiokafkaClients, KafkaClients, partitions_of
from toolgate.service._store import restore_partitions

_decode_version = msgspec.json.Decoder(PublishedVersion).decode
_decode_marker = msgspec.json.Decoder(SetMarker).decode


@dataclass
class TopicPublish:
    """What a publish wrote: the set's generation, the versions written and those unchanged."""

    generation: int
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


async def read_published(
    config: Config, clients: KafkaClients, wait_seconds: float = 30.0
) -> tuple[dict[str, str], SetMarker | None]:
    """The contracts topic as it is: each version's digest by ``tool/version``, and the marker
    (undecoded or unsigned records are skipped: readers refuse them anyway).

    Raises:
        ConfigError: the topic is missing.
        BrokerError: it was not read to its end within ``wait_seconds``.
    """
    topic = config.topics.contracts
    if not await partitions_of(clients, topic):
        raise ConfigError(f"topic {topic!r} does not exist (run: toolgate topics ensure)")
    digests: dict[str, str] = {}
    markers: list[SetMarker] = []

    def apply(key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        try:
            if key == SET_KEY and value is not None:
                markers.append(_decode_marker(value))
            elif key.startswith(VERSION_KEY_PREFIX.encode()):
                name = key[len(VERSION_KEY_PREFIX) :].decode("utf-8", "replace")
                if value is None:
                    digests.pop(name, None)
                else:
                    digests[name] = _decode_version(value).digest
        except (msgspec.DecodeError, msgspec.ValidationError):
            return

    if not await restore_partitions(clients, topic, {0}, apply, wait_seconds):
        raise BrokerError(f"topic {topic!r}: not read to its end within {wait_seconds} s", retriable=True)
    return digests, (max(markers, key=lambda m: m.generation) if markers else None)


async def publish_to_topic(
    config: Config,
    versions: list[PublishedVersion],
    key: Key,
    *,
    generation: int | None = None,
    clients: KafkaClients | None = None,
) -> TopicPublish:
    """Write the versions the topic lacks (or holds with another digest), then the set marker.

    Args:
        versions: every version of the set, signed.
        key: the publisher key that signs the marker.
        generation: the marker's (default: the topic's newest plus 1); above the topic's.

    Raises:
        ConfigError: the topic is missing, or ``generation`` is not above the topic's.
        BrokerError: the cluster did not take the records.
    """
    clients = clients or AiokafkaClients(config)
    topic = config.topics.contracts
    present, previous = await read_published(config, clients)
    newest = previous.generation if previous is not None else 0
    if generation is not None and generation <= newest:
        raise ConfigError(
            f"--generation {generation}: {topic} already holds generation {newest}; give a higher one"
        )
    marker = sign_marker(generation or newest + 1, {pv.key: pv.digest for pv in versions}, key)
    done = TopicPublish(marker.generation)
    producer = clients.producer(acks="all", enable_idempotence=True, linger_ms=5)
    try:
        await producer.start()
    except BaseException:
        await producer.stop()
        raise
    try:
        for pv in versions:
            if present.get(pv.key) == pv.digest:
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
