#!/usr/bin/env bash
# Makes sure PostgreSQL, Redis and RabbitMQ answer on their default local
# ports, starting the servers that do not, and creates the hookline
# database. Used by `make run`, `make test` and .ci/run.
#
# Programs that are missing are installed from Debian's packages, all in
# one apt-get install, when this is Debian and we are root; anywhere else
# the script prints the command to run and stops. With --test it also
# starts a local Redis Cluster (ports below) and
# brings what the tests need besides the services: gcc (the race
# detector), Chromium (the browser tests of the console and of the API
# reference at /docs) and promtool (the alert rule checks); the last two
# are optional, their tests skip without them. It also starts a local
# three-node RabbitMQ cluster beside the default node (rabbit-cluster.sh).
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

pg_version() { ls /etc/postgresql | head -n1; }

for_tests=0
case ${1:-} in
  --test) for_tests=1 ;;
  "") ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac

# What to install: needed packages (nothing works without them) and
# optional ones (only some tests need them).
needed=() optional=() missing=()
add() { # array, package
  local -n list=$1
  [[ " ${list[*]} " == *" $2 "* ]] || list+=("$2")
}
want() { # program, package: needed unless the program is on PATH
  command -v "$1" >/dev/null 2>&1 || { add needed "$2"; add missing "$1"; }
}
port_open 5432 || want pg_ctlcluster postgresql
want pg_isready postgresql-client
want psql postgresql-client
port_open 6379 || want redis-server redis-server
want redis-cli redis-tools
port_open 5672 || want rabbitmq-server rabbitmq-server
want jq jq # the README's examples
want curl curl
if [ "$for_tests" = 1 ]; then
  want gcc gcc
  [ -e /usr/include/stdio.h ] || { add needed libc6-dev; add missing "C headers"; }
  [ -x /usr/bin/chromium ] || add optional chromium
  command -v promtool >/dev/null 2>&1 || add optional prometheus
fi

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local cmd=(apt-get install -y --no-install-recommends "$@")
  "${cmd[@]}" >&2 && return 0
  # A fresh machine may have no package lists yet, or stale ones.
  log "apt-get install failed; updating the package lists and trying again"
  apt-get update >&2 && "${cmd[@]}" >&2
}

installed_pg=0
packages=("${needed[@]}" "${optional[@]}")
if [ "${#packages[@]}" -gt 0 ]; then
  if [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    log "installing ${packages[*]} with apt-get"
    apt_install "${packages[@]}" || { log "could not install ${packages[*]}"; exit 1; }
    if [[ " ${needed[*]} " == *" postgresql "* ]]; then installed_pg=1; fi
  else
    sudo=; [ "$(id -u)" = 0 ] || sudo="sudo "
    cmd="${sudo}apt-get install -y --no-install-recommends ${packages[*]}"
    [ -f /etc/debian_version ] || cmd="$cmd (or your system's packages for them)"
    if [ "${#needed[@]}" -gt 0 ]; then
      log "missing ${missing[*]}; install with: $cmd"
      exit 1
    fi
    log "missing ${optional[*]} (the tests that need them skip); install with: $cmd"
  fi
fi

# A cluster installed just now: local TCP connections need no password, as
# the default URLs (postgres://postgres@127.0.0.1:5432/...) expect. An
# existing installation's authentication is left as it is.
if [ "$installed_pg" = 1 ]; then
  hba=/etc/postgresql/$(pg_version)/main/pg_hba.conf
  log "trusting local TCP connections in $hba"
  { printf '# local development (deploy/local/services.sh): TCP from this machine needs no password\n'
    printf 'host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n\n'
    cat "$hba"; } >"$hba.new"
  cat "$hba.new" >"$hba" # keeps the file's owner and mode
  rm -f "$hba.new"
  # Started by the package (systemd machines): read the new rules.
  if port_open 5432; then pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main reload || true; fi
fi

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! port_open 5432; then
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main start
fi
wait_for PostgreSQL 60 pg_up

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
if ! port_open 6379; then
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_for Redis 30 redis_up

# For the tests only: a Redis Cluster of three masters and three replicas
# on ports 7000-7005 (internal/redistest). No persistence; each node's
# node table lives in its own directory under /var/lib/redis-cluster, made
# anew whenever its process is not running. The tests that kill a node or
# fail a primary over start their own clusters and Sentinel setups.
cluster_ports=(7000 7001 7002 7003 7004 7005)
redis_node() { # port, dir, extra redis-server arguments...
  local port=$1 dir=$2; shift 2
  rm -rf "$dir"; mkdir -p "$dir"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$dir" --logfile "$dir/redis.log" "$@"
}
cluster_ok() { redis-cli -p 7000 cluster info | grep -q '^cluster_state:ok'; }
start_cluster() {
  local port started=0
  for port in "${cluster_ports[@]}"; do
    port_open "$port" && continue
    log "starting Redis Cluster node $port"
    redis_node "$port" "/var/lib/redis-cluster/$port" --cluster-enabled yes \
      --cluster-config-file "/var/lib/redis-cluster/$port/nodes.conf" --cluster-node-timeout 5000
    started=1
  done
  for port in "${cluster_ports[@]}"; do wait_for "Redis node $port" 30 redis-cli -p "$port" ping; done
  # Nodes started just now know no cluster: a cluster that lost some of
  # its nodes is made anew with all six.
  if [ "$started" = 1 ] && ! cluster_ok; then
    for port in "${cluster_ports[@]}"; do redis-cli -p "$port" flushall >/dev/null; redis-cli -p "$port" cluster reset hard >/dev/null; done
    log "creating the Redis Cluster on ports ${cluster_ports[*]}"
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${cluster_ports[@]}") --cluster-replicas 1 --cluster-yes >/dev/null
  fi
  wait_for "Redis Cluster" 60 cluster_ok
}
if [ "$for_tests" = 1 ]; then start_cluster; fi

rabbit_up() { port_open 5672; }
if ! port_open 5672; then
  log "starting RabbitMQ"
  rabbitmq-server -detached
  wait_for RabbitMQ 120 rabbit_up
  if command -v rabbitmqctl >/dev/null 2>&1; then
    timeout 120 rabbitmqctl -q await_startup >/dev/null 2>&1 || log "rabbitmqctl await_startup did not confirm; continuing"
  fi
else
  log "RabbitMQ is up"
fi

db=${HOOKLINE_DB:-hookline}
if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
  log "creating database $db"
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE \"$db\""
fi

# The RabbitMQ cluster tests (TEST_AMQP_CLUSTER_URL, HOOKLINE_REQUIRE_CLUSTER)
# need three more nodes, hookline-a, -b and -c @localhost on 5701-5703.
if [ "$for_tests" = 1 ]; then
  if [ "$(id -u)" = 0 ]; then
    bash "$(dirname "$0")/rabbit-cluster.sh" up
  else
    log "not root: the local RabbitMQ cluster is not started (its tests skip); run: sudo bash $(dirname "$0")/rabbit-cluster.sh up"
  fi
fi
