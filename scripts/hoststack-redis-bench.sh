#!/usr/bin/env bash
# Host stack redis benchmark: seed 004's test 1 in small form (not a test; root, release
# build, Debian's redis-server/redis-tools). redis-benchmark SET latency, p50/p95/p99/p99.9
# (ms, from redis-benchmark's percentile distribution), for
#   kernel — redis-benchmark in a namespace → veth → redis-server in another (Linux TCP
#            on both ends), and
#   sluice — redis-benchmark under LD_PRELOAD=libsluice_preload.so (its sockets are
#            Sluice sessions over shared-memory FIFOs) → Sluice (AF_PACKET on a veth) →
#            redis-server on the kernel in a namespace,
# interleaved in every run, for each clients × payload cell. Printed as min / median / max
# over the runs with the ratio of the medians; a cell that does not complete fails the run.
#
# Usage: scripts/hoststack-redis-bench.sh [runs (3)] [requests (20000)] [clients (1 4 24)]
#        [payloads (64 1024 8192)]
# (NO_BUILD=1: use the release binaries as they are; FIFO=<bytes>: session FIFO size, default
# 1 MiB; TIMEOUT=<s>: one redis-benchmark run's limit, default 120; SLUICE=<path>,
# PRELOAD=<path>: the sluice binary and libsluice_preload.so, e.g. older builds for a
# before/after comparison; RXMODE=polling|interrupt|adaptive: rx mode of Sluice's veth,
# default polling)
source "$(dirname "$0")/common.sh"
runs=${1:-3}
nreq=${2:-20000}
clients=${3:-"1 4 24"}
sizes=${4:-"64 1024 8192"}
fifo=${FIFO:-1048576}
limit=${TIMEOUT:-120}
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, AF_PACKET)"; exit 0
fi
for t in redis-server redis-benchmark; do
  command -v $t >/dev/null || { echo "SKIPPED: $t missing (apt-get install redis-server redis-tools)"; exit 0; }
done
[ -n "${NO_BUILD:-}" ] || cargo build -j 2 --release -q -p sluice -p sluicectl -p sluice-preload
bin=$PWD/target/release
tmp=$(mktemp -d)
CS=hrb$$cs; CK=hrb$$ck; K=hrb$$k; V=hrb$$v
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  ip link del "$V" 2>/dev/null
  for n in "$CS" "$CK" "$K"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$n" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
for n in "$CS" "$CK" "$K"; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip link add "$V" type veth peer name eth0 netns "$CS"
echo 1 >"/proc/sys/net/ipv6/conf/$V/disable_ipv6"
ip link set "$V" up
ip -n "$CS" addr add 10.78.0.2/24 dev eth0; ip -n "$CS" link set eth0 up
ip -n "$CK" link add eth0 type veth peer name eth1 netns "$K"
ip -n "$CK" addr add 10.79.0.2/24 dev eth0; ip -n "$CK" link set eth0 up
ip -n "$K" addr add 10.79.0.1/24 dev eth1; ip -n "$K" link set eth1 up

printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\nsession { enable app-socket %s/app.sock fifo-size %s }\n' "$tmp" "$tmp" "$fifo" >"$tmp/c.conf"
"${SLUICE:-$bin/sluice}" -c "$tmp/c.conf" >"$tmp/sluice.log" 2>&1 &
pid=$!
until [ -S "$tmp/cli.sock" ] && [ -S "$tmp/app.sock" ]; do sleep 0.05; done
C() { "$bin/sluicectl" -s "$tmp/cli.sock" "$@"; }
C create host-interface v2 name "$V" >/dev/null
[ -z "${RXMODE:-}" ] || C set interface rx-mode "host-$V" "$RXMODE"
C set interface state "host-$V" up
C set interface ip address "host-$V" 10.78.0.1/24
C ping 10.78.0.2 repeat 2 interval 0.1 >/dev/null

# One kernel redis-server per side, no persistence.
srv() { ip netns exec "$1" redis-server --bind "$2" --port 6379 --save '' --appendonly no \
          --protected-mode no --daemonize no --dir "$tmp" >/dev/null 2>&1 & }
srv "$K" 10.79.0.1; srv "$CS" 10.78.0.2
for a in "$CK 10.79.0.1" "$CS 10.78.0.2"; do
  set -- $a
  until ip netns exec "$1" redis-cli -h "$2" PING 2>/dev/null | grep -q PONG; do sleep 0.05; done
done

# p50 p95 p99 p99.9 (ms) from redis-benchmark's "Latency by percentile distribution".
pcts() {
  awk '/%.*<=.*milliseconds/ { p = $1; sub("%", "", p); v = $3
         for (i = 1; i <= 4; i++) if (!(i in got) && p + 0 >= want[i]) { got[i] = v } }
       BEGIN { want[1] = 50; want[2] = 95; want[3] = 99; want[4] = 99.9 }
       END { if (length(got) < 4) exit 1; print got[1], got[2], got[3], got[4] }'
}
bench() { # side clients size -> "p50 p95 p99 p99.9" in $tmp/p, or fails
  local side=$1 c=$2 d=$3 out=$tmp/out
  if [ "$side" = kernel ]; then
    timeout "$limit" ip netns exec "$CK" redis-benchmark -h 10.79.0.1 -t set -n "$nreq" -c "$c" -d "$d" >"$out" 2>&1
  else
    SLUICE_APP_SOCKET=$tmp/app.sock LD_PRELOAD=${PRELOAD:-$bin/libsluice_preload.so} \
      timeout "$limit" redis-benchmark -h 10.78.0.2 -t set -n "$nreq" -c "$c" -d "$d" >"$out" 2>&1
  fi
  local rc=$?
  if [ $rc != 0 ] || ! pcts <"$out" >"$tmp/p"; then
    echo "FAILED: $side, $c clients, $d B (exit $rc):"; tr '\r' '\n' <"$out" | tail -5; return 1
  fi
}

declare -A R
echo "== $runs runs, redis-benchmark SET -n $nreq, clients: $clients, payloads: $sizes; FIFO $fifo B"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  for c in $clients; do
    for d in $sizes; do
      for side in kernel sluice; do
        bench $side "$c" "$d" || exit 1
        read -r a b e f <"$tmp/p"
        R[$side,$c,$d,50]+="$a "; R[$side,$c,$d,95]+="$b "; R[$side,$c,$d,99]+="$e "; R[$side,$c,$d,99.9]+="$f "
      done
    done
  done
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '\n| clients | payload | pct | kernel ms min / median / max | sluice ms min / median / max | sluice / kernel (medians) |\n|---|---|---|---|---|---|\n'
for c in $clients; do
  for d in $sizes; do
    for p in 50 95 99 99.9; do
      # shellcheck disable=SC2086
      read -r ka kb kc < <(stats ${R[kernel,$c,$d,$p]})
      # shellcheck disable=SC2086
      read -r sa sb sc < <(stats ${R[sluice,$c,$d,$p]})
      printf '| %s | %s | p%s | %.3f / %.3f / %.3f | %.3f / %.3f / %.3f | %.2f |\n' "$c" "$d" "$p" \
        "$ka" "$kb" "$kc" "$sa" "$sb" "$sc" "$(echo "$sb / $kb" | bc -l)"
    done
  done
done
echo
C show errors | grep -E 'tcp4-input|session-queue' || true
echo "buffers in use: $(C show buffers | awk '/default-numa-0/ {print $9}')"
