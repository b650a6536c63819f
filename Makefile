# hookline: `make run` starts everything, `make test` runs every test.
# Both install what they need first when it is missing (Debian, as root).
GO ?= go
GOLANGCI_LINT_VERSION := 2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint
# Go's own installer puts it in /usr/local/go/bin, not always on PATH.
export PATH := $(PATH):/usr/local/go/bin

.PHONY: run test build vet lint apilint services test-services

run:
	bash deploy/local/run.sh

# Services and test tools first, then vet, lint, the OpenAPI linters and
# the tests.
# The tests leave nothing behind but the template database they clone
# theirs from, which test-cleanup.sh drops, whatever the outcome.
test: test-services vet lint apilint
	$(GO) test -race -count=1 -timeout 10m ./...; status=$$?; bash deploy/local/test-cleanup.sh; exit $$status

build:
	$(GO) build -o bin/ ./cmd/...

vet:
	$(GO) vet ./...

# golangci-lint at the pinned version, built into bin/tools on first use,
# with the settings in .golangci.yml.
lint:
	@$(GOLANGCI_LINT) version 2>/dev/null | grep -q ' $(GOLANGCI_LINT_VERSION) ' || \
		{ echo "installing golangci-lint v$(GOLANGCI_LINT_VERSION) into bin/tools" >&2; \
		GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(GOLANGCI_LINT_VERSION); }
	$(GOLANGCI_LINT) run ./...

# Spectral (spectral:oas) and Redocly (recommended) over openapi.json, at
# the versions pinned in deploy/local/apilint, installed into bin/tools on
# first use; any warning fails.
apilint:
	bash deploy/local/apilint/run.sh

# PostgreSQL, Redis and RabbitMQ up, with the hookline database.
services:
	bash deploy/local/services.sh

# The same, plus gcc, Chromium and promtool for the tests.
test-services:
	bash deploy/local/services.sh --test
