"""``toolgate contracts publish`` and ``pull``: a contracts folder to a schema registry and back.

Publish registers, tool by tool and major version by major version, each revision the
registry lacks (``<tool>-v<major>-value``, :mod:`toolgate.registry._layout`), after setting the
subject's compatibility level to ``BACKWARD``: a revision must accept every value its
predecessor accepted, which is the contracts' own rule (``toolgate contracts history``).
It checks that history first and refuses a breaking revision before the registry is asked;
the registry then refuses one as well. A registered revision never changes: publishing a
changed schema or ``contract.yaml`` under a version the registry already holds is refused
with the way out (a new revision). Status changes are registered (see the layout).

Every version registered carries its folder's files signed with the publisher's key
(:mod:`toolgate.gate._published`), and once every version is there, publish writes the set
marker LAST (``<set>-set-value``, generation = the previous one + 1): readers load a set only
when complete by it. A publish that changes nothing writes no marker.

Pull writes the versions of the registry's newest complete set, as signed, into a folder for
review, lint and fixtures.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec

from toolgate._errors import ConfigError, ContractTrustError
from toolgate.authoring._contract_diff import contract_history
from toolgate.gate._contracts import Contract, ContractSet
from toolgate.gate._published import (
    PublishedVersion,
    SetMarker,
    files_of,
    sign_marker,
    sign_version,
    verify_version,
    version_label,
    write_version,
)
from toolgate.gate._signing import Key, Keyring
from toolgate.registry._client import RegistryClient, RegistryError
from toolgate.registry._layout import (
    COMPATIBILITY,
    DEFAULT_SET,
    Entry,
    entry_of,
    marker_text,
    parse_entry,
    parse_marker,
    parse_published,
    set_subject,
    subject_of,
)
from toolgate.registry._snapshot import Problem, fetch_set

__all__ = ["Published", "publish", "pull", "signed_versions"]


class Published(msgspec.Struct, frozen=True, kw_only=True):
    """What publishing one contract version did."""

    key: str
    subject: str
    action: str  # registered | statuses | unchanged | set
    schema_id: int | None = None


def signed_versions(contracts: ContractSet, key: Key) -> dict[str, PublishedVersion]:
    """Every version of ``contracts`` signed with ``key``, by contract key (``tool@v1.1``)."""
    return {
        c.key: sign_version(c.spec.tool, version_label(c.spec.version, c.spec.minor), files_of(c.folder), key)
        for c in contracts
    }


def publish(
    contracts: ContractSet,
    client: RegistryClient,
    key: Key,
    *,
    set_name: str = DEFAULT_SET,
    generation: int | None = None,
    check_history: bool = True,
) -> list[Published]:
    """Register every version of ``contracts`` the registry lacks, signed with ``key``, and their
    status changes; then the set marker, last.

    Args:
        generation: the marker's generation (default: the newest marker's plus 1); above it.

    Raises:
        ConfigError: a breaking revision without a new major version (before any request), a
            registered version that changed, a generation not above the newest marker's, or a
            registry error naming subject and version.
    """
    if check_history:
        for step in contract_history(contracts):
            if not step.ok:
                kinds = ", ".join(sorted({c.kind for c in step.changes if c.breaking}))
                raise ConfigError(
                    f"{step.new}: breaking change from {step.old} without a new major version ({kinds}); "
                    "not published"
                )
    signed = signed_versions(contracts, key)
    marker_subject = set_subject(set_name)
    previous = _newest_marker(client, marker_subject)
    if generation is not None and previous is not None and generation <= previous.generation:
        raise ConfigError(
            f"--generation {generation}: {marker_subject} already holds generation {previous.generation}; "
            "give a higher one"
        )
    done: list[Published] = []
    for (tool, major), group in itertools.groupby(
        sorted(contracts, key=lambda c: (c.spec.tool, c.spec.version, c.spec.minor)),
        key=lambda c: (c.spec.tool, c.spec.version),
    ):
        done.extend(_publish_major(client, subject_of(tool, major), list(group), signed, key))
    versions = {pv.key: pv.digest for pv in signed.values()}
    if previous is not None and previous.versions == versions and generation is None:
        return done
    number = generation if generation is not None else (previous.generation + 1 if previous else 1)
    marker = sign_marker(number, versions, key)
    schema_id = client.register(marker_subject, marker_text(marker), what=f"subject {marker_subject}")
    # Markers accept any value, so any check passes them; NONE says no check is meant (and a
    # registry sets a subject's level only once the subject exists).
    if client.compatibility(marker_subject) != "NONE":
        client.set_compatibility(marker_subject, "NONE")
    done.append(
        Published(key=f"generation {number}", subject=marker_subject, action="set", schema_id=schema_id)
    )
    return done


def _newest_marker(client: RegistryClient, subject: str) -> SetMarker | None:
    """The newest marker of the subject that decodes (the generation to follow), unverified."""
    for number in reversed(client.versions(subject)):
        try:
            return parse_marker(client.schema(subject, number), subject, number)
        except RegistryError:
            raise
        except ConfigError:
            continue
    return None


def _publish_major(
    client: RegistryClient,
    subject: str,
    versions: list[Contract],
    signed: dict[str, PublishedVersion],
    key: Key,
) -> Iterator[Published]:
    statuses: dict[int, str] = {c.spec.minor: c.spec.status for c in versions}
    held: dict[int, Entry] = {}
    newest: Entry | None = None
    present: set[str] = set()  # digests of the signed versions the subject carries
    numbers = client.versions(subject)
    sequence = len(numbers)
    own = Keyring(publishers={key.key_id: key})
    for number in numbers:
        text = client.schema(subject, number)
        entry = parse_entry(text, subject, number)
        if entry is None:
            continue
        published = parse_published(json.loads(text), subject, number)
        if published is not None and not _signed_by(published, own):
            continue  # another key's (or a forged) registration: readers refuse it, publish ignores it
        held[entry.spec.minor] = newest = entry
        present.update(pv.digest for pv in published or ())
    if client.compatibility(subject) != COMPATIBILITY:
        client.set_compatibility(subject, COMPATIBILITY)
    absent: list[PublishedVersion] = []
    for contract in versions:
        entry = entry_of(contract, statuses)
        pv = signed[contract.key]
        have = held.get(contract.spec.minor)
        if have is not None:
            if not have.same_version(entry):
                raise ConfigError(
                    f"{contract.key} ({contract.folder}): the registry holds another {contract.key} under "
                    f"{subject}; a registered version never changes: publish the change as a new revision"
                )
            if pv.digest in present:
                yield Published(key=contract.key, subject=subject, action="unchanged")
            else:
                absent.append(pv)  # its status changed, or it was registered unsigned
            continue
        if newest is not None and contract.spec.minor < newest.spec.minor:
            raise ConfigError(
                f"{contract.key} ({contract.folder}): {subject} already holds a later revision "
                f"({newest.key}); a revision cannot be added before it"
            )
        sequence += 1
        entry = msgspec.structs.replace(entry, sequence=sequence)
        schema_id = _register(client, subject, entry, [pv])
        held[contract.spec.minor] = newest = entry
        present.add(pv.digest)
        yield Published(key=contract.key, subject=subject, action="registered", schema_id=schema_id)
    if held and (absent or (newest is not None and newest.statuses != statuses)):
        # Statuses travel with the newest registration: register it again with them, and the
        # signed versions whose contract.yaml changed.
        top = held[max(held)]
        again = msgspec.structs.replace(top, statuses=statuses, sequence=sequence + 1)
        schema_id = _register(client, subject, again, absent)
        for pv in absent:
            yield Published(
                key=f"{pv.tool}@v{pv.version}", subject=subject, action="statuses", schema_id=schema_id
            )
        if not absent:
            yield Published(key=top.key, subject=subject, action="statuses", schema_id=schema_id)


def _signed_by(published: list[PublishedVersion], keyring: Keyring) -> bool:
    try:
        for pv in published:
            verify_version(pv, keyring)
    except ContractTrustError:
        return False
    return True


def _register(client: RegistryClient, subject: str, entry: Entry, published: list[PublishedVersion]) -> int:
    what = f"subject {subject}, {entry.key}"
    try:
        return client.register(subject, entry.registered_text(published), what=what)
    except RegistryError as exc:
        if exc.status == 409:
            raise RegistryError(
                f"{entry.key}: the schema registry refused it as incompatible with the latest version of "
                f"{subject} (compatibility {COMPATIBILITY}): {str(exc).rpartition(': ')[2]}",
                status=409,
                refused=True,
            ) from exc
        raise


def pull(
    client: RegistryClient,
    dest: Path,
    keyring: Keyring,
    *,
    set_name: str = DEFAULT_SET,
    problems: list[Problem] | None = None,
) -> tuple[int, list[str]]:
    """Write the versions of the registry's newest complete set, as their publisher signed them
    (``contract.yaml``, schemas and fixtures), into ``dest`` (``<tool>/v<N>[.<M>]/``), beside
    what is there.

    Returns:
        The set's generation and the version keys written.

    Raises:
        ConfigError: no complete set the keyring's publishers signed, or a registry error.
    """
    signed = fetch_set(client, keyring, set_name=set_name, problems=problems)
    written = []
    for pv in signed.versions:
        write_version(pv, dest)
        written.append(f"{pv.tool}@v{pv.version}")
    return signed.marker.generation, written
