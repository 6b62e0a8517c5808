"""The intake message ``toolgate check`` evaluates offline: headers and key, as the worker sees them.

An operator gives ``--header K=V`` pairs, perhaps a request record and perhaps a ``--key``;
the worker would receive a Kafka record. :func:`intake_envelope` turns the first into the
second: the pairs in the order given (a repeated header is sent twice, so the offline check
meets a duplicate exactly as the worker does: ``HEADER_MISMATCH``), ``tg-tool`` and
``tg-request-id`` defaulting to the request record's ``tool`` and ``request_id`` unless given
(in any case, as the gate reads header names), and the key defaulting to ``tg-request-id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolgate._errors import ConfigError
from toolgate.gate._records import RequestRecord

__all__ = ["Envelope", "intake_envelope", "utf8"]


@dataclass(frozen=True)
class Envelope:
    """The Kafka key and headers of the intake record a result file is evaluated as."""

    key: bytes | None
    headers: list[tuple[str, bytes]]


def utf8(text: str, what: str) -> bytes:
    """A command-line value as UTF-8 (arguments that are not UTF-8 arrive surrogate-escaped)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{what}: the value is not UTF-8") from None


def intake_envelope(pairs: Sequence[str], request: RequestRecord | None, key: str | None) -> Envelope:
    """The key and headers for ``--header`` pairs (``K=V``), a request record and a ``--key``.

    Raises:
        ConfigError: a pair is not ``K=V`` or a value is not UTF-8, naming the flag.
    """
    given: list[tuple[str, bytes]] = []
    for item in pairs:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--header {item!r}: expected K=V, e.g. tg-tool=review_status")
        given.append((name, utf8(value, f"--header {name}")))
    headers: list[tuple[str, bytes]] = []
    if request is not None:
        named = {name.lower() for name, _ in given}
        for name, text in (("tg-tool", request.tool), ("tg-request-id", request.request_id)):
            if name not in named:
                headers.append((name, text.encode()))
    headers += given
    if key is not None:
        return Envelope(key=utf8(key, "--key"), headers=headers)
    return Envelope(key=next((v for n, v in headers if n.lower() == "tg-request-id"), None), headers=headers)
