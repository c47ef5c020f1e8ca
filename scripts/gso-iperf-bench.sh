#!/usr/bin/env bash
# TCP through a router between two Linux namespaces (issue 23's af_packet topology):
#   A 10.81.1.2 —veth— [router] —veth— B 10.81.2.2
# Routers, interleaved in every run:
#   sluice — Sluice on the host ends of both veths (af_packet, GSO aggregates kept whole);
#   old    — the same with another Sluice binary (OLD=<path to sluice>), when given;
#   linux  — the kernel forwarding in a third namespace;
#   vpp    — VPP's af_packet host-interfaces (prefix VPP=<dir>, default /work/vpp/install;
#            its rows are left out when it is not there).
# Each: iperf3 A -> B for <seconds>, 1 stream and 4 streams (-P 4); the receiver's Gbit/s,
# min / median / max over the runs that completed (a failed iperf3 run is reported and left
# out), with the load average before and after. A router that does not pass a ping from A
# to B fails the benchmark. For Sluice, `show errors` after each run must show that it
# measured passthrough: aggregates kept whole (af-packet-input gso_kept > 0) and none cut
# (gso-segment / ip4-gso-segment segmented == 0), else the benchmark fails (with GSO=off
# there are no aggregates: the check is skipped).
#
# TAP=1: A is on a Sluice tap instead (`create tap ... host-ns A`: the tap's offloads hand
# Sluice A's aggregates whole, virtio-input gso_kept > 0); only the Sluice routers run.
#
# PERF=<prefix>: also records the Sluice router's 1-stream runs with `perf record` (call
# graphs by frame pointers, or PERF_CALLGRAPH=dwarf) into
# <prefix>.<run>.data (read with `perf report -i ...`), and prints its `show runtime` after
# each such run (clocks and vectors per node per aggregate).
#
# Usage: scripts/gso-iperf-bench.sh [runs (3)] [seconds (5)]
# (NO_BUILD=1: use target/release as it is; GSO=off: the hosts' TSO/GSO off (ethtool))
source "$(dirname "$0")/common.sh"
runs=${1:-3}
secs=${2:-5}
vpp=${VPP:-/work/vpp/install}
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, AF_PACKET)"; exit 0
fi
command -v iperf3 >/dev/null || { echo "SKIPPED: iperf3 is not installed"; exit 0; }
[ -n "${NO_BUILD:-}" ] || cargo build -j 2 --release -q -p sluice -p sluicectl
bin=$PWD/target/release
routers="sluice"
[ -n "${OLD:-}" ] && routers="$routers old"
if [ -n "${TAP:-}" ]; then
  echo "note: TAP=1: A on a Sluice tap, Sluice routers only"
else
  routers="$routers linux"
  if [ -x "$vpp/bin/vpp" ]; then routers="$routers vpp"; else echo "note: no VPP at $vpp"; fi
