"""The docker-compose stack, the image and the ops files it mounts agree with each other.

No Docker engine is needed: the files are parsed and cross-checked. ``promtool`` checks run
only where it is on PATH.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests import ROOT
from tests.ops_catalog import exported

COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_FILE = ROOT / "ops" / "prometheus" / "prometheus.yml"
RULES_DIR = ROOT / "ops" / "prometheus" / "rules"
GRAFANA_DIR = ROOT / "ops" / "grafana"
DASHBOARDS_DIR = GRAFANA_DIR / "dashboards"
DOCKERFILE = ROOT / "Dockerfile"

SERVICES = {"kafka", "topics", "worker", "prometheus", "grafana"}
METRICS_PORT = 9464


# --------------------------------------------------------------------------- helpers


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict of strings (map or KEY=VALUE list syntax)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) for item in raw)
        return {key: value for key, value in pairs}
    return {key: "" if value is None else str(value) for key, value in raw.items()}


def _published(service: dict[str, Any]) -> dict[int, int]:
    """Host port -> container port for a service's ``ports`` (short or long syntax)."""
    out: dict[int, int] = {}
    for spec in service.get("ports") or []:
        if isinstance(spec, dict):
            out[int(spec["published"])] = int(spec["target"])
            continue
        text = str(spec).split("/", 1)[0]
        parts = text.rsplit(":", 2)
        if len(parts) == 1:
            continue  # container port only: published on a random host port
        out[int(parts[-2])] = int(parts[-1])
    return out


