"""Every number and value toolgate.client reads from its caller: finite, in range, named."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from toolgate.client import AnswerTimeout, Client
from toolgate.gate._records import BindValue

from tests.unit.builders import NOW
from tests.unit.worker_kit import CONFIG, World

T = CONFIG.topics
NAN, INF = math.nan, math.inf


class Clock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def nothing_sent(world: World) -> bool:
    return all(not p for p in world.broker.logs[T.requests]) and all(
        not p for p in world.broker.logs[T.intake]
    )


class TestIssueRefusesBadNumbers:
    """issue() refuses, before anything is sent or awaited, a value that is not finite, not in
    range or not of its type, with an error naming the parameter."""

    @pytest.mark.parametrize(
        "ttl", [NAN, INF, -INF, 1e12, 10**400, timedelta.max, timedelta(days=8), 0, -5, timedelta(0)]
    )
    async def test_ttl_out_of_range(self, world: World, clock: Clock, ttl: Any) -> None:
        """NaN, infinities, 1e12, timedelta.max, zero and negatives: a ValueError naming ttl."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(ValueError, match=r"^ttl: "):
                await client.issue("review_status", ttl=ttl)
            assert client.pending == 0
        assert nothing_sent(world)

    @pytest.mark.parametrize("ttl", ["60", True, None, [60]])
    async def test_ttl_of_another_type(self, world: World, clock: Clock, ttl: Any) -> None:
        """A string, a bool, None or a list: a TypeError naming ttl."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(TypeError, match=r"^ttl: a number of seconds"):
                await client.issue("review_status", ttl=ttl)
        assert nothing_sent(world)

    @pytest.mark.parametrize("wait_s", [NAN, INF, -1, 0, 1e12, True, "2"])
    async def test_wait_s_out_of_range(self, world: World, clock: Clock, wait_s: Any) -> None:
        """wait_s must be a number of seconds above 0 and at most a week."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises((ValueError, TypeError), match=r"^wait_s: "):
                await client.issue("review_status", wait_s=wait_s)
            request = await client.issue("review_status", max_attempts=2)
            with pytest.raises((ValueError, TypeError), match=r"^wait_s: "):
                await client.next_attempt(request, wait_s=wait_s)
            assert client.pending == 1

    async def test_a_refused_nan_wait_leaves_other_timeouts_working(self, world: World, clock: Clock) -> None:
        """After wait_s=nan is refused, twenty waits of 1-3 s all time out by the clock."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(ValueError, match="wait_s"):
                await client.issue("review_status", wait_s=NAN)
            requests = [await client.issue("review_status", wait_s=1 + i % 3) for i in range(20)]
            clock.now += 4
            world.broker.changed()
            results = await asyncio.wait_for(
                asyncio.gather(*(client.answer(r) for r in requests), return_exceptions=True), 10
            )
        assert all(isinstance(r, AnswerTimeout) for r in results)

    @pytest.mark.parametrize(
        ("expires_at", "word"),
        [
            (datetime(2026, 5, 1, 12, 5), "no UTC offset"),  # naive
            (NOW - timedelta(seconds=1), "is not after now"),
            (NOW + timedelta(days=8), "within 604800 s"),
            (datetime.max.replace(tzinfo=NOW.tzinfo), "within"),
        ],
    )
    async def test_expires_at_out_of_range(
        self, world: World, clock: Clock, expires_at: datetime, word: str
    ) -> None:
        """expires_at needs a UTC offset, lies after now and at most a week ahead."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(ValueError, match=rf"^expires_at: .*{word}"):
                await client.issue("review_status", expires_at=expires_at)
        assert nothing_sent(world)

    @pytest.mark.parametrize("max_attempts", [0, -1, 1001, 10**30, True, 1.5, "3"])
    async def test_max_attempts_out_of_range(self, world: World, clock: Clock, max_attempts: Any) -> None:
        """max_attempts is a whole number from 1 to 1000 (a bool is no count)."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises((ValueError, TypeError), match=r"^max_attempts: "):
                await client.issue("review_status", max_attempts=max_attempts)
        assert nothing_sent(world)


class TestIssueRefusesBadBind:
    """bind is a mapping of string names to a string, integer, boolean or list of strings."""

    @pytest.mark.parametrize("bind", ["ab", [1, 2], [("k", "v")], 5, b"kv"])
    async def test_not_a_mapping(self, world: World, clock: Clock, bind: Any) -> None:
        """A string, a list (even of pairs), a number or bytes: a TypeError naming bind."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(TypeError, match=r"^bind: a mapping of names to values"):
                await client.issue("review_status", bind=bind)
        assert nothing_sent(world)

    @pytest.mark.parametrize(
        ("bind", "error"),
        [
            ({1: "x"}, TypeError),
            ({"k": 2**63}, ValueError),
            ({"k": 1.5}, ValueError),
            ({"k": [1, 2]}, ValueError),
            ({"k": {"nested": 1}}, ValueError),
            ({"k": "x" * (1024 * 1024)}, ValueError),
        ],
    )
    async def test_bad_names_and_values(
        self, world: World, clock: Clock, bind: Any, error: type[Exception]
    ) -> None:
        """A non-string name, an integer past 64 bits, a float, a list of non-strings, a
        nested object or a record over 1 MiB: refused naming bind."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(error, match=r"^bind"):
                await client.issue("review_status", bind=bind)
        assert nothing_sent(world)

    async def test_good_values_pass(self, world: World, clock: Clock) -> None:
        """Every allowed kind of value is written as given."""
        bind: dict[str, BindValue] = {"s": "x", "i": -(2**63), "b": True, "l": ["a", "b"]}
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            request = await client.issue("review_status", bind=bind)
        assert request.bind == bind


class TestSettingsAndAttempts:
    """The client's own settings and an adapter's attempt are checked the same way."""

    @pytest.mark.parametrize(
        ("setting", "value"),
        [
            ("max_pending", 0),
            ("max_pending", True),
            ("max_pending", NAN),
            ("poll_ms", 0),
            ("send_timeout_s", NAN),
            ("send_timeout_s", INF),
            ("send_timeout_s", 0),
            ("max_sends", 0),
            ("max_sends", 10**9),
        ],
    )
    def test_client_settings(self, world: World, setting: str, value: Any) -> None:
        """A setting out of range or of another type is refused, naming it."""
        with pytest.raises((ValueError, TypeError), match=rf"^{setting}: "):
            Client(CONFIG, clients=world.clients, **{setting: value})

    @pytest.mark.parametrize("attempt", [0, -1, 1001, True, 1.0, "1"])
    async def test_publish_attempt(self, world: World, clock: Clock, attempt: Any) -> None:
        """publish_result's attempt is a whole number from 1 to 1000."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises((ValueError, TypeError), match=r"^attempt: "):
                await client.publish_result("req.a1", attempt, b"{}", tool="t", adapter_version="1")
        assert nothing_sent(world)