fi
tmp=$(mktemp -d)
A=gib$$a; B=gib$$b; R=gib$$r; VA=gib$$va; VB=gib$$vb
pid=""
die() { echo "FAIL: $*" >&2; exit 1; }
# Waits up to 10 s for socket $1 (and command $2... to succeed, when given).
wait_sock() {
  local sock=$1; shift
  for _ in $(seq 100); do
    if [ -S "$sock" ] && { [ $# -eq 0 ] || "$@" >/dev/null 2>&1; }; then return 0; fi
    kill -0 "$pid" 2>/dev/null || die "router exited before its CLI socket $sock appeared"
    sleep 0.1
  done
  die "no CLI socket $sock after 10 s"
}
stop_router() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
  pid=""
}
teardown() {
  stop_router
  for n in "$A" "$B" "$R"; do
    { ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null; } || true
    ip netns del "$n" 2>/dev/null || true
  done
  ip link del "$VA" 2>/dev/null || true; ip link del "$VB" 2>/dev/null || true
  true
}
trap 'teardown; rm -rf "$tmp"' EXIT

# Hosts A and B; the veths' router ends in namespace $1 ("" = the default one).
topo() {
  teardown
  for n in "$A" "$B"; do ip netns add "$n"; ip -n "$n" link set lo up; done
  local where=()
  if [ -n "$1" ]; then ip netns add "$1"; ip -n "$1" link set lo up; where=(netns "$1"); fi
  ip link add "$VB" "${where[@]}" type veth peer name eth0 netns "$B"
  ip -n "$B" addr add 10.81.2.2/24 dev eth0; ip -n "$B" link set eth0 up
  ip -n "$B" route add default via 10.81.2.1
  local hosts=("$B")
  if [ -z "${TAP:-}" ]; then # with TAP=1 Sluice creates A's link (start_sluice)
    ip link add "$VA" "${where[@]}" type veth peer name eth0 netns "$A"
    ip -n "$A" addr add 10.81.1.2/24 dev eth0; ip -n "$A" link set eth0 up
    ip -n "$A" route add default via 10.81.1.1
    hosts+=("$A")
  fi
  if [ "${GSO:-on}" = off ]; then
    for n in "${hosts[@]}"; do ip netns exec "$n" ethtool -K eth0 tso off gso off >/dev/null; done
  fi
}

start_sluice() { # binary
  printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\n' "$tmp" >"$tmp/s.conf"
  rm -f "$tmp/cli.sock"
  "$1" -c "$tmp/s.conf" >"$tmp/sluice.log" 2>&1 &
  pid=$!
  wait_sock "$tmp/cli.sock"
  local C=("$bin/sluicectl" -s "$tmp/cli.sock") links=("$VA 10.81.1.1/24" "$VB 10.81.2.1/24")
  if [ -n "${TAP:-}" ]; then
    "${C[@]}" create tap id 0 host-if-name "$VA" host-ns "$A" host-ip4-addr 10.81.1.2/24 \
      host-ip4-gw 10.81.1.1 >/dev/null
    "${C[@]}" set interface state tap0 up
    "${C[@]}" set interface ip address tap0 10.81.1.1/24
    if [ "${GSO:-on}" = off ]; then
      ip netns exec "$A" ethtool -K "$VA" tso off gso off >/dev/null
    fi
    links=("$VB 10.81.2.1/24")
  fi
  for x in "${links[@]}"; do
    set -- $x
    "${C[@]}" create host-interface name "$1" >/dev/null
    "${C[@]}" set interface state "host-$1" up
    "${C[@]}" set interface ip address "host-$1" "$2"
  done
}

start_vpp() {
  local lib="$vpp/lib:$vpp/lib/x86_64-linux-gnu" pp=""
  for d in "$vpp/lib/x86_64-linux-gnu/vpp_plugins" "$vpp/lib/vpp_plugins"; do
    [ -d "$d" ] && pp="path $d" && break
  done
  cat >"$tmp/v.conf" <<EOF
unix { nodaemon cli-listen $tmp/vcli.sock runtime-dir $tmp log $tmp/vpp-internal.log }
api-segment { prefix gib$$ }
socksvr { socket-name $tmp/vapi.sock }
plugins { $pp plugin dpdk_plugin.so { disable } }
buffers { buffers-per-numa 32768 page-size 4k }
memory { main-heap-size 1G main-heap-page-size 4k }
statseg { size 64M page-size 4k socket-name $tmp/vstats.sock }
EOF
  rm -f "$tmp/vcli.sock"
  LD_LIBRARY_PATH=$lib "$vpp/bin/vpp" -c "$tmp/v.conf" >"$tmp/vpp.log" 2>&1 &
  pid=$!
  local C=(env LD_LIBRARY_PATH="$lib" "$vpp/bin/vppctl" -s "$tmp/vcli.sock")
  wait_sock "$tmp/vcli.sock" "${C[@]}" show version
  for x in "$VA 10.81.1.1/24" "$VB 10.81.2.1/24"; do
    set -- $x
    "${C[@]}" create host-interface name "$1" >/dev/null
    "${C[@]}" set interface state "host-$1" up
    "${C[@]}" set interface ip address "host-$1" "$2"
  done
}

setup() { # router
  case $1 in
    sluice) topo ""; start_sluice "$bin/sluice" ;;
    old) topo ""; start_sluice "$OLD" ;;
    linux)
      topo "$R"
      ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
      ip -n "$R" addr add 10.81.1.1/24 dev "$VA"; ip -n "$R" link set "$VA" up
      ip -n "$R" addr add 10.81.2.1/24 dev "$VB"; ip -n "$R" link set "$VB" up ;;
    vpp) topo ""; start_vpp ;;
  esac
  ip netns exec "$A" ping -c 3 -i 0.2 -W 1 10.81.2.2 >/dev/null ||
    die "$1: A cannot ping B through the router"
}

