"""cel rules: checked when the contract loads, decided in the semantic stage, never echoing a value."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate._errors import ContractError
from toolgate.gate import ContractSet, Gate
from toolgate.gate._cel import MAX_COST, error_class, rejected_rule

from tests import cel_kit
from tests.properties import DERANDOMIZED


@pytest.fixture
def gate(tmp_path: Path) -> Gate:
    return Gate(ContractSet.load(cel_kit.write_contract(tmp_path)))


def decide(gate: Gate, value: Any, **bind: Any) -> Any:
    return gate.evaluate(cel_kit.message(value), cel_kit.request(**bind), cel_kit.NOW)


class TestRulesDecide:
    """Each rule rejects exactly the results it is false for, as RULE_FAILED naming it."""

    def test_a_result_every_rule_holds_for_is_accepted(self, gate: Gate) -> None:
        """A refund within the request, of the tenant's accounts, ordered and recent is accepted."""
        verdict = decide(gate, cel_kit.envelope())
        assert verdict.accepted, verdict.diagnostics

    @pytest.mark.parametrize(
        ("changes", "rule"),
        [
            ({"amount": 1501}, "within_request"),
            ({"accounts": [{"id": "acc_a1b2", "tenant": "acme"}, {"id": "acc_zz99", "tenant": "evil"}]},
             "accounts_of_tenant"),
            ({"ended_at": "2026-05-01T11:39:59Z"}, "ended_after_started"),
            ({"started_at": "2026-05-01T10:59:59Z", "ended_at": "2026-05-01T11:00:00Z"}, "started_recently"),
        ],
    )  # fmt: skip
    def test_a_false_rule_is_rule_failed_naming_it(
        self, gate: Gate, changes: dict[str, Any], rule: str
    ) -> None:
        """A result one rule is false for is rejected in the semantic stage with that rule's name."""
        verdict = decide(gate, cel_kit.envelope(**changes))
        assert (verdict.accepted, verdict.stage, verdict.code) == (False, "semantic", "RULE_FAILED")
        assert rejected_rule(verdict) == rule
        assert verdict.diagnostics.message == f"rule {rule!r} is false"
        assert json.loads(verdict.agent)["error"]["code"] == "INVALID_RESPONSE"

    def test_the_request_decides_too(self, gate: Gate) -> None:
        """The same result is accepted or refused by what its request asked for."""
        value = cel_kit.envelope(amount=1400)
        assert decide(gate, value, max_amount=1400).accepted
        assert rejected_rule(decide(gate, value, max_amount=1399)) == "within_request"

    def test_now_is_the_decision_clock(self, gate: Gate) -> None:
        """A rule over ``now`` reads the injected clock: the same result turns stale with it."""
        value = cel_kit.envelope()
        request = cel_kit.request(issued=cel_kit.NOW + timedelta(minutes=40))
        assert gate.evaluate(cel_kit.message(value), request, cel_kit.NOW + timedelta(minutes=40)).accepted
        later = gate.evaluate(cel_kit.message(value), request, cel_kit.NOW + timedelta(minutes=40, seconds=1))
        assert rejected_rule(later) == "started_recently"

    def test_no_value_reaches_a_detail(self, gate: Gate) -> None:
        """Neither the verdict's detail nor the agent's envelope holds a value of the result."""
        verdict = decide(gate, cel_kit.envelope(accounts=[{"id": "acc_secret1", "tenant": "leakme"}]))
        assert not verdict.accepted
        for text in (verdict.agent.decode(), repr(verdict.diagnostics)):
            assert "leakme" not in text
            assert "secret1" not in text

    def test_a_failure_envelope_is_not_ruled(self, gate: Gate) -> None:
        """Rules read data: the upstream's validated failure is passed on as it is."""
        value = {"tool": "refund", "request_id": cel_kit.REQUEST_ID, "outcome": "failure",
                 "error": {"code": "NOT_FOUND", "retryable": False}}  # fmt: skip
        assert decide(gate, value).accepted


