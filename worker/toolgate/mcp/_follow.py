"""The proxy follows its contract source while it runs (``--contracts kafka:`` or
``registry+URL``): the set it decides with moves to each new generation the group's workers
move to, without a restart (docs/design.md, One contract set for the group).

It does so through the workers' own catch-up seam
(:class:`toolgate.service._contract_source.CatchUp`): the command builds it and hands it over
in a :class:`Following`, since this room may not import the service itself. Then:

* every ``every_s`` seconds (``TOOLGATE_CONTRACTS_WATCH_SECONDS``) it asks the source whether
  it moved (the contracts topic is tailed in the background; a registry's snapshots are
  written by its poll) and, if so, catches up and swaps the new set in:
  :meth:`toolgate.mcp._proxy.Proxy.use_contracts` serves, withdraws and re-lists tools as a
  changed definition does;
* before a call that names a tool the proxy does not serve, or while the group's view says
  another member decides with a newer generation, it catches up first, for at most
  ``bound_s`` (``TOOLGATE_CONTRACTS_CATCH_UP_SECONDS``); a proxy still behind the group then
  answers ``CONTRACTS_BEHIND`` (retryable) without calling the upstream, never a decision
  made with a set it knows is stale;
* deciding in process, it is a member of the group's view (the members topic): it writes its
  set when it loads one and every ``members_refresh_seconds``, so ``toolgate contracts
  status`` lists it, as a worker, with the set that decides its answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from toolgate.gate import ContractSet
from toolgate.gate._gate import GroupHint

_log = logging.getLogger("toolgate.mcp_proxy")


class CatchUpSeam(Protocol):
    """The workers' catch-up on a contract source (``toolgate.service._contract_source.CatchUp``)."""

    async def catch_up(
        self, deadline: float, *, behind: Callable[[ContractSet], bool] | None = None
    ) -> ContractSet: ...


class GroupSeat(Protocol):
    """This proxy's place in the group's view (``toolgate.service._members.GroupView``)."""

    async def publish(self, contracts: ContractSet) -> None: ...

    def check(self, mine: ContractSet) -> tuple[GroupHint | None, bool]: ...


# Builds the catch-up seam over the proxy's reload (True: a new set now decides) and its set.
SeamFactory = Callable[[Callable[[], bool], Callable[[], ContractSet]], CatchUpSeam]


@dataclass(frozen=True)
class Following:
    """What the command gives the proxy to follow its contract source while it runs.

    Args:
        seam: builds the catch-up (the workers' :class:`~toolgate.service._contract_source.CatchUp`).
        load: the source's newest complete set.
        changed: whether the source moved since the last load, fetching nothing.
        every_s: seconds between two looks at the source (0: only before calls).
        bound_s: how long a catch-up before a call may last.
        group: this proxy's record in the group's view (None: not a member).
        refresh_s: how often the record is written again (``members_refresh_seconds``).
        clock: monotonic seconds (the catch-up's deadlines, the record's period).
    """

    seam: SeamFactory
    load: Callable[[], ContractSet]
    changed: Callable[[], bool]
    every_s: float
    bound_s: float
    group: GroupSeat | None = None
    refresh_s: float = 10.0
    clock: Callable[[], float] = time.monotonic


class ContractFollower:
    """The proxy's side of :class:`Following`: ``apply`` swaps a loaded set in (False: refused,
    the running one kept), ``current`` is the set deciding now."""

    def __init__(
        self, following: Following, apply: Callable[[ContractSet], bool], current: Callable[[], ContractSet]
    ) -> None:
        self.following = following
        self._apply = apply
        self._current = current
        self.seam = following.seam(self._reload, current)
        self._catching: asyncio.Task[ContractSet] | None = None
        self._published: str | None = None  # the label of the set last written to the group's view
        self._published_at = 0.0

    def _reload(self) -> bool:
        try:
            contracts = self.following.load()
        except Exception as exc:  # any failure keeps the running set, as a worker's reload does
            _log.error("loading the new contract set failed; keeping %s: %s", self._current().label, exc)
            return False
        return self._apply(contracts)

    def group_generation(self) -> int:
        """The newest generation another live member of the group decides with (0: none known)."""
        group = self.following.group
        if group is None:
            return 0
        hint, _split = group.check(self._current())
        return hint.generation if hint is not None else 0

    def _older(self, contracts: ContractSet) -> bool:
        return self.group_generation() > contracts.generation

    def behind(self) -> bool:
        """The group decides with a newer generation than this proxy."""
        return self._older(self._current())

    async def catch_up(self) -> ContractSet:
        """Bring the source to its end now and load what changed; while the group is ahead,
        until the bound. Calls that want one meanwhile share it."""
        if self._catching is None or self._catching.done():
            deadline = self.following.clock() + self.following.bound_s
            self._catching = asyncio.ensure_future(self.seam.catch_up(deadline, behind=self._older))
        return await asyncio.shield(self._catching)

    async def ready(self, *, served: bool) -> bool:
        """Before a call: caught up when it names a tool not ``served`` or the group is ahead.
        False while this proxy still decides with an older generation than the group's."""
        if served and not self.behind():
            return True
        try:
            await self.catch_up()
        except Exception as exc:  # the source's cluster did not answer: what is loaded stays
            _log.warning("catching up on the contracts failed: %s", type(exc).__name__)
        if self.behind():
            _log.warning(
                "contracts behind the group: %s, the group decides with generation %d; answered "
                "CONTRACTS_BEHIND (retryable)",
                self._current().label,
                self.group_generation(),
            )
            return False
        return True

    async def tick(self, *, look: bool = True) -> None:
        """One look at the source (a newer set swapped in; none when ``look`` is False), then
        this proxy's record in the group's view written when its set changed or its period
        passed."""
        try:
            if look and self.following.changed():
                await self.catch_up()
        except Exception as exc:  # kept: the next look tries again
            _log.warning("following the contract source failed: %s", type(exc).__name__)
        await self.publish()

    async def publish(self) -> None:
        """Write this proxy's set to the group's view when it changed or its period passed."""
        group = self.following.group
        if group is None:
            return
        contracts = self._current()
        now = self.following.clock()
        if contracts.label == self._published and now - self._published_at < self.following.refresh_s:
            return
        try:
            await group.publish(contracts)
        except Exception as exc:  # the next period writes it again
            _log.warning("writing to the members topic failed: %s", type(exc).__name__)
            return
        self._published, self._published_at = contracts.label, now

    async def run(self) -> None:
        """:meth:`tick` every ``every_s`` seconds, and at least every ``refresh_s`` (only the
        record then, when ``every_s`` is 0), until cancelled."""
        every, refresh = self.following.every_s, self.following.refresh_s
        await self.publish()
        while True:
            await asyncio.sleep(min(every, refresh) if every else refresh)
            await self.tick(look=bool(every))
