"""The registry's compatibility check and ``toolgate contracts diff`` over every change kind.

Each case registers the old schema in a subject of its own (compatibility ``BACKWARD``, as
``toolgate contracts publish`` sets it, draft-07 as publish registers it) and asks the registry
whether the new one may follow; ``diff_schemas`` says whether the change is breaking. They
must agree, except for the kinds ``DISAGREEMENTS`` lists (and docs/contracts.md explains):
there the stricter side refuses, and publish refuses whatever either refuses.
"""

from __future__ import annotations

import json
import uuid

import pytest
from toolgate.authoring._schema_diff import diff_schemas
from toolgate.registry import RegistryClient
from toolgate.registry._layout import COMPATIBILITY, REGISTRY_DIALECT

from tests.integration.registry_cases import CASES, Schema, expected_kinds
from tests.integration.registry_kit import registry_client

# case -> who refuses it: "toolgate" (the registry accepts it) or "registry" (toolgate does not
# call it breaking). Keywords of drafts after 7 are invisible to the registry's checker.
DISAGREEMENTS = {
    "type-changed/widened": "registry",
    "if-removed": "registry",
    "property-removed/open": "toolgate",
    "branches-changed": "toolgate",
    "prefix-items-added": "toolgate",
    "min-contains-added": "toolgate",
    "min-contains-changed": "toolgate",
    "max-contains-added": "toolgate",
    "max-contains-changed": "toolgate",
    "dependent-schemas-added": "toolgate",
    "dependent-schemas-changed": "toolgate",
    "dependent-required-added": "toolgate",
    "dependent-required-changed": "toolgate",
    "additional-items-changed": "toolgate",
    "unevaluated-items-added": "toolgate",
    "unevaluated-items-changed": "toolgate",
    "dynamic-ref-added": "toolgate",
    "dynamic-ref-changed": "toolgate",
}


@pytest.fixture(scope="module")
def client() -> RegistryClient:
    return registry_client()


def _registered(schema: Schema) -> str:
    return json.dumps({**schema, "$schema": REGISTRY_DIALECT})


class TestCases:
    """The cases cover every change kind, each case the kind it is named for."""

    def test_every_kind_has_a_case(self) -> None:
        """The kinds the cases produce are exactly the kinds the schema diff can name."""
        produced = {c.kind for old, new in CASES.values() for c in diff_schemas(old, new)}
        assert produced == expected_kinds()

    @pytest.mark.parametrize("name", sorted(CASES))
    def test_a_case_reports_its_kind(self, name: str) -> None:
        """The diff of a case names the kind the case is for."""
        old, new = CASES[name]
        assert name.partition("/")[0] in {c.kind for c in diff_schemas(old, new)}


class TestRegistryAgreesWithDiff:
    """Breaking for ``contracts diff`` exactly when the registry refuses, but for the listed kinds."""

    @pytest.mark.parametrize("name", sorted(CASES))
    def test_registry_and_diff(self, client: RegistryClient, name: str) -> None:
        """The registry's verdict on the change, against toolgate's."""
        old, new = CASES[name]
        breaking = any(c.breaking for c in diff_schemas(old, new))
        subject = f"compat-{uuid.uuid4().hex[:12]}-value"
        client.set_compatibility(subject, COMPATIBILITY)
        client.register(subject, _registered(old), what=subject)
        compatible, reason = client.compatible(subject, _registered(new), what=subject)
        refused_by = {"toolgate"} if breaking else set()
        refused_by |= {"registry"} if not compatible else set()
        expected = DISAGREEMENTS.get(name)
        if expected is None:
            assert len(refused_by) != 1, f"{name}: only {refused_by} refuses it ({reason})"
        else:
            assert refused_by == {expected}, f"{name}: refused by {refused_by or 'neither'} ({reason})"
