"""For teams that keep their contracts in a schema registry: the client, the layout, the snapshot.

A Confluent-compatible registry API (Confluent Schema Registry, Apicurio Registry's
``/apis/ccompat/v7``) holds each contract version's schema with its metadata beside it
(:mod:`toolgate.registry._layout` says how). The worker and the MCP proxy load the active
versions its publishers signed (:mod:`toolgate.gate._published`), complete by a set marker,
from it through a snapshot on disk (:mod:`toolgate.registry._snapshot`);
``toolgate contracts publish`` and ``pull`` (in :mod:`toolgate.authoring`) write and read it.

It may import :mod:`toolgate.gate` and the package's shared modules (``toolgate._*``) only:
never :mod:`toolgate.service`, :mod:`toolgate.authoring`, :mod:`toolgate.mcp`,
:mod:`toolgate.operations`, :mod:`toolgate.client`, the CLI, aiokafka or prometheus-client.
"""

from toolgate.registry._client import RegistryClient, RegistryError, parse_source
from toolgate.registry._layout import Entry, subject_of
from toolgate.registry._snapshot import RegistrySource, fetch_set, write_snapshot

__all__ = [
    "Entry",
    "RegistryClient",
    "RegistryError",
    "RegistrySource",
    "fetch_set",
    "parse_source",
    "subject_of",
    "write_snapshot",
]
