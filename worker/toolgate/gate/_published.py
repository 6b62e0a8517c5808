"""Published contract versions: what a publisher signed, whatever the channel carries it.

A contract version travels (on the contracts topic, in a schema registry) as a
:class:`PublishedVersion`: the text of every file of its folder (``contract.yaml``, the
schemas, the fixtures), their digest and the publisher's Ed25519 signature of it. A reader
loads a version only when :func:`verify_version` holds against its own keyring, and writes the
very files that were signed (:func:`write_version`): a copy changed by anyone without the
publisher's private key (a rule dropped, the digest recomputed) is refused, naming the tool
and version.

The bytes signed are fixed here, for every channel and language::

    digest    = sha256 hex of canonical_bytes(tool, version, files)
    canonical = b"toolgate-contract-version-v1\\n" + JSON of {"files": ..., "tool": ..., "version": ...}
    signed    = b"toolgate-contract-version-sig-v1\\n" + publisher + b"\\n" + digest

where the JSON has its keys sorted, no spaces (``","`` and ``":"``), non-ASCII characters as
UTF-8, and ``files`` maps each path relative to the version folder (``/``-separated, no ``..``)
to the file's UTF-8 text. ``version`` is the folder's label without its ``v``: ``"1"``,
``"1.1"``.

A publish writes a :class:`SetMarker` LAST: the generation (the previous one plus 1) and
the digest of every version of the set, signed the same way over::

    b"toolgate-contract-set-v1\\n" + JSON of {"generation": ..., "versions": {"tool/version": digest}}

so a reader loads a set only when every version the marker names is present with that
digest (:func:`missing_versions`): a channel holding part of a set, as during any publish,
never replaces a complete one.

Publisher keys are the keyring's ``[publishers.<id>]`` table (:mod:`toolgate.gate._signing`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Final

import msgspec

from toolgate._errors import ConfigError, ContractTrustError
from toolgate.gate._signing import Key, Keyring, decode_signature

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_GENERATION",
    "MAX_VERSION_BYTES",
    "PublishedVersion",
    "SetMarker",
    "canonical_bytes",
    "files_of",
    "marker_bytes",
    "missing_versions",
    "set_key",
    "sign_marker",
    "sign_version",
    "verify_marker",
    "verify_version",
    "version_label",
    "write_version",
]

_VERSION_TAG: Final = b"toolgate-contract-version-v1\n"
_VERSION_SIG_TAG: Final = b"toolgate-contract-version-sig-v1\n"
_SET_TAG: Final = b"toolgate-contract-set-v1\n"
_SET_SIG_TAG: Final = b"toolgate-contract-set-sig-v1\n"
MAX_FILE_BYTES: Final = 4 * 1024 * 1024
MAX_VERSION_BYTES: Final = 8 * 1024 * 1024
MAX_GENERATION: Final = 10**18 - 1
"""The highest set generation a marker, a member record or ``tg-contract-generation`` may name."""
MAX_SET_VERSIONS: Final = 10_000
_Text = Annotated[str, msgspec.Meta(max_length=1024)]


class PublishedVersion(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One contract version as its publisher signed it."""

    tool: str
    version: str  # the folder's label: "1", "1.1"
    files: dict[str, str]  # path relative to the version folder -> UTF-8 text
    digest: str  # sha256 hex of canonical_bytes(tool, version, files)
    publisher: str  # the key id, in the readers' keyring [publishers.<id>]
    signature: str  # base64 Ed25519 signature (see the module docstring)

    @property
    def key(self) -> str:
        """``tool/version``, as a :class:`SetMarker` names it."""
        return set_key(self.tool, self.version)


