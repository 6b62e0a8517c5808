"""The sample traffic is honest: every sample gets the verdict it claims, through the real gate."""

from __future__ import annotations

import msgspec
from toolgate.authoring._fixtures import fixtures_keyring
from toolgate.gate._gate import Gate
from toolgate.gate._records import decode_request
from toolgate.operations._traffic import TrafficGenerator

from tests.unit.builders import CONTRACTS, NOW


class TestSampleTraffic:
    def test_every_sample_gets_its_expected_verdict(self, gate: Gate) -> None:
        """Each generated sample is decided as its `expect` says, for every kind."""
        traffic = TrafficGenerator(fixtures_keyring(CONTRACTS), seed=3)
        seen = set()
        for sample in traffic.mix(300, NOW):
            raw = sample.request_bytes()
            request = decode_request(raw) if raw is not None else None
            verdict = gate.evaluate(sample.message, request, NOW)
            got = None if verdict.accepted else (verdict.stage, verdict.code)
            assert got == sample.expect, (sample.kind, verdict.diagnostics)
            seen.add(sample.kind)
        assert seen == set(traffic.kinds)

    def test_request_ids_are_unique(self) -> None:
        """No two samples of a run share a request id."""
        traffic = TrafficGenerator(fixtures_keyring(CONTRACTS), run_id="t1")
        ids = [s.request_id for s in traffic.mix(500, NOW)]
        assert len(set(ids)) == len(ids)

    def test_same_seed_same_mix(self) -> None:
        """The mix is reproducible from its random seed."""

        def kinds(seed: int) -> list[str]:
            return [s.kind for s in TrafficGenerator(fixtures_keyring(CONTRACTS), seed=seed).mix(60, NOW)]

        assert kinds(5) == kinds(5)
        assert kinds(5) != kinds(6)

    def test_request_records_decode_strictly(self) -> None:
        """Every request record the generator writes passes the strict decoder."""
        for sample in TrafficGenerator(fixtures_keyring(CONTRACTS)).mix(40, NOW):
            raw = sample.request_bytes()
            if raw is not None:
                assert isinstance(decode_request(raw), msgspec.Struct)
