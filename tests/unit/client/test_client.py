"""toolgate.client on the in-memory Kafka seam, with an injected clock (no sleeps)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import mcp.types as types
import pytest
import toolgate
from aiokafka.errors import KafkaConnectionError
from toolgate._errors import BrokerError, ConfigError
from toolgate.client import AnswerTimeout, Client, ClientClosed, Signer, call_tool_result_bytes
from toolgate.gate._gate import Gate
from toolgate.gate._records import decode_request
from toolgate.gate._signing import Keyring, signed_message_v2
from toolgate.service._kafka import partition_of

import tests.fakes.kafka as fake_kafka
from tests.fakes.kafka import FakeRecord
from tests.unit.builders import NOW, review_value
from tests.unit.worker_kit import CONFIG, World, until

T = CONFIG.topics
KEYRING = "contracts/fixtures-keyring.toml"


class Clock:
    """Seconds since the epoch, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(gate: Gate) -> World:
    w = World()
    w.gate = gate
    return w


@pytest.fixture
def clock() -> Clock:
    return Clock()


def envelope(request_id: str, **fields: Any) -> bytes:
    body = {"tool": "review_status", "request_id": request_id, "outcome": "success", "data": {"x": 1}}
    body.update(fields)
    return json.dumps(body).encode()


def answer_with(world: World, request_id: str, value: bytes) -> FakeRecord:
    return world.broker.append(T.agent, value, key=request_id.encode(), headers=[])


