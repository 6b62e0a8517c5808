"""A real schema registry for the registry tests, and contract folders to publish into it.

The registry is the local Apicurio Registry (``ops/registry/registry.sh ensure``, its
Confluent-compatible API on 127.0.0.1:18081) unless ``TOOLGATE_REGISTRY_URL`` names another.
Without one answering the tests are skipped, or fail when ``TOOLGATE_REQUIRE_REGISTRY=1``
(``make test`` sets it). Each test publishes tools of its own (``rs_<uuid>``): the registry is
shared and keeps what it is given until it restarts. Every set this process publishes is
:data:`KIT_SET` (its markers ``<KIT_SET>-set-value``), signed by the sample publisher of
``contracts/fixtures-keyring.toml``, so other runs on the shared registry never move it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from toolgate.authoring._publish import Published, publish, pull
from toolgate.gate._contracts import ContractSet, ContractSpec, contract_digest
from toolgate.gate._published import PublishedVersion, canonical_bytes
from toolgate.gate._signing import Key, Keyring
from toolgate.registry import RegistryClient, RegistryError, RegistrySource, subject_of
from toolgate.registry._layout import KEYWORD

from tests import ROOT

LOCAL_REGISTRY = "http://127.0.0.1:18081/apis/ccompat/v7"
SCRIPT = ROOT / "ops" / "registry" / "registry.sh"
TEMPLATE = ROOT / "contracts" / "review_status" / "v1"
KEYRING = ROOT / "contracts" / "fixtures-keyring.toml"
PUBLISHER = "sample-publisher"
KIT_SET = f"rs-{uuid.uuid4().hex[:12]}"  # this process's set on the shared registry


def readers_keyring() -> Keyring:
    """The keyring readers verify with (the sample publisher among its [publishers])."""
    return Keyring.load(KEYRING, environ={})


def publisher_key() -> Key:
    """The sample publisher's key, private part included."""
    key = readers_keyring().publisher(PUBLISHER)
    assert key is not None
    return key


def publish_set(contracts: ContractSet, client: RegistryClient, **kwargs: Any) -> list[Published]:
    """``publish`` of this process's set, signed by the sample publisher."""
    return publish(contracts, client, publisher_key(), set_name=KIT_SET, **kwargs)


def pull_set(client: RegistryClient, dest: Path) -> list[str]:
    """``pull`` of this process's set; the version keys written."""
    return pull(client, dest, readers_keyring(), set_name=KIT_SET)[1]


def reader(client: RegistryClient, root: Path, **kwargs: Any) -> RegistrySource:
    """A source of this process's set, polling every second, verifying with the sample keyring."""
    return RegistrySource(client, root, 1, readers_keyring(), set_name=KIT_SET, **kwargs)


def reader_env() -> dict[str, str]:
    """The variables a ``toolgate`` process reading this process's set needs."""
    return {"TOOLGATE_KEYRING": str(KEYRING), "TOOLGATE_REGISTRY_SET_NAME": KIT_SET}


