# inferq: `make demo` runs the pipeline on a small workload, `make test` runs the suite.
# Both set up what they need: a virtualenv with the package and the Kafka jars from Maven Central.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed


.PHONY: helm test-helm setup jars redis-server demo test test-cluster demo-regions bench bench-scheduling bench-fairness bench-memory bench-latency bench-delivery bench-throughput bench-replay bench-tokens bench-fallback test-unit check lint format typecheck broker-up broker-down clean
.PHONY: setup jars redis-server demo test test-cluster test-container image demo-regions bench bench-scheduling bench-fairness bench-memory bench-latency bench-delivery bench-throughput bench-replay bench-tokens bench-fallback test-unit check lint format typecheck broker-up broker-down clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

jars: setup
	$(BIN)/inferq broker jars

# Debian's redis-server when missing: the dispatcher group's shared budget and its tests need it.
redis-server:
	bash infra/redis/ensure-redis.sh

# Debian's prometheus (and promtool) when missing: the alert rules' tests and the real-Prometheus test.
.PHONY: prometheus
prometheus:
	bash infra/prometheus/ensure-prometheus.sh

demo: setup jars
	$(BIN)/inferq demo

# Two clusters (central, eu) joined by MirrorMaker 2, a request round trip from eu: docs/deployment.md#regions
demo-regions: setup jars
	bash infra/regions/demo.sh

# Two workers, each with its own broker, Redis and Prometheus: the suite mostly waits on brokers and
# services, so on two cores it takes about half the time of one worker (13 min 22 s -> 7 min 24 s).
# A file's tests stay on one worker (--dist loadfile), so module fixtures are started once.
TEST_WORKERS ?= 2

test: setup jars redis-server prometheus
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

# Several brokers, MirrorMaker: kept out of `make test` (addopts: -m 'not cluster and not helm'); .ci/run runs them all.
test-cluster: setup jars redis-server
	$(BIN)/pytest -m cluster

# The wheel as a user installs it (fresh virtualenv, its own pip, outside the checkout), one request
# through its ingest, dispatcher and results: kept out of `make test`; .ci/run runs it.
.PHONY: test-wheel
test-wheel: setup jars
	$(BIN)/pytest -m wheel tests/packaging
# helm v4 for the chart in infra/helm/inferq: /opt/helm/helm when present, else built from the Go
# module proxy into .inferq/bin (git-ignored; about 3 minutes on 2 cores). No cluster needed.
HELM_VERSION := v4.3.2
HELM ?= $(shell test -x /opt/helm/helm && echo /opt/helm/helm || echo $(CURDIR)/.inferq/bin/helm)

helm:
	@test -x $(HELM) || GOBIN=$(CURDIR)/.inferq/bin go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	@$(HELM) version --short

# Lints and renders the chart, then checks the rendered manifests (tests/deploy, marker helm).
test-helm: setup helm
	$(HELM) lint infra/helm/inferq
	$(HELM) template inferq infra/helm/inferq > /dev/null
	HELM=$(HELM) $(BIN)/pytest -m helm tests/deploy
# inferq's image (infra/container/Dockerfile) built with podman on a Debian base made here (no
# registry needed), its services run against the local broker: kept out of `make test` (addopts:
# -m 'not container'); .ci/run runs it. CONTAINER_BASE=python:3.11-slim-bookworm where a registry is.
CONTAINER_BASE ?= localhost/debian-base:bookworm

# Debian's podman, runc (crun refuses this machine's cgroup layout) and mmdebstrap (the base image)
# when missing.
.PHONY: podman
podman:
	bash infra/ensure-debian-package.sh ensure-podman podman podman
	bash infra/ensure-debian-package.sh ensure-runc runc runc
	bash infra/ensure-debian-package.sh ensure-mmdebstrap mmdebstrap mmdebstrap

test-container: setup jars podman
	INFERQ_CONTAINER_BASE=$(CONTAINER_BASE) $(BIN)/pytest -m container tests/container

# The image alone: make image [BASE=...] [EXTRAS=tools] [IMAGE=localhost/inferq:latest]
IMAGE ?= localhost/inferq:latest
image: podman
	BASE=$(CONTAINER_BASE) EXTRAS=$(EXTRAS) bash infra/container/build.sh $(IMAGE)

test-unit: setup
	$(BIN)/pytest tests/unit

lint: setup
	$(BIN)/ruff check services tests
	$(BIN)/ruff format --check services tests

format: setup
	$(BIN)/ruff format services tests
	$(BIN)/ruff check --fix services tests

# docs/configuration.md from the settings models (tests/unit/test_configuration_doc.py fails when it is stale).
.PHONY: config-docs
config-docs: setup
	$(BIN)/inferq config docs > docs/configuration.md

typecheck: setup
	@mkdir -p .typecheck && ln -sfn ../services .typecheck/inferq
	$(BIN)/mypy

check: lint typecheck test

# Benchmarks write bench-results/*.md and *.json; they are never timed assertions in tests.
bench: bench-scheduling bench-fairness bench-memory bench-latency bench-delivery bench-throughput bench-replay bench-tokens bench-fallback

bench-scheduling: setup jars
	$(BIN)/inferq bench scheduling

bench-tokens: setup jars
	$(BIN)/inferq bench tokens

bench-fallback: setup jars
	$(BIN)/inferq bench fallback

bench-fairness: setup jars
	$(BIN)/inferq bench fairness

bench-memory: setup jars
	$(BIN)/inferq bench memory

bench-latency: setup jars
	$(BIN)/inferq bench latency

bench-delivery: setup jars
	$(BIN)/inferq bench delivery

bench-throughput: setup jars
	$(BIN)/inferq bench throughput --profile

bench-replay: setup jars
	$(BIN)/inferq bench replay

# Not in `make bench`: each starts a three-node cluster (or, takeover, a broker) of its own.
.PHONY: bench-cluster bench-takeover
bench-cluster: setup jars
	$(BIN)/inferq bench cluster-chaos
	$(BIN)/inferq bench throughput --cluster --dispatchers 1,2,4 --no-tracing

bench-takeover: setup jars
	$(BIN)/inferq bench takeover

broker-up: setup jars
	$(BIN)/inferq broker start

broker-down: setup
	$(BIN)/inferq broker stop

clean:
	-$(BIN)/inferq broker stop
	rm -rf .inferq
