#!/usr/bin/env bash
# Checks the README's two commands on a fresh Debian 12: in a minimal
# bookworm chroot (debootstrap, plus make, git and CA certificates) that
# has Go from /usr/local/go and nothing else, a clean clone of the
# repository runs `make run` until the api answers /healthz, stops it as
# Ctrl-C would, then runs `make test`; both have to install and start
# PostgreSQL, Redis, RabbitMQ and the test tools themselves. Prints each
# step's outcome and time.
#
# The chroot has a network namespace of its own, reached through a veth
# pair and NAT, so its services use the usual ports without meeting this
# machine's. Its processes are stopped, and mounts, namespace, veth and NAT
# rule removed, on exit. Needs root, on Debian or with debootstrap, iproute2,
# iptables and curl installed.
#
#   deploy/local/fresh-debian-check.sh [REPOSITORY]
#
# REPOSITORY is cloned, so only committed files count (default: this one).
# Environment:
#   FRESH_DIR       the base chroot and the run's copy (/var/tmp/hookline-fresh-debian)
#   FRESH_REBUILD=1 debootstrap the base again instead of reusing it
#   FRESH_MIRROR    Debian mirror (default: the one this machine's apt uses)
#   FRESH_GOMODCACHE a Go module cache read, read-only, before the module
#                   proxy, to save downloads (default: this machine's; "" for none)
#   FRESH_KEEP=1    keep the run's file system (FRESH_DIR/run) afterwards
#   FRESH_RUN_TIMEOUT seconds for `make run` to answer (1800)
#   FRESH_TEST_CMD  what stands for `make test`, for diagnosis only (make test)
set -euo pipefail

repo=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=${FRESH_DIR:-/var/tmp/hookline-fresh-debian}
base=$dir/base-bookworm
root=$dir/run
logs=$dir/logs/$(date +%Y%m%d-%H%M%S)
ns=hookline-fresh
veth_host=hlfresh0 veth_ns=hlfresh1
net=10.200.231 # .1 this machine's end, .2 the chroot's
run_timeout=${FRESH_RUN_TIMEOUT:-1800}

say() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'fresh-debian-check: %s\n' "$*" >&2; exit 1; }
now() { date +%s; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, network namespaces)"
for tool in debootstrap:debootstrap ip:iproute2 iptables:iptables curl:curl git:git; do
  command -v "${tool%%:*}" >/dev/null 2>&1 && continue
  [ -f /etc/debian_version ] || die "${tool%%:*} is not installed"
  say "installing ${tool#*:} with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${tool#*:}" ||
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${tool#*:}"; }
done
[ -x /usr/local/go/bin/go ] || die "no Go in /usr/local/go"

mounted_under() { awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/mounts; }

# --- cleanup ---------------------------------------------------------------
mounts=() ip_forward= rules=()
cleanup() {
  set +e
  local pids
  # Every process in the namespace or the chroot: the services first
  # politely, then anything left.
  for sig in TERM KILL; do
    pids=$( { ip netns pids "$ns" 2>/dev/null
      for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && echo "${p#/proc/}"
      done; } | sort -u)
    [ -n "$pids" ] || break
    kill "-$sig" $pids 2>/dev/null
    [ "$sig" = TERM ] && for _ in $(seq 50); do
      alive=0; for p in $pids; do [ -d "/proc/$p" ] && alive=1; done
      [ $alive = 0 ] && break; sleep 0.2
    done
  done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}"
  done
  for rule in "${rules[@]}"; do iptables $(printf -- "$rule" -D); done
  [ -n "$ip_forward" ] && sysctl -qw net.ipv4.ip_forward="$ip_forward"
  ip link del "$veth_host" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  if [ "${FRESH_KEEP:-0}" != 1 ] && [ -d "$root" ] && [ -z "$(mounted_under "$root")" ]; then
    rm -rf "$root"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'echo "fresh-debian-check: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

# --- the base chroot, built once ------------------------------------------
mirror=${FRESH_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v '^[[:space:]]*#' |
  grep -oE '(https?|file)://[^ ]*/debian/?( |$)' | head -n1 | tr -d ' ' || true)}
