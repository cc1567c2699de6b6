# sloscope: `make test` bootstraps everything it needs (virtualenv, pinned packages) and runs all checks.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)
# The native core (native/: Rust with PyO3, crates pinned by native/Cargo.lock) is compiled by maturin, the
# build backend, into exporter/sloscope/_native*.so; it is rebuilt whenever one of its sources changes.
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(sort $(wildcard native/src/*.rs native/src/*/*.rs))
STAMP := $(VENV)/.native-$(shell cat $(NATIVE_SOURCES) | sha1sum | cut -c1-12)
CARGO_MISSING := sloscope's native core needs the Rust toolchain (cargo, rustc >= 1.80; https://rustup.rs) to build

.PHONY: all test lint typecheck unit e2e native-test fuzz demo bench clean tools generate check-generated

all: test

$(PY_STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "sloscope needs Python >= 3.11 (found $$($(PYTHON) --version))"; exit 1; }
	@command -v cargo >/dev/null || { echo "$(CARGO_MISSING)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test,dev,review]'
	rm -f $(VENV)/.installed-* $(VENV)/.native-*
	touch $(PY_STAMP)

$(STAMP): $(PY_STAMP) $(NATIVE_SOURCES)
	@command -v cargo >/dev/null || { echo "$(CARGO_MISSING)"; exit 1; }
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.native-*
	touch $(STAMP)

venv: $(STAMP)

## native-test: the native core's own Rust unit tests (make test runs them).
native-test: $(STAMP)
	cd native && PYO3_PYTHON=$(CURDIR)/$(BIN)/python cargo test --quiet --locked

# Pinned tools built from source with the Go toolchain (module proxy): Prometheus and promtool.
PROMETHEUS_VERSION := v0.316.0
TOOLS := .tools/bin
TOOLS_STAMP := $(TOOLS)/.prometheus-$(PROMETHEUS_VERSION)

$(TOOLS_STAMP):
	@command -v go >/dev/null || { echo "make tools needs the Go toolchain (go) to build Prometheus $(PROMETHEUS_VERSION) and promtool"; exit 1; }
	mkdir -p $(TOOLS)
	GOBIN=$(CURDIR)/$(TOOLS) go install github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)
	GOBIN=$(CURDIR)/$(TOOLS) go install github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)
	rm -f $(TOOLS)/.prometheus-*
	touch $(TOOLS_STAMP)

# Jaeger (v2, an OpenTelemetry Collector distribution): the real OTLP receiver the OTLP export is tested against.
# Its go.mod has replace directives, so it is built from a scratch module that requires it as a tool.
JAEGER_VERSION := v1.76.0
JAEGER_STAMP := $(TOOLS)/.jaeger-$(JAEGER_VERSION)

$(JAEGER_STAMP):
	@command -v go >/dev/null || { echo "make tools needs the Go toolchain (go) to build Jaeger $(JAEGER_VERSION)"; exit 1; }
	mkdir -p $(TOOLS) .tools/jaeger-build
	cd .tools/jaeger-build && rm -f go.mod go.sum && go mod init sloscope.local/jaeger-build >/dev/null 2>&1 \
		&& go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@$(JAEGER_VERSION) \
		&& go build -o $(CURDIR)/$(TOOLS)/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
	rm -f $(TOOLS)/.jaeger-*
	touch $(JAEGER_STAMP)

# helm, for the chart tests (helm lint, helm template); its main package builds with a plain go install.
HELM_VERSION := v3.22.0
HELM_STAMP := $(TOOLS)/.helm-$(HELM_VERSION)

$(HELM_STAMP):
	@command -v go >/dev/null || { echo "make tools needs the Go toolchain (go) to build helm $(HELM_VERSION)"; exit 1; }
	mkdir -p $(TOOLS)
	GOBIN=$(CURDIR)/$(TOOLS) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	rm -f $(TOOLS)/.helm-*
	touch $(HELM_STAMP)

# The OpenTelemetry Collector (otelcol-sloscope), built with the Collector builder from the manifest
# tools/collector/builder-config.yaml: the scale-out tier's loadbalancing exporter and the benchmark's spanmetrics
# pipeline. Its components are pinned to the versions Jaeger uses and it is built after Jaeger, without the
# builder's -trimpath, so it reuses Jaeger's downloaded modules and compiled packages. The committed go.sum pins
# every module's hash (no checksum-database lookups at build time).
COLLECTOR_BUILDER_VERSION := v0.140.0
COLLECTOR_MANIFEST := tools/collector/builder-config.yaml
COLLECTOR_BUILD := .tools/collector-build
COLLECTOR_STAMP := $(TOOLS)/.otelcol-$(shell cat $(COLLECTOR_MANIFEST) tools/collector/go.sum | sha1sum | cut -c1-12)

