# Every target creates (or reuses) the project virtualenv first, so each one
# works on a fresh machine. The stamp re-installs when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv test lint unit e2e promql-test crd-test crd-server crd-server-down dev-up dev-down demo demo-down crd bench reliability images release clean

venv: $(STAMP)

$(STAMP): pyproject.toml devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[operator,dev,scan]' -e ./devtools
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy runtime/ascend_pd_runtime operator/ascend_pd_operator devtools/ascend_pd_dev
	$(BIN)/lint-imports

# The README's test command: lint, types, then every test tier side by side (unit, e2e,
# Prometheus e2e, reliability, SGLang, CRD server), each cluster tier on a control plane of its own; ends
# with a table of each tier's time. One tier: make test TIERS="--only e2e".
test: lint
	$(BIN)/python -m ascend_pd_dev.cli.tiers $(TIERS)

unit: venv
	$(BIN)/pytest -m "not e2e and not sglang and not crdserver"

# The chart's alerts and the dashboard's queries, judged by the real Prometheus and promtool.
promql-test: venv
	$(BIN)/pytest -m prometheus tests/prometheus

# The CRD on the newest Kubernetes (its kube-apiserver alone, from the dev cluster's build).
crd-test: venv
	$(BIN)/pytest -m crdserver tests/crdserver

crd-server: venv
	$(BIN)/ascend-pd-dev cluster crd-server up

crd-server-down: venv
	$(BIN)/ascend-pd-dev cluster crd-server down

e2e: venv
	$(BIN)/pytest -m e2e tests/e2e

dev-up: venv
	$(BIN)/ascend-pd-dev cluster up

dev-down: venv
	$(BIN)/ascend-pd-dev cluster down

# The README's main command.
demo: venv
	$(BIN)/ascend-pd-dev demo

demo-down: venv
	$(BIN)/ascend-pd-dev demo --down

crd: venv
	$(BIN)/ascend-pd crd --write

bench: venv
	$(BIN)/python -m bench

# Reliability and security scenarios on the local control plane; prints the table and
# writes reliability/results.json.
reliability: venv
	$(BIN)/python -m reliability

# The operator and runtime images with docker, podman or buildah (not part of `make test`):
#   make images REGISTRY=registry.example.com/llm SGLANG_VERSION=0.5.14 CHIP=a2|a3 [BASE_IMAGE=...]
# Settings: devtools/images.sh. Refuses, naming them, when no engine is on PATH.
images:
	bash devtools/images.sh

# A release (docs/development.md, "Cutting a release"): checks that the CHANGELOG, the chart,
# the Python packages and the examples' image tags all say VERSION (at its commit in
# releases.yaml once recorded), packages the chart into $(DIST), builds the images through
# `make images` and prints the push commands:
#   make release VERSION=0.1.0 DRY_RUN=1      the check and the package; image builds printed
#   make release VERSION=0.1.0 REGISTRY=registry.example.com/llm [PUSH=1]
# DRY_RUN=1 needs no container engine; PUSH=1 pushes the images and the chart (never with
# DRY_RUN=1). Image settings as for `make images`; CHIPS (default "a2 a3") picks the runtimes.
DIST ?= dist
release: venv
	@test -n "$(VERSION)" || { echo "error: set VERSION, e.g. make release VERSION=0.1.0" >&2; exit 1; }
	$(BIN)/ascend-pd-dev release "$(VERSION)" --dist "$(DIST)" \
		$(if $(filter 1,$(DRY_RUN)),--dry-run) $(if $(filter 1,$(PUSH)),--push)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
