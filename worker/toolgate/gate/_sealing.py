"""The quarantine encrypted at rest: envelope encryption of each record, AES-256-GCM.

A quarantine record keeps a rejected result's original bytes so that it can be replayed;
sealed, those bytes and every diagnostic text that can quote them are readable only with
a quarantine key of the keyring (``[quarantine.<id>]``, :mod:`toolgate.gate._signing`).

Per record: a fresh 256-bit data key encrypts the plaintext (the raw value and the
diagnostics' ``message``) with AES-256-GCM; the data key is wrapped with AES-256-GCM by
the newest quarantine key. The record carries::

    value                   12-byte nonce + ciphertext (the plaintext, msgpack)
    tg-quarantine-key       the quarantine key's id (clear)
    tg-quarantine-wrapped   base64 of 12-byte nonce + the wrapped data key

Both encryptions bind the record's identity as associated data (the key id, ``tg-origin``,
``tg-raw-sha256`` and the Kafka key): a ciphertext or wrapped key moved to another record,
or altered, fails to open, naming the record and never guessing. Codes, stages, pointers,
the tool, versions, hashes and timings stay clear (``quarantine summary``, the metrics and
the dashboard need no key); ``tg-error-detail`` keeps all but its ``message``, and Kafka
Connect's ``exception.message`` is emptied. The adapter's own headers are kept as they came.

Removing a quarantine key from the keyring makes every record it wrapped unreadable
(crypto-shredding): docs/security.md says how and what it costs.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from toolgate.gate._signing import Keyring

KEY_HEADER = "tg-quarantine-key"
WRAPPED_HEADER = "tg-quarantine-wrapped"
SEALED_HEADERS = frozenset({KEY_HEADER, WRAPPED_HEADER})
_DETAIL = "tg-error-detail"
_CONNECT_MESSAGE = "__connect.errors.exception.message"
_CONTEXT = b"toolgate-quarantine-v1"
_NONCE = 12
_DATA_NONCE = bytes(_NONCE)


class _Plain(msgspec.Struct, array_like=True, gc=False):
    """What a sealed record encrypts."""

    value: bytes | None
    message: str = ""


_encode_plain = msgspec.msgpack.encode
_decode_plain = msgspec.msgpack.Decoder(_Plain).decode


class SealError(Exception):
    """A sealed record that cannot be opened; the message is one line saying what is missing."""


class Opened(NamedTuple):
    """A quarantine record's value and headers in clear (as a worker without a key writes)."""

    value: bytes | None
    headers: list[tuple[str, bytes]]


class _Pool:
    """Bytes of the system's random source (``os.urandom``), read 4 KiB at a time and each
    handed out once: one system call per about 90 records instead of one per record. A forked
    child starts with an empty pool, never with its parent's bytes."""

    __slots__ = ("_at", "_bytes", "_lock")

    def __init__(self) -> None:
        self._bytes = b""
        self._at = 0
        self._lock = threading.Lock()  # two threads must never be handed the same bytes

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._at + n > len(self._bytes):
                self._bytes, self._at = os.urandom(max(4096, n)), 0
            taken = self._bytes[self._at : self._at + n]
            self._at += n
            return taken

    def clear(self) -> None:
        self._bytes, self._at = b"", 0
        self._lock = threading.Lock()


_POOL = _Pool()
_random = _POOL.take
os.register_at_fork(after_in_child=_POOL.clear)


def _identity(key_id: str, origin: bytes, digest: bytes, key: bytes | None) -> bytes:
    """What both encryptions bind: the key id and the record's identity."""
    return b"\n".join((_CONTEXT, key_id.encode(), origin, digest, b"" if key is None else key.hex().encode()))


