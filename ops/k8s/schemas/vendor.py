"""Write the JSON schemas kubeconform validates the chart's manifests with (only the kinds used).

Not run by ``make test``: the schemas it writes are committed next to it (README.md says where
each came from). Run it again to move to newer Kubernetes or operator versions:

    python ops/k8s/schemas/vendor.py --swagger SWAGGER.json --crd CRD.yaml... [--out ops/k8s/schemas]

Kubernetes kinds come from an OpenAPI v2 document (``swagger.json``), each written standalone
(every ``$ref`` inlined) and strict (no property the API does not define); custom resources from
their CustomResourceDefinition's ``openAPIV3Schema``, strict the same way except where the CRD
keeps unknown fields. Descriptions are dropped (they are most of the size). File names follow
kubeconform's ``{{ .ResourceKind }}{{ .KindSuffix }}.json``: ``statefulset-apps-v1.json``,
``scaledobject-keda-v1alpha1.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
# The Kubernetes kinds the chart renders: (definition name, apiVersion, kind).
KINDS = [
    ("io.k8s.api.apps.v1.StatefulSet", "apps/v1", "StatefulSet"),
    ("io.k8s.api.core.v1.Service", "v1", "Service"),
    ("io.k8s.api.core.v1.ConfigMap", "v1", "ConfigMap"),
    ("io.k8s.api.core.v1.Secret", "v1", "Secret"),
    ("io.k8s.api.core.v1.ServiceAccount", "v1", "ServiceAccount"),
    ("io.k8s.api.policy.v1.PodDisruptionBudget", "policy/v1", "PodDisruptionBudget"),
    ("io.k8s.api.networking.v1.NetworkPolicy", "networking.k8s.io/v1", "NetworkPolicy"),
    ("io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler", "autoscaling/v2", "HorizontalPodAutoscaler"),
]
# Custom resources: (kind, the CRD version to take).
CUSTOM = {
    "ScaledObject": "v1alpha1",
    "KafkaTopic": "v1",
    "KafkaUser": "v1",
    "ServiceMonitor": "v1",
    "PrometheusRule": "v1",
}


def file_name(api_version: str, kind: str) -> str:
    """kubeconform's name for a kind's schema (its KindSuffix: group's first label, version)."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{version}" if group else f"-{version}"
    return f"{kind.lower()}{suffix.lower()}.json"


def _strict(node: Any) -> Any:
    """``node`` without descriptions, objects with properties closed unless they keep unknowns."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k != "description"}
    keeps_unknown = node.get("x-kubernetes-preserve-unknown-fields") or "additionalProperties" in node
    if "properties" in node and not keeps_unknown:
        out["additionalProperties"] = False
    # An int-or-string field (ports, maxUnavailable) is either, as the API server accepts.
    if node.get("x-kubernetes-int-or-string") or node.get("format") == "int-or-string":
        out.pop("type", None)
        out.pop("format", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    return out


def _inline(node: Any, definitions: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        name = ref.removeprefix("#/definitions/")
        if name in seen:  # JSONSchemaProps refers to itself: leave that branch open
            return {}
        return _inline(definitions[name], definitions, (*seen, name))
    return {k: _inline(v, definitions, seen) for k, v in node.items()}


def kubernetes_schema(
    swagger: dict[str, Any], definition: str, api_version: str, kind: str
) -> dict[str, Any]:
    """One kind's standalone strict schema; apiVersion and kind must be the ones given."""
    schema = _strict(_inline(swagger["definitions"][definition], swagger["definitions"]))
    schema.pop("x-kubernetes-group-version-kind", None)
    schema["properties"]["apiVersion"] = {"enum": [api_version]}
    schema["properties"]["kind"] = {"enum": [kind]}
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return schema  # type: ignore[no-any-return]


def custom_schema(crd: dict[str, Any], version: str) -> tuple[str, dict[str, Any]]:
    """(apiVersion, strict schema) of one version of a CustomResourceDefinition."""
    group = crd["spec"]["group"]
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _strict(entry["schema"]["openAPIV3Schema"])
    schema["$schema"] = "http://json-schema.org/draft-07/schema#"
    return f"{group}/{version}", schema


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--swagger", type=Path, required=True, help="a Kubernetes OpenAPI v2 swagger.json")
    parser.add_argument("--crd", type=Path, nargs="+", default=[], help="CustomResourceDefinition files")
    parser.add_argument("--out", type=Path, default=HERE, help=f"where to write (default {HERE})")
    args = parser.parse_args(argv)
    swagger = json.loads(args.swagger.read_text(encoding="utf-8"))
    written = []
    for definition, api_version, kind in KINDS:
        target = args.out / file_name(api_version, kind)
        target.write_text(
            json.dumps(kubernetes_schema(swagger, definition, api_version, kind), sort_keys=True)
        )
        written.append(target.name)
    for path in args.crd:
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            kind = crd["spec"]["names"]["kind"]
            if kind not in CUSTOM:
                continue
            api_version, schema = custom_schema(crd, CUSTOM[kind])
            target = args.out / file_name(api_version, kind)
            target.write_text(json.dumps(schema, sort_keys=True))
            written.append(target.name)
    missing = {k for k in CUSTOM if not any(n.startswith(k.lower() + "-") for n in written)}
    for name in written:
        print(f"wrote {args.out / name}")
    if missing:
        print(f"vendor.py: no CRD given for {', '.join(sorted(missing))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