def _binds(service: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(host source, container target, read-only) for each bind mount of a service."""
    out: list[tuple[str, str, bool]] = []
    for spec in service.get("volumes") or []:
        if isinstance(spec, dict):
            if spec.get("type") == "bind":
                out.append((spec["source"], spec["target"], bool(spec.get("read_only"))))
            continue
        parts = str(spec).split(":")
        if len(parts) >= 2 and parts[0].startswith((".", "/")):
            mode = parts[2] if len(parts) > 2 else ""
            out.append((parts[0], parts[1], "ro" in mode.split(",")))
    return out


def _bind_source(service: dict[str, Any], target: str) -> Path:
    """The host path mounted at ``target``, resolved against the compose file's folder."""
    for source, mounted_at, _ in _binds(service):
        if mounted_at == target:
            return (COMPOSE_FILE.parent / source).resolve()
    raise AssertionError(f"nothing is bind-mounted at {target}")


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port,...`` -> {NAME: (host, port)}; an empty host stays empty."""
    out: dict[str, tuple[str, int]] = {}
    for item in value.split(","):
        match = re.fullmatch(r"\s*([A-Za-z0-9_]+)://([^:]*):(\d+)\s*", item)
        assert match, f"listener {item!r} is not NAME://host:port"
        out[match.group(1)] = (match.group(2), int(match.group(3)))
    return out


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "Dockerfile ends in a line continuation"
    out = []
    for text in logical:
        keyword, _, args = text.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _instruction(name: str) -> list[str]:
    return [args for keyword, args in _dockerfile_instructions() if keyword == name]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"{args!r} is not the JSON exec form"
    return [str(item) for item in value]


def _rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml")) + sorted(RULES_DIR.glob("*.yaml"))


def _rules(kind: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in _rule_files():
        for group in _load_yaml(path)["groups"]:
            for rule in group["rules"]:
                if kind in rule:
                    yield path, rule


def _dashboards() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = _load_yaml(COMPOSE_FILE)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def kafka_env(services: dict[str, dict[str, Any]]) -> dict[str, str]:
    return _env(services["kafka"])


@pytest.fixture(scope="module")
def prometheus_config() -> dict[str, Any]:
    data = _load_yaml(PROMETHEUS_FILE)
    assert isinstance(data, dict)
    return data


# --------------------------------------------------------------------------- compose


class TestComposeServices:
    """The compose file declares the whole local stack and starts it in order."""

    def test_declares_the_five_services(self, services: dict[str, dict[str, Any]]) -> None:
        """Kafka, topic creation, the worker, Prometheus and Grafana are all declared."""
        assert set(services) >= SERVICES

    def test_host_ports_are_published(self, services: dict[str, dict[str, Any]]) -> None:
        """The broker, metrics, Prometheus and Grafana are reachable on their host ports."""
        assert 19092 in _published(services["kafka"])
        assert _published(services["worker"]).get(METRICS_PORT) == METRICS_PORT
        assert _published(services["prometheus"]).get(9090) == 9090
        assert _published(services["grafana"]).get(3000) == 3000

    def test_bind_mounted_host_paths_exist(self, services: dict[str, dict[str, Any]]) -> None:
        """Every ./ path bind-mounted into a container exists in the repository."""
        seen = 0
        for name, service in services.items():
            for source, _, _ in _binds(service):
                if source.startswith("./"):
                    seen += 1
                    path = (COMPOSE_FILE.parent / source).resolve()
                    assert path.exists(), f"{name}: {source} does not exist"
                    assert path.is_relative_to(ROOT), f"{name}: {source} leaves the repository"
        assert seen, "no bind mounts found"

    def test_config_mounts_are_read_only(self, services: dict[str, dict[str, Any]]) -> None:
        """Containers cannot rewrite the contracts or ops files they are given."""
        for name in ("worker", "prometheus", "grafana"):
            for source, target, read_only in _binds(services[name]):
                assert read_only, f"{name}: {source}:{target} is writable"

    def test_build_contexts_have_a_dockerfile(self, services: dict[str, dict[str, Any]]) -> None:
        """Every service built locally points at a context holding its Dockerfile."""
        built = {name: svc["build"] for name, svc in services.items() if "build" in svc}
        assert {"topics", "worker"} <= set(built)
        for name, build in built.items():
            spec = {"context": build} if isinstance(build, str) else build
            context = (COMPOSE_FILE.parent / spec.get("context", ".")).resolve()
            dockerfile = context / spec.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: no {dockerfile}"

    def test_topics_run_once_after_a_healthy_broker(self, services: dict[str, dict[str, Any]]) -> None:
        """Topics are ensured once, only after the broker reports healthy."""
        topics = services["topics"]
        assert topics["command"] == ["topics", "ensure"]
        assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert topics.get("restart") == "no"

    def test_worker_waits_for_topics(self, services: dict[str, dict[str, Any]]) -> None:
        """The worker starts only once topic creation has exited successfully."""
        worker = services["worker"]
        assert worker["command"] == ["run"]
        condition = worker["depends_on"]["topics"]["condition"]
        assert condition == "service_completed_successfully"

    def test_toolgate_environment_is_valid_config(self, services: dict[str, dict[str, Any]]) -> None:
        """Every TOOLGATE_* variable a service sets is a known, well-typed setting."""
        config = pytest.importorskip("toolgate._config", reason="toolgate is not importable")
        for name in ("topics", "worker"):
            env = {k: v for k, v in _env(services[name]).items() if k.startswith("TOOLGATE_")}
            config.load_config(environ=env)

    def test_worker_reads_the_mounted_contracts(self, services: dict[str, dict[str, Any]]) -> None:
        """The worker's contracts directory is where ./contracts is mounted."""
        worker = services["worker"]
        contracts_dir = _env(worker)["TOOLGATE_CONTRACTS_DIR"]
        assert _bind_source(worker, contracts_dir) == (ROOT / "contracts").resolve()

    def test_worker_metrics_port_is_the_published_one(self, services: dict[str, dict[str, Any]]) -> None:
        """The port the worker serves metrics on is the container port that is published."""
        worker = services["worker"]
        port = int(_env(worker).get("TOOLGATE_METRICS_PORT", METRICS_PORT))
        assert port == METRICS_PORT
        assert port in _published(worker).values()


class TestComposeKafka:
    """The broker is a single KRaft node reachable from containers and from the host."""

    def test_uses_the_official_image(self, services: dict[str, dict[str, Any]]) -> None:
        """The broker runs the Apache Kafka project's own image, pinned to a version."""
        image = services["kafka"]["image"]
        repo, _, tag = image.partition(":")
        assert repo == "apache/kafka"
        assert re.fullmatch(r"\d+\.\d+\.\d+", tag), image

    def test_runs_kraft_combined_mode(self, kafka_env: dict[str, str]) -> None:
        """One node is both broker and controller and votes for itself on the controller port."""
        roles = {role.strip() for role in kafka_env["KAFKA_PROCESS_ROLES"].split(",")}
        assert roles == {"broker", "controller"}
        node_id = kafka_env["KAFKA_NODE_ID"]
        listeners = _listeners(kafka_env["KAFKA_LISTENERS"])
        controller = kafka_env["KAFKA_CONTROLLER_LISTENER_NAMES"]
        assert controller in listeners
        voters = kafka_env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
        assert voters == [f"{node_id}@kafka:{listeners[controller][1]}"]

    def test_every_listener_has_a_security_protocol(self, kafka_env: dict[str, str]) -> None:
        """Each declared listener name appears in the listener security protocol map."""
        protocol_map = kafka_env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
        protocols = dict(item.split(":", 1) for item in protocol_map.split(","))
        listeners = _listeners(kafka_env["KAFKA_LISTENERS"])
        advertised = _listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
        assert set(listeners) | set(advertised) <= set(protocols)
        assert set(advertised) <= set(listeners)
        assert kafka_env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised

    def test_single_node_replication_settings(self, kafka_env: dict[str, str]) -> None:
        """Internal topics ask for one replica, so a single node can create them."""
        for key in (
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
        ):
            assert kafka_env[key] == "1", key
        assert kafka_env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"

    def test_topics_are_never_auto_created(self, kafka_env: dict[str, str]) -> None:
        """Only `toolgate topics ensure` creates topics."""
        assert kafka_env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"].lower() == "false"

    def test_host_listener_is_published(
        self, services: dict[str, dict[str, Any]], kafka_env: dict[str, str]
    ) -> None:
        """The listener advertised as localhost:19092 is the one published on host port 19092."""
        advertised = _listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
        listeners = _listeners(kafka_env["KAFKA_LISTENERS"])
        external = [name for name, addr in advertised.items() if addr == ("localhost", 19092)]
        assert len(external) == 1, advertised
        assert _published(services["kafka"])[19092] == listeners[external[0]][1]

    @pytest.mark.parametrize("service", ["topics", "worker"])
    def test_clients_bootstrap_from_the_internal_listener(
        self, services: dict[str, dict[str, Any]], kafka_env: dict[str, str], service: str
    ) -> None:
        """Containers bootstrap from a listener the broker advertises under its service name."""
        bootstrap = _env(services[service])["TOOLGATE_BOOTSTRAP"]
        host, _, port = bootstrap.rpartition(":")
        assert host in {"kafka", services["kafka"].get("hostname", "kafka")}
        advertised = _listeners(kafka_env["KAFKA_ADVERTISED_LISTENERS"])
        listeners = _listeners(kafka_env["KAFKA_LISTENERS"])
        names = [name for name, addr in advertised.items() if addr == (host, int(port))]
        assert names, f"{bootstrap} is not an advertised listener"
        assert listeners[names[0]][1] == int(port)

    def test_healthcheck_asks_the_broker(
        self, services: dict[str, dict[str, Any]], kafka_env: dict[str, str]
    ) -> None:
        """The health check queries the broker's API versions on a listener it declares."""
        test = services["kafka"]["healthcheck"]["test"]
        command = test if isinstance(test, list) else ["CMD-SHELL", test]
        text = " ".join(command)
        assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in text
        match = re.search(r"--bootstrap-server[ =]localhost:(\d+)", text)
        assert match, text
        ports = {port for _, port in _listeners(kafka_env["KAFKA_LISTENERS"]).values()}
        assert int(match.group(1)) in ports


# --------------------------------------------------------------------------- prometheus


class TestPrometheus:
    """Prometheus scrapes the worker and loads every rules file in ops/prometheus/rules."""

    def test_is_mounted_where_the_image_reads_it(self, services: dict[str, dict[str, Any]]) -> None:
        """The compose service mounts ops/prometheus/prometheus.yml as the default config."""
        source = _bind_source(services["prometheus"], "/etc/prometheus/prometheus.yml")
        assert source == PROMETHEUS_FILE.resolve()

    def test_scrapes_the_worker_metrics_port(self, prometheus_config: dict[str, Any]) -> None:
        """A scrape job targets the worker service on its metrics port every 5s."""
        jobs = [
            job
            for job in prometheus_config["scrape_configs"]
            for static in job.get("static_configs", [])
            if f"worker:{METRICS_PORT}" in static["targets"]
        ]
        assert len(jobs) == 1
        assert jobs[0].get("metrics_path", "/metrics") == "/metrics"
        assert jobs[0]["scrape_interval"] == "5s"

    def test_rule_files_glob_covers_the_mounted_rules(
        self, services: dict[str, dict[str, Any]], prometheus_config: dict[str, Any]
    ) -> None:
        """Every rules file in the repository is matched by a rule_files glob in the container."""
        mounted = {target: source for source, target, _ in _binds(services["prometheus"])}
        assert mounted["/etc/prometheus/rules"] == "./ops/prometheus/rules"
        globs = prometheus_config["rule_files"]
        assert _rule_files()
        for path in _rule_files():
            in_container = f"/etc/prometheus/rules/{path.name}"
            assert any(fnmatch.fnmatch(in_container, pattern) for pattern in globs), path.name

    def test_job_selectors_name_a_scrape_job(self, prometheus_config: dict[str, Any]) -> None:
        """A `job="..."` selector in a rule names a job Prometheus actually scrapes."""
        jobs = {job["job_name"] for job in prometheus_config["scrape_configs"]}
        for path, rule in [*_rules("alert"), *_rules("record")]:
            for job in re.findall(r'job\s*=\s*"([^"]*)"', rule["expr"]):
                assert job in jobs, f"{path.name}: job {job!r} is never scraped"


class TestPrometheusRules:
    """Rules files are well formed and every alert tells the operator what to do."""

    def test_every_rules_file_parses(self) -> None:
        """Each rules file is YAML with named groups of rules that have an expression."""
        assert _rule_files()
        for path in _rule_files():
            data = _load_yaml(path)
            assert data["groups"], path.name
            for group in data["groups"]:
                assert group["name"], path.name
                assert group["rules"], path.name
                for rule in group["rules"]:
                    assert ("alert" in rule) != ("record" in rule), rule
                    assert str(rule["expr"]).strip(), rule

    def test_alerts_are_annotated(self) -> None:
        """Every alert has summary, description and a runbook_url into ops/RUNBOOK.md."""
        alerts = list(_rules("alert"))
        assert alerts
        for path, rule in alerts:
            annotations = rule.get("annotations") or {}
            for key in ("summary", "description", "runbook_url"):
                assert str(annotations.get(key, "")).strip(), f"{path.name}: {rule['alert']} {key}"
            assert "RUNBOOK.md" in annotations["runbook_url"], rule["alert"]

    def test_alert_names_are_unique(self) -> None:
        """No two alerts share a name."""
        names = [rule["alert"] for _, rule in _rules("alert")]
        assert len(names) == len(set(names))

    def test_recording_rule_names_follow_the_convention(self) -> None:
        """Recording rules are named level:metric:operations."""
        records = [rule["record"] for _, rule in _rules("record")]
        assert records
        for name in records:
            assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", name), name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not on PATH")