class TestRuntimeErrors:
    """An evaluation error is a rejection with its own detail, never a crash nor an accept."""

    @pytest.mark.parametrize(
        ("expr", "bind", "detail"),
        [
            ("data.amount / request.bind.divisor > 0", {"divisor": 0}, "division by zero"),
            ("data.amount <= request.bind.missing", {}, "a member it reads is missing"),
            ("data.amount + request.bind.big > 0", {"big": 2**63 - 1}, "overflow"),
            ("data.refund_id < request.bind.max_amount", {}, "no operation for these types"),
            (
                "data.refund_id.matches(request.bind.pattern)",
                {"pattern": "(a"},
                "a pattern the runtime refuses",
            ),
        ],
    )
    def test_each_error_has_its_fixed_detail(
        self, tmp_path: Path, expr: str, bind: dict[str, Any], detail: str
    ) -> None:
        """Division by zero, a missing key, overflow, a type mismatch and a bad pattern at run time."""
        contract = cel_kit.CONTRACT.replace("data.amount <= request.bind.max_amount", expr)
        gate = Gate(ContractSet.load(cel_kit.write_contract(tmp_path, contract)))
        verdict = decide(gate, cel_kit.envelope(), **bind)
        assert (verdict.stage, verdict.code) == ("semantic", "RULE_FAILED")
        assert verdict.diagnostics.message == f"rule 'within_request' could not be evaluated: {detail}"

    def test_an_error_text_is_classed_never_copied(self) -> None:
        """An unknown error text becomes a fixed phrase: CEL's own text may quote values."""
        assert error_class("something 'secret' happened") == "an evaluation error"


def load_error(tmp_path: Path, expr: str, schema: dict[str, Any] | None = None) -> str:
    contract = cel_kit.CONTRACT.replace("data.amount <= request.bind.max_amount", expr.replace("'", "''"))
    contract = contract.replace("expr: " + expr.replace("'", "''"), "expr: '" + expr.replace("'", "''") + "'")
    with pytest.raises(ContractError) as caught:
        ContractSet.load(cel_kit.write_contract(tmp_path, contract, schema))
    message = str(caught.value)
    assert "\n" not in message
    assert str(tmp_path / "refund" / "v1" / "contract.yaml") in message
    assert "$.rules[0] (within_request)" in message
    return message


