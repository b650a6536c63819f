#!/usr/bin/env bash
# Makes sure PostgreSQL, Redis and RabbitMQ answer on their default local
# ports, starting the Debian-installed servers that do not, and creates the
# hookline database. Used by `make run`, `make test` and .ci/run.
set -euo pipefail

log() { printf 'services: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  for _ in $(seq "$((secs * 5))"); do
    if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
    sleep 0.2
  done
  log "$name did not come up within ${secs}s"; return 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || {
    log "$1 is not installed; on Debian: apt-get install -y $2"; exit 1; }
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! port_open 5432; then
  need pg_ctlcluster postgresql
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
fi
need pg_isready postgresql-client
wait_for PostgreSQL 60 pg_up

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
if ! port_open 6379; then
  need redis-server redis-server
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_for Redis 30 redis_up

rabbit_up() { port_open 5672; }
if ! port_open 5672; then
  need rabbitmq-server rabbitmq-server
  log "starting RabbitMQ"
  rabbitmq-server -detached
fi
wait_for RabbitMQ 120 rabbit_up
if command -v rabbitmqctl >/dev/null 2>&1; then
  timeout 120 rabbitmqctl -q await_startup >/dev/null 2>&1 || log "rabbitmqctl await_startup did not confirm; continuing"
fi

db=${HOOKLINE_DB:-hookline}
if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
  log "creating database $db"
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE \"$db\""
fi