class TestPromtool:
    """Prometheus's own checker accepts the configuration and the rules."""

    def test_check_config(self, prometheus_config: dict[str, Any], tmp_path: Path) -> None:
        """`promtool check config` passes, loading the repository's rules files."""
        local = dict(prometheus_config)
        local["rule_files"] = [
            str(RULES_DIR / PurePosixPath(pattern).name) for pattern in local["rule_files"]
        ]
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(local), encoding="utf-8")
        result = subprocess.run(
            ["promtool", "check", "config", str(config)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def test_check_rules(self) -> None:
        """`promtool check rules` passes for every rules file."""
        result = subprocess.run(
            ["promtool", "check", "rules", *map(str, _rule_files())],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- grafana


class TestGrafana:
    """Grafana is provisioned with the Prometheus data source and the toolgate dashboard."""

    def test_anonymous_viewers(self, services: dict[str, dict[str, Any]]) -> None:
        """Anonymous visitors may look at dashboards but not edit them."""
        env = _env(services["grafana"])
        assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
        assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"

    def test_datasource_points_at_the_prometheus_service(self, services: dict[str, dict[str, Any]]) -> None:
        """The provisioned data source is the compose Prometheus, with the uid panels use."""
        provisioning = _bind_source(services["grafana"], "/etc/grafana/provisioning")
        data = _load_yaml(provisioning / "datasources" / "prometheus.yml")
        (source,) = data["datasources"]
        assert source["type"] == "prometheus"
        assert source["uid"] == "prometheus"
        assert source["url"] == "http://prometheus:9090"

    def test_dashboard_provider_reads_the_mounted_dashboards(
        self, services: dict[str, dict[str, Any]]
    ) -> None:
        """The file provider's path is where ops/grafana/dashboards is mounted."""
        grafana = services["grafana"]
        provisioning = _bind_source(grafana, "/etc/grafana/provisioning")
        data = _load_yaml(provisioning / "dashboards" / "toolgate.yml")
        (provider,) = data["providers"]
        assert provider["type"] == "file"
        path = provider["options"]["path"]
        assert _bind_source(grafana, path) == DASHBOARDS_DIR.resolve()

    def test_dashboards_parse_with_queries(self) -> None:
        """Each dashboard is JSON with a uid and panels that query the provisioned source."""
        assert _dashboards()
        uids = []
        for path in _dashboards():
            dashboard = json.loads(path.read_text(encoding="utf-8"))
            uids.append(dashboard["uid"])
            assert dashboard["title"], path.name
            assert dashboard["panels"], path.name
            for panel in dashboard["panels"]:
                assert panel["targets"], f"{path.name}: {panel['title']}"
                assert panel["datasource"]["uid"] == "prometheus"
                for target in panel["targets"]:
                    assert target["expr"].strip(), f"{path.name}: {panel['title']}"
        assert len(uids) == len(set(uids))

    def test_toolgate_dashboard_filters_by_tool(self) -> None:
        """The toolgate dashboard has a tool variable that every query of a per-tool metric honours."""
        dashboard = json.loads((DASHBOARDS_DIR / "toolgate.json").read_text(encoding="utf-8"))
        assert dashboard["uid"] == "toolgate"
        variables = {var["name"]: var for var in dashboard["templating"]["list"]}
        assert "label_values(toolgate_results_total, tool)" in json.dumps(variables["tool"])
        exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
        assert any("toolgate_results_total" in expr for expr in exprs)
        assert any("toolgate_rejections_total" in expr for expr in exprs)
        per_tool = {name for name, labels in exported().items() if "tool" in labels}
        for expr in exprs:
            for metric in re.findall(r"\btoolgate_[a-z_]+", expr):
                if metric in per_tool:
                    assert re.search(rf'{metric}\{{[^}}]*tool=~"\$tool"', expr), expr


# --------------------------------------------------------------------------- image


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run_healthcheck(port: int) -> int:
    (args,) = _instruction("HEALTHCHECK")
    command = _exec_form(args[args.index("CMD") + len("CMD") :].strip())
    assert command[0] == "python"
    env = {**os.environ, "TOOLGATE_METRICS_PORT": str(port)}
    result = subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, check=False, timeout=30
    )
    return result.returncode


class TestDockerfile:
    """The image runs `toolgate` as an unprivileged user and reports its own health."""

    def test_entrypoint_is_toolgate_running_the_worker(self) -> None:
        """The entrypoint is the console script and the default command runs the worker."""
        assert [_exec_form(a) for a in _instruction("ENTRYPOINT")] == [["toolgate"]]
        assert [_exec_form(a) for a in _instruction("CMD")] == [["run"]]
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
        assert "toolgate" in scripts["project"]["scripts"]

    def test_exposes_the_metrics_port(self) -> None:
        """The metrics port is exposed."""
        ports = [port for args in _instruction("EXPOSE") for port in args.split()]
        exposed = {int(port.split("/")[0]) for port in ports}
        assert METRICS_PORT in exposed

    def test_runs_as_a_non_root_user(self) -> None:
        """The last USER is neither root nor uid 0."""
        users = _instruction("USER")
        assert users
        user = users[-1].split(":")[0]
        assert user not in {"root", "0"}

    def test_copies_what_pip_install_needs(self) -> None:
        """The package, its metadata and readme, and the bundled contracts are copied in."""
        sources: set[str] = set()
        for args in _instruction("COPY"):
            parts = [p for p in args.split() if not p.startswith("--")]
            sources.update(p.rstrip("/") for p in parts[:-1])
        project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
        assert {"pyproject.toml", "worker", "contracts", project["project"]["readme"]} <= sources
        runs = " ".join(_instruction("RUN"))
        assert "pip install --no-cache-dir ." in runs

    def test_dockerignore_keeps_copied_files(self) -> None:
        """.dockerignore drops local state but nothing the image copies."""
        patterns = [
            line.strip()
            for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")
        ]
        for required in (".venv", ".git", "ops/kafka/.jars", "ops/kafka/.data"):
            assert required in patterns, required
        for copied in (
            "pyproject.toml",
            "README.md",
            "worker",
            "contracts",
            "worker/toolgate/cli/__init__.py",
        ):
            assert not any(fnmatch.fnmatch(copied, p) for p in patterns), copied

    def test_healthcheck_passes_on_a_healthy_worker(
        self, health_server: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The HEALTHCHECK command exits 0 when /healthz on the metrics port answers 200."""
        monkeypatch.setattr(_Health, "status", 200)
        assert _run_healthcheck(health_server.server_address[1]) == 0

    def test_healthcheck_fails_on_an_unhealthy_worker(
        self, health_server: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The HEALTHCHECK command exits non-zero when /healthz answers 503."""
        monkeypatch.setattr(_Health, "status", 503)
        assert _run_healthcheck(health_server.server_address[1]) != 0


# --------------------------------------------------------------------------- secure override

SECURE_FILE = ROOT / "docker-compose.secure.yml"
SECURE_DIR = ROOT / "ops" / "kafka" / "secure"
SECURE_SERVICES = {"kafka-users", "acls"}
_INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?::?[-?][^}]*)?\}")