class TestLoadRefusals:
    """A rule that cannot be right does not load: one line naming the file, the rule and the position."""

    @pytest.mark.parametrize(
        ("expr", "said"),
        [
            ("data.amount <=", "1:15: Syntax error"),
            ("amount <= 3", "1:1: undeclared reference to 'amount'"),
            (
                "data.amount <= request.bind.max_amount && frobnicate(data)",
                "undeclared reference to 'frobnicate'",
            ),
            ("data.amont <= 3", "1:5: the schema declares no 'amont' in data"),
            (
                "data.accounts.exists(a, a.tenantt == 'x')",
                "1:26: the schema declares no 'tenantt' in data.accounts.*",
            ),
            ("request.tenant == 'acme'", "1:8: a request has no 'tenant'"),
            ("'a' == 1", "1:5: found no matching overload for '_==_' applied to '(string, int)'"),
            ("data.amount", "1:1: the expression is dyn, not bool"),
            ("1 + 2", "the expression is int, not bool"),
            ("data.refund_id.matches('(a')", "1:24: RE2 refuses the pattern of matches()"),
            ("'a' * 100000 == ''", "found no matching overload for '_*_' applied to '(string, int)'"),
        ],
    )
    def test_each_mistake_is_one_line(self, tmp_path: Path, expr: str, said: str) -> None:
        """Syntax, unknown names, unknown fields, type errors, non-booleans and bad patterns."""
        assert said in load_error(tmp_path, expr)

    def test_an_unbounded_nested_loop_is_over_the_cost_bound(self, tmp_path: Path) -> None:
        """Loops within loops over an array the schema does not bound cost too much to load."""
        schema = json.loads(json.dumps(cel_kit.SCHEMA))
        del schema["$defs"]["refund"]["properties"]["accounts"]["maxItems"]
        expr = "data.accounts.all(a, data.accounts.all(b, a.id == b.id || a.tenant == b.tenant))"
        assert f"over the bound of {MAX_COST:,}" in load_error(tmp_path, expr, schema)

    def test_a_bounded_nested_loop_loads(self, tmp_path: Path) -> None:
        """The same loops over an array of at most 20 items are cheap enough."""
        expr = "data.accounts.all(a, data.accounts.all(b, a.id == b.id || a.tenant == b.tenant))"
        contract = cel_kit.CONTRACT.replace("data.amount <= request.bind.max_amount", f"'{expr}'")
        assert ContractSet.load(cel_kit.write_contract(tmp_path, contract))

    @pytest.mark.parametrize(
        ("change", "said"),
        [
            (("name: within_request", "name: Within-Request"), "rule name 'Within-Request' must match"),
            (("name: accounts_of_tenant", "name: within_request"), "rule name 'within_request' repeats"),
            (
                ("expr: data.amount <= request.bind.max_amount", "expr: ' '"),
                "expr must be 1..4096 characters",
            ),
        ],
    )
    def test_names_and_sizes(self, tmp_path: Path, change: tuple[str, str], said: str) -> None:
        """A rule's name is a plain identifier, once per contract; its expression is bounded."""
        contract = cel_kit.CONTRACT.replace(*change)
        with pytest.raises(ContractError, match=said):
            ContractSet.load(cel_kit.write_contract(tmp_path, contract))

    def test_argument_rules_need_a_pinned_definition(self, tmp_path: Path) -> None:
        """Argument rules read a call's arguments: a contract that serves no tool has none."""
        contract = cel_kit.CONTRACT + "mcp:\n  argument_rules: []\n"
        with pytest.raises(ContractError):
            ContractSet.load(cel_kit.write_contract(tmp_path, contract))


