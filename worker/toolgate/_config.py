"""Worker configuration: defaults, ``TOOLGATE_*`` environment variables, optional TOML file.

Precedence, lowest first: built-in defaults, the TOML file (``--config`` or
``TOOLGATE_CONFIG``), then ``TOOLGATE_*`` environment variables. A topic prefix
(``topic_prefix``, ``TOOLGATE_TOPIC_PREFIX``) names every topic ``<prefix>.<role>`` and
the group ``<prefix>``, below any topic or group named on its own (in the file or a
variable), which wins over it. Every value is
decoded strictly: an unknown key or a wrong type fails at start-up naming the
file (or variable) and the path of the mistake.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from toolgate._errors import ConfigError
from toolgate._secrets import check_private, read_secret

LOCAL_BOOTSTRAP = "127.0.0.1:19092"
# A topic prefix: Kafka's topic characters, short enough for <prefix>.quarantine (249 at most).
TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,200}")


class Topics(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Topic names (docs/design.md, Topics and trust boundaries)."""

    requests: str = "toolgate.requests"
    intake: str = "toolgate.intake"
    agent: str = "toolgate.agent"
    quarantine: str = "toolgate.quarantine"
    audit: str = "toolgate.audit"
    # The worker's own changelog: accepted attempts of live requests, co-partitioned with intake.
    state: str = "toolgate.state"
    # Signed contract versions and set markers (toolgate contracts publish --to topic), read
    # by workers and proxies started with --contracts kafka: (compacted, 1 partition).
    contracts: str = "toolgate.contracts"
    # What each live worker decides with, keyed by member id (compacted, 1 partition).
    members: str = "toolgate.members"

    @classmethod
    def under(cls, prefix: str) -> Topics:
        """Every topic named ``<prefix>.<role>`` (private topics of a test or a benchmark)."""
        return cls(**{role: f"{prefix}.{role}" for role in cls.__struct_fields__})

    def names(self) -> list[str]:
        """Every topic name, in field order."""
        return [getattr(self, role) for role in self.__struct_fields__]

    def env(self) -> dict[str, str]:
        """The ``TOOLGATE_TOPIC_*`` variables that name these topics."""
        return {f"TOOLGATE_TOPIC_{role.upper()}": getattr(self, role) for role in self.__struct_fields__}


class Partitions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Partition counts used by ``toolgate topics ensure``.

    Requests and the state changelog are created with intake's count (co-partitioned: a
    worker restores only its own intake partitions' requests and accepted attempts).
    """

    requests: int = 3
    intake: int = 3
    agent: int = 3
    quarantine: int = 1
    audit: int = 3


class Security(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Passed through to aiokafka (``security_protocol``, ``sasl_*``, TLS files).

    ``sasl_password_file`` names a file holding the password (a mounted secret); ``load_config``
    reads it into ``sasl_password``. TLS verifies the broker's certificate and host name against
    ``ssl_cafile`` (else the system's CAs); ``ssl_certfile``/``ssl_keyfile`` are the client
    certificate for mutual TLS.
    """

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    sasl_password_file: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None