def _interpolated(value: str) -> str:
    """A compose value with every ``${VAR...}`` replaced by a harmless stand-in."""
    return _INTERPOLATION.sub("x", value)


def _merge_service(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Compose's override merge, as far as these files use it: maps merge key by key,
    ``volumes`` and ``ports`` add up, anything else is replaced."""
    merged = dict(base)
    for key, value in over.items():
        if key in {"volumes", "ports"}:
            merged[key] = [*(base.get(key) or []), *value]
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merge_service(base[key], value)
        else:
            merged[key] = value
    return merged


def _ignored(path: Path) -> bool:
    """Whether ops/kafka/secure/.gitignore keeps ``path`` (a file in that folder) out of git."""
    patterns = [
        line.strip()
        for line in (SECURE_DIR / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)


def _secure_file(path: Path) -> None:
    """A file the secured stack reads: committed, or a placeholder the README says how to make
    and git ignores (keys, keystores, passwords are never committed)."""
    if path.exists() and not _ignored(path):
        return
    readme = (SECURE_DIR / "README.md").read_text(encoding="utf-8")
    relative = path.relative_to(SECURE_DIR).as_posix()
    assert f"`{relative}`" in readme, f"{relative} is neither committed nor documented"
    assert _ignored(path), f"{relative} would be committed"


@pytest.fixture(scope="module")
def secure() -> dict[str, Any]:
    data = _load_yaml(SECURE_FILE)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def secured(services: dict[str, dict[str, Any]], secure: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The services as `docker compose -f docker-compose.yml -f docker-compose.secure.yml` sees them."""
    merged = dict(services)
    for name, service in secure["services"].items():
        merged[name] = _merge_service(services.get(name, {}), service)
    return merged


@pytest.fixture(scope="module")
def secure_kafka(secured: dict[str, dict[str, Any]]) -> dict[str, str]:
    return _env(secured["kafka"])


def _protocols(kafka_env: dict[str, str]) -> dict[str, str]:
    return dict(item.split(":", 1) for item in kafka_env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))


