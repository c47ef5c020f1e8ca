#!/usr/bin/env bash
# Host stack UDP echo benchmark (not a test; root). The same client (sluice-udp-bench, a
# plain Linux UDP socket in a namespace) talks across one veth pair to
#   kernel — a Linux UDP echo socket in a second namespace (the kernel's socket path), and
#   sluice — Sluice attached to the veth's other end with AF_PACKET, its session layer, and
#            sluice-udp-echo attached over shared-memory FIFOs,
# interleaved in every run. Per payload size: round-trip latency with one datagram in flight
# (p50, p99 in µs) and echo rate with a window of datagrams in flight (echoes/s). Printed as
# min / median / max over the runs, with the ratio of the medians (sluice / kernel).
#
# Usage: scripts/hoststack-bench.sh [runs (5)] [latency count (5000)] [rate count (50000)]
# AFP=v3 uses TPACKET_V3 rx blocks on Sluice's veth (default v2: one wake-up per packet;
# a V3 block is handed to user space only when full or when its 1 ms retire timer fires,
# which puts a 1 ms floor under every round trip at low rates). RXMODE=polling|interrupt|
# adaptive sets the rx mode of Sluice's veth (default polling).
source "$(dirname "$0")/common.sh"
runs=${1:-5}
nlat=${2:-5000}
nrate=${3:-50000}
window=32
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, AF_PACKET)"; exit 0
fi
cargo build -j 2 --release -q -p sluice -p sluicectl -p sluice-session
bin=$PWD/target/release
tmp=$(mktemp -d)
CS=hsb$$cs; CK=hsb$$ck; K=hsb$$k; V=hsb$$v
cleanup() {
  [ -n "${echo_pid:-}" ] && kill "$echo_pid" 2>/dev/null
  [ -n "${kpid:-}" ] && kill "$kpid" 2>/dev/null
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  ip link del "$V" 2>/dev/null
  for n in "$CS" "$CK" "$K"; do ip netns del "$n" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
for n in "$CS" "$CK" "$K"; do ip netns add "$n"; ip -n "$n" link set lo up; done
# Sluice's client: veth $V (Sluice's AF_PACKET side) <-> eth0 in $CS.
ip link add "$V" type veth peer name eth0 netns "$CS"
echo 1 >"/proc/sys/net/ipv6/conf/$V/disable_ipv6"
ip link set "$V" up
ip -n "$CS" addr add 10.78.0.2/24 dev eth0; ip -n "$CS" link set eth0 up
# The kernel's client and server: eth0 in $CK <-> eth1 in $K.
ip -n "$CK" link add eth0 type veth peer name eth1 netns "$K"
ip -n "$CK" addr add 10.79.0.2/24 dev eth0; ip -n "$CK" link set eth0 up
ip -n "$K" addr add 10.79.0.1/24 dev eth1; ip -n "$K" link set eth1 up

printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\nsession { enable app-socket %s/app.sock }\n' "$tmp" "$tmp" >"$tmp/c.conf"
"$bin/sluice" -c "$tmp/c.conf" >"$tmp/sluice.log" 2>&1 &
pid=$!
until [ -S "$tmp/cli.sock" ] && [ -S "$tmp/app.sock" ]; do sleep 0.05; done
C() { "$bin/sluicectl" -s "$tmp/cli.sock" "$@"; }
afp=${AFP:-v2}
if [ "$afp" = v2 ]; then C create host-interface v2 name "$V" >/dev/null; else C create host-interface name "$V" >/dev/null; fi
[ -z "${RXMODE:-}" ] || C set interface rx-mode "host-$V" "$RXMODE"
C set interface state "host-$V" up
C set interface ip address "host-$V" 10.78.0.1/24
"$bin/sluice-udp-echo" --socket "$tmp/app.sock" --bind 0.0.0.0:7777 >"$tmp/echo.out" 2>&1 &
echo_pid=$!
until grep -q ready "$tmp/echo.out"; do sleep 0.05; done
ip netns exec "$K" "$bin/sluice-udp-bench" serve 10.79.0.1:7777 &
kpid=$!
C ping 10.78.0.2 repeat 2 interval 0.1 >/dev/null
sleep 0.2

B() { local ns=$1; shift; ip netns exec "$ns" "$bin/sluice-udp-bench" "$@"; }
declare -A R
echo "== AF_PACKET $afp, $runs runs, latency $nlat datagrams, rate $nrate datagrams (window $window); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  for size in 64 1024; do
    for side in kernel sluice; do
      if [ $side = kernel ]; then ns=$CK; to=10.79.0.1:7777; else ns=$CS; to=10.78.0.1:7777; fi
      read -r _ p50 p99 _ _ _ _ < <(B "$ns" latency "$to" "$nlat" "$size")
      read -r _ pps _ _ < <(B "$ns" rate "$to" "$nrate" "$size" "$window")
      R[$side,$size,p50]+="$p50 "; R[$side,$size,p99]+="$p99 "; R[$side,$size,pps]+="$pps "
    done
  done
done
printf '\n| metric | kernel min / median / max | sluice min / median / max | sluice / kernel (medians) |\n|---|---|---|---|\n'
for size in 64 1024; do
  for m in p50 p99 pps; do
    # shellcheck disable=SC2086
    read -r ka kb kc < <(stats ${R[kernel,$size,$m]})
    # shellcheck disable=SC2086
    read -r sa sb sc < <(stats ${R[sluice,$size,$m]})
    case $m in p50) name="RTT p50 µs";; p99) name="RTT p99 µs";; pps) name="echoes/s (window $window)";; esac
    printf '| %s B %s | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %.2f |\n' "$size" "$name" "$ka" "$kb" "$kc" "$sa" "$sb" "$sc" "$(echo "$sb / $kb" | bc -l)"
  done
done
echo
C show session verbose | head -5
C show errors | grep -E 'udp[46]-input|session-queue' || true
echo "buffers in use: $(C show buffers | awk '/default-numa-0/ {print $9}')"
