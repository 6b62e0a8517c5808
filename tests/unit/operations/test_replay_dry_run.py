"""``toolgate replay --dry-run`` without the key a signed contract names: its BAD_SIGNATURE
predictions are said, in one line, to tell nothing about the results."""

from __future__ import annotations

import io

import msgspec
from toolgate.authoring._fixtures import Case, fixtures_keyring, load_cases
from toolgate.gate._contracts import ContractSet
from toolgate.gate._gate import Gate
from toolgate.gate._signing import Keyring
from toolgate.operations._replay import DryRunReport, Quarantined, dry_run
from toolgate.service._store import RequestTable

from tests.unit.builders import CONTRACTS


def _signed_case(contracts: ContractSet) -> Case:
    """An accept fixture of a signed contract (job_status, signed by jobs-adapter-2026)."""
    contract = next(c for c in contracts if c.spec.tool == "job_status" and c.spec.signature is not None)
    cases = load_cases(contract, fixtures_keyring(CONTRACTS))
    return next(c for c in cases if c.kind == "accept" and c.request is not None and not c.already_accepted)


def _report(gate: Gate, case: Case) -> tuple[DryRunReport, str]:
    assert case.request is not None
    requests = RequestTable()
    requests.apply(case.request.request_id.encode(), msgspec.json.encode(case.request))
    headers = [*case.message.headers, ("tg-error-code", b"BAD_SIGNATURE"), ("tg-replay-count", b"0")]
    record = Quarantined(
        0, 1, case.message.key, case.message.value, headers, {n: v.decode() for n, v in headers}
    )
    report = dry_run([record], gate, requests, lambda r, a: False, case.now, 3)
    out = io.StringIO()
    report.print(out)
    return report, out.getvalue()


class TestWithoutTheKeys:
    """A BAD_SIGNATURE predicted only because the key is missing here is counted apart and said in
    one line naming the missing keyring or key; with the key, the same result is predicted to pass."""

    def test_no_keyring_says_so_in_one_line(self, contracts: ContractSet) -> None:
        """No keyring: the result is predicted BAD_SIGNATURE, and one line says why that means nothing."""
        report, out = _report(Gate(contracts, None), _signed_case(contracts))
        assert report.same_code == report.unverifiable == 1
        (line,) = [line for line in out.splitlines() if "only because" in line]
        assert line.startswith("1 result predicted BAD_SIGNATURE only because this dry run has no keyring")
        assert "--keyring FILE or TOOLGATE_KEYRING" in line
        assert "jobs-adapter-2026" in line

    def test_a_keyring_lacking_the_key_names_it(self, contracts: ContractSet) -> None:
        """A keyring without the contract's key: the line names the key it lacks."""
        keyring = fixtures_keyring(CONTRACTS)
        lacking = Keyring({k: v for k, v in keyring.keys.items() if k != "jobs-adapter-2026"})
        report, out = _report(Gate(contracts, lacking), _signed_case(contracts))
        assert report.unverifiable == 1
        assert "only because the keyring here lacks the key jobs-adapter-2026:" in out

    def test_with_the_key_it_would_pass_and_nothing_is_said(self, contracts: ContractSet) -> None:
        """With the workers' keyring the same record is predicted to pass, and no line is printed."""
        report, out = _report(Gate(contracts, fixtures_keyring(CONTRACTS)), _signed_case(contracts))
        assert (report.would_pass, report.unverifiable) == (1, 0)
        assert "only because" not in out