def registry_client() -> RegistryClient:
    """A client of a registry that has just answered, else skip (or fail when required)."""
    url = os.environ.get("TOOLGATE_REGISTRY_URL") or LOCAL_REGISTRY
    client = RegistryClient(url, timeout=10)
    try:
        client.subjects()
    except RegistryError as exc:
        reason = f"no schema registry answers at {url} ({exc}); start it with ops/registry/registry.sh ensure"
        if os.environ.get("TOOLGATE_REQUIRE_REGISTRY") == "1":
            pytest.fail(f"TOOLGATE_REQUIRE_REGISTRY=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return client


def new_tool() -> str:
    """A tool name no other test uses."""
    return f"rs_{uuid.uuid4().hex[:12]}"


def write_version(
    root: Path, tool: str, folder: str, *, decisions: list[str] | None = None, status: str = "active"
) -> Path:
    """``root/<tool>/<folder>``: the bundled review_status/v1 renamed to ``tool``, as version
    ``folder`` (``v1``, ``v1.1``, ``v2``), its ``decision`` enum set to ``decisions``."""
    major, _, minor = folder[1:].partition(".")
    dest = root / tool / folder
    shutil.copytree(TEMPLATE, dest)
    contract = (dest / "contract.yaml").read_text(encoding="utf-8")
    contract = contract.replace("tool: review_status", f"tool: {tool}")
    contract = contract.replace("version: 1", f"version: {major}" + (f"\nminor: {minor}" if minor else ""), 1)
    contract = contract.replace("status: active", f"status: {status}")
    (dest / "contract.yaml").write_text(contract, encoding="utf-8")
    schema = json.loads((dest / "schema.json").read_text(encoding="utf-8").replace("review_status", tool))
    if decisions is not None:
        schema["$defs"]["reviewStatus"]["properties"]["decision"]["enum"] = decisions
    (dest / "schema.json").write_text(json.dumps(schema, indent=2), encoding="utf-8")
    for fixture in (dest / "fixtures").rglob("*.json"):
        fixture.write_text(
            fixture.read_text(encoding="utf-8").replace("review_status", tool), encoding="utf-8"
        )
    return dest


def registered(client: RegistryClient, subject: str) -> list[dict[str, Any]]:
    """Every registration of ``subject``: its ``x-toolgate`` metadata, oldest first."""
    out = []
    for number in client.versions(subject):
        document = json.loads(client.schema(subject, number))
        out.append(document["x-toolgate"])
    return out


def drop_rules(client: RegistryClient, tool: str) -> str:
    """Register the tool's v1 again through the registry's API with its rules dropped and every
    digest recomputed; ``<subject> version <n>`` of the new registration."""
    subject = subject_of(tool, 1)
    document = json.loads(client.schema(subject, client.versions(subject)[-1]))
    meta = document[KEYWORD]
    meta["contract"]["rules"] = []
    spec = msgspec.convert(meta["contract"], ContractSpec)
    schema = {k: v for k, v in document.items() if k not in ("$schema", KEYWORD)}
    schema = {"$schema": meta["dialect"], **schema}
    meta["digest"] = contract_digest(spec, schema, None)
    meta["sequence"] += 1
    pv = msgspec.convert(meta["published"][0], PublishedVersion)
    contract = pv.files["contract.yaml"]
    start = contract.index("rules:")
    end = contract.index("projection:")
    files = {**pv.files, "contract.yaml": contract[:start] + contract[end:]}
    digest = hashlib.sha256(canonical_bytes(pv.tool, pv.version, files)).hexdigest()
    meta["published"] = [msgspec.to_builtins(msgspec.structs.replace(pv, files=files, digest=digest))]
    client.register(subject, json.dumps(document), what="a foreign re-registration")
    return f"{subject} version {client.versions(subject)[-1]}"


class PrivateRegistry:
    """A registry of the test's own on other ports (registry.sh with its own data dir), so it
    can be stopped and started again without touching the shared one; https beside http."""

    def __init__(self, port: int, tls_port: int, data: Path) -> None:
        self.port = port
        self.env = {
            **os.environ,
            "TOOLGATE_APICURIO_PORT": str(port),
            "TOOLGATE_APICURIO_TLS_PORT": str(tls_port),
            "TOOLGATE_APICURIO_DATA": str(data),
        }
        self.url = f"http://127.0.0.1:{port}/apis/ccompat/v7"
        self.https_url = f"https://127.0.0.1:{tls_port}/apis/ccompat/v7"
        self.tls = data / "tls"  # ca.pem: the CA of its certificate; other-ca.pem: one that signed nothing

    def _script(self, command: str) -> None:
        done = subprocess.run(
            ["bash", str(SCRIPT), command], env=self.env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]

    def start(self) -> None:
        """Start it and wait until it answers."""
        self._script("start")

    def stop(self) -> None:
        """Stop it (graceful, then SIGKILL)."""
        self._script("stop")


def private_registry(port: int, tls_port: int, data: Path) -> Iterator[PrivateRegistry]:
    """A started :class:`PrivateRegistry` (http on ``port``, https on ``tls_port``), stopped afterwards."""
    registry = PrivateRegistry(port, tls_port, data)
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()