class Registry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The schema registry contracts come from (``--contracts registry+https://...``) or go to
    (``toolgate contracts publish``, ``pull``): TOOLGATE_REGISTRY_*.

    ``url`` is the Confluent-compatible API (``https://host/apis/ccompat/v7`` on Apicurio) for
    publish and pull; the files hold HTTP basic ``user:password`` or a bearer token (one, not
    both); ``ca_file`` the CAs for https (else the system's). The worker keeps the last
    complete set it loaded in ``snapshot_dir`` and checks the registry for new versions every
    ``poll_seconds``. ``set_name`` names the set: its signed markers are the subject
    ``<set_name>-set-value``.
    """

    url: str | None = None
    basic_auth_file: str | None = None
    bearer_token_file: str | None = None
    ca_file: str | None = None
    snapshot_dir: str = "registry-snapshot"
    poll_seconds: float = 10.0
    timeout_seconds: float = 10.0
    set_name: str = "toolgate"


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Everything the worker and the CLI read from the environment."""

    bootstrap: str = LOCAL_BOOTSTRAP
    client_id: str = "toolgate"
    group_id: str = "toolgate"
    replication_factor: int = 1
    contracts_dir: str = "contracts"
    keyring: str | None = None
    metrics_port: int = 9464
    metrics_host: str = "127.0.0.1"
    # Outstanding requests a worker holds at most; beyond it the oldest are dropped
    # (their results fail closed as UNKNOWN_REQUEST). TOOLGATE_MAX_REQUESTS.
    max_requests: int = 1_000_000
    # The consumer group's session timeout. Taking assigned partitions over and restoring their
    # state happens while the group waits for this member (no heartbeats meanwhile): it must
    # fit in the session, or the group drops the member and rebalances again.
    # TOOLGATE_SESSION_TIMEOUT_MS.
    session_timeout_ms: int = 10_000
    # Static group membership (KIP-345): a stable name per worker (a StatefulSet pod's name).
    # A worker that restarts under the same name within the session timeout gets its
    # partitions back without a rebalance of the others; it does not leave the group when it
    # stops. None: a dynamic member. TOOLGATE_GROUP_INSTANCE_ID.
    group_instance_id: str | None = None
    # Seconds between checks of the contracts folder and the keyring for changes (a contract
    # activated, a mounted ConfigMap or Secret updated in place); a change reloads them as
    # SIGHUP does. 0: only on SIGHUP. At most a day. TOOLGATE_CONTRACTS_WATCH_SECONDS.
    contracts_watch_seconds: Annotated[float, msgspec.Meta(ge=0, le=86_400)] = 2.0
    # How long a worker catches up on its contract source (the contracts topic to its end, the
    # registry fetched, the folder rescanned) before deciding a result of an unknown tool or
    # version, or one naming a newer set; still behind then: CONTRACTS_BEHIND (retryable).
    # More than 0, at most 300. TOOLGATE_CONTRACTS_CATCH_UP_SECONDS.
    contracts_catch_up_seconds: Annotated[float, msgspec.Meta(gt=0, le=300)] = 5.0
    # How often a worker republishes what it decides with to the members topic; a member not
    # heard from for three times this long is no longer live. At least 1, at most 3600.
    # TOOLGATE_MEMBERS_REFRESH_SECONDS.
    members_refresh_seconds: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 10.0
    # The names of the variables of its own environment `toolgate mcp-proxy` passes to a stdio
    # upstream, comma-separated (beside any --upstream-env NAME): never the whole environment.
    # TOOLGATE_MCP_UPSTREAM_ENV.
    mcp_upstream_env: str = ""
    # Isolation on a shared broker in one setting: every topic <prefix>.<role> and the group
    # <prefix>, unless a topic or the group is named on its own. TOOLGATE_TOPIC_PREFIX.
    topic_prefix: str | None = None
    topics: Topics = msgspec.field(default_factory=Topics)
    partitions: Partitions = msgspec.field(default_factory=Partitions)
    security: Security = msgspec.field(default_factory=Security)
    registry: Registry = msgspec.field(default_factory=Registry)

    def masked(self) -> dict[str, Any]:
        """The configuration as a dict with secrets replaced, for the start-up log line."""
        raw = msgspec.to_builtins(self)
        if raw["security"].get("sasl_password"):
            raw["security"]["sasl_password"] = "***"  # noqa: S105
        return raw  # type: ignore[no-any-return]


_ENV_PREFIX = "TOOLGATE_"
# Flat environment names for nested fields: TOOLGATE_TOPIC_INTAKE, TOOLGATE_PARTITIONS_AUDIT,
# TOOLGATE_SECURITY_SASL_PASSWORD.
_NESTED = {"TOPIC_": "topics", "PARTITIONS_": "partitions", "SECURITY_": "security", "REGISTRY_": "registry"}
_NOT_CONFIG = {"TOOLGATE_CONFIG", "TOOLGATE_REQUIRE_KAFKA", "TOOLGATE_REQUIRE_REGISTRY"}
# The local broker script's knobs (ops/kafka/kafka.sh: TOOLGATE_KAFKA_PORT, _DATA, _HEAP, ...)
# share the prefix; `kafka.sh with CMD` runs toolgate in the same environment.
# So do the local registry script's (ops/registry/registry.sh: TOOLGATE_APICURIO_PORT, ...).
_NOT_CONFIG_PREFIX = ("TOOLGATE_KAFKA_", "TOOLGATE_APICURIO_")
_PREFIX_VARIABLE = "TOOLGATE_TOPIC_PREFIX"


def _environment_error(exc: msgspec.ValidationError, environ: dict[str, str]) -> str:
    """One line naming the variable whose value does not convert (its value, unless a secret)."""
    message, found, path = str(exc).rpartition(" - at `$.")
    parts = path.rstrip("`").split(".")
    sections = {section: prefix for prefix, section in _NESTED.items()}
    if len(parts) > 1 and parts[0] in sections:
        name = _ENV_PREFIX + sections[parts[0]] + "_".join(parts[1:]).upper()
    else:
        name = _ENV_PREFIX + "_".join(parts).upper()
    if not found or name not in environ:
        return f"TOOLGATE_* environment: {exc}"
    secret = any(word in name for word in ("PASSWORD", "SECRET", "TOKEN"))
    field = ".".join(parts)
    return f"{name}={'***' if secret else repr(environ[name])} ({field}): {message}"


def _from_env(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(_ENV_PREFIX) or name in _NOT_CONFIG or name.startswith(_NOT_CONFIG_PREFIX):
            continue
        if name == _PREFIX_VARIABLE:  # not a topic of its own: the prefix of them all
            out["topic_prefix"] = value
            continue
        rest = name[len(_ENV_PREFIX) :]
        for prefix, section in _NESTED.items():
            if rest.startswith(prefix):
                out.setdefault(section, {})[rest[len(prefix) :].lower()] = value
                break
        else:
            out[rest.lower()] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    """Build the configuration from an optional TOML file and the environment.

    Raises:
        ConfigError: naming the file or the ``TOOLGATE_*`` variable and the path of the mistake.
    """
    env = dict(os.environ if environ is None else environ)
    path = path or env.get("TOOLGATE_CONFIG")
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
        try:
            msgspec.convert(data, Config)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    env_data = _from_env(env)
    merged = _merge(data, env_data)
    try:
        # Environment values are strings; strict=False lets "3" become 3 for int fields.
        config = msgspec.convert(_prefixed(merged, path, env_data), Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_environment_error(exc, env)) from exc
    return _with_secrets(config)


def _prefixed(merged: dict[str, Any], path: Any, env_data: dict[str, Any]) -> dict[str, Any]:
    """``merged`` with the topic prefix applied: every topic and the group it does not name on
    its own take ``<prefix>.<role>`` and ``<prefix>``.

    Raises:
        ConfigError: a prefix that is not a Kafka topic name's characters, naming its setting.
    """
    prefix = merged.get("topic_prefix")
    if prefix is None:
        return merged
    where = _PREFIX_VARIABLE if "topic_prefix" in env_data else f"{path}: topic_prefix"
    if not isinstance(prefix, str) or not TOPIC_PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"{where}={str(prefix)[:80]!r}: a topic prefix is 1-200 of [A-Za-z0-9._-] "
            "(topics are named <prefix>.<role>)"
        )
    named = merged.get("topics")
    topics = dict(named) if isinstance(named, dict) else {}
    for role in Topics.__struct_fields__:
        topics.setdefault(role, f"{prefix}.{role}")
    return {**merged, "topics": topics, "group_id": merged.get("group_id", prefix)}


def _with_secrets(config: Config) -> Config:
    """Read ``security.sasl_password_file`` into ``sasl_password``; warn about shared key files."""
    sec = config.security
    if sec.ssl_keyfile:
        check_private(sec.ssl_keyfile, "TOOLGATE_SECURITY_SSL_KEYFILE")
    if sec.sasl_password_file is None:
        return config
    what = "TOOLGATE_SECURITY_SASL_PASSWORD_FILE"
    if sec.sasl_password is not None:
        raise ConfigError(f"{what} and TOOLGATE_SECURITY_SASL_PASSWORD are both set: keep one")
    password = read_secret(sec.sasl_password_file, what)
    return msgspec.structs.replace(config, security=msgspec.structs.replace(sec, sasl_password=password))
