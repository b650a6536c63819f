#!/usr/bin/env bash
# A local three-node RabbitMQ cluster for the tests, beside the default
# node (rabbit@localhost on 5672), which it leaves alone.
#
#   rabbit-cluster.sh up [NAME] [PORT]    start and join what is not running
#   rabbit-cluster.sh down [NAME] [PORT]  stop the nodes, delete their data
#
# The nodes are NAME-a, NAME-b and NAME-c @localhost (NAME defaults to
# hookline) with AMQP on PORT+1 to PORT+3 (PORT defaults to 5700: 5701,
# 5702, 5703) and Erlang distribution on 20000 above those, each with its
# own configuration, data and logs under /var/lib/rabbitmq/NAME-cluster.
# They run as the rabbitmq user, so they share the default node's Erlang
# cookie and rabbitmqctl reaches them. No plugins, one scheduler each: a
# node costs about 100 MB and starts in a few seconds. `up` is idempotent:
# nodes running and joined are left as they are, a stopped node is started
# again (it rejoins by itself), a fresh one is joined to NAME-a.
# services.sh --test runs `up`; tests that kill a node run `up` to bring it
# back, and may start a set of their own under another NAME and PORT.
set -euo pipefail

log() { printf 'rabbit-cluster: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

action=${1:-up} name=${2:-hookline} base=${3:-5700}
case $action in up | down) ;; *) echo "usage: $0 up|down [NAME] [PORT]" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { log "must run as root (it starts the nodes as the rabbitmq user)"; exit 1; }
dir=/var/lib/rabbitmq/$name-cluster
letters=(a b c)

node() { echo "$name-$1@localhost"; }
amqp_port() { echo "$((base + $2))"; }

as_rabbitmq() { # command... with the node's environment
  runuser -u rabbitmq -- env HOME=/var/lib/rabbitmq "$@"
}

ctl() { # node, rabbitmqctl arguments...
  local n=$1; shift
  as_rabbitmq /usr/lib/rabbitmq/bin/rabbitmqctl -q -n "$n" "$@"
}

start_node() { # letter, index
  local l=$1 i=$2 port=$((base + i)) d=$dir/$1
  mkdir -p "$d/data" "$d/log"
  printf 'listeners.tcp.local = 127.0.0.1:%s\n' "$port" >"$d/rabbitmq.conf"
  printf '[].\n' >"$d/enabled_plugins"
  : >"$d/rabbitmq-env.conf"
  chown -R rabbitmq:rabbitmq "$dir"
  log "starting $(node "$l") on port $port"
  as_rabbitmq \
    RABBITMQ_NODENAME="$(node "$l")" RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$((port + 20000))" \
    RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" RABBITMQ_MNESIA_BASE="$d/data" RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+S 1:1 +SDio 1 +A 4" \
    ERL_EPMD_ADDRESS=127.0.0.1 ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    /usr/lib/rabbitmq/bin/rabbitmq-server -detached
}

members() { ctl "$(node a)" cluster_status --formatter json 2>/dev/null || true; }

if [ "$action" = down ]; then
  for l in "${letters[@]}"; do
    ctl "$(node "$l")" stop >/dev/null 2>&1 && log "stopped $(node "$l")" || true
  done
  rm -rf "$dir"
  exit 0
fi

start=$SECONDS
for i in 1 2 3; do
  l=${letters[$((i - 1))]}
  port_open "$((base + i))" || start_node "$l" "$i"
done
for i in 1 2 3; do
  l=${letters[$((i - 1))]}
  timeout 120 bash -c "until (exec 3<>/dev/tcp/127.0.0.1/$((base + i))) 2>/dev/null; do sleep 0.2; done" ||
    { log "$(node "$l") did not open port $((base + i)) within 120s (logs: $dir/$l/log)"; exit 1; }
  ctl "$(node "$l")" await_startup
done
for l in b c; do
  if ! members | grep -q "\"$(node "$l")\""; then
    log "joining $(node "$l") to $(node a)"
    # join_cluster prints errors about tables of the node it stopped; its
    # status says whether it joined.
    ctl "$(node "$l")" stop_app
    ctl "$(node "$l")" join_cluster "$(node a)" 2>/dev/null
    ctl "$(node "$l")" start_app
  fi
done
running=$(members | grep -o '"running_nodes":\[[^]]*\]' || true)
for l in "${letters[@]}"; do
  [[ $running == *"\"$(node "$l")\""* ]] || { log "$(node "$l") is not running in the cluster: $running"; exit 1; }
done
log "cluster $(node a) $(node b) $(node c) is up on ports $((base + 1))-$((base + 3)) ($((SECONDS - start))s)"
