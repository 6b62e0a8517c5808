"""Contract publication in the simulation: a publisher, the contracts topic, and a source
that reads it the way the worker's topic source does (docs/simulation.md, Contract
publication).

The publisher writes one version record (key ``version/<tool>/<version>``) and then the
set marker (key ``set``) naming it, to the fake broker's contracts topic, as ``toolgate
contracts publish --to topic`` does. :class:`SimContractSource` is the worker's
:class:`~toolgate.service._contract_source.TopicContractSource` with its records'
signatures and folders left out (the unit tests of the source check those): its catch-up
(``refresh``: the topic read to the end offsets seen now, by the worker's own
:class:`~toolgate.service._store.TopicReader`) and its "newer set arrived" test
(``changed``) are the worker's, so a lagging, failing or cut-off topic reaches the
worker's wait (``Worker._contracts_behind``, the seam ``CatchUp``) as it would in
production. A complete set loads the gate of its generation, built once per process.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.service._contract_source import ContractSource, TopicContractSource
from toolgate.service._kafka import KafkaClients, TopicPartition
from toolgate.service._store import TopicReader

from tests.unit.builders import CONTRACTS

GENERATION = 1  # the generation the publisher writes (the running set is generation 0)
TOOL = "review_status"
VERSION = "2"  # review_status v2, for adapter versions 2.*
ADAPTER_VERSION = "2.0.0"  # a result of the new adapter: only the published version decides it
VERSION_KEY = f"version/{TOOL}/{VERSION}".encode()
SET_KEY = b"set"

# Set in the task that awaited a contracts catch-up: (virtual time it began, ended).
contracts_wait: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "contracts_wait", default=None
)

_GATES: dict[int, Gate] = {}


def published_gate(base: Gate) -> Gate:
    """The gate of the published generation: ``base``'s contracts plus review_status v2 for
    adapter versions 2.*. Built once per process (a folder written to a temporary directory)."""
    gate = _GATES.get(GENERATION)
    if gate is None:
        root = Path(tempfile.mkdtemp(prefix="toolgate-simulation-contracts-"))
        atexit.register(shutil.rmtree, root, True)
        for folder in CONTRACTS.glob("*/v*/contract.yaml"):
            shutil.copytree(folder.parent, root / folder.parent.relative_to(CONTRACTS))
        target = root / TOOL / f"v{VERSION}"
        shutil.copytree(CONTRACTS / TOOL / "v1", target)
        spec = target / "contract.yaml"
        text = spec.read_text().replace("\nversion: 1\n", f"\nversion: {VERSION}\n")
        text = text.replace('adapter_versions: ["1.*"]', 'adapter_versions: ["2.*"]')
        spec.write_text(text)
        gate = _GATES[GENERATION] = Gate(ContractSet.load(root, generation=GENERATION), base.keyring)
    return gate


def version_record() -> bytes:
    """The published version's record (its files and signature are the unit tests' concern)."""
    return json.dumps({"tool": TOOL, "version": VERSION}).encode()


def marker_record() -> bytes:
    """The set marker, written last: the generation and the versions it names."""
    return json.dumps({"generation": GENERATION, "versions": [f"{TOOL}/{VERSION}"]}).encode()


class SimContractSource(TopicContractSource):
    """The contracts topic as the worker's topic source reads it (see the module docstring).

    Args:
        topic: the contracts topic.
        clients: the node's clients (its calls go through the simulation's hook).
        base: the gate of generation 0, the one every node starts with.
        reader_class: a planted bug's reader (tests/simulation/bugs.py); None: the worker's.
        ends: the topic's end offset per partition now (what the fake broker holds).
        fail: called with a detail when a catch-up of the source said it caught up but had
            not read everything written before it began.
    """

    def __init__(
        self,
        topic: str,
        clients: KafkaClients,
        base: Gate,
        reader_class: type[TopicReader] | None = None,
        *,
        ends: Callable[[], dict[int, int]],
        fail: Callable[[str], None],
    ) -> None:
        ContractSource.__init__(self, [])
        self.topic = topic
        self._reader = TopicReader(topic, self._apply, clients)
        self._base = base
        self._reader_class = reader_class
        self._present: set[str] = set()
        self._named: tuple[int, set[str]] | None = None
        self.generation = 0
        self.published = 0  # the highest generation a marker read names
        self._fresh = False
        self.refused: dict[str, str] = {}
        self._loaded_generation = 0
        self._ends = ends
        self._fail = fail

    async def start(self, wait_seconds: float) -> None:
        """Start tailing the topic from its beginning, and read it to its end (bounded; a
        set it holds then is loaded by the worker's loop, which sees it ``changed``)."""
        await self._reader.start()
        if self._reader_class is not None:
            self._reader.__class__ = self._reader_class
        for consumer in (self._reader._consumer, self._reader._offsets):
            consumer.sim_contracts = True  # type: ignore[union-attr]  # the hook aims faults at it
        self._watch(self._reader)
        await self._reader.catch_up(wait_seconds)

    def _watch(self, reader: TopicReader) -> None:
        """A catch-up that says it caught up has read every record written before it began
        (the reader's positions reached the end offsets of its call)."""
        original = reader.catch_up

        async def catch_up(wait_seconds: float, partitions: set[int] | None = None) -> bool:
            before = self._ends()
            done = await original(wait_seconds, partitions)
            behind = {
                p: (reader._positions.get(TopicPartition(self.topic, p), 0), end)
                for p, end in before.items()
                if reader._positions.get(TopicPartition(self.topic, p), 0) < end
            }
            if done and behind:
                self._fail(
                    "said it caught up at positions "
                    + ", ".join(f"{at} of end offset {end}" for at, end in behind.values())
                )
            return done

        reader.catch_up = catch_up  # type: ignore[method-assign]

    def load(self) -> ContractSet:
        """The newest complete set."""
        return self.gate().contracts

    def gate(self) -> Gate:
        """The gate of the newest complete set (the worker's ``gate_factory``)."""
        self._loaded_generation = self.generation
        return self._base if self.generation == 0 else published_gate(self._base)

    async def stop(self) -> None:
        await self._reader.stop()

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or value is None:
            return
        record: dict[str, Any] = json.loads(value)
        if key == SET_KEY:
            self._named = (int(record["generation"]), set(record["versions"]))
            self.published = max(self.published, self._named[0])
        elif key.startswith(b"version/"):
            self._present.add(f"{record['tool']}/{record['version']}")
        named = self._named
        # A set is loaded only once every version its marker names is here.
        if named is not None and named[0] > self.generation and named[1] <= self._present:
            self.generation = named[0]
