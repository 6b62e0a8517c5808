"""The Helm chart (deploy/helm/toolgate): helm lint and template with the default and the
production-like values, the manifests validated by kubeconform against the vendored Kubernetes
and CRD schemas (ops/k8s/schemas), and what the manifests must say.

helm and kubeconform are built by ``make k8s-tools`` into ops/k8s/.bin. Without them these tests
skip, except in CI (``TOOLGATE_REQUIRE_KAFKA=1``), where a missing tool fails them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import ROOT
from tests.ops_catalog import RULES_FILE

CHART = ROOT / "deploy" / "helm" / "toolgate"
PRODUCTION = CHART / "ci" / "production-values.yaml"
SCHEMAS = ROOT / "ops" / "k8s" / "schemas"
KUBE_VERSION = "1.31.0"  # Makefile, KUBE_VERSION
VALUES = {"default": None, "production": PRODUCTION}


def _tool(name: str) -> str:
    local = ROOT / "ops" / "k8s" / ".bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        reason = f"{name} is missing (make k8s-tools builds it into ops/k8s/.bin)"
        if os.environ.get("TOOLGATE_REQUIRE_KAFKA") == "1":
            pytest.fail(f"TOOLGATE_REQUIRE_KAFKA=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def helm() -> str:
    """The helm executable."""
    return _tool("helm")


@pytest.fixture(scope="module")
def kubeconform() -> str:
    """The kubeconform executable."""
    return _tool("kubeconform")


def _helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, check=False, timeout=120)


def render(helm: str, values: Path | None, *sets: str) -> subprocess.CompletedProcess[str]:
    args = ["template", "toolgate", str(CHART), "--kube-version", KUBE_VERSION]
    if values is not None:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    return _helm(helm, *args)


def manifests(helm: str, values: Path | None, *sets: str) -> dict[str, dict[str, Any]]:
    result = render(helm, values, *sets)
    assert result.returncode == 0, result.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if doc}


def kubeconform_run(kubeconform: str, text: str) -> subprocess.CompletedProcess[str]:
    location = str(SCHEMAS / "{{ .ResourceKind }}{{ .KindSuffix }}.json")
    return subprocess.run(
        [kubeconform, "-strict", "-summary", "-schema-location", location, "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def production(helm: str) -> dict[str, dict[str, Any]]:
    return manifests(helm, PRODUCTION)


def container(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (worker,) = docs["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    return worker  # type: ignore[no-any-return]


def env(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(docs)["env"]}


class TestRendersAndValidates:
    """helm lint, helm template and kubeconform accept the chart with both values files."""

    @pytest.mark.parametrize("which", sorted(VALUES))
    def test_lint(self, helm: str, which: str) -> None:
        """helm lint --strict passes."""
        values = VALUES[which]
        args = ["lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART)]
        result = _helm(helm, *args, *(["-f", str(values)] if values else []))
        assert result.returncode == 0, result.stdout + result.stderr

    @pytest.mark.parametrize("which", sorted(VALUES))
    def test_manifests_match_the_schemas(self, helm: str, kubeconform: str, which: str) -> None:
        """Every rendered manifest validates (strict: no unknown field) against its schema."""
        result = render(helm, VALUES[which])
        assert result.returncode == 0, result.stderr
        checked = kubeconform_run(kubeconform, result.stdout)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "Invalid: 0, Errors: 0, Skipped: 0" in checked.stdout

    def test_the_production_values_render_every_kind(self, production: dict[str, dict[str, Any]]) -> None:
        """The production-like values render the monitoring and the KEDA autoscaler too."""
        assert set(production) == {
            "ConfigMap",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "PrometheusRule",
            "ScaledObject",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
            "StatefulSet",
        }

    def test_the_strimzi_resources_match_their_schemas(self, kubeconform: str) -> None:
        """deploy/strimzi's KafkaTopics and KafkaUsers validate against Strimzi's CRD schemas."""
        text = "\n".join(
            p.read_text(encoding="utf-8") for p in sorted((ROOT / "deploy" / "strimzi").glob("*.yaml"))
        )
        checked = kubeconform_run(kubeconform, text)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        documents = sum(1 for line in text.splitlines() if line.startswith("kind: "))
        assert documents >= 13  # a KafkaTopic per topic and a KafkaUser per principal
        assert f"Valid: {documents}, Invalid: 0" in checked.stdout

    def test_an_unknown_field_is_refused(self, helm: str, kubeconform: str) -> None:
        """The validation can fail: a misspelt field in the StatefulSet or ScaledObject is invalid."""
        text = render(helm, PRODUCTION).stdout
        for good, bad in (
            ("podManagementPolicy: Parallel", "podManagementPolicyy: Parallel"),
            ("pollingInterval: 15", "pollingIntervall: 15"),
        ):
            assert good in text
            checked = kubeconform_run(kubeconform, text.replace(good, bad))
            assert checked.returncode == 1
            assert bad.split(":")[0] in checked.stdout


class TestWorkerPod:
    """The StatefulSet runs the worker as the design says."""

    def test_static_membership_from_the_pod_name(self, production: dict[str, dict[str, Any]]) -> None:
        """TOOLGATE_GROUP_INSTANCE_ID is the pod's stable name."""
        assert env(production)["TOOLGATE_GROUP_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert production["StatefulSet"]["spec"]["podManagementPolicy"] == "Parallel"

    def test_probes(self, production: dict[str, dict[str, Any]]) -> None:
        """Liveness on /healthz, readiness on /readyz, startup on /readyz within the restore budget."""
        worker = container(production)
        assert worker["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert worker["readinessProbe"]["httpGet"]["path"] == "/readyz"
        startup = worker["startupProbe"]
        assert startup["httpGet"]["path"] == "/readyz"
        assert startup["failureThreshold"] * startup["periodSeconds"] == 600

    def test_grace_period_covers_drain_and_transaction_timeout(self, helm: str) -> None:
        """terminationGracePeriodSeconds is the drain plus the transaction timeout."""
        docs = manifests(helm, None, "shutdown.drainSeconds=20", "shutdown.transactionTimeoutSeconds=60")
        assert docs["StatefulSet"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 80

    def test_locked_down(self, production: dict[str, dict[str, Any]]) -> None:
        """Non-root, read-only root filesystem, no privilege escalation, no service-account token."""
        pod = production["StatefulSet"]["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert production["ServiceAccount"]["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        context = container(production)["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]

    def test_secrets_are_files_never_values(self, production: dict[str, dict[str, Any]]) -> None:
        """SASL password and CA are mounted files named by *_FILE settings; no secret in the env."""
        variables = env(production)
        assert variables["TOOLGATE_SECURITY_SASL_PASSWORD_FILE"] == "/etc/toolgate/kafka/sasl-password"
        assert variables["TOOLGATE_SECURITY_SSL_CAFILE"] == "/etc/toolgate/kafka/ca.crt"
        assert "TOOLGATE_SECURITY_SASL_PASSWORD" not in variables
        assert not [e for e in container(production)["env"] if "secretKeyRef" in e.get("valueFrom", {})]
        volumes = {v["name"]: v for v in production["StatefulSet"]["spec"]["template"]["spec"]["volumes"]}
        assert volumes["kafka"]["secret"]["secretName"] == "toolgate-kafka"
        assert volumes["keyring"]["secret"]["secretName"] == "toolgate-keyring"
        assert variables["TOOLGATE_KEYRING"] == "/etc/toolgate/keyring/keyring.toml"

    def test_sasl_without_a_secret_is_refused(self, helm: str) -> None:
        """A SASL protocol with no Secret for the password fails rendering, naming the values."""
        result = render(helm, None, "kafka.securityProtocol=SASL_SSL")
        assert result.returncode != 0
        assert "kafka.existingSecret" in result.stderr


class TestContracts:
    """The contracts reach the pod as files, reloaded on change."""

    def test_configmap_holds_every_contract_version(self, production: dict[str, dict[str, Any]]) -> None:
        """Each */v*/contract.yaml and schema.json of contracts/ is in the ConfigMap, unchanged,
        mounted at its path; no fixture and no sample keyring."""
        data = production["ConfigMap"]["data"]
        files = sorted(
            p.relative_to(ROOT / "contracts")
            for p in (ROOT / "contracts").glob("*/v*/*")
            if p.name in ("contract.yaml", "schema.json")
        )
        assert sorted(data) == sorted(str(f).replace("/", ".") for f in files)
        for f in files:
            assert data[str(f).replace("/", ".")] == (ROOT / "contracts" / f).read_text(
                encoding="utf-8"
            ).rstrip("\n")
        volumes = {v["name"]: v for v in production["StatefulSet"]["spec"]["template"]["spec"]["volumes"]}
        items = {i["key"]: i["path"] for i in volumes["contracts"]["configMap"]["items"]}
        assert items == {str(f).replace("/", "."): str(f) for f in files}

    def test_reloaded_on_change(self, production: dict[str, dict[str, Any]]) -> None:
        """The worker watches its contracts folder and keyring (TOOLGATE_CONTRACTS_WATCH_SECONDS)."""
        assert env(production)["TOOLGATE_CONTRACTS_WATCH_SECONDS"] == "10"
        assert env(production)["TOOLGATE_CONTRACTS_DIR"] == "/etc/toolgate/contracts"


class TestMonitoring:
    """ServiceMonitor and PrometheusRule."""

    def test_prometheus_rule_is_the_tested_rules_file(self, production: dict[str, dict[str, Any]]) -> None:
        """The PrometheusRule's groups are ops/prometheus/rules/toolgate.yml (promtool-tested),
        with the runbook URLs under prometheusRule.runbookBaseUrl."""
        text = RULES_FILE.read_text(encoding="utf-8").replace(
            "https://git.example.com/toolgate/blob/main/",
            "https://git.acme.test/platform/toolgate/blob/main/",
        )
        assert production["PrometheusRule"]["spec"]["groups"] == yaml.safe_load(text)["groups"]

    def test_the_rules_file_is_linked_not_copied(self) -> None:
        """The chart reads the rules through a link to the one source."""
        link = CHART / "files" / "prometheus" / "toolgate.yml"
        assert link.is_symlink()
        assert link.resolve() == RULES_FILE.resolve()

    def test_service_monitor_scrapes_the_headless_service_as_job_toolgate(
        self, production: dict[str, dict[str, Any]]
    ) -> None:
        """The job label is app.kubernetes.io/name (toolgate), which the alerts select."""
        monitor = production["ServiceMonitor"]["spec"]
        service = production["Service"]
        assert monitor["jobLabel"] == "app.kubernetes.io/name"
        assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "toolgate"
        assert monitor["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]


class TestEveryPodReachable:
    """The headless Service gives each pod a name for replay --apply --workers."""

    def test_headless_and_lists_not_ready_pods(self, production: dict[str, dict[str, Any]]) -> None:
        """clusterIP None, not-ready pods published, the StatefulSet's serviceName."""
        service = production["Service"]
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["publishNotReadyAddresses"] is True
        assert production["StatefulSet"]["spec"]["serviceName"] == service["metadata"]["name"]


class TestAutoscaling:
    """KEDA on the intake lag, or an HPA on toolgate_consumer_lag, never past the partitions."""

    def test_keda_scales_on_intake_lag(self, production: dict[str, dict[str, Any]]) -> None:
        """The Kafka trigger reads the worker's group on intake, at most one worker per partition."""
        scaled = production["ScaledObject"]["spec"]
        (trigger,) = scaled["triggers"]
        assert trigger["type"] == "kafka"
        assert trigger["metadata"]["topic"] == "toolgate.intake"
        assert trigger["metadata"]["consumerGroup"] == "toolgate"
        assert trigger["metadata"]["offsetResetPolicy"] == "earliest"
        assert scaled["maxReplicaCount"] <= 12
        assert "replicas" not in production["StatefulSet"]["spec"]  # the autoscaler owns it

    def test_more_workers_than_partitions_is_refused(self, helm: str) -> None:
        """maxReplicas above intakePartitions fails rendering with the two values named."""
        result = render(helm, PRODUCTION, "autoscaling.maxReplicas=13")
        assert result.returncode != 0
        assert "maxReplicas 13 is more than intakePartitions 12" in result.stderr

    def test_an_activation_at_the_drained_lag_is_refused(self, helm: str) -> None:
        """activationLagThreshold at or below the partition count fails: a drained group would flap."""
        result = render(helm, PRODUCTION, "autoscaling.keda.activationLagThreshold=12")
        assert result.returncode != 0
        assert "activationLagThreshold 12 must exceed intakePartitions 12" in result.stderr

    def test_hpa_alternative(self, helm: str, kubeconform: str) -> None:
        """mode hpa renders a valid HorizontalPodAutoscaler on toolgate_consumer_lag."""
        result = render(helm, PRODUCTION, "autoscaling.mode=hpa")
        assert result.returncode == 0, result.stderr
        assert kubeconform_run(kubeconform, result.stdout).returncode == 0
        docs = {d["kind"]: d for d in yaml.safe_load_all(result.stdout) if d}
        assert "ScaledObject" not in docs
        hpa = docs["HorizontalPodAutoscaler"]["spec"]
        assert hpa["metrics"][0]["pods"]["metric"]["name"] == "toolgate_consumer_lag"
        assert hpa["maxReplicas"] == 12
