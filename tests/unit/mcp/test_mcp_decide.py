"""The MCP proxy deciding in process (``--decide proxy``): the workers' verdicts, records and
answers, written before the host is answered; over the fake Kafka seam."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from toolgate.client import Client, Request, answer_of, result_record
from toolgate.gate import ContractSet, Gate, Message, Origin, RequestRecord, decide_batch
from toolgate.gate._batch import AcceptedView
from toolgate.gate._outputs import OutRecord
from toolgate.mcp._answers import host_result
from toolgate.mcp._decide import Decider, request_record
from toolgate.mcp._options import ProxyOptions
from toolgate.mcp._proxy import Proxy

from tests import mcp_kit
from tests.unit.mcp.test_mcp_proxy import Upstream, code_of, imported, intake_records
from tests.unit.worker_kit import CONFIG, World

T = CONFIG.topics
TOOL = "deployer.deploy_status"
NOW = datetime(2026, 7, 28, 12, 0, tzinfo=UTC)
# The headers that name where a record was decided: an intake offset, or the proxy.
WHERE = {"tg-origin", "__connect.errors.topic", "__connect.errors.partition", "__connect.errors.offset"}


@pytest.fixture
def reviewed(tmp_path: Path) -> ContractSet:
    """deploy_status imported, pinned, reviewed (active, bound to the asked environment)."""
    return imported(tmp_path, ["deploy_status"])


def issued(
    rid: str = "req.decide0001", *, bind: dict[str, Any] | None = None, attempt: int = 1, tool: str = TOOL
) -> Request:
    return Request(
        request_id=rid,
        tool=tool,
        issued_at=NOW - timedelta(seconds=1),
        expires_at=NOW + timedelta(seconds=60),
        bind=bind or {},
        attempt=attempt,
        max_attempts=2,
        answer=asyncio.get_running_loop().create_future(),
    )


def decide(decider: Decider, request: Request, raw: dict[str, Any]) -> Any:
    """The proxy's decision on ``raw`` for ``request``, unsigned, as ``mcp-proxy`` of server deployer."""
    return decider.decide(
        request,
        raw,
        adapter_version="1.0.0",
        adapter="mcp-proxy",
        signer=None,
        source="mcp:deployer",
        traceparent=None,
        tracestate=None,
    )


