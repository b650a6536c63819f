# One image holds all three hookline processes; choose one with the command:
#   docker run hookline:local                          -> api (the default CMD)
#   docker run hookline:local /usr/local/bin/api migrate
#   docker run hookline:local /usr/local/bin/worker
#   docker run hookline:local /usr/local/bin/dlq
# Configuration is /etc/hookline/hookline.yaml (config/docker.yaml), overridden
# by environment variables; ADMIN_TOKEN must be set (production refuses to
# start without one of at least 16 characters).

# ---- build ------------------------------------------------------------------
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build

WORKDIR /src

# Download modules in their own layer so that source changes reuse it.
COPY go.mod go.sum ./
RUN go mod download

COPY . .

# Cross-compile for the target platform: BuildKit sets TARGETOS/TARGETARCH
# (when they are empty Go builds for the build machine). Static binaries: no cgo.
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/api ./cmd/worker ./cmd/dlq

# ---- runtime ----------------------------------------------------------------
# Distroless static: CA certificates and tzdata, no shell, runs as nonroot
# (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot

COPY --from=build /out/api /out/worker /out/dlq /usr/local/bin/
COPY config/docker.yaml /etc/hookline/hookline.yaml

ENV HOOKLINE_CONFIG=/etc/hookline/hookline.yaml
WORKDIR /
USER nonroot:nonroot

# 8080: api (REST, /healthz, /readyz, /metrics, /openapi.json).
# 9091: worker and dlq operations endpoints (/metrics, /healthz, /readyz).
EXPOSE 8080 9091

# No entrypoint, so that the command alone picks the binary.
ENTRYPOINT []
CMD ["/usr/local/bin/api"]