$(COLLECTOR_STAMP): $(COLLECTOR_MANIFEST) tools/collector/go.sum | $(JAEGER_STAMP)
	@command -v go >/dev/null || { echo "make tools needs the Go toolchain (go) to build the OpenTelemetry Collector (builder $(COLLECTOR_BUILDER_VERSION))"; exit 1; }
	mkdir -p $(TOOLS) $(COLLECTOR_BUILD)/src
	GOBIN=$(CURDIR)/$(COLLECTOR_BUILD) go install go.opentelemetry.io/collector/cmd/builder@$(COLLECTOR_BUILDER_VERSION)
	cp tools/collector/go.sum $(COLLECTOR_BUILD)/src/go.sum
	$(COLLECTOR_BUILD)/builder --config=$(COLLECTOR_MANIFEST) --skip-compilation
	cd $(COLLECTOR_BUILD)/src && go build -ldflags='-s -w' -o $(CURDIR)/$(TOOLS)/otelcol-sloscope .
	rm -f $(TOOLS)/.otelcol-*
	touch $(COLLECTOR_STAMP)

# The real fleet of tests/e2e: the EPP of gateway-api-inference-extension v1.5.0, kube-apiserver v1.35.4, etcd v3.6.5,
# llm-d-inference-sim v0.10.2 and the ext_proc front (tools/fleet/gateway, our own code). Each is built from a scratch
# module under tools/fleet/ whose committed go.mod and go.sum pin every module and its hash; pure Go (CGO_ENABLED=0).
# The EPP's CRDs (InferencePool, InferenceObjective, ...) are copied from its module into .tools/bin/fleet-crds.
FLEET := tools/fleet
FLEET_MODULES := $(foreach m,epp kube-apiserver etcd inference-sim gateway,$(FLEET)/$(m)/go.mod $(FLEET)/$(m)/go.sum)
FLEET_STAMP := $(TOOLS)/.fleet-$(shell cat $(FLEET_MODULES) $(FLEET)/gateway/main.go Makefile | sha1sum | cut -c1-12)
FLEET_BUILD = cd $(FLEET)/$(1) && CGO_ENABLED=0 go build -ldflags='-s -w $(4)' -o $(CURDIR)/$(TOOLS)/$(2) $(3)
# The version stamps the upstream release builds set (GIE's Dockerfile; Kubernetes' hack/lib/version.sh), so the EPP's
# spans carry service.version v1.5.0 and the API server reports v1.35.4, as the released images do.
EPP_LDFLAGS := -X sigs.k8s.io/gateway-api-inference-extension/version.BuildRef=v1.5.0 \
	-X sigs.k8s.io/gateway-api-inference-extension/version.CommitSHA=df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=v1.35.4 -X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=35