def by_worker(gate: Gate, request: RequestRecord, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
    """What a worker decides for the intake record ``publish_result`` would have written."""
    message = Message(
        key=request.request_id.encode(), value=value, headers=headers, origin=Origin(T.intake, 1, 7)
    )
    return decide_batch(
        gate,
        [message],
        lambda key: request if key == request.request_id else None,
        AcceptedView(lambda _r, _a: False),
        NOW,
        topics=T,
        max_record_bytes=1024 * 1024,
    )


def comparable(record: OutRecord) -> tuple[str, bytes | None, Any, list[tuple[str, bytes]]]:
    """A record without where it was decided (an intake offset, or the proxy)."""
    value: Any = record.value
    if record.topic == T.audit and value is not None:
        value = {k: v for k, v in json.loads(value).items() if k != "origin"}
    return record.topic, record.key, value, [(n, v) for n, v in record.headers if n not in WHERE]


class TestSameVerdicts:
    """The proxy's decision is the worker's: verdict, envelope, records, the host's answer."""

    @pytest.mark.parametrize("case", [*mcp_kit.CASES, "binding"])
    async def test_each_case_as_a_worker_decides_it(self, reviewed: ContractSet, case: str) -> None:
        """Every MCP test case: the same verdict, agent envelope, quarantine and audit records
        (but the origin) and the same host answer as a worker deciding the intake record."""
        raw, _sdk = await mcp_kit.call("ok" if case == "binding" else case)
        request = issued(bind={"environment": "production" if case == "binding" else "staging"})
        decider = Decider(mcp_kit.SERVER, reviewed, None, T, clock=lambda: NOW)
        mine = decide(decider, request, raw)
        value, headers = result_record(
            request.request_id,
            1,
            raw,
            tool=TOOL,
            adapter_version="1.0.0",
            adapter="mcp-proxy",
            source="mcp:deployer",
        )
        theirs = by_worker(Gate(reviewed), request_record(request), value, headers)
        verdict = theirs.decisions[0].verdict
        assert (mine.verdict.accepted, mine.verdict.stage, mine.verdict.code) == (
            verdict.accepted,
            verdict.stage,
            verdict.code,
        )
        assert mine.verdict.agent == verdict.agent
        assert [comparable(r) for r in mine.records] == [comparable(r) for r in theirs.records]
        worker_answer = answer_of(request.request_id, verdict.agent)
        assert worker_answer is not None
        assert host_result(mine.answer) == host_result(worker_answer)
        origins = {dict(r.headers).get("tg-origin") for r in mine.records if r.topic == T.quarantine}
        assert origins <= {b"mcp-proxy:deployer"}

    async def test_the_cases_span_every_verdict_class(self, reviewed: ContractSet) -> None:
        """The cases above are not all one verdict: success, failure and rejections at four stages."""
        decider = Decider(mcp_kit.SERVER, reviewed, None, T, clock=lambda: NOW)
        seen = set()
        for case in mcp_kit.CASES:
            raw, _sdk = await mcp_kit.call(case)
            got = decide(decider, issued(bind={"environment": "staging"}), raw)
            seen.add(got.verdict.stage or got.verdict.outcome)
        assert {"success", "failure", "parse", "schema", "limits"} <= seen


class TestAnsweredAttempt:
    """A request record that says its attempt was answered makes any further result a duplicate."""

    async def test_a_second_result_is_a_duplicate_without_an_envelope(self, reviewed: ContractSet) -> None:
        """After the proxy's acceptance, a worker decides another result DUPLICATE_RESULT and
        writes no agent envelope: the host's answer stays the only one."""
        raw, _sdk = await mcp_kit.call("ok")
        request = request_record(issued(bind={"environment": "staging"}))
        value, headers = result_record(request.request_id, 1, raw, tool=TOOL, adapter_version="1.0.0")
        fresh = by_worker(Gate(reviewed), request, value, headers)
        answered = by_worker(
            Gate(reviewed), RequestRecord(**{**_fields(request), "answered": True}), value, headers
        )
        assert fresh.decisions[0].verdict.accepted
        verdict = answered.decisions[0].verdict
        assert (verdict.stage, verdict.code) == ("semantic", "DUPLICATE_RESULT")
        assert [r.topic for r in answered.records] == [T.quarantine, T.audit]

    async def test_the_next_attempt_is_decided_as_usual(self, reviewed: ContractSet) -> None:
        """``answered`` speaks of the current attempt only: a stale attempt's result stays STALE_RESULT."""
        raw, _sdk = await mcp_kit.call("ok")
        request = RequestRecord(**{**_fields(request_record(issued(attempt=2))), "answered": True})
        value, headers = result_record(request.request_id, 1, raw, tool=TOOL, adapter_version="1.0.0")
        verdict = by_worker(Gate(reviewed), request, value, headers).decisions[0].verdict
        assert verdict.code == "STALE_RESULT"


def _fields(record: RequestRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__struct_fields__}


def on(world: World, topic: str) -> list[Any]:
    return [r for p in world.broker.logs[topic] for r in p]


class TestCallInProcess:
    """A call decided in process: records first, then the answer; nothing on intake."""

    async def test_answered_from_the_verdict_after_its_records(
        self, world: World, reviewed: ContractSet
    ) -> None:
        """A good result: the host gets the projected data; the agent envelope, the audit event
        and the request record marked answered are on the broker; no intake record."""
        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            proxy = Proxy(
                mcp_kit.SERVER, up, client, reviewed, decider=Decider(mcp_kit.SERVER, reviewed, None, T)
            )
            await proxy.load_tools()
            result = await proxy.call("deploy_status", {"case": "ok", "environment": "staging"}, None)
        assert result.structured_content == mcp_kit.GOOD
        rid = result.meta["io.toolgate/request_id"]
        assert intake_records(world) == []
        (envelope,) = [r for r in on(world, T.agent) if r.key == rid.encode()]
        assert json.loads(envelope.value)["data"] == mcp_kit.GOOD
        (audit,) = [json.loads(r.value) for r in on(world, T.audit) if r.key == rid.encode()]
        assert (audit["outcome"], audit["origin"]) == ("success", "mcp-proxy:deployer")
        requests = [json.loads(r.value) for r in on(world, T.requests) if r.key == rid.encode()]
        assert [r.get("answered", False) for r in requests] == [True]  # written once, with the decision

    async def test_a_rejection_is_quarantined_and_the_request_left_for_replay(
        self, world: World, reviewed: ContractSet
    ) -> None:
        """A banner: INVALID_RESPONSE; the quarantine holds the raw result with its intake
        headers; the request record is not marked answered (a replay may still decide it)."""
        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            proxy = Proxy(
                mcp_kit.SERVER, up, client, reviewed, decider=Decider(mcp_kit.SERVER, reviewed, None, T)
            )
            await proxy.load_tools()
            result = await proxy.call("deploy_status", {"case": "banner"}, None)
        assert code_of(result) == "INVALID_RESPONSE"
        (quarantined,) = on(world, T.quarantine)
        headers = dict(quarantined.headers)
        assert headers["tg-error-code"] == b"SCHEMA_VIOLATION"
        assert headers["tg-tool"] == TOOL.encode()
        assert b"MAINTENANCE" in quarantined.value
        requests = [json.loads(r.value) for r in on(world, T.requests)]
        assert not any(r.get("answered") for r in requests)

    async def test_a_retryable_failure_moves_to_the_next_attempt(
        self, world: World, reviewed: ContractSet
    ) -> None:
        """An upstream isError the contract calls retryable: attempt 2 is called and answered."""
        path = next(Path(c.path) for c in reviewed)
        spec = yaml.safe_load(path.read_text())
        spec["mcp"]["error_retryable"] = True
        spec["retry"] = {"retryable_codes": ["TOOL_ERROR"]}
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        reloaded = ContractSet.load(path.parent.parent.parent)
        upstream = Upstream()

        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            proxy = Proxy(
                mcp_kit.SERVER,
                up,
                client,
                reloaded,
                options=ProxyOptions(max_attempts=2),
                decider=Decider(mcp_kit.SERVER, reloaded, None, T),
            )
            await proxy.load_tools()
            result = await proxy.call("deploy_status", {"case": "error"}, None)
        assert upstream.calls == 2
        assert json.loads(result.content[0].text)["error"]["code"] == "TOOL_ERROR"
        outcomes = [
            (json.loads(r.value)["attempt"], json.loads(r.value)["outcome"]) for r in on(world, T.audit)
        ]
        assert outcomes == [(1, "failure"), (2, "failure")]

    async def test_records_not_acknowledged_answer_broker_unavailable(
        self, world: World, reviewed: ContractSet
    ) -> None:
        """The decision's records cannot be written: BROKER_UNAVAILABLE, never the verdict."""
        from aiokafka.errors import KafkaConnectionError

        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            proxy = Proxy(
                mcp_kit.SERVER, up, client, reviewed, decider=Decider(mcp_kit.SERVER, reviewed, None, T)
            )
            await proxy.load_tools()
            world.broker.fail("send", KafkaConnectionError("down"), times=4)  # the decision's four records
            result = await proxy.call("deploy_status", {"case": "ok", "environment": "staging"}, None)
        assert upstream.calls == 1
        assert code_of(result) == "BROKER_UNAVAILABLE"
        assert on(world, T.agent) == []  # nothing of the refused decision was written

    async def test_a_client_deciding_itself_reads_no_answer(self, world: World) -> None:
        """``Client(answers=False)`` refuses ``answer``: its caller decides."""
        async with Client(CONFIG, clients=world.clients, answers=False) as client:
            request = await client.issue(TOOL)
            with pytest.raises(ValueError, match="reads no answers"):
                await client.answer(request)


class TestContractSetStamp:
    """The contract set's identity goes on every record a proxy decision writes, and the
    generation it decides with on what it writes as the issuer."""

    async def test_every_record_carries_the_set_and_the_generation(self, reviewed: ContractSet) -> None:
        """Generation 3: the agent, quarantine and audit records carry ``tg-contract-set`` (the
        set's label); the quarantined intake headers carry ``tg-contract-generation: 3``."""
        generation = ContractSet(list(reviewed), generation=3)
        decider = Decider(mcp_kit.SERVER, generation, None, T, clock=lambda: NOW)
        raw, _sdk = await mcp_kit.call("banner")
        got = decide(decider, issued(), raw)
        assert [r.topic for r in got.records] == [T.agent, T.quarantine, T.audit]
        assert generation.label.startswith("g3-")
        assert all(("tg-contract-set", generation.label.encode()) in r.headers for r in got.records)
        (quarantined,) = [r for r in got.records if r.topic == T.quarantine]
        assert ("tg-contract-generation", b"3") in quarantined.headers
        assert (got.verdict.stage, got.verdict.code) == ("schema", "SCHEMA_VIOLATION")  # not CONTRACTS_BEHIND

    async def test_the_request_record_carries_the_generation(
        self, world: World, reviewed: ContractSet
    ) -> None:
        """The request record the proxy writes names the generation it decided with."""
        generation = ContractSet(list(reviewed), generation=5)
        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            decider = Decider(mcp_kit.SERVER, generation, None, T)
            proxy = Proxy(mcp_kit.SERVER, up, client, generation, decider=decider)
            await proxy.load_tools()
            result = await proxy.call("deploy_status", {"case": "ok", "environment": "staging"}, None)
        assert result.structured_content == mcp_kit.GOOD
        (record,) = on(world, T.requests)
        assert dict(record.headers)["tg-contract-generation"] == b"5"
        (envelope,) = on(world, T.agent)
        assert dict(envelope.headers)["tg-contract-set"] == generation.label.encode()


class TestCelRulesInProcess:
    """The proxy deciding in process applies the contract's cel rules to the upstream's result."""

    @pytest.mark.parametrize(
        ("expr", "accepted"),
        [("size(data.revision) >= 7 && data.state == 'healthy'", True), ("size(data.revision) == 40", False)],
    )
    async def test_a_result_rule_decides_the_call(
        self, world: World, tmp_path: Path, expr: str, accepted: bool
    ) -> None:
        """A rule true of the result answers the host with it; a false one is INVALID_RESPONSE,
        quarantined as RULE_FAILED naming the rule."""
        contracts = imported(tmp_path, ["deploy_status"])
        (contract,) = list(contracts)
        spec = yaml.safe_load(contract.path.read_text())
        spec["rules"] = [{"kind": "cel", "name": "full_revision", "expr": expr}]
        contract.path.write_text(yaml.safe_dump(spec, sort_keys=False))
        ruled = ContractSet.load(tmp_path)
        upstream = Upstream()
        async with Client(CONFIG, clients=world.clients, answers=False) as client, upstream.connected() as up:
            proxy = Proxy(mcp_kit.SERVER, up, client, ruled, decider=Decider(mcp_kit.SERVER, ruled, None, T))
            await proxy.load_tools()
            result = await proxy.call("deploy_status", {"case": "ok", "environment": "staging"}, None)
        if accepted:
            assert result.structured_content == mcp_kit.GOOD
            assert on(world, T.quarantine) == []
            return
        assert code_of(result) == "INVALID_RESPONSE"
        (quarantined,) = on(world, T.quarantine)
        headers = dict(quarantined.headers)
        assert headers["tg-error-code"] == b"RULE_FAILED"
        assert json.loads(headers["tg-error-detail"])["schema_path"] == "full_revision"