mirror=${mirror:-http://deb.debian.org/debian}
mirror=${mirror%/}
if [ "${FRESH_REBUILD:-0}" = 1 ] || [ ! -e "$base/.complete" ]; then
  say "building a minimal Debian bookworm in $base from $mirror"
  t=$(now)
  [ -z "$(mounted_under "$base")" ] || die "something is mounted under $base"
  rm -rf "$base.tmp" "$base"
  mkdir -p "$dir"
  debootstrap --variant=minbase --include=make,git,ca-certificates bookworm "$base.tmp" "$mirror" >&2
  # The sources of an installed system, and no package lists yet.
  sources() { printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n\n' \
    "$1" "$2" /usr/share/keyrings/debian-archive-keyring.gpg; }
  { sources "$mirror" "bookworm bookworm-updates"
    if curl -fsI -m 10 "$mirror-security/dists/bookworm-security/Release" >/dev/null 2>&1; then
      sources "$mirror-security" bookworm-security
    fi; } >"$base.tmp/etc/apt/sources.list.d/debian.sources"
  rm -f "$base.tmp/etc/apt/sources.list"
  echo fresh-bookworm >"$base.tmp/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 fresh-bookworm\n::1 localhost ip6-localhost ip6-loopback\n' \
    >"$base.tmp/etc/hosts"
  chroot "$base.tmp" apt-get clean
  rm -rf "$base.tmp"/var/lib/apt/lists/*
  touch "$base.tmp/.complete"
  mv "$base.tmp" "$base"
  say "base built in $(($(now) - t))s"
else
  say "reusing the base in $base (built $(date -r "$base/.complete" '+%F %T'))"
fi

# --- this run's copy, mounts and clone ------------------------------------
[ -z "$(mounted_under "$root")" ] || die "something is still mounted under $root"
rm -rf "$root"
cp -a "$base" "$root"
mkdir -p "$logs"

mnt() { # mount arguments..., target last
  mount "$@"; mounts+=("${!#}")
}
mnt -t proc proc "$root/proc"
mnt -t sysfs sysfs "$root/sys"
mnt --bind /dev "$root/dev"
mnt --bind /dev/pts "$root/dev/pts"
mnt -t tmpfs -o mode=1777,size=2g tmpfs "$root/dev/shm"
mkdir -p "$root/usr/local/go"
mnt --bind /usr/local/go "$root/usr/local/go"
mount -o remount,bind,ro "$root/usr/local/go"

modcache=${FRESH_GOMODCACHE-$(/usr/local/go/bin/go env GOMODCACHE 2>/dev/null || true)}
goproxy=https://proxy.golang.org,direct
if [ -n "$modcache" ] && [ -d "$modcache/cache/download" ]; then
  mkdir -p "$root/var/cache/host-go-modules"
  mnt --bind "$modcache/cache/download" "$root/var/cache/host-go-modules"
  mount -o remount,bind,ro "$root/var/cache/host-go-modules"
  goproxy=file:///var/cache/host-go-modules,$goproxy
fi

# Certificate authorities this machine adds to Debian's own (a TLS-inspecting
# proxy's, say): any machine on this network would trust them too.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi

git clone -q "$repo" "$root/root/hookline"
commit=$(git -C "$root/root/hookline" log -1 --format='%h %s')

# --- network: own namespace, veth pair, NAT -------------------------------
ip netns del "$ns" 2>/dev/null || true
ip link del "$veth_host" 2>/dev/null || true
ip netns add "$ns"
ip link add "$veth_host" type veth peer name "$veth_ns"
ip link set "$veth_ns" netns "$ns"
ip addr add "$net.1/30" dev "$veth_host"
ip link set "$veth_host" up
ip -n "$ns" addr add "$net.2/30" dev "$veth_ns"
ip -n "$ns" link set "$veth_ns" up
ip -n "$ns" link set lo up
ip -n "$ns" route add default via "$net.1"
ip_forward=$(sysctl -n net.ipv4.ip_forward)
sysctl -qw net.ipv4.ip_forward=1
for rule in "-t nat %s POSTROUTING -s $net.0/30 ! -o $veth_host -j MASQUERADE" \
  "%s FORWARD -i $veth_host -j ACCEPT" "%s FORWARD -o $veth_host -j ACCEPT"; do
  iptables $(printf -- "$rule" -I)
  rules+=("$rule")
done

# in_chroot COMMAND: runs a shell command as root in the repository's clone,
# with a fresh login's environment (Go is not on PATH: the Makefile finds it).
in_chroot() {
  ip netns exec "$ns" unshare --uts -- sh -c 'hostname fresh-bookworm && exec "$@"' sh \
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOPROXY="$goproxy" HOOKLINE_REQUIRE_BROWSER=1 \
    bash -c "cd /root/hookline && $1"
}
in_ns() { ip netns exec "$ns" "$@"; }
# stamp: each line prefixed with the seconds since it started (Ctrl-C is
# for the command, not for its log).
stamp() {
  trap '' INT
  local start=$SECONDS line
  while IFS= read -r line; do printf '%5d %s\n' $((SECONDS - start)) "$line"; done
}
# steps LOG: when each step began, by the lines make and services.sh print.
steps() {
  grep -E '^ *[0-9]+ (services: |hookline is starting|stopping api|bash deploy/local/|go (vet|test|build) |installing golangci|bin/tools/golangci-lint run|[0-9]+ issues|make: \*\*\*)' "$1" |
    sed -E 's/^ *([0-9]+) /    at \1s: /' >&2 || true
}

say "fresh Debian $(cat "$root/etc/debian_version"), commit $commit; logs in $logs"
in_chroot 'for p in psql pg_ctlcluster redis-server rabbitmq-server chromium promtool gcc jq go; do
  command -v $p >/dev/null && echo "  $p: present" || echo "  $p: missing"; done' >&2

# --- make run --------------------------------------------------------------
say "make run (log: $logs/make-run.log)"
t=$(now)
setsid bash -c "echo \$\$ >$logs/make-run.pgid; $(declare -f in_chroot stamp); ns=$ns root=$root goproxy=$goproxy
  in_chroot 'exec make run' 2>&1 | stamp" >"$logs/make-run.log" 2>&1 </dev/null &
run_pid=$!
for _ in $(seq 50); do [ -s "$logs/make-run.pgid" ] && break; sleep 0.1; done
run_pgid=$(cat "$logs/make-run.pgid")
run_result=fail
while [ $(($(now) - t)) -lt "$run_timeout" ]; do
  if in_ns curl -fsS -m 2 -o /dev/null http://127.0.0.1:8080/healthz 2>/dev/null; then
    run_result=ok; break
  fi
  kill -0 "$run_pid" 2>/dev/null || break
  sleep 2
done
run_secs=$(($(now) - t))
if [ "$run_result" = ok ]; then
  say "make run: the api answered /healthz after ${run_secs}s; stopping it with SIGINT as Ctrl-C would"
  ready=$(in_ns curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/readyz || true)
  echo "  /readyz: $ready" >&2
  kill -INT -- "-$run_pgid" 2>/dev/null || true
  for _ in $(seq 150); do kill -0 -- "-$run_pgid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 -- "-$run_pgid" 2>/dev/null; then
    echo "  make run did not stop within 30s" >&2; run_result=fail
  fi
else
  say "make run: FAILED after ${run_secs}s; its last lines:"
  tail -n 30 "$logs/make-run.log" >&2
fi
steps "$logs/make-run.log"

# --- make test -------------------------------------------------------------
test_cmd=${FRESH_TEST_CMD:-make test}
say "$test_cmd (log: $logs/make-test.log)"
t=$(now)
set +e
in_chroot "$test_cmd" 2>&1 </dev/null | stamp >"$logs/make-test.log"
test_rc=${PIPESTATUS[0]}
set -e
test_secs=$(($(now) - t))
steps "$logs/make-test.log"
grep -E '^ *[0-9]+ (ok|FAIL|---|panic:)' "$logs/make-test.log" | grep -vE '^ *[0-9]+ --- (PASS|SKIP)' >&2 || true
[ "$test_rc" = 0 ] || { echo "  last lines:" >&2; tail -n 40 "$logs/make-test.log" >&2; }

# --- services again, all up: should be quick -------------------------------
t=$EPOCHREALTIME
in_chroot 'bash deploy/local/services.sh --test' >"$logs/services-again.log" 2>&1 </dev/null && again=ok || again=fail
again_secs=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

say "summary ($commit)"
printf '  make run:  %s (api healthy after %ss)\n' "$run_result" "$run_secs"
printf '  %s: %s (exit %s, %ss)\n' "$test_cmd" "$([ "$test_rc" = 0 ] && echo ok || echo FAIL)" "$test_rc" "$test_secs"
printf '  services.sh --test again, all up: %s (%ss)\n' "$again" "$again_secs"
[ "$run_result" = ok ] && [ "$test_rc" = 0 ] && [ "$again" = ok ]