# Sluice's `show errors` summed over nodes for the counter described as $1.
sluice_count() {
  "$bin/sluicectl" -s "$tmp/cli.sock" show errors |
    awk -v d="$1" 'index($0, d) { n += $1 } END { print n + 0 }'
}

# The Sluice rows measure passthrough: aggregates kept whole, none cut.
check_passthrough() { # router
  local kept cut
  kept=$(sluice_count "GSO aggregates kept whole")
  cut=$(sluice_count "GSO aggregates cut into segments")
  echo "  $1: gso_kept $kept, segmented $cut"
  [ "${GSO:-on}" = off ] && return 0
  [ "$kept" -gt 0 ] && [ "$cut" -eq 0 ] || die "$1 did not measure GSO passthrough"
}

# Receiver Gbit/s of one iperf3 run with $2 streams.
iperf() {
  ip netns exec "$B" iperf3 -s -1 -B 10.81.2.2 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local out
  out=$(ip netns exec "$A" iperf3 -c 10.81.2.2 -t "$secs" -P "$1" -J 2>/dev/null || true)
  wait "$srv" 2>/dev/null || true
  printf '%s' "$out" | iperf3_rx 1e9 2 2>/dev/null || echo nan
}

declare -A res
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$runs"); do
  for router in $routers; do
    setup "$router"
    for p in 1 4; do
      perf_pid=""
      if [ -n "${PERF:-}" ] && [ "$router" = sluice ] && [ "$p" = 1 ]; then
        "$bin/sluicectl" -s "$tmp/cli.sock" clear runtime >/dev/null
        perf record -q --call-graph "${PERF_CALLGRAPH:-fp}" -p "$pid" -o "$PERF.$r.data" \
          -- sleep "$secs" >/dev/null 2>&1 &
        perf_pid=$!
      fi
      g=$(iperf "$p")
      if [ -n "$perf_pid" ]; then
        wait "$perf_pid" || true
        echo "run $r sluice P1: perf data $PERF.$r.data; show runtime:"
        "$bin/sluicectl" -s "$tmp/cli.sock" show runtime
      fi
      if [ "$g" = nan ]; then
        echo "run $r $router P$p: iperf3 failed (left out)"
        continue
      fi
      res[$router/$p]+="$g "
      echo "run $r $router P$p: $g Gbit/s"
    done
    case $router in sluice) check_passthrough "$router" ;; esac
    teardown
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| router | streams | Gbit/s min | median | max |"
echo "|---|---|---|---|---|"
for router in $routers; do
  for p in 1 4; do
    if [ -z "${res[$router/$p]:-}" ]; then
      echo "| $router | $p | - | - | - |"
      continue
    fi
    # shellcheck disable=SC2086
    read -r lo md hi <<<"$(stats ${res[$router/$p]})"
    echo "| $router | $p | $lo | $md | $hi |"
  done
done