class TestRequestRecords:
    """The platform side writes request records the worker's strict decoder takes."""

    async def test_record_decodes_strictly_and_goes_to_the_murmur2_partition(
        self, world: World, clock: Clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record lands where murmur2 puts its key even when the producer's own default
        would put it elsewhere (the fake producer's default is made to pick partition 0)."""
        monkeypatch.setattr(fake_kafka, "partition_for", lambda _key, _n: 0)
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            requests = [
                await client.issue("review_status", bind={"change_id": "CR-1042"}, ttl=60, max_attempts=3)
                for _ in range(6)
            ]
        for request in requests:
            where = partition_of(request.request_id.encode(), 3)
            (record,) = [
                r for r in world.broker.logs[T.requests][where] if r.key == request.request_id.encode()
            ]
            decoded = decode_request(record.value or b"")
            assert (decoded.tool, decoded.attempt, decoded.max_attempts) == ("review_status", 1, 3)
            assert decoded.bind == {"change_id": "CR-1042"}
            assert decoded.expires_at.timestamp() - decoded.issued_at.timestamp() == 60
        assert any(partition_of(r.request_id.encode(), 3) != 0 for r in requests)

    async def test_invalid_fields_are_refused_before_sending(self, world: World, clock: Clock) -> None:
        """A request the worker would skip as invalid is refused with the field named."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(ValueError, match="request_id"):
                await client.issue("review_status", request_id="has space")
            with pytest.raises(ValueError, match="bind"):
                await client.issue("review_status", bind={"k": {"nested": 1}})  # type: ignore[dict-item]
            with pytest.raises(ValueError, match="ttl"):
                await client.issue("review_status", ttl=0)
        assert world.broker.logs[T.requests] == [[], [], []]


class TestAnswers:
    """Waits end with the decided envelope, once, or with an explicit timeout."""

    async def test_round_trip_through_the_real_worker(self, world: World, clock: Clock) -> None:
        """Accepted data, and the fixed INVALID_RESPONSE for a result the gate rejects."""
        worker = world.worker()
        task = asyncio.create_task(worker.run())
        try:
            async with Client(CONFIG, clients=world.clients, clock=clock) as client:
                good = await client.issue("review_status", bind={"change_id": "CR-1042"})
                bad = await client.issue("review_status", bind={"change_id": "CR-1042"})
                for request, data in ((good, {}), (bad, {"admin_override": True})):
                    value = dict(review_value(**data), request_id=request.request_id)
                    await client.publish_result(
                        request.request_id,
                        request.attempt,
                        json.dumps(value).encode(),
                        tool="review_status",
                        adapter="review-adapter",
                        adapter_version="1.4.2",
                    )
                accepted = await asyncio.wait_for(client.answer(good), 10)
                rejected = await asyncio.wait_for(client.answer(bad), 10)
        finally:
            worker.request_stop()
            await task
        assert accepted.outcome == "success", world.codes()
        assert not accepted.rejected
        assert accepted.data == review_value()["data"]
        assert rejected.rejected
        assert rejected.code == "INVALID_RESPONSE"
        assert not rejected.retryable
        assert rejected.data is None

    async def test_a_thousand_concurrent_waits_are_each_answered_once(
        self, world: World, clock: Clock
    ) -> None:
        """One consumer serves every wait; unrelated and malformed records are ignored."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            requests = await asyncio.gather(*(client.issue("review_status") for _ in range(1000)))
            assert client.pending == 1000
            assert len(world.clients.consumers) == 1
            answer_with(world, "req.someone-else", envelope("req.someone-else"))
            answer_with(world, requests[0].request_id, b"not an envelope")
            for i, request in enumerate(requests):
                answer_with(world, request.request_id, envelope(request.request_id, data={"i": i}))
            answers = await asyncio.wait_for(asyncio.gather(*(client.answer(r) for r in requests)), 10)
            assert [a.data for a in answers] == [{"i": i} for i in range(1000)]
            assert client.pending == 0
            assert client.answered == 1000

    async def test_no_answer_times_out_by_the_injected_clock(self, world: World, clock: Clock) -> None:
        """Past the expiry plus the grace the wait fails with AnswerTimeout, and is released."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            request = await client.issue("review_status", ttl=30)
            early = await client.issue("review_status", ttl=30, wait_s=2)
            clock.now += 3
            world.broker.changed()
            with pytest.raises(AnswerTimeout, match=r"no answer for request .* \(attempt 1\) within 3\.0 s"):
                await asyncio.wait_for(client.answer(early), 10)
            assert not request.answer.done()
            clock.now += 40
            world.broker.changed()
            with pytest.raises(AnswerTimeout):
                await asyncio.wait_for(client.answer(request), 10)
            assert client.pending == 0

    async def test_pending_waits_are_bounded(self, world: World, clock: Clock) -> None:
        """Beyond max_pending, issuing waits until an answer frees a slot (backpressure)."""
        async with Client(CONFIG, clients=world.clients, clock=clock, max_pending=2) as client:
            first = await client.issue("review_status")
            await client.issue("review_status")
            third = asyncio.create_task(client.issue("review_status"))
            await until(lambda: client.pending == 2 and not third.done(), 1)
            for _ in range(20):
                await asyncio.sleep(0)
            assert not third.done()
            answer_with(world, first.request_id, envelope(first.request_id))
            await asyncio.wait_for(third, 10)
            assert client.pending == 2

    async def test_next_attempt_is_one_call(self, world: World, clock: Clock) -> None:
        """The record is rewritten with the next attempt; the old wait is superseded."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            request = await client.issue("review_status", max_attempts=2)
            second = await client.next_attempt(request)
            with pytest.raises(ClientClosed, match="attempt 2"):
                await client.answer(request)
            with pytest.raises(ValueError, match="attempt 2 of 2"):
                await client.next_attempt(second)
            answer_with(
                world,
                second.request_id,
                envelope(
                    second.request_id,
                    outcome="failure",
                    data=None,
                    error={"code": "UPSTREAM_UNAVAILABLE", "retryable": False},
                ),
            )
            got = await asyncio.wait_for(client.answer(second), 10)
        records = [
            r for p in world.broker.logs[T.requests] for r in p if r.key == request.request_id.encode()
        ]
        assert [decode_request(r.value or b"").attempt for r in records] == [1, 2]
        assert (got.outcome, got.code, got.retryable, got.rejected) == (
            "failure",
            "UPSTREAM_UNAVAILABLE",
            False,
            False,
        )

    async def test_close_fails_the_open_waits(self, world: World, clock: Clock) -> None:
        """A wait open when the client closes ends with ClientClosed, never hangs."""
        client = Client(CONFIG, clients=world.clients, clock=clock)
        await client.start()
        request = await client.issue("review_status")
        await client.close()
        with pytest.raises(ClientClosed):
            await client.answer(request)
        with pytest.raises(ClientClosed, match="not started"):
            await client.issue("review_status")


class TestBroker:
    """A broker that fails is one clear error, and leaves no wait behind."""

    async def test_a_failed_send_is_a_broker_error(self, world: World, clock: Clock) -> None:
        """The send's Kafka error becomes a BrokerError naming the topic; the slot is freed."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            world.broker.fail("send", KafkaConnectionError("connection refused"))
            with pytest.raises(BrokerError, match=f"topic '{T.requests}'"):
                await client.issue("review_status")
            assert client.pending == 0

    async def test_a_missing_agent_topic_is_named(self, world: World, clock: Clock) -> None:
        """Starting on a cluster without the agent topic says which topic and what to run."""
        del world.broker.logs[T.agent]
        with pytest.raises(BrokerError, match=r"toolgate\.agent.*topics ensure"):
            await Client(CONFIG, clients=world.clients, clock=clock).start()


class TestNothingLeftOpen:
    """Whatever makes start() fail, every Kafka client it built is stopped (no Unclosed
    AIOKafkaProducer or AIOKafkaConsumer afterwards)."""

    @staticmethod
    def watch_stops(world: World) -> set[int]:
        stopped: set[int] = set()

        async def hook(operation: str, node: Any, kafka_client: Any) -> None:
            if operation in ("producer_stop", "consumer_stop"):
                stopped.add(id(kafka_client))
            if operation == "position":
                raise KafkaConnectionError("connection lost")

        world.broker.hook = hook
        return stopped

    async def test_a_missing_agent_topic(self, world: World, clock: Clock) -> None:
        """The topic is looked up before any producer or consumer is built or left behind."""
        stopped = self.watch_stops(world)
        del world.broker.logs[T.agent]
        with pytest.raises(BrokerError, match="does not exist"):
            await Client(CONFIG, clients=world.clients, clock=clock).start()
        built = [*world.clients.producers, *world.clients.consumers]
        assert all(id(c) in stopped for c in built)

    async def test_a_failure_after_connecting(self, world: World, clock: Clock) -> None:
        """A Kafka error while taking the agent topic's positions: a BrokerError naming the
        bootstrap, and the producer and consumer already started are both stopped."""
        stopped = self.watch_stops(world)
        with pytest.raises(BrokerError, match=rf"^{CONFIG.bootstrap}: .*connection lost") as caught:
            await Client(CONFIG, clients=world.clients, clock=clock).start()
        assert caught.value.__cause__ is None
        built = [*world.clients.producers, *world.clients.consumers]
        assert len(built) == 2
        assert all(id(c) in stopped for c in built)


class TestAdapterSide:
    """Results go out with every header the gate reads and a v2 signature."""

    async def test_call_tool_result_with_headers_and_hmac_signature(self, world: World, clock: Clock) -> None:
        """An SDK CallToolResult is sent as its wire JSON, signed with the keyring's HMAC key."""
        result = types.CallToolResult(content=[types.TextContent(text="{}")], structured_content={"a": 1})
        signer = Signer.from_keyring(KEYRING, "deploy-adapter-2026")
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            await client.publish_result(
                "req.adapter1",
                2,
                result,
                tool="deploy_status",
                adapter_version="3.1.0",
                signer=signer,
                traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )
        (record,) = [r for p in world.broker.logs[T.intake] for r in p]
        assert record.partition == partition_of(b"req.adapter1", 3)
        assert json.loads(record.value or b"") == result.model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
        assert json.loads(record.value or b"")["structuredContent"] == {"a": 1}
        headers = dict(record.headers)
        assert headers["tg-tool"] == b"deploy_status"
        assert headers["tg-request-id"] == b"req.adapter1"
        assert headers["tg-attempt"] == b"2"
        assert headers["tg-adapter"] == b"deploy-adapter"
        assert headers["tg-adapter-version"] == b"3.1.0"
        assert headers["traceparent"].startswith(b"00-4bf92f")
        key = Keyring.load(KEYRING).get("deploy-adapter-2026")
        assert key is not None
        signed = signed_message_v2("req.adapter1", 2, record.value or b"")
        assert key.verify(signed, base64.b64decode(headers["tg-signature"]))
        assert not key.verify(
            signed_message_v2("req.adapter1", 1, record.value or b""),
            base64.b64decode(headers["tg-signature"]),
        )

    def test_ed25519_signature_verifies_with_the_public_key(self) -> None:
        """The Ed25519 key signs what the public key alone verifies."""
        signer = Signer.from_keyring(KEYRING, "jobs-adapter-2026")
        raw = call_tool_result_bytes({"content": []})
        signature = base64.b64decode(signer.sign("req.e1", 1, raw))
        key = Keyring.load(KEYRING).get("jobs-adapter-2026")
        assert key is not None
        assert key.verify(signed_message_v2("req.e1", 1, raw), signature)
        assert signer.adapter == "jobs-adapter"

    def test_an_unknown_key_names_the_keyring_setting(self) -> None:
        """A key id the keyring lacks says which file and which options name it."""
        with pytest.raises(ConfigError, match=r"no key 'nope'.*--keyring or TOOLGATE_KEYRING"):
            Signer.from_keyring(KEYRING, "nope")

    async def test_a_header_the_gate_refuses_is_refused_here(self, world: World, clock: Clock) -> None:
        """A control character in a header is refused before it reaches intake."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            with pytest.raises(ValueError, match="tg-adapter-version"):
                await client.publish_result("req.x1", 1, b"{}", tool="t", adapter_version="1\n2")
        assert all(not p for p in world.broker.logs[T.intake])

    async def test_the_contract_generation_seen_is_a_header(self, world: World, clock: Any) -> None:
        """contract_generation becomes tg-contract-generation; none or 0 writes no header."""
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            await client.publish_result(
                "req.g1", 1, b"{}", tool="t", adapter_version="1", contract_generation=7
            )
            await client.publish_result("req.g2", 1, b"{}", tool="t", adapter_version="1")
            with pytest.raises(ValueError, match="contract_generation"):
                await client.publish_result(
                    "req.g3", 1, b"{}", tool="t", adapter_version="1", contract_generation=-2
                )
        seen = {
            r.key: dict(r.headers).get("tg-contract-generation")
            for p in world.broker.logs[T.intake]
            for r in p
        }
        assert seen == {b"req.g1": b"7", b"req.g2": None}


class TestPublicApi:
    """The client is part of the public API, loaded only when used."""

    def test_client_is_exported(self) -> None:
        """``toolgate.client`` is in ``__all__`` and resolves to the module."""
        assert "client" in toolgate.__all__
        assert toolgate.client.Client is Client


class TestRequestIds:
    async def test_generated_ids_fit_the_contracts_request_id_pattern(
        self, world: World, clock: Clock
    ) -> None:
        """Generated request ids match the pattern bundled and imported schemas give request ids."""
        import re

        pattern = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]{7,63}$")
        async with Client(CONFIG, clients=world.clients, clock=clock) as client:
            ids = [(await client.issue("review_status")).request_id for _ in range(200)]
        assert all(pattern.fullmatch(i) for i in ids)
        assert len(set(ids)) == 200
