"""A small client of the Confluent-compatible schema registry API, on the standard library.

Every error is one line naming the registry, and the subject and version when there is one.
Authentication: HTTP basic (``user:password`` in a file) or a bearer token (in a file); TLS
with the system's CAs or a CA file.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from toolgate._errors import ConfigError
from toolgate._urls import redact_url, split_url

__all__ = ["SOURCE_PREFIX", "RegistryClient", "RegistryError", "parse_source"]

SOURCE_PREFIX: Final = "registry+"
_CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
MAX_RESPONSE_BYTES: Final = 16 * 1024 * 1024


class RegistryError(ConfigError):
    """The registry could not be reached or refused a request: one line, naming what."""

    def __init__(self, message: str, *, status: int | None = None, refused: bool = False) -> None:
        self.status = status
        # True when the registry answered and said no (a 4xx): not an outage.
        self.refused = refused
        super().__init__(message)


def parse_source(source: str, *, setting: str = "--contracts") -> str:
    """The registry's base URL of a ``--contracts registry+http(s)://...`` value.

    Args:
        setting: the option or variable the value came from, for the error.

    Raises:
        ConfigError: the value is not ``registry+http://`` or ``registry+https://`` and a host,
            or holds credentials; the message names ``setting`` and never echoes a password.
    """
    if not source.startswith(SOURCE_PREFIX):
        raise ConfigError(f"{setting} {redact_url(source)!r}: a registry source starts with {SOURCE_PREFIX}")
    url = source[len(SOURCE_PREFIX) :]
    shown = "registry+" + redact_url(url) if setting == "--contracts" else redact_url(url)
    split_url(source if setting == "--contracts" else url, setting)  # a bad host or port: one line
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        expected = "registry+http://HOST[:PORT][/PATH] or registry+https://..."
        if setting != "--contracts":
            expected = "http://HOST[:PORT][/PATH] or https://..."
        raise ConfigError(f"{setting} {shown!r}: expected {expected}")
    if parts.username or parts.password:
        raise ConfigError(
            f"{setting} {shown!r}: put credentials in a file (TOOLGATE_REGISTRY_BASIC_AUTH_FILE or "
            "TOOLGATE_REGISTRY_BEARER_TOKEN_FILE), not in the URL"
        )
    if parts.port == 0:
        raise ConfigError(f"{setting} {shown!r}: port 0 is not a port")
    return url.rstrip("/")


def _read_secret(path: str, setting: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{setting}={path}: cannot read: {exc}") from exc
    if not text or "\n" in text:
        raise ConfigError(f"{setting}={path}: expected one non-empty line")
    return text


class RegistryClient:
    """Requests to one registry.

    Args:
        url: base URL, e.g. ``http://127.0.0.1:18081/apis/ccompat/v7``.
        basic_auth_file: a file holding ``user:password`` (HTTP basic).
        bearer_token_file: a file holding a bearer token.
        ca_file: a PEM file of the CAs to trust for https (default: the system's).
        timeout: seconds per request.
    """

    def __init__(
        self,
        url: str,
        *,
        basic_auth_file: str | None = None,
        bearer_token_file: str | None = None,
        ca_file: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not 0 < timeout <= 300:
            raise ConfigError(
                f"TOOLGATE_REGISTRY_TIMEOUT_SECONDS={timeout!r} (registry.timeout_seconds): "
                "expected 0 < seconds <= 300"
            )
        if basic_auth_file and bearer_token_file:
            raise ConfigError(
                "TOOLGATE_REGISTRY_BASIC_AUTH_FILE and TOOLGATE_REGISTRY_BEARER_TOKEN_FILE: set one, not both"
            )
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"schema registry {url!r}: expected an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": f"{_CONTENT_TYPE}, application/json"}
        if basic_auth_file:
            secret = _read_secret(basic_auth_file, "TOOLGATE_REGISTRY_BASIC_AUTH_FILE")
            if ":" not in secret:
                raise ConfigError(
                    f"TOOLGATE_REGISTRY_BASIC_AUTH_FILE={basic_auth_file}: expected user:password"
                )
            self._headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode()
        elif bearer_token_file:
            token = _read_secret(bearer_token_file, "TOOLGATE_REGISTRY_BEARER_TOKEN_FILE")
            self._headers["Authorization"] = f"Bearer {token}"
        self._deadline: float | None = None
        self._context: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            try:
                self._context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"TOOLGATE_REGISTRY_CA_FILE={ca_file}: cannot load: {exc}") from exc

    @contextlib.contextmanager
    def until(self, deadline: float) -> Iterator[None]:
        """Within the block, no request outlives ``deadline`` (``time.monotonic()``): each is
        bounded by what is left, and none starts once it has passed."""
        before, self._deadline = self._deadline, deadline
        try:
            yield
        finally:
            self._deadline = before

    def request(self, method: str, path: str, body: Any = None, *, what: str = "") -> Any:
        """One request; the decoded JSON answer.

        Args:
            what: the subject and version concerned, for the error message.

        Raises:
            RegistryError: unreachable, an error status (with the registry's message) or not JSON.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self._headers)
        if data is not None:
            headers["Content-Type"] = _CONTENT_TYPE
        # http(s) only: the constructor refuses any other scheme.
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)  # noqa: S310
        where = f"schema registry {self.url}" + (f", {what}" if what else "")
        timeout = self.timeout
        if self._deadline is not None:
            timeout = min(timeout, self._deadline - time.monotonic())
            if timeout <= 0:
                raise RegistryError(f"{where}: no time left before the deadline for {method} {path}")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._context) as resp:  # noqa: S310
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            raise RegistryError(
                f"{where}: HTTP {exc.code} on {method} {path}: {detail}",
                status=exc.code,
                refused=400 <= exc.code < 500,
            ) from exc
        except urllib.error.URLError as exc:
            reason = exc.reason
            raise RegistryError(f"{where}: unreachable: {reason}") from exc
        except (OSError, ValueError) as exc:
            raise RegistryError(f"{where}: unreachable: {exc}") from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise RegistryError(f"{where}: answer to {method} {path} is over {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(raw) if raw else None
        except ValueError as exc:
            raise RegistryError(f"{where}: answer to {method} {path} is not JSON") from exc

    # The API calls toolgate uses.

    def subjects(self) -> list[str]:
        """Every subject."""
        answer = self.request("GET", "/subjects")
        if not isinstance(answer, list) or not all(isinstance(s, str) for s in answer):
            raise RegistryError(f"schema registry {self.url}: GET /subjects is not a list of names")
        return answer

    def versions(self, subject: str) -> list[int]:
        """The version numbers of ``subject``, ascending (none for an unknown subject)."""
        try:
            answer = self.request("GET", f"/subjects/{_q(subject)}/versions", what=f"subject {subject}")
        except RegistryError as exc:
            if exc.status == 404:
                return []
            raise
        if not isinstance(answer, list) or not all(isinstance(v, int) for v in answer):
            raise RegistryError(f"schema registry {self.url}, subject {subject}: versions are not numbers")
        return sorted(answer)

    def schema(self, subject: str, version: int) -> str:
        """The schema text of one version."""
        what = f"subject {subject} version {version}"
        answer = self.request("GET", f"/subjects/{_q(subject)}/versions/{version}", what=what)
        if not isinstance(answer, dict) or not isinstance(answer.get("schema"), str):
            raise RegistryError(f"schema registry {self.url}, {what}: the answer has no schema")
        schema_type = answer.get("schemaType", "AVRO")
        if schema_type != "JSON":
            raise RegistryError(f"schema registry {self.url}, {what}: a {schema_type} schema, not JSON")
        return str(answer["schema"])

    def register(self, subject: str, schema: str, *, what: str) -> int:
        """Register a JSON Schema under ``subject``; its global id."""
        answer = self.request(
            "POST", f"/subjects/{_q(subject)}/versions", {"schemaType": "JSON", "schema": schema}, what=what
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("id"), int):
            raise RegistryError(f"schema registry {self.url}, {what}: the answer has no id")
        return int(answer["id"])

    def compatible(self, subject: str, schema: str, *, what: str) -> tuple[bool, str]:
        """Whether the registry would accept ``schema`` as the next version, and its reason."""
        answer = self.request(
            "POST",
            f"/compatibility/subjects/{_q(subject)}/versions/latest?verbose=true",
            {"schemaType": "JSON", "schema": schema},
            what=what,
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("is_compatible"), bool):
            raise RegistryError(f"schema registry {self.url}, {what}: the compatibility answer is malformed")
        reasons = answer.get("messages") or answer.get("reason") or ""
        return bool(answer["is_compatible"]), reasons if isinstance(reasons, str) else "; ".join(
            map(str, reasons)
        )

    def set_compatibility(self, subject: str, level: str) -> None:
        """Set ``subject``'s compatibility level."""
        self.request("PUT", f"/config/{_q(subject)}", {"compatibility": level}, what=f"subject {subject}")

    def compatibility(self, subject: str) -> str | None:
        """``subject``'s own compatibility level (None: it has none of its own)."""
        try:
            answer = self.request("GET", f"/config/{_q(subject)}", what=f"subject {subject}")
        except RegistryError as exc:
            if exc.status == 404:
                return None
            raise
        level = answer.get("compatibilityLevel") if isinstance(answer, dict) else None
        return level if isinstance(level, str) else None


def _q(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read(4096)
    except OSError:
        raw = b""
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("message"), str):
        text = answer["message"]
    else:
        text = raw.decode("utf-8", "replace") or str(exc.reason)
    return " ".join(text.split())[:400]