class Sealer:
    """Seals quarantine records with the newest quarantine key; opens them with any key held.

    Args:
        keys: quarantine key id -> 32-byte key.
        newest: the key id new records are sealed with (None: opens only).
    """

    __slots__ = ("_aeads", "newest")

    def __init__(self, keys: Mapping[str, bytes], newest: str | None) -> None:
        self._aeads = {kid: AESGCM(secret) for kid, secret in keys.items()}
        if newest is not None and newest not in self._aeads:
            raise ValueError(f"no quarantine key {newest!r}")
        self.newest = newest

    def seal(
        self,
        key: bytes | None,
        value: bytes | None,
        message: str,
        headers: list[tuple[str, bytes]],
        *,
        origin: bytes,
        digest: bytes,
    ) -> tuple[bytes, list[tuple[str, bytes]]]:
        """The sealed value of a quarantine record holding ``value`` and the diagnostics'
        ``message``; ``headers`` (already without the message; ``origin`` and ``digest`` are
        its ``tg-origin`` and ``tg-raw-sha256``) get the key id and the wrapped data key."""
        key_id = self.newest
        if key_id is None:
            raise ValueError("no quarantine key to seal with")
        identity = _identity(key_id, origin, digest, key)
        # A data key seals one record only, so its own nonce may be fixed.
        fresh = _random(32 + _NONCE)
        data_key, wrap_nonce = fresh[:32], fresh[32:]
        plain = _encode_plain(_Plain(value, message))
        sealed = _DATA_NONCE + AESGCM(data_key).encrypt(_DATA_NONCE, plain, identity)
        wrapped = wrap_nonce + self._aeads[key_id].encrypt(wrap_nonce, data_key, identity)
        headers.append((KEY_HEADER, key_id.encode()))
        headers.append((WRAPPED_HEADER, base64.b64encode(wrapped)))
        return sealed, headers

    def open(self, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]) -> Opened:
        """The record as it was before sealing; a clear record as it is.

        Raises:
            SealError: the key is not held, or the record was altered or moved.
        """
        return open_record(self._aeads, key, value, headers)


def open_record(
    aeads: Mapping[str, AESGCM], key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
) -> Opened:
    """See :meth:`Sealer.open` (``aeads``: quarantine key id -> its AES-GCM)."""
    named = dict(headers)
    key_id_raw = named.get(KEY_HEADER)
    if key_id_raw is None:
        return Opened(value, list(headers))
    key_id = key_id_raw.decode("utf-8", "replace")
    aead = aeads.get(key_id)
    if aead is None:
        held = ", ".join(sorted(aeads)) or "none"
        raise SealError(
            f"sealed with quarantine key {key_id!r}, which the keyring lacks (it holds: {held}); "
            f"give --keyring FILE with [quarantine.{key_id}], or the key was removed (shredded)"
        )
    identity = _identity(key_id, named.get("tg-origin", b""), named.get("tg-raw-sha256", b""), key)
    try:
        wrapped = base64.b64decode(named.get(WRAPPED_HEADER, b""), validate=True)
        data_key = aead.decrypt(wrapped[:_NONCE], wrapped[_NONCE:], identity)
        sealed = value or b""
        plain = _decode_plain(AESGCM(data_key).decrypt(sealed[:_NONCE], sealed[_NONCE:], identity))
    except (InvalidTag, ValueError, binascii.Error, msgspec.DecodeError) as exc:
        raise SealError(
            f"sealed with quarantine key {key_id!r} but does not open: its ciphertext, wrapped key or "
            f"identity headers were altered or moved from another record ({type(exc).__name__})"
        ) from exc
    opened: list[tuple[str, bytes]] = []
    for name, raw in headers:
        if name in SEALED_HEADERS:
            continue
        if name == _DETAIL and plain.message:
            detail = json.loads(raw)
            # In the diagnostics' own order: stage, code, message, then the pointers.
            head = {k: detail.pop(k) for k in ("stage", "code") if k in detail}
            detail = {**head, "message": plain.message, **detail}
            raw = json.dumps(detail, ensure_ascii=True, separators=(",", ":")).encode()
        elif name == _CONNECT_MESSAGE:
            raw = plain.message.encode()
        opened.append((name, raw))
    return Opened(plain.value, opened)


_SEALERS: weakref.WeakKeyDictionary[Keyring, Sealer | None] = weakref.WeakKeyDictionary()


def sealer_for(keyring: Keyring) -> Sealer | None:
    """The keyring's quarantine sealer (None: the keyring holds no quarantine key), built once
    per keyring object and dropped with it: a reloaded keyring without a removed key leaves no
    copy of that key behind."""
    try:
        return _SEALERS[keyring]
    except KeyError:
        pass
    keys = keyring.quarantine
    sealer = (
        Sealer({kid: key.secret for kid, key in keys.items()}, keyring.newest_quarantine_key())
        if keys
        else None
    )
    _SEALERS[keyring] = sealer
    return sealer
