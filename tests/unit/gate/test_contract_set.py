"""The contract set's identity and the header naming it on every record a decision writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from toolgate.gate._contracts import ContractSet, set_digest, set_label
from toolgate.gate._gate import Gate
from toolgate.gate._records import CONTRACT_SET_HEADER

from tests.unit.builders import CONTRACTS, REQUEST_ID, message, pairs, review_request, review_value
from tests.unit.gate.test_batch import decide, shadow_gate


def _copy(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.copytree(CONTRACTS, root, ignore=shutil.ignore_patterns("wire", "*.toml", "*.md"))
    return root


class TestIdentity:
    """A set is named by its generation and the digest of what its versions enforce."""

    def test_label_is_generation_and_digest_prefix(self, contracts: ContractSet) -> None:
        """The label is g<generation>- and the first 12 hex digits of the 64-digit digest."""
        again = ContractSet(list(contracts), generation=7)
        assert len(again.digest) == 64
        assert int(again.digest, 16) >= 0
        assert again.label == f"g7-{again.digest[:12]}"
        assert set_label(7, again.digest) == again.label

    def test_a_folder_is_generation_zero(self, contracts: ContractSet) -> None:
        """A folder loaded without a generation is unordered: generation 0."""
        assert contracts.generation == 0
        assert contracts.label.startswith("g0-")

    def test_same_versions_same_digest_whatever_the_order(self, contracts: ContractSet) -> None:
        """The digest depends on the versions, not the order they were given in, nor the generation."""
        shuffled = ContractSet(list(reversed(list(contracts))), generation=3)
        assert shuffled.digest == contracts.digest == set_digest(reversed(list(contracts)))

    def test_a_changed_version_changes_the_digest(self, tmp_path: Path, contracts: ContractSet) -> None:
        """A schema change in one version, or a status change, gives another digest."""
        root = _copy(tmp_path, "schema")
        schema = root / "review_status" / "v1" / "schema.json"
        schema.write_text(schema.read_text().replace('"maxLength": 128', '"maxLength": 127', 1))
        changed = ContractSet.load(root)
        status_root = _copy(tmp_path, "status")
        spec = status_root / "job_status" / "v1" / "contract.yaml"
        spec.write_text(spec.read_text().replace("status: active", "status: retired", 1))
        retired = ContractSet.load(status_root)
        assert len({contracts.digest, changed.digest, retired.digest}) == 3

    def test_fewer_versions_change_the_digest(self, contracts: ContractSet) -> None:
        """Dropping a version (a set that lost a tool) gives another digest."""
        assert ContractSet(list(contracts)[1:]).digest != contracts.digest

    def test_negative_generation_is_refused(self, contracts: ContractSet) -> None:
        """A generation below 0 is a programming error, said with the value."""
        with pytest.raises(ValueError, match="-1"):
            ContractSet(list(contracts), generation=-1)


def _set_headers(headers: object) -> list[bytes]:
    assert isinstance(headers, (list, tuple))
    return [value for name, value in headers if name == CONTRACT_SET_HEADER]


class TestEveryRecordNamesTheSet:
    """Every agent, quarantine and audit record of a decision carries tg-contract-set."""

    def test_accepted_and_rejected_records(self, gate: Gate) -> None:
        """Agent, quarantine and audit records each carry the deciding set's label once."""
        generation = Gate(ContractSet(list(gate.contracts), generation=12), gate.keyring)
        batch = decide(
            generation,
            [message(), message(review_value(admin_override=True), key=b"req.other")],
            {REQUEST_ID: review_request()},
        )
        assert [r.topic for r in batch.records] == ["a", "au", "a", "q", "au"]
        label = generation.contracts.label.encode()
        assert label.startswith(b"g12-")
        for record in batch.records:
            assert _set_headers(record.headers) == [label], record.topic

    def test_a_forged_original_set_header_is_replaced(self, gate: Gate) -> None:
        """An intake record claiming a tg-contract-set (or a replayed one) keeps only the deciding set's."""
        forged = pairs(message(review_value(admin_override=True)), (CONTRACT_SET_HEADER, "g99-forged"))
        batch = decide(gate, [forged], {REQUEST_ID: review_request()})
        quarantine = next(r for r in batch.records if r.topic == "q")
        assert _set_headers(quarantine.headers) == [gate.contracts.label.encode()]

    def test_shadow_audit_events_name_the_set(self, tmp_path: Path, gate: Gate) -> None:
        """A sampled shadow disagreement's audit event names the set too."""
        shadowed = shadow_gate(tmp_path, gate)
        batch = decide(
            shadowed, [message(review_value(comment="looks good"))], {REQUEST_ID: review_request()}
        )
        audits = [r for r in batch.records if r.topic == "au"]
        assert len(audits) == 2
        for record in audits:
            assert _set_headers(record.headers) == [shadowed.contracts.label.encode()]
