# Targets document the commands; `make test` is what CI runs.
GO ?= go

.PHONY: build test vet bench fuzz

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/runner ./cmd/runner

test:
	$(GO) test -race -count=1 -timeout 15m ./...

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./internal/wire/
