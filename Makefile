# Targets document the commands; `make test` is what CI runs.
GO ?= go
SHELL := /bin/bash

.PHONY: build test test-short vet bench fuzz generate

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/runner ./cmd/runner

# The report keeps what a person needs: each package's result, the output
# of every failed test, and at the end the skipped (gated) tests with the
# variable each needs.
test:
	set -o pipefail; $(GO) test -race -count=1 -timeout 30m -json ./... | $(GO) run ./internal/testreport

# The fast loop while editing: the unit tests, without the race detector;
# the end-to-end ones (the tenant suite, real harnesses, the slowest
# sandbox and Daytona tests) skip under -short. `make test` runs them all.
test-short:
	$(GO) test -short ./...

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./internal/wire/

# Rewrites what is generated from code: the settings tables of
# docs/configuration.md and the README (internal/config).
generate:
	$(GO) generate ./...