class TestCheckCommand:
    """``toolgate check`` decides by the rules as the worker does, naming the rule that failed."""

    def test_three_rules_through_check(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An accepted result and one result per rule each false, decided offline."""
        from toolgate import cli

        cel_kit.write_contract(tmp_path / "contracts")
        request = tmp_path / "request.json"
        record = cel_kit.request()
        request.write_text(
            json.dumps(
                {
                    "request_id": record.request_id,
                    "tool": "refund",
                    "issued_at": record.issued_at.isoformat(),
                    "expires_at": record.expires_at.isoformat(),
                    "bind": record.bind,
                }
            )
        )
        cases: dict[str, tuple[dict[str, Any], str | None]] = {
            "ok": ({}, None),
            "over": ({"amount": 1501}, "within_request"),
            "tenant": ({"accounts": [{"id": "acc_zz99", "tenant": "evil"}]}, "accounts_of_tenant"),
            "order": ({"ended_at": "2026-05-01T11:00:00Z"}, "ended_after_started"),
        }
        files = []
        for name, (changes, _) in cases.items():
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(cel_kit.envelope(**changes)))
            files.append(str(path))
        code = cli.main(
            [
                "check",
                "--contracts",
                str(tmp_path / "contracts"),
                "--request",
                str(request),
                "--now",
                cel_kit.NOW.isoformat(),
                "--header",
                "tg-adapter-version=1.0",
                *files,
            ]
        )
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert code == 1
        for line, (_, rule) in zip(lines, cases.values(), strict=True):
            if rule is None:
                assert line["outcome"] == "accepted", line
            else:
                assert (line["stage"], line["code"]) == ("semantic", "RULE_FAILED")
                assert line["diagnostics"]["schema_path"] == rule
                assert line["diagnostics"]["message"] == f"rule {rule!r} is false"


class TestRuleSet:
    """The gate's fast path (one combined program, data cut to what the rules read) decides as
    the rules one by one over the whole data do."""

    EXPRS = (
        "data.items.all(i, i.state != 'blocked' || i.score <= 50)",
        "data.count == size(data.items)",
        "has(data.note) || data.count < 3",
        "timestamp(request.issued_at) < now && request.attempt == 1",
    )

    @pytest.mark.parametrize(
        "data",
        [
            {"count": 2, "items": [{"state": "open", "score": 99}, {"state": "blocked", "score": 10}]},
            {"count": 2, "items": [{"state": "open", "score": 99}, {"state": "blocked", "score": 60}]},
            {"count": 3, "items": [{"state": "open"}, {"state": "open"}, {"state": "x"}]},
            {"count": 1, "items": [{"state": "blocked"}]},
            {"count": 1, "items": ["not an object"]},
            {"count": 5, "items": [], "note": "n"},
            {"items": []},
            {"count": 1, "items": {"state": "blocked"}},
        ],
    )
    def test_the_fast_path_agrees_with_each_rule_alone(self, data: dict[str, Any]) -> None:
        """Same first failing rule and same detail, for true, false and erring rules."""
        from toolgate._errors import RejectedInput
        from toolgate.gate._cel import RuleSet, compile_rule, evaluate, result_variables

        rules = [
            compile_rule(f"r{i}", e, "", kind="result", where="w", path="p", schema=None)
            for i, e in enumerate(self.EXPRS)
        ]
        request = cel_kit.request()

        def outcome(run: Any) -> tuple[str, str] | None:
            try:
                run()
            except RejectedInput as rejected:
                return rejected.schema_path, rejected.detail
            return None

        fast = outcome(lambda: RuleSet(rules).check(data, request, "1.0", cel_kit.NOW))
        slow = outcome(lambda: evaluate(rules, result_variables(data, request, "1.0", cel_kit.NOW)))
        assert fast == slow


class TestFixtures:
    """contracts test: a reject fixture names the rule that must fail, and only a RULE_FAILED one does."""

    def _write(self, tmp_path: Path, expect: dict[str, Any], **changes: Any) -> Path:
        root = cel_kit.write_contract(tmp_path)
        fixtures = root / "refund" / "v1" / "fixtures"
        (fixtures / "reject").mkdir(parents=True)
        record = cel_kit.request()
        defaults = {
            "now": cel_kit.NOW.isoformat(),
            "headers": {
                "tg-tool": "refund",
                "tg-request-id": cel_kit.REQUEST_ID,
                "tg-adapter-version": "1.0",
            },
            "request": {
                "request_id": record.request_id,
                "tool": "refund",
                "issued_at": record.issued_at.isoformat(),
                "expires_at": record.expires_at.isoformat(),
                "bind": record.bind,
            },
        }
        (fixtures / "defaults.json").write_text(json.dumps(defaults))
        case = {"value": cel_kit.envelope(**changes), "expect": expect}
        (fixtures / "reject" / "case.json").write_text(json.dumps(case))
        return root

    def _outcomes(self, root: Path) -> list[str]:
        from toolgate.authoring._fixtures import iter_outcomes
        from toolgate.gate import Keyring

        return [o.problem for o in iter_outcomes(ContractSet.load(root), Keyring())]

    def test_the_named_rule_must_be_the_one_that_failed(self, tmp_path: Path) -> None:
        """A fixture naming the rule that fails passes; naming another rule fails, saying both."""
        expect = {"stage": "semantic", "code": "RULE_FAILED", "rule": "within_request"}
        assert self._outcomes(self._write(tmp_path / "a", expect, amount=9999)) == [""]
        expect["rule"] = "accounts_of_tenant"
        [problem] = self._outcomes(self._write(tmp_path / "b", expect, amount=9999))
        assert problem == "expected rule 'accounts_of_tenant', got rule 'within_request'"

    @pytest.mark.parametrize(
        "expect",
        [
            {"stage": "semantic", "code": "RULE_FAILED"},
            {"stage": "semantic", "code": "RULE_FAILED", "rule": "no_such_rule"},
            {"stage": "semantic", "code": "BINDING_MISMATCH", "rule": "within_request"},
        ],
    )
    def test_a_fixture_names_a_rule_exactly_when_it_expects_one(
        self, tmp_path: Path, expect: dict[str, Any]
    ) -> None:
        """RULE_FAILED without a rule, an unknown rule, or a rule for another code is refused."""
        with pytest.raises(ContractError, match=r"\$\.expect\.rule"):
            self._outcomes(self._write(tmp_path, expect, amount=9999))


class TestReadmeRules:
    """The rules contracts/README.md shows compile as written, and its fixture names one of them."""

    def test_the_five_rules_and_the_fixture(self) -> None:
        """Five cel rules in its rules example; its RULE_FAILED fixture names one of them."""
        import re

        import yaml
        from toolgate.gate._cel import compile_rule

        from tests import ROOT

        text = (ROOT / "contracts" / "README.md").read_text()
        section = text.split("## cel rules", 1)[1].split("\n## ", 1)[0]
        block = re.search(r"```yaml\n(rules:\n.*?)```", section, re.DOTALL)
        assert block is not None
        rules = yaml.safe_load(block.group(1))["rules"]
        assert len(rules) == 5
        for rule in rules:
            assert compile_rule(
                rule["name"], rule["expr"], "", kind="result", where="w", path="p", schema=None
            )
        fixture = re.search(r"```json\n(.*?)```", section, re.DOTALL)
        assert fixture is not None
        assert json.loads(fixture.group(1))["expect"]["rule"] in {r["name"] for r in rules}


_SCALAR_VALUES = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 2**70, 2**53, 2**53 + 1, -(2**53) - 1]),
    st.floats(min_value=-3, max_value=3, allow_nan=False),
    st.sampled_from([0.5, 1.0, 100.0, float("nan"), 2.0**53, 2.0**53 + 2, -(2.0**53)]),
    st.booleans(),
    st.none(),
    st.sampled_from(["blocked", "open", "acme", "ab", "", "é"]),
    st.sampled_from(
        [
            "2026-05-01T11:00:00Z",
            "2026-05-01T12:00:00.000001+00:00",
            "2026-05-01T13:00:00+02:00",
            "2026-05-01T12:00:00.123456789Z",
            "2026-05-01 11:00:00Z",
            "2026-05-01T11:00:00",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:30:00-01:00",
            "2026-05-01T23:59:60Z",
            "2026-13-01T11:00:00Z",
        ]
    ),
)
_ITEM = st.dictionaries(st.sampled_from(["state", "score", "id"]), _SCALAR_VALUES, max_size=3)
_DATA = st.fixed_dictionaries(
    {},
    optional={
        "items": st.one_of(st.lists(st.one_of(_ITEM, _SCALAR_VALUES), max_size=4), _ITEM),
        "count": _SCALAR_VALUES,
        "query": _SCALAR_VALUES,
        "observed_at": _SCALAR_VALUES,
        "note": _SCALAR_VALUES,
        "flag": _SCALAR_VALUES,
    },
)


class TestFastPath:
    """A rule the Python fast path covers is vouched true only where the runtime finds it true,
    and false only where the runtime finds it false; the rest is left to the runtime."""

    EXPRS = (
        "data.items.all(i, i.state != 'blocked' || i.score <= 100.0)",
        "data.items.all(i, i.score > 0 && i.score < 2)",
        "data.count == size(data.items)",
        "data.query == request.bind.tenant && timestamp(data.observed_at) <= now",
        "timestamp(data.observed_at) > now || !(data.flag == true)",
        "has(data.note) ? data.note >= 'b' : data.count != 1",
        "data.items[0].state == 'open' || data['count'] >= 2",
        "size(data.query) == 2 && request.attempt == 1",
        "data.items.exists(i, i.score == 1)",
        "data.count == 1.0",
        "data.count <= data.flag",
        "data.count < data.flag || data.count == data.flag",
    )

    @staticmethod
    def runtime(rule: Any, data: Any) -> str:
        """The gate's answer without the fast path (the runtime over the data cut to what it reads)."""
        from toolgate._errors import RejectedInput
        from toolgate.gate._cel import RuleSet

        rules = RuleSet([rule])
        rules.fast = None
        try:
            rules.check(data, cel_kit.request(), "1.0", cel_kit.NOW)
        except RejectedInput as rejected:
            return "false" if rejected.detail.endswith("is false") else "error"
        return "true"

    @given(data=_DATA)
    @settings(DERANDOMIZED, max_examples=300)
    def test_every_answer_matches_the_runtime(self, data: dict[str, Any]) -> None:
        """Whatever the fast path answers for a rule, the runtime answers the same over the same data."""
        from toolgate.gate._cel import RuleSet, compile_rule

        for index, expr in enumerate(self.EXPRS):
            rule = compile_rule(f"r{index}", expr, "", kind="result", where="w", path="p", schema=None)
            rules = RuleSet([rule])
            if rules.fast is None:
                continue
            vouched = rules._surely_true(
                {"data": data, "request": request_fields(), "now": cel_kit.NOW}, cel_kit.NOW
            )
            if vouched:
                assert self.runtime(rule, data) == "true", expr

    def test_it_covers_the_usual_rules(self) -> None:
        """Comparisons, logic, size, timestamp, has, indexes, all() and exists() are covered; map() is not."""
        from toolgate.gate._cel import compile_rule

        covered = [
            compile_rule("r", e, "", kind="result", where="w", path="p", schema=None).fast is not None
            for e in (*self.EXPRS, "size(data.items.map(i, i.score)) == 1")
        ]
        assert covered == [True] * len(self.EXPRS) + [False]

    def test_it_vouches_for_a_usual_result(self) -> None:
        """A result every rule holds for is decided by the fast path alone."""
        from toolgate.gate._cel import RuleSet, compile_rule

        rules = RuleSet(
            [
                compile_rule(f"r{i}", e, "", kind="result", where="w", path="p", schema=None)
                for i, e in enumerate(self.EXPRS[:3])
            ]
        )
        data = {"items": [{"state": "open", "score": 1.5}, {"state": "blocked", "score": 0.5}], "count": 2}
        variables = {"data": data, "request": request_fields(), "now": cel_kit.NOW}
        assert rules._surely_true(variables, cel_kit.NOW)
        assert not rules._surely_true({**variables, "data": {**data, "count": 3}}, cel_kit.NOW)
        unread = {**data, "id": 2**64}  # cut away before the runtime converts: no refusal
        assert rules._surely_true({**variables, "data": unread}, cel_kit.NOW)

    def test_an_integer_past_64_bits_leaves_it_to_the_runtime(self) -> None:
        """An item member the runtime is given, past 64 bits, is not vouched for: it refuses it."""
        from toolgate.gate._cel import RuleSet, compile_rule

        rule = compile_rule("r", self.EXPRS[0], "", kind="result", where="w", path="p", schema=None)
        data = {"items": [{"state": "open", "score": 2**70}]}
        assert not RuleSet([rule])._surely_true({"data": data, "now": cel_kit.NOW}, cel_kit.NOW)
        assert self.runtime(rule, data) == "error"


def request_fields() -> dict[str, Any]:
    """The request variable as the gate builds it for rules over request members."""
    from toolgate.gate._cel import request_variable

    return request_variable(cel_kit.request())
