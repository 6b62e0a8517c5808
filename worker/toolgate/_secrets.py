"""Secrets read from files, as container platforms mount them (Docker/Kubernetes secrets).

A secret file holds the secret alone; one trailing line break is dropped. What is logged about a
secret is its file name, never its content. A file that group or other users may read gets a
warning (naming the file and its mode): the secret is then only as safe as every account on the
host.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from toolgate._errors import ConfigError

log = logging.getLogger("toolgate.secrets")

_SHARED_BITS = stat.S_IRGRP | stat.S_IROTH


def check_private(path: str | os.PathLike[str], what: str) -> str | None:
    """Warn when group or others can read ``path``; return the warning (None when private).

    ``what`` names the setting the file is for, e.g. ``TOOLGATE_SECURITY_SASL_PASSWORD_FILE``.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # reading it reports the problem
    if not mode & _SHARED_BITS:
        return None
    if not mode & stat.S_IROTH and _kubelet_mounted(path):
        return None  # a Kubernetes secret volume: group-readable for the pod's fsGroup by design
    who = " and ".join(
        name for bit, name in ((stat.S_IRGRP, "group"), (stat.S_IROTH, "others")) if mode & bit
    )
    warning = (
        f"{what}: {os.fspath(path)} is readable by {who} (mode {stat.S_IMODE(mode):04o}); "
        "make it readable by the service's user only (chmod 600)"
    )
    log.warning(warning, extra={"file": os.fspath(path), "mode": f"{stat.S_IMODE(mode):04o}"})
    return warning


def _kubelet_mounted(path: str | os.PathLike[str]) -> bool:
    """The file is in a Kubernetes secret or ConfigMap volume: the kubelet writes it into a
    ``..<timestamp>`` folder and links it through ``..data``, and gives the pod's ``fsGroup``
    read access (the pod's own group, no other account)."""
    return any(part.startswith("..") and len(part) > 2 for part in Path(os.path.realpath(path)).parts)


def read_secret(path: str | os.PathLike[str], what: str) -> str:
    """The secret in ``path`` (one trailing line break dropped).

    Raises:
        ConfigError: naming ``what`` and the file when it cannot be read, is not UTF-8 or is empty.
    """
    name = os.fspath(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what}: {name}: cannot read: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what}: {name}: not UTF-8 text") from exc
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if not text.strip():
        raise ConfigError(f"{what}: {name} is empty")
    check_private(path, what)
    return text
