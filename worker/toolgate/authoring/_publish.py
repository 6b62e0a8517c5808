"""``toolgate contracts publish`` and ``pull``: a contracts folder to a schema registry and back.

Publish registers, tool by tool and major version by major version, each revision the
registry lacks (``<tool>-v<major>-value``, :mod:`toolgate.registry._layout`), after setting the
subject's compatibility level to ``BACKWARD``: a revision must accept every value its
predecessor accepted, which is the contracts' own rule (``toolgate contracts history``).
It checks that history first and refuses a breaking revision before the registry is asked;
the registry then refuses one as well. A registered revision never changes: publishing a
changed schema or ``contract.yaml`` under a version the registry already holds is refused
with the way out (a new revision). Status changes are registered (see the layout).

Pull writes the registry's versions into a folder for review, lint and fixtures.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import msgspec

from toolgate._errors import ConfigError
from toolgate.authoring._contract_diff import contract_history
from toolgate.gate._contracts import Contract, ContractSet
from toolgate.registry._client import RegistryClient, RegistryError
from toolgate.registry._layout import COMPATIBILITY, Entry, entry_of, parse_entry, subject_of
from toolgate.registry._snapshot import fetch_contracts

__all__ = ["Published", "publish", "pull"]


class Published(msgspec.Struct, frozen=True, kw_only=True):
    """What publishing one contract version did."""

    key: str
    subject: str
    action: str  # registered | statuses | unchanged
    schema_id: int | None = None


def publish(contracts: ContractSet, client: RegistryClient, *, check_history: bool = True) -> list[Published]:
    """Register every version of ``contracts`` the registry lacks, and their status changes.

    Raises:
        ConfigError: a breaking revision without a new major version (before any request), a
            registered version that changed, or a registry error naming subject and version.
    """
    if check_history:
        for step in contract_history(contracts):
            if not step.ok:
                kinds = ", ".join(sorted({c.kind for c in step.changes if c.breaking}))
                raise ConfigError(
                    f"{step.new}: breaking change from {step.old} without a new major version ({kinds}); "
                    "not published"
                )
    done: list[Published] = []
    for (tool, major), group in itertools.groupby(
        sorted(contracts, key=lambda c: (c.spec.tool, c.spec.version, c.spec.minor)),
        key=lambda c: (c.spec.tool, c.spec.version),
    ):
        done.extend(_publish_major(client, subject_of(tool, major), list(group)))
    return done


def _publish_major(client: RegistryClient, subject: str, versions: list[Contract]) -> Iterator[Published]:
    statuses: dict[int, str] = {c.spec.minor: c.spec.status for c in versions}
    held: dict[int, Entry] = {}
    newest: Entry | None = None
    numbers = client.versions(subject)
    sequence = len(numbers)
    for number in numbers:
        entry = parse_entry(client.schema(subject, number), subject, number)
        if entry is not None:
            held[entry.spec.minor] = newest = entry
    if client.compatibility(subject) != COMPATIBILITY:
        client.set_compatibility(subject, COMPATIBILITY)
    last: Entry | None = None
    for contract in versions:
        entry = entry_of(contract, statuses)
        last = entry
        have = held.get(contract.spec.minor)
        if have is not None:
            if not have.same_version(entry):
                raise ConfigError(
                    f"{contract.key} ({contract.folder}): the registry holds another {contract.key} under "
                    f"{subject}; a registered version never changes: publish the change as a new revision"
                )
            yield Published(key=contract.key, subject=subject, action="unchanged")
            continue
        if newest is not None and contract.spec.minor < newest.spec.minor:
            raise ConfigError(
                f"{contract.key} ({contract.folder}): {subject} already holds a later revision "
                f"({newest.key}); a revision cannot be added before it"
            )
        sequence += 1
        entry = msgspec.structs.replace(entry, sequence=sequence)
        schema_id = _register(client, subject, entry)
        held[contract.spec.minor] = newest = entry
        yield Published(key=contract.key, subject=subject, action="registered", schema_id=schema_id)
    if last is not None and newest is not None and newest.statuses != statuses:
        # The statuses travel with the newest registration: register it again with them.
        top = held[max(held)]
        again = msgspec.structs.replace(top, statuses=statuses, sequence=sequence + 1)
        schema_id = _register(client, subject, again)
        yield Published(key=top.key, subject=subject, action="statuses", schema_id=schema_id)


def _register(client: RegistryClient, subject: str, entry: Entry) -> int:
    what = f"subject {subject}, {entry.key}"
    try:
        return client.register(subject, entry.registered_text(), what=what)
    except RegistryError as exc:
        if exc.status == 409:
            raise RegistryError(
                f"{entry.key}: the schema registry refused it as incompatible with the latest version of "
                f"{subject} (compatibility {COMPATIBILITY}): {str(exc).rpartition(': ')[2]}",
                status=409,
                refused=True,
            ) from exc
        raise


def pull(client: RegistryClient, dest: Path) -> list[str]:
    """Write every version the registry holds into ``dest`` (``<tool>/v<N>[.<M>]/``), beside
    what is there: ``contract.yaml``, the schema and an MCP tool's input schema are replaced,
    fixtures are kept.

    Returns:
        The version keys written.
    """
    snapshot = fetch_contracts(client)
    written = []
    for entry, status in snapshot.entries:
        folder = dest / entry.spec.tool / entry.key.partition("@")[2]
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in entry.files(status).items():
            (folder / name).write_bytes(data)
        written.append(entry.key)
    return written
