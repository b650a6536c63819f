#!/usr/bin/env bash
# Starts the whole system on this machine: the local services if needed,
# then migrations, then api, worker and dlq together with prefixed logs.
# Ctrl-C (or SIGTERM) stops all three gracefully.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Go's own installer puts it in /usr/local/go/bin, not always on PATH.
command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin

bash deploy/local/services.sh
mkdir -p bin
go build -o bin/ ./cmd/...

export HOOKLINE_CONFIG=${HOOKLINE_CONFIG:-config/hookline.yaml}
./bin/api migrate

pids=()
run() { # name, env...
  local name=$1; shift
  env "$@" "./bin/$name" > >(trap '' INT TERM; exec sed -u "s/^/[$name] /") 2>&1 &
  pids+=($!)
}
stop() {
  trap - INT TERM
  echo "stopping api, worker and dlq" >&2
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  exit 0
}
trap stop INT TERM

run api
run worker METRICS_ADDR="${WORKER_METRICS_ADDR:-127.0.0.1:9091}"
run dlq METRICS_ADDR="${DLQ_METRICS_ADDR:-127.0.0.1:9092}"
echo "hookline is starting: API on http://${API_ADDR:-127.0.0.1:8080} (Ctrl-C stops everything)" >&2
wait -n "${pids[@]}" || true
stop
