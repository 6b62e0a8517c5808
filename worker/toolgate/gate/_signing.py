"""Adapter signatures: HMAC-SHA256 and Ed25519 over what the gate binds a result to.

Scheme ``v2`` (the default) signs the request id, the attempt and the SHA-256 of the
raw value bytes, each on its own line after a version line::

    toolgate-sig-v2\n<request_id>\n<attempt, decimal>\n<sha256 of the raw bytes, lower-case hex>

so a signed result answers one attempt of one request: re-sent for another request,
or for another attempt (``tg-attempt`` removed or rewritten), it no longer verifies.
The attempt is the one the gate binds: ``tg-attempt`` when present, else the
request's current attempt. Scheme ``v1`` (``request_id + "\\n" + raw bytes``, no
attempt) is verified only for contracts that list it in ``signature.schemes``.
``ops/signing/`` holds the reference signer and published test vectors.
The ``tg-signature`` header carries the signature in base64 (standard or URL-safe
alphabet, padding optional).

Keys live in a keyring TOML file (``TOOLGATE_KEYRING``), never in contracts::

    [keys.review-adapter-2026]
    algorithm = "hmac-sha256"
    adapter = "review-adapter"      # the tg-adapter this key belongs to
    secret = "base64..."            # or secret_env = "NAME_OF_ENV_VAR",
                                    # or secret_file = "review-adapter.key" (below)

    [keys.deploy-adapter-2026]
    algorithm = "ed25519"
    adapter = "deploy-adapter"
    public_key = "base64 of the 32-byte raw public key"

``secret_file`` (and ``private_key_file`` for ``private_key``) names a file holding the base64
text, as container platforms mount secrets; a relative path is relative to the keyring file's
folder. The file's name is what is logged (``Key.source``), never its content; a file that group
or others may read gets a warning.

A signature only verifies when the message's ``tg-adapter`` header names the
key's adapter: a key vouches for one adapter, not for whoever holds a result.

Publisher keys vouch for contracts, not for results: they sign each published contract
version and set marker (:mod:`toolgate.gate._published`), and live in their own table, so
an adapter key can never pass for a publisher's nor the other way round::

    [publishers.contracts-team-2026]
    algorithm = "ed25519"           # the only one: readers hold the public key alone
    public_key = "base64 of the 32-byte raw public key"
    # private_key_file = "contracts-team.key"   only where `toolgate contracts publish` runs

Ed25519 only, because every worker and proxy holds the readers' keyring: with a shared
HMAC secret any of them could sign a contract.

Quarantine keys seal the quarantine at rest (:mod:`toolgate.gate._sealing`); new records
use the newest by ``created``, older ones stay readable until their key is removed::

    [quarantine.q-2026-12]
    created = "2026-12-01"
    secret_file = "quarantine-2026-12.key"   # base64 of 32 random bytes (or secret, secret_env)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import tomllib
from pathlib import Path
from typing import Literal

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from toolgate._errors import ConfigError
from toolgate._secrets import read_secret


class KeySpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One key of the keyring file."""

    algorithm: Literal["hmac-sha256", "ed25519"]
    adapter: str
    secret: str | None = None
    secret_env: str | None = None
    secret_file: str | None = None
    public_key: str | None = None
    private_key: str | None = None  # only for signing sample traffic and fixtures
    private_key_file: str | None = None


class PublisherSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One publisher key of the keyring file (``[publishers.<id>]``): Ed25519 only."""

    algorithm: Literal["ed25519"] = "ed25519"
    public_key: str | None = None
    private_key: str | None = None  # only for samples and tests
    private_key_file: str | None = None  # where contracts are published from

    def as_key_spec(self) -> KeySpec:
        """The same key in the adapter keys' shape (no adapter: it vouches for contracts)."""
        return KeySpec(
            algorithm=self.algorithm,
            adapter="",
            public_key=self.public_key,
            private_key=self.private_key,
            private_key_file=self.private_key_file,
        )


class QuarantineKeySpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One quarantine key of the keyring file (``[quarantine.<id>]``): 32 bytes, base64, that
    wrap each quarantine record's data key (:mod:`toolgate.gate._sealing`). ``created`` (a
    date, ISO 8601) orders them: new records are sealed with the newest."""

    created: str
    secret: str | None = None
    secret_env: str | None = None
    secret_file: str | None = None


class QuarantineKey:
    """A usable quarantine key."""

    __slots__ = ("created", "key_id", "secret", "source")

    def __init__(
        self, key_id: str, spec: QuarantineKeySpec, environ: dict[str, str], where: str, folder: Path
    ):
        path = f"$.quarantine.{key_id}"
        as_hmac = KeySpec(
            algorithm="hmac-sha256",
            adapter="",
            secret=spec.secret,
            secret_env=spec.secret_env,
            secret_file=spec.secret_file,
        )
        key = Key(key_id, as_hmac, environ, where, folder, table="quarantine")
        assert key._secret is not None
        if len(key._secret) != 32:
            raise ConfigError(f"{where}: {path}.secret must be 32 bytes (AES-256), base64")
        self.key_id = key_id
        self.secret = key._secret
        self.source = key.source
        self.created = spec.created


class KeyringFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The keyring TOML file."""

    keys: dict[str, KeySpec] = {}
    publishers: dict[str, PublisherSpec] = {}
    quarantine: dict[str, QuarantineKeySpec] = {}


class Key:
    """A usable key: verifies (and, where the secret is known, signs)."""

    __slots__ = ("_private", "_public", "_secret", "adapter", "algorithm", "key_id", "source")

    def __init__(
        self,
        key_id: str,
        spec: KeySpec,
        environ: dict[str, str],
        where: str,
        folder: Path | None = None,
        table: str = "keys",
    ) -> None:
        self.key_id = key_id
        self.algorithm = spec.algorithm
        self.adapter = spec.adapter
        self._secret: bytes | None = None
        self._public: Ed25519PublicKey | None = None
        self._private: Ed25519PrivateKey | None = None
        # Where the secret came from, safe to log: "inline", "env NAME", "file PATH", "public key".
        self.source = "public key"
        path = f"$.{table}.{key_id}"
        if spec.algorithm == "hmac-sha256":
            text = spec.secret
            self.source = "inline"
            if spec.secret_env is not None:
                text = environ.get(spec.secret_env)
                if text is None:
                    raise ConfigError(f"{where}: {path}.secret_env names {spec.secret_env}, which is not set")
                self.source = f"env {spec.secret_env}"
            if spec.secret_file is not None:
                if spec.secret is not None or spec.secret_env is not None:
                    raise ConfigError(f"{where}: {path}: give one of secret, secret_env and secret_file")
                file = _relative(spec.secret_file, folder)
                text = read_secret(file, f"{where}: {path}.secret_file").strip()
                self.source = f"file {file}"
            if text is None:
                raise ConfigError(f"{where}: {path} needs secret, secret_env or secret_file")
            self._secret = _b64(text, where, f"{path}.secret")
            if len(self._secret) < 16:
                raise ConfigError(f"{where}: {path}.secret is shorter than 16 bytes")
        else:
            private = spec.private_key
            if private is not None:
                self.source = "inline"
            if spec.private_key_file is not None:
                if private is not None:
                    raise ConfigError(f"{where}: {path}: give private_key or private_key_file, not both")
                file = _relative(spec.private_key_file, folder)
                private = read_secret(file, f"{where}: {path}.private_key_file").strip()
                self.source = f"file {file}"
            if private is not None:
                raw = _b64(private, where, f"{path}.private_key")
                try:
                    self._private = Ed25519PrivateKey.from_private_bytes(raw)
                except ValueError as exc:
                    raise ConfigError(f"{where}: {path}.private_key: {exc}") from exc
                self._public = self._private.public_key()
            if spec.public_key is not None:
                raw = _b64(spec.public_key, where, f"{path}.public_key")
                try:
                    self._public = Ed25519PublicKey.from_public_bytes(raw)
                except ValueError as exc:
                    raise ConfigError(f"{where}: {path}.public_key: {exc}") from exc
            if self._public is None:
                raise ConfigError(f"{where}: {path} needs public_key")

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True when ``signature`` is this key's signature of ``message``."""
        if self._secret is not None:
            expected = hmac.new(self._secret, message, hashlib.sha256).digest()
            return hmac.compare_digest(expected, signature)
        assert self._public is not None
        try:
            self._public.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def sign(self, message: bytes) -> bytes:
        """Sign ``message`` (needs the secret or private key)."""
        if self._secret is not None:
            return hmac.new(self._secret, message, hashlib.sha256).digest()
        if self._private is None:
            raise ConfigError(f"key {self.key_id} has no private key to sign with")
        return self._private.sign(message)


