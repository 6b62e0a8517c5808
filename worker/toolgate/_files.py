"""Files read whole, within a bound: never more than the bound plus one byte is read."""

from __future__ import annotations

from pathlib import Path

from toolgate._errors import ConfigError


def read_bounded(path: Path, limit: int, name: str | None = None) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them.

    Raises:
        ConfigError: naming the file (or ``name``): it cannot be read, or it is larger.
    """
    said = name or str(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{said}: cannot read: {exc.strerror}") from exc
    if len(data) > limit:
        raise ConfigError(f"{said}: larger than {limit} bytes")
    return data
