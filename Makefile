# hookline: `make run` starts everything, `make test` runs every test.
GO ?= go

.PHONY: run test build vet services

run:
	bash deploy/local/run.sh

test: services
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 10m ./...

build:
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet ./...

services:
	bash deploy/local/services.sh
