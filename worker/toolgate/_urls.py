"""URLs from settings and options: split with one clear error, printed without credentials."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit

from toolgate._errors import ConfigError

__all__ = ["redact_url", "split_url"]


def redact_url(url: str) -> str:
    """``url`` with any credentials before the host replaced by ``***`` (safe to print)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{sep}{authority}{slash}{path}"


def split_url(url: str, setting: str) -> SplitResult:
    """``urlsplit(url)``, its host and port checked.

    Raises:
        ConfigError: a URL that does not parse (an unclosed IPv6 bracket, a port out of range),
            naming ``setting`` and the URL without its credentials.
    """
    try:
        parts = urlsplit(url)
        _ = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigError(f"{setting} {redact_url(url)!r}: not a URL ({exc})") from exc
    return parts