$(FLEET_STAMP): $(FLEET_MODULES) $(FLEET)/gateway/main.go
	@command -v go >/dev/null || { echo "make tools needs the Go toolchain (go) to build the real fleet (the EPP, kube-apiserver, etcd, llm-d-inference-sim)"; exit 1; }
	mkdir -p $(TOOLS)
	$(call FLEET_BUILD,epp,epp,sigs.k8s.io/gateway-api-inference-extension/cmd/epp,$(EPP_LDFLAGS))
	$(call FLEET_BUILD,inference-sim,llm-d-inference-sim,github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim)
	$(call FLEET_BUILD,etcd,etcd,go.etcd.io/etcd/server/v3)
	$(call FLEET_BUILD,kube-apiserver,kube-apiserver,k8s.io/kubernetes/cmd/kube-apiserver,$(KUBE_LDFLAGS))
	$(call FLEET_BUILD,gateway,fleet-gateway,.)
	rm -rf $(TOOLS)/fleet-crds && mkdir -p $(TOOLS)/fleet-crds
	cp "$$(cd $(FLEET)/epp && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api-inference-extension)"/config/crd/bases/*.yaml $(TOOLS)/fleet-crds/
	chmod u+w $(TOOLS)/fleet-crds/*.yaml
	rm -f $(TOOLS)/.fleet-*
	touch $(FLEET_STAMP)

## tools: build the pinned Prometheus, promtool, Jaeger, the OpenTelemetry Collector, helm and the real fleet (the EPP,
## kube-apiserver, etcd, llm-d-inference-sim, the ext_proc front) into .tools/bin (tests, the demo and make bench use them).
tools: $(TOOLS_STAMP) $(JAEGER_STAMP) $(COLLECTOR_STAMP) $(HELM_STAMP) $(FLEET_STAMP)

# The integration tests that speak OTLP, run again against the Python fronts (listeners.grpc.server: grpcio and
# listeners.otlp_http_server: uvicorn; the native fronts serve by default).
FRONT_TESTS := $(addprefix tests/integration/,test_ingest_limits.py test_listener_limits.py test_listener_security.py \
	test_lifecycle.py test_overload.py test_hostile_bodies.py test_otlp_export.py test_self_observability.py \
	test_collector_scale_out.py test_upstream_shapes.py test_join_workers_serve.py test_bad_input.py \
	test_first_miss_counting.py test_serve_scenario.py test_url_credentials.py)

## test: lint, type-check, check the generated files and run every test suite (unit, integration against real servers).
test: lint typecheck native-test tools check-generated
	$(BIN)/pytest
	$(BIN)/pytest -q $(FRONT_TESTS) --grpc-server grpcio --http-server uvicorn

## generate: regenerate the committed dashboards and rules (and the chart's copies) from the built-in SLO spec.
generate: $(STAMP)
	$(BIN)/sloscope build --out .

## check-generated: fail when the committed dashboards/, alerts/ or the chart's copies differ from a fresh build.
check-generated: $(STAMP)
	rm -rf .generated-check && $(BIN)/sloscope build --out .generated-check > /dev/null
	@diff -r dashboards .generated-check/dashboards && diff -r alerts .generated-check/alerts \
		&& diff -r charts/sloscope/files .generated-check/charts/sloscope/files \
		|| { echo "dashboards/, alerts/ or charts/sloscope/files/ are stale: run make generate and commit the result"; rm -rf .generated-check; exit 1; }
	rm -rf .generated-check

## lint: ruff, the import floors (tests/unit/test_layers.py), the native stub against the compiled module
## (mypy.stubtest), rustfmt and clippy with warnings as errors on the toolchain of rust-toolchain.toml.
lint: $(STAMP)
	$(BIN)/ruff check exporter tests bench
	$(BIN)/ruff format --check exporter tests bench
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_layers.py
	$(BIN)/python -m mypy.stubtest sloscope._native
	cd native && cargo fmt --check && PYO3_PYTHON=$(CURDIR)/$(BIN)/python cargo clippy --quiet --locked --all-targets -- -D warnings

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit

## e2e: the real-fleet tests alone (tests/e2e, marker fleet): a real EPP (GIE v1.5.0), kube-apiserver, etcd and
## llm-d-inference-sim pods behind an ext_proc front, traced into sloscope; make test runs them too. Logs of every
## process stay in pytest's temporary folder (printed on a failed start). E2E_ARGS passes pytest options.
e2e: $(STAMP) tools
	$(BIN)/pytest -m fleet tests/e2e $(E2E_ARGS)

## fuzz: every decoder's fuzz target run long: FUZZ_EXAMPLES per target (default 100000), random inputs each run,
## failing examples kept in .hypothesis/ and replayed first next time. make test runs them for 200 examples each.
FUZZ_EXAMPLES ?= 100000
fuzz: $(STAMP)
	$(BIN)/pytest tests/fuzz --fuzz-examples=$(FUZZ_EXAMPLES) --hypothesis-show-statistics --timeout=0

## demo: a simulated fleet (pods, latency predictor, EPP-like router) against a real sloscope, about two minutes.
## DEMO_ARGS passes options, e.g. make demo DEMO_ARGS="--duration 300 --with-prometheus"; Ctrl-C stops it.
demo: $(STAMP)
	$(BIN)/sloscope demo $(DEMO_ARGS)

## bench: every benchmark in one run (bench/all.py, about 15 minutes): CPU per span of both join engines beside the
## OpenTelemetry Collector's spanmetrics on the same payloads (HTTP and gRPC, 1 and 2 cores) as ratios, bytes per pending
## trace, decode alone, self-tracing, the join, columnar evaluation, the parser, the sinks and the review per 10 M rows.
## BENCH_ARGS passes options, e.g. make bench BENCH_ARGS=--quick (a few minutes) or BENCH_ARGS="--only compare".
bench: $(STAMP) $(COLLECTOR_STAMP)
	$(BIN)/python bench/all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache native/target exporter/sloscope/_native*.so
