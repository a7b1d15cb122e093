# glm-operator developer commands. `make demo` runs the main job locally; `make test` runs everything CI runs.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help deps venv tools prometheus prometheus-operator-crds vllm vllm-flags contract lint unit integration e2e test cluster cluster-down demo generate recipes verify bench image image-save

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP) ## Python virtualenv with the package and test tools

# Debian packages (hack/system-packages.sh): installed as root, else one line naming the command.
# Each target that needs them checks first, before any build or download.
PACKAGES = bash hack/system-packages.sh

tools: ## Build the Kubernetes/etcd/KWOK/Helm/simulator binaries into the cache (no-op when cached)
	bash hack/build-tools.sh

prometheus: ## Install Prometheus from Debian's packages into the cache (no-op when cached)
	@if [ -f hack/prometheus.sh ]; then bash hack/prometheus.sh >/dev/null; fi

prometheus-operator-crds: ## Copy the PodMonitor CRD out of the pinned prometheus-operator Go module into the cache (~3 s cold)
	@bash hack/prometheus-operator-crds.sh >/dev/null

vllm: ## Install the default image's vLLM release from PyPI into the cache (~10 GB; no-op when cached)
	nice -n 10 bash hack/vllm.sh >/dev/null

vllm-flags: venv vllm ## Regenerate the extraArgs guard's flag list from vLLM's own parser, then the CRD
	$(BIN)/python -m devtools vllm-flags
	$(MAKE) generate

contract: venv vllm ## The vLLM contract test: rendered argv, registry and engine config against real vLLM
	$(BIN)/python -m pytest tests/contract -q

# The Go builds are CPU-bound and the vLLM download is network-bound: on a cold machine they run
# side by side (each is a no-op when cached).
deps: venv
	@$(MAKE) --no-print-directory -j3 tools prometheus prometheus-operator-crds vllm

lint: venv ## ruff, mypy, import contracts, unused code
	$(BIN)/ruff check operator devtools tests benchmarks
	$(BIN)/ruff format --check operator devtools tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/vulture

unit: venv ## unit tests: pure code, no external binary
	$(BIN)/python -m pytest tests/unit -q

integration: ## tests with a real binary but no full cluster: helm, haproxy, promtool/Prometheus, kube-apiserver + etcd
	@$(PACKAGES) integration
	@$(MAKE) --no-print-directory venv tools prometheus prometheus-operator-crds
	$(BIN)/python -m pytest tests/integration -q

e2e: ## e2e tests on the local control plane with simulated GPU nodes
	@$(PACKAGES) test
	@$(MAKE) --no-print-directory deps
	$(BIN)/python -m pytest tests/e2e -q

test: ## everything: lint, types, unit, integration, e2e and contract tests
	@$(PACKAGES) test
	@$(MAKE) --no-print-directory deps lint
	$(BIN)/python -m pytest tests/unit tests/integration tests/e2e tests/contract -q --durations=25

cluster: ## start the local cluster (kubeconfig in .cluster/kubeconfig)
	@$(PACKAGES) demo
	@$(MAKE) --no-print-directory deps
	$(BIN)/python -m tests.harness.local_cluster up

cluster-down: venv ## stop the local cluster (and the test tiers' ones, if GLM_KEEP_CLUSTER=1 left them up)
	$(BIN)/python -m tests.harness.local_cluster down
	@for d in .cluster-e2e .cluster-integration; do \
	  if [ -f $$d/state.json ]; then $(BIN)/python -m tests.harness.local_cluster down --state-dir $$d; fi; \
	done

demo: ## main job: local simulated GPU cluster, then show its GPU nodes
	@$(PACKAGES) demo
	@$(MAKE) --no-print-directory venv tools prometheus
	bash hack/demo.sh

generate: venv ## regenerate committed artifacts (CRDs and their chart copies, alerts, dashboards, install.yaml; python -m devtools)
	@if [ -f hack/generate.sh ]; then bash hack/generate.sh; fi

recipes: venv ## regenerate docs/recipes.md: the planner's shape per GLM model and machine next to the published recipes
	$(BIN)/python -m benchmarks.recipes --write

verify: generate ## fail if generated artifacts drift from the committed copies
	git diff --exit-code -- crds charts manifests

image: ## build the operator image (podman, else docker), tagged with the package version
	bash hack/image.sh build

image-save: ## build the image and write dist/glm-operator-<version>.tar (kind load image-archive, ctr import)
	bash hack/image.sh save