def _relative(name: str, folder: Path | None) -> Path:
    """A key file's path: relative names are relative to the keyring file's folder."""
    path = Path(name)
    return path if path.is_absolute() or folder is None else folder / path


def _b64(text: str, where: str, path: str) -> bytes:
    try:
        return decode_signature(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise ConfigError(f"{where}: {path} is not base64") from exc


def decode_signature(value: bytes) -> bytes:
    """Decode a base64 signature header (either alphabet, padding optional)."""
    value = value.strip().replace(b"-", b"+").replace(b"_", b"/")
    value += b"=" * (-len(value) % 4)
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise ValueError("not base64") from exc


SCHEME_V2 = b"toolgate-sig-v2"


def signed_message(request_id: str, raw: bytes) -> bytes:
    """What an adapter signs for one result under the old scheme ``v1`` (no attempt)."""
    return request_id.encode("utf-8") + b"\n" + raw


def signed_message_v2(request_id: str, attempt: int, raw: bytes) -> bytes:
    """What an adapter signs for one result under scheme ``v2``: see the module docstring."""
    digest = hashlib.sha256(raw).hexdigest()
    return b"\n".join(
        (SCHEME_V2, request_id.encode("utf-8"), str(attempt).encode("ascii"), digest.encode("ascii"))
    )


def signed_message_for(scheme: str, request_id: str, attempt: int, raw: bytes) -> bytes:
    """The signed message of ``scheme`` (``v2`` or ``v1``)."""
    if scheme == "v1":
        return signed_message(request_id, raw)
    return signed_message_v2(request_id, attempt, raw)


class Keyring:
    """Keys by key id, as named by contracts' ``signature.key_id``; publisher keys apart."""

    def __init__(
        self,
        keys: dict[str, Key] | None = None,
        publishers: dict[str, Key] | None = None,
        quarantine: dict[str, QuarantineKey] | None = None,
    ) -> None:
        self.keys = dict(keys or {})
        self.publishers = dict(publishers or {})
        self.quarantine = dict(quarantine or {})

    def newest_quarantine_key(self) -> str | None:
        """The quarantine key new records are sealed with: the latest ``created`` (None: none)."""
        if not self.quarantine:
            return None
        return max(self.quarantine.values(), key=lambda k: (k.created, k.key_id)).key_id

    def get(self, key_id: str) -> Key | None:
        """The key with this id, if configured."""
        return self.keys.get(key_id)

    def publisher(self, key_id: str) -> Key | None:
        """The publisher key with this id (``[publishers.<id>]``), if configured."""
        return self.publishers.get(key_id)

    @classmethod
    def load(cls, path: str | Path, environ: dict[str, str] | None = None) -> Keyring:
        """Read a keyring TOML file.

        Raises:
            ConfigError: naming the file and the path of the mistake.
        """
        env = dict(os.environ if environ is None else environ)
        where = str(path)
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
            parsed = msgspec.convert(data, KeyringFile)
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: not valid TOML: {exc}") from exc
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        folder = Path(path).parent
        return cls(
            {kid: Key(kid, spec, env, where, folder) for kid, spec in parsed.keys.items()},
            {
                kid: Key(kid, spec.as_key_spec(), env, where, folder, table="publishers")
                for kid, spec in parsed.publishers.items()
            },
            {kid: QuarantineKey(kid, spec, env, where, folder) for kid, spec in parsed.quarantine.items()},
        )

    def sources(self) -> str:
        """``key_id=source`` per key, for the start-up log (file names, never secrets)."""
        keys = [f"{kid}={key.source}" for kid, key in sorted(self.keys.items())]
        keys += [f"publisher {kid}={key.source}" for kid, key in sorted(self.publishers.items())]
        keys += [f"quarantine {kid}={key.source}" for kid, key in sorted(self.quarantine.items())]
        return ",".join(keys)