class TestComposeSecure:
    """docker-compose.secure.yml: SASL_SSL with SCRAM-SHA-512, ACLs, a principal per party."""

    def test_overrides_known_services(
        self, services: dict[str, dict[str, Any]], secure: dict[str, Any]
    ) -> None:
        """The override changes services of docker-compose.yml and adds the two security steps."""
        assert set(secure["services"]) - set(services) == SECURE_SERVICES
        assert {"kafka", "topics", "worker"} <= set(secure["services"])
        assert all(key == "services" or key.startswith("x-") for key in secure)

    def test_only_loopback_listeners_authenticate_nobody(self, secure_kafka: dict[str, str]) -> None:
        """Every listener other containers or the host can reach is SASL_SSL; the PLAINTEXT and
        controller listeners (User:ANONYMOUS) listen on the container's loopback only."""
        protocols = _protocols(secure_kafka)
        listeners = _listeners(secure_kafka["KAFKA_LISTENERS"])
        advertised = _listeners(secure_kafka["KAFKA_ADVERTISED_LISTENERS"])
        assert set(listeners) | set(advertised) <= set(protocols)
        for name, (host, _) in listeners.items():
            if protocols[name] != "SASL_SSL":
                assert host == "127.0.0.1", f"{name} ({protocols[name]}) listens on {host or 'all'}"
        for name, (host, _) in advertised.items():
            assert host == "127.0.0.1" or protocols[name] == "SASL_SSL", name
        assert "SASL_SSL" in protocols.values()
        inter_broker = secure_kafka["KAFKA_INTER_BROKER_LISTENER_NAME"]
        assert listeners[inter_broker][0] == "127.0.0.1"

    def test_controller_quorum_on_loopback(self, secure_kafka: dict[str, str]) -> None:
        """The node votes for itself on its loopback controller listener."""
        listeners = _listeners(secure_kafka["KAFKA_LISTENERS"])
        controller = secure_kafka["KAFKA_CONTROLLER_LISTENER_NAMES"]
        assert secure_kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"] == (
            f"{secure_kafka['KAFKA_NODE_ID']}@127.0.0.1:{listeners[controller][1]}"
        )

    def test_host_listener_is_sasl_ssl_and_published(
        self, secured: dict[str, dict[str, Any]], secure_kafka: dict[str, str]
    ) -> None:
        """localhost:19092 is still the published port, now a SASL_SSL listener."""
        advertised = _listeners(secure_kafka["KAFKA_ADVERTISED_LISTENERS"])
        listeners = _listeners(secure_kafka["KAFKA_LISTENERS"])
        (external,) = [name for name, addr in advertised.items() if addr == ("localhost", 19092)]
        assert _protocols(secure_kafka)[external] == "SASL_SSL"
        assert _published(secured["kafka"])[19092] == listeners[external][1]

    def test_scram_and_acls_are_enforced(self, secure_kafka: dict[str, str]) -> None:
        """SCRAM-SHA-512 only; the StandardAuthorizer denies whatever no ACL allows; the super
        users are the broker itself (loopback listeners) and admin."""
        assert secure_kafka["KAFKA_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
        assert secure_kafka["KAFKA_AUTHORIZER_CLASS_NAME"] == (
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        )
        assert secure_kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
        assert set(secure_kafka["KAFKA_SUPER_USERS"].split(";")) == {"User:ANONYMOUS", "User:admin"}

    def test_broker_tls_and_jaas_files(
        self, secured: dict[str, dict[str, Any]], secure_kafka: dict[str, str]
    ) -> None:
        """The keystore and its password file are in the folder mounted at /etc/kafka/secrets
        (or documented placeholders there); the JAAS file is committed and holds no secret."""
        secrets = _bind_source(secured["kafka"], "/etc/kafka/secrets")
        assert secrets == (SECURE_DIR / "broker").resolve()
        assert secrets.is_dir()
        assert secure_kafka["KAFKA_SSL_KEYSTORE_TYPE"] == "PKCS12"
        for key in (
            "KAFKA_SSL_KEYSTORE_FILENAME",
            "KAFKA_SSL_KEYSTORE_CREDENTIALS",
            "KAFKA_SSL_KEY_CREDENTIALS",
        ):
            _secure_file(secrets / secure_kafka[key])
        match = re.search(
            r"-Djava\.security\.auth\.login\.config=/etc/kafka/secrets/(\S+)", secure_kafka["KAFKA_OPTS"]
        )
        assert match, secure_kafka["KAFKA_OPTS"]
        jaas = secrets / match.group(1)
        text = jaas.read_text(encoding="utf-8")
        assert "KafkaServer" in text
        assert "org.apache.kafka.common.security.scram.ScramLoginModule required" in text
        assert "password" not in text.lower()
        assert not _ignored(jaas)

    def test_healthcheck_uses_the_loopback_listener(
        self, secured: dict[str, dict[str, Any]], secure_kafka: dict[str, str]
    ) -> None:
        """The health check reaches the broker where no credentials are needed."""
        text = " ".join(secured["kafka"]["healthcheck"]["test"])
        match = re.search(r"--bootstrap-server[ =]127\.0\.0\.1:(\d+)", text)
        assert match, text
        listeners = _listeners(secure_kafka["KAFKA_LISTENERS"])
        assert ("127.0.0.1", int(match.group(1))) in listeners.values()

    def test_kafka_users_creates_every_principal(
        self, secured: dict[str, dict[str, Any]], secure_kafka: dict[str, str]
    ) -> None:
        """kafka-users runs the mounted scram-users.sh in the broker's network namespace, against
        the loopback listener, for admin and every principal of the ACL plan."""
        acls = pytest.importorskip("toolgate.operations._acls", reason="toolgate is not importable")
        service = secured["kafka-users"]
        assert service["image"] == secured["kafka"]["image"]
        assert service["network_mode"] == "service:kafka"
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        command = service["command"]
        assert command[0] == "bash"
        assert _bind_source(service, command[1]) == (SECURE_DIR / "scram-users.sh").resolve()
        script = (SECURE_DIR / "scram-users.sh").read_text(encoding="utf-8")
        assert "SCRAM-SHA-512=" in script
        default = re.search(r"SCRAM_BOOTSTRAP:-([0-9.]+):(\d+)\}", script)
        assert default, "scram-users.sh has no default bootstrap"
        listeners = _listeners(secure_kafka["KAFKA_LISTENERS"])
        name = next(n for n, addr in listeners.items() if addr == (default.group(1), int(default.group(2))))
        assert _protocols(secure_kafka)[name] == "PLAINTEXT"
        users = dict(item.split(":", 1) for item in _env(service)["SCRAM_USERS"].split(","))
        principals = {value.split(":", 1)[1] for value in vars(acls.Principals()).values()}
        assert set(users) == principals | {"admin"}
        for user, password in users.items():
            assert re.fullmatch(r"\$\{SCRAM_[A-Z]+_PASSWORD:\?[^}]+\}", password), user

    @pytest.mark.parametrize(
        ("service", "user"), [("topics", "admin"), ("acls", "admin"), ("worker", "toolgate")]
    )
    def test_toolgate_services_log_in_over_tls(
        self, secured: dict[str, dict[str, Any]], secure_kafka: dict[str, str], service: str, user: str
    ) -> None:
        """Each toolgate service: valid TOOLGATE_* settings, SASL_SSL with SCRAM-SHA-512 to a
        SASL_SSL listener the broker advertises as kafka, its own user, the password from .env,
        and the CA file from the mounted ops/kafka/secure/client."""
        config_module = pytest.importorskip("toolgate._config", reason="toolgate is not importable")
        env = {k: v for k, v in _env(secured[service]).items() if k.startswith("TOOLGATE_")}
        config = config_module.load_config(environ={k: _interpolated(v) for k, v in env.items()})
        sec = config.security
        assert (sec.protocol, sec.sasl_mechanism, sec.sasl_username) == ("SASL_SSL", "SCRAM-SHA-512", user)
        assert re.fullmatch(r"\$\{SCRAM_[A-Z]+_PASSWORD:\?[^}]+\}", env["TOOLGATE_SECURITY_SASL_PASSWORD"]), (
            service
        )
        host, _, port = config.bootstrap.rpartition(":")
        advertised = _listeners(secure_kafka["KAFKA_ADVERTISED_LISTENERS"])
        names = [name for name, addr in advertised.items() if addr == (host, int(port))]
        assert host == "kafka", config.bootstrap
        assert names, config.bootstrap
        assert _protocols(secure_kafka)[names[0]] == "SASL_SSL"
        cafile = PurePosixPath(str(sec.ssl_cafile))
        source = _bind_source(secured[service], str(cafile.parent))
        assert source == (SECURE_DIR / "client").resolve()
        assert source.is_dir()
        _secure_file(source / cafile.name)
        for source_path, _, read_only in _binds(secured[service]):
            if "secure" in source_path:
                assert read_only, f"{service}: {source_path} is writable"

    def test_admin_is_a_super_user_and_the_worker_is_not(
        self, secured: dict[str, dict[str, Any]], secure_kafka: dict[str, str]
    ) -> None:
        """Topics and ACLs are made by a super user; the worker has only what the ACLs grant."""
        supers = set(secure_kafka["KAFKA_SUPER_USERS"].split(";"))
        for name in ("topics", "acls"):
            assert f"User:{_env(secured[name])['TOOLGATE_SECURITY_SASL_USERNAME']}" in supers
        assert f"User:{_env(secured['worker'])['TOOLGATE_SECURITY_SASL_USERNAME']}" not in supers

    def test_acls_are_applied_before_the_worker_starts(self, secured: dict[str, dict[str, Any]]) -> None:
        """kafka-users, topics, acls and the worker start in that order, each after the previous
        one succeeded; the ACL step is `toolgate acls apply`, a command the CLI accepts."""
        cli = pytest.importorskip("toolgate.cli", reason="toolgate is not importable")
        acls = secured["acls"]
        assert acls["command"] == ["acls", "apply"]
        cli.build_parser().parse_args(acls["command"])
        assert acls.get("restart") == "no"
        chain = [("topics", "kafka-users"), ("acls", "topics"), ("worker", "acls")]
        for service, before in chain:
            condition = secured[service]["depends_on"][before]["condition"]
            assert condition == "service_completed_successfully", (service, before)
        assert secured["kafka-users"].get("restart") == "no"

    def test_passwords_come_from_dot_env(self, secure: dict[str, Any]) -> None:
        """No password is written in the file: each is a required variable that the README's
        .env recipe defines."""
        text = SECURE_FILE.read_text(encoding="utf-8")
        variables = set(_INTERPOLATION.findall(text))
        assert variables
        assert all(re.fullmatch(r"SCRAM_[A-Z]+_PASSWORD", v) for v in variables), variables
        assert not any(v.startswith("TOOLGATE_") for v in variables)  # not read as toolgate config
        readme = (SECURE_DIR / "README.md").read_text(encoding="utf-8")
        match = re.search(r"for who in ([A-Z ]+); do\s+echo \"SCRAM_\$\{who\}_PASSWORD=", readme)
        assert match, "the README has no .env recipe"
        assert variables == {f"SCRAM_{who}_PASSWORD" for who in match.group(1).split()}

    def test_secret_material_stays_out_of_git_and_the_image(self) -> None:
        """Keys, keystores, certificates and password files are ignored by git; the secure folder
        and .env are not in the image's build context."""
        for name in (
            "ca.key",
            "broker/kafka.keystore.p12",
            "broker/keystore_creds",
            "client/ca.pem",
            "client/truststore.p12",
            "broker.key",
        ):
            assert _ignored(SECURE_DIR / name), name
        for name in ("README.md", "scram-users.sh", "broker/broker_jaas.conf"):
            assert (SECURE_DIR / name).is_file(), name
            assert not _ignored(SECURE_DIR / name), name
        dockerignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        assert "ops/kafka/secure" in dockerignore
        assert ".env" in dockerignore
        assert "/.env" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