class SetMarker(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A published set: written last, so its versions are all there before a reader sees it."""

    generation: Annotated[int, msgspec.Meta(ge=1, le=MAX_GENERATION)]  # above the previous marker's
    # "tool/version" -> digest
    versions: Annotated[dict[_Text, _Text], msgspec.Meta(max_length=MAX_SET_VERSIONS)]
    publisher: _Text
    signature: _Text


def set_key(tool: str, version: str) -> str:
    """The name of a version in a :class:`SetMarker`: ``tool/version``."""
    return f"{tool}/{version}"


def version_label(major: int, minor: int) -> str:
    """The label of ``v<major>[.<minor>]``: ``"1"`` or ``"1.1"``."""
    return str(major) if minor == 0 else f"{major}.{minor}"


def _canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canonical_bytes(tool: str, version: str, files: Mapping[str, str]) -> bytes:
    """The bytes whose SHA-256 is a version's digest (see the module docstring)."""
    return _VERSION_TAG + _canonical_json({"files": dict(files), "tool": tool, "version": version})


def _digest(tool: str, version: str, files: Mapping[str, str]) -> str:
    return hashlib.sha256(canonical_bytes(tool, version, files)).hexdigest()


def _version_message(publisher: str, digest: str) -> bytes:
    return _VERSION_SIG_TAG + publisher.encode("utf-8") + b"\n" + digest.encode("ascii")


def marker_bytes(generation: int, versions: Mapping[str, str]) -> bytes:
    """The bytes a :class:`SetMarker` signs (before the publisher line)."""
    return _SET_TAG + _canonical_json({"generation": generation, "versions": dict(versions)})


def _marker_message(publisher: str, generation: int, versions: Mapping[str, str]) -> bytes:
    return _SET_SIG_TAG + publisher.encode("utf-8") + b"\n" + marker_bytes(generation, versions)


def _publisher_key(key: Key) -> None:
    if key.algorithm != "ed25519":
        raise ConfigError(f"key {key.key_id}: a publisher key is ed25519 ([publishers.{key.key_id}])")


def _unsafe_path(path: str) -> str | None:
    """Why ``path`` cannot be a file of a version folder, None when it can."""
    if not path or "\\" in path or "\0" in path:
        return "empty, or holds a backslash or NUL"
    if path.startswith("/") or posixpath.normpath(path) != path or path.split("/")[0] == "..":
        return "not a plain relative path"
    if any(part.startswith(".") for part in path.split("/")):
        return "a hidden name or a dot folder"
    return None


def check_files(tool: str, version: str, files: Mapping[str, str]) -> None:
    """Every path is a plain relative one, ``contract.yaml`` is there, and the sizes are bounded.

    Raises:
        ContractTrustError: naming the tool, the version and the file.
    """
    total = 0
    for path, text in files.items():
        problem = _unsafe_path(path)
        if problem is not None:
            raise ContractTrustError(tool, version, f"file {path!r}: {problem}")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_FILE_BYTES:
            raise ContractTrustError(tool, version, f"file {path}: over {MAX_FILE_BYTES} bytes")
        total += size
    if total > MAX_VERSION_BYTES:
        raise ContractTrustError(tool, version, f"files over {MAX_VERSION_BYTES} bytes in all")
    if "contract.yaml" not in files:
        raise ContractTrustError(tool, version, "no contract.yaml among its files")


def sign_version(tool: str, version: str, files: Mapping[str, str], key: Key) -> PublishedVersion:
    """Sign one version's files with a publisher key (one with its private key).

    Raises:
        ContractTrustError: a file path or size a reader would refuse.
        ConfigError: the key is not an Ed25519 key with its private key.
    """
    _publisher_key(key)
    check_files(tool, version, files)
    digest = _digest(tool, version, files)
    signature = key.sign(_version_message(key.key_id, digest))
    return PublishedVersion(
        tool=tool,
        version=version,
        files=dict(sorted(files.items())),
        digest=digest,
        publisher=key.key_id,
        signature=base64.b64encode(signature).decode("ascii"),
    )


def _verified_key(keyring: Keyring, publisher: str, tool: str, version: str) -> Key:
    key = keyring.publisher(publisher)
    if key is None:
        known = ", ".join(sorted(keyring.publishers)) or "none"
        raise ContractTrustError(
            tool, version, f"unknown publisher {publisher!r} (the keyring's [publishers]: {known})"
        )
    return key


def _signature_holds(key: Key, message: bytes, signature: str) -> bool:
    try:
        raw = decode_signature(signature.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return False
    return key.verify(message, raw)


def verify_version(pv: PublishedVersion, keyring: Keyring) -> None:
    """Hold ``pv`` to its publisher's signature.

    Raises:
        ContractTrustError: naming the tool, the version and the reason: unknown publisher,
            digest mismatch (the files are not the ones the digest names), bad signature, or
            a file a reader would refuse.
    """
    key = _verified_key(keyring, pv.publisher, pv.tool, pv.version)
    check_files(pv.tool, pv.version, pv.files)
    actual = _digest(pv.tool, pv.version, pv.files)
    if actual != pv.digest:
        reason = f"digest mismatch: the files hash to {actual[:16]}..., not {pv.digest[:16]}..."
        raise ContractTrustError(pv.tool, pv.version, reason)
    if not _signature_holds(key, _version_message(pv.publisher, pv.digest), pv.signature):
        raise ContractTrustError(pv.tool, pv.version, f"bad signature for publisher {pv.publisher}")


def sign_marker(generation: int, versions: Mapping[str, str], key: Key) -> SetMarker:
    """Sign a set marker.

    Raises:
        ConfigError: a generation below 1, or a key that cannot sign contracts.
    """
    _publisher_key(key)
    if generation < 1:
        raise ConfigError(f"contract set generation {generation}: expected 1 or more")
    message = _marker_message(key.key_id, generation, versions)
    return SetMarker(
        generation=generation,
        versions=dict(sorted(versions.items())),
        publisher=key.key_id,
        signature=base64.b64encode(key.sign(message)).decode("ascii"),
    )


def verify_marker(marker: SetMarker, keyring: Keyring) -> None:
    """Hold a set marker to its publisher's signature.

    Raises:
        ContractTrustError: naming ``set`` and the generation, and the reason.
    """
    label = f"generation {marker.generation}"
    key = _verified_key(keyring, marker.publisher, "set", label)
    message = _marker_message(marker.publisher, marker.generation, marker.versions)
    if not _signature_holds(key, message, marker.signature):
        raise ContractTrustError("set", label, f"bad signature for publisher {marker.publisher}")


def missing_versions(marker: SetMarker, present: Mapping[str, str]) -> list[str]:
    """The versions ``marker`` names that ``present`` ("tool/version" -> digest) lacks or
    holds with another digest; empty when the set is complete."""
    return sorted(k for k, digest in marker.versions.items() if present.get(k) != digest)


def files_of(folder: Path) -> dict[str, str]:
    """Every file of a version folder as UTF-8 text, by ``/``-separated relative path
    (hidden files and folders left out).

    Raises:
        ConfigError: a file that is not UTF-8 text or is too large, naming it.
    """
    files: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if not path.is_file() or any(part.startswith(".") for part in relative.split("/")):
            continue
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise ConfigError(f"{path}: over {MAX_FILE_BYTES} bytes: not publishable")
        try:
            files[relative] = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason}): not publishable") from exc
    return files


def write_version(pv: PublishedVersion, root: Path) -> Path:
    """Write a verified version's files as ``root/<tool>/v<version>/``; the folder.

    Raises:
        ContractTrustError: a tool name or file path that would leave ``root``.
    """
    for name in (pv.tool, pv.version):
        problem = _unsafe_path(name)
        if problem is not None or "/" in name:
            raise ContractTrustError(pv.tool, pv.version, f"name {name!r}: not a plain folder name")
    check_files(pv.tool, pv.version, pv.files)
    folder = root / pv.tool / f"v{pv.version}"
    for relative, text in pv.files.items():
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", newline="")
    return folder
