# Fulfillment service. `make help` lists the targets.
#
# Tools (buf, the protoc plugins and golangci-lint) are pinned in tools/go.mod
# and installed into .cache/bin; PostgreSQL comes from DATABASE_URL or from a throwaway
# cluster started by rig/cmd/pgrun from the machine's server binaries.

SHELL      := /bin/bash
TOOLS_BIN  := $(CURDIR)/.cache/bin
# Two stamps: make generate needs buf and the protoc plugins only; make lint
# also golangci-lint, the longest to build.
GEN_TOOLS  := $(TOOLS_BIN)/.stamp-generate
LINT_TOOLS := $(TOOLS_BIN)/.stamp-lint
TOOLS      := $(GEN_TOOLS) $(LINT_TOOLS)
export PATH := $(TOOLS_BIN):$(PATH)

GO_TEST_FLAGS ?= -race -shuffle=on -count=1 -timeout=10m

# What --version and fulfillment_build_info say of a binary make builds.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
COMMIT_TIME ?= $(shell TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ $(COMMIT) 2>/dev/null)
BUILT_AT := $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO := github.com/fulfillplatform/fulfillment/internal/buildinfo
LDFLAGS  := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).commitTime=$(COMMIT_TIME) \
	-X $(BUILDINFO).builtAt=$(BUILT_AT)

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: run
run: ## Run the service on a local throwaway PostgreSQL (or $DATABASE_URL), with a dev config.
	@echo "make run: building fulfillmentd, fulfillctl and pgrun" >&2
	@go build -ldflags '$(LDFLAGS)' -o .cache/ ./cmd/fulfillmentd ./cmd/fulfillctl ./rig/cmd/pgrun
	@scripts/dev-config.sh .data/dev
	@echo "make run: starting PostgreSQL and fulfillmentd (the banner follows once it serves; Ctrl-C stops both)" >&2
	@.cache/pgrun --dir .data/postgres --durable --ready http://$${FULFILLMENT_LISTEN_HTTP:-127.0.0.1:8080}/readyz --banner .data/dev/banner.txt -- \
		.cache/fulfillmentd serve --config .data/dev/config.yaml --migrate

.PHONY: test
test: test-alerts ## Run every test against a real PostgreSQL (throwaway cluster unless $DATABASE_URL is set), and the alert rules' tests.
	go run ./rig/cmd/pgrun -- go test $(GO_TEST_FLAGS) ./...

.PHONY: test-alerts
test-alerts: ## Check the Prometheus alert rules and run their unit tests (promtool, from Debian's prometheus package).
	@if ! command -v promtool >/dev/null; then \
		if [ -n "$$CI" ]; then echo "promtool not found: install Debian's prometheus package"; exit 1; fi; \
		echo "make test-alerts: skipped, promtool not found (Debian: apt-get install prometheus)"; exit 0; fi; \
	promtool check rules deploy/prometheus/fulfillment.rules.yml && \
	cd deploy/prometheus && promtool test rules fulfillment.rules.test.yml

.PHONY: bench
bench: ## Benchmark: raw-PostgreSQL baseline vs webhook ingest (Yolfi, T-Bank), pipeline latency, reads, outbox deliveries, 1M-event history; writes results/ (JSON, Markdown, PNG). About 10 min on 2 cores.
	go run ./rig/cmd/bench $(BENCH_FLAGS)

.PHONY: bench-quick
bench-quick: ## Smoke test of make bench (2 s phases, 20k history rows).
	go run ./rig/cmd/bench --quick

.PHONY: chaos
chaos: ## Kill fulfillmentd and PostgreSQL at random under provider-like load; check nothing is lost or doubled (a failing run's folder is kept).
	go build -o .cache/fulfillmentd ./cmd/fulfillmentd
	go run ./rig/cmd/chaos --binary .cache/fulfillmentd --keep $(CHAOS_FLAGS)

# BENCHTIME: go test -benchtime for make bench-micro. CI's 100x runs each
# benchmark 100 times, to keep them compiling and passing; measure with e.g.
# make bench-micro BENCHTIME=2s.
BENCHTIME ?= 100x

.PHONY: bench-micro
bench-micro: ## Go micro-benchmarks (-benchmem) of the gateway, adapters, state machine and inbox writers, on a throwaway PostgreSQL; each for BENCHTIME (100x unless set, e.g. BENCHTIME=2s).
	go run ./rig/cmd/pgrun -- go test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./ingest/... ./fulfillment/ ./storage/

FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## Run the input fuzz targets (Yolfi and T-Bank verify + parse, Standard Webhooks verify, the strict JSON reader) for FUZZTIME each (10s unless set, e.g. FUZZTIME=1m).
	go test -run='^$$' -fuzz='^FuzzVerify$$' -fuzztime=$(FUZZTIME) ./ingest/yolfi/
	go test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./ingest/yolfi/
	go test -run='^$$' -fuzz='^FuzzVerify$$' -fuzztime=$(FUZZTIME) ./ingest/tbank/
	go test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) ./ingest/tbank/
	go test -run='^$$' -fuzz='^FuzzVerify$$' -fuzztime=$(FUZZTIME) ./outbox/stdwebhooks/
	go test -run='^$$' -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME) ./ingest/wire/

# Not in CI: a failure here is a finding to triage (a rule that depends on how
# events are batched, or the model's), not a regression of a change.
.PHONY: fuzz-rules
fuzz-rules: ## Fuzz the batch step with whole stories of an order and of a subscription for FUZZTIME each.
	go test -run='^$$' -fuzz='^FuzzOrderStory$$' -fuzztime=$(FUZZTIME) ./fulfillment/
	go test -run='^$$' -fuzz='^FuzzSubscriptionStory$$' -fuzztime=$(FUZZTIME) ./fulfillment/

.PHONY: build
build: ## Build fulfillmentd and fulfillctl into .cache/.
	go build -ldflags '$(LDFLAGS)' -o .cache/ ./cmd/fulfillmentd ./cmd/fulfillctl

$(GEN_TOOLS): tools/go.mod tools/go.sum
	cd tools && GOBIN=$(TOOLS_BIN) go install github.com/bufbuild/buf/cmd/buf \
		github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway \
		github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 \
		google.golang.org/grpc/cmd/protoc-gen-go-grpc google.golang.org/protobuf/cmd/protoc-gen-go
	@touch $@

$(LINT_TOOLS): tools/go.mod tools/go.sum
	cd tools && GOBIN=$(TOOLS_BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	@touch $@

.PHONY: tools
tools: $(TOOLS) ## Install the pinned buf, protoc plugins and golangci-lint into .cache/bin.

# The OpenAPI document is finished by rig/cmd/apidocs, which marks x-nullable
# what the REST gateway may answer as null (protoc-gen-openapiv2 cannot say so).
.PHONY: generate
generate: $(GEN_TOOLS) ## Regenerate gen/ and the OpenAPI document from proto/.
	buf generate
	go run ./rig/cmd/apidocs server/apidocs/fulfillment.swagger.json

.PHONY: check-generate
check-generate: generate ## Fail when generated code is not what proto/ produces.
	@if [ -n "$$(git status --porcelain -- gen server/apidocs)" ]; then \
		echo "generated code is stale: run make generate and commit"; \
		git status --porcelain -- gen server/apidocs; exit 1; fi

.PHONY: lint
lint: $(TOOLS) ## go vet, gofmt, golangci-lint (.golangci.yml), buf lint and buf format.
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^gen/'); echo "gofmt needed"; exit 1; }
	golangci-lint run ./...
	buf lint
	buf format -d --exit-code

# What `make breaking` compares proto/ with: the local main branch, else
# origin/main (a clone of a feature branch has no local main).
BREAKING_AGAINST ?= $(shell git show-ref --verify --quiet refs/heads/main && echo branch=main || echo ref=origin/main)

# make breaking: run it on a feature branch before merging. It compares the
# API in proto/ in the work tree with proto/ on main and fails on a change
# that breaks generated code or the wire format for existing clients (buf.yaml:
# breaking.use). On main itself it compares main with main and always passes,
# which is why CI (which runs on main) does not run it.
.PHONY: breaking
breaking: $(GEN_TOOLS) ## Fail when proto/ breaks compatibility with main (run on a feature branch before merging).
	buf breaking --against '.git#$(BREAKING_AGAINST)'

.PHONY: clean
clean: ## Remove what make run and make build created: binaries, the dev config and database (wherever it lives).
	@if [ -d .data/postgres ] || [ -x .cache/pgrun ]; then go run ./rig/cmd/pgrun --dir .data/postgres --clean; fi
	rm -rf .data .cache/fulfillmentd .cache/fulfillctl .cache/pgrun .cache/loadgen .cache/fakebank
