#!/usr/bin/env bash
# Forwarding through Sluice (af_packet) vs the Linux kernel, between network namespaces.
#
#   generator ns --veth--> router --veth--> sink ns
#
# The router is Sluice (two host-interfaces, IPv4 routing) or, for comparison, a namespace
# with ip_forward=1 holding the same veth ends. Traffic: `iperf3 -u` (UDP, unlimited rate,
# small datagrams) from the generator; the rate is what the sink's eth0 received, so it
# counts only forwarded packets. Prints min/median/max over N runs and the ratio of medians.
# Addresses are private and live only in namespaces this script creates and removes.
#
#   scripts/bench-netns.sh [--runs N] [--seconds S] [--size BYTES]
#
# Needs root, iproute2 and iperf3 (Debian: apt-get install iperf3). A shared 2-core VM runs
# the generator, the router and the sink on the same cores: read the ratio, not the
# absolute numbers.
set -euo pipefail

RUNS=3
SECS=5
SIZE=64
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--seconds S] [--size BYTES]" >&2; exit 2 ;;
    esac
done

skip() { echo "bench-netns: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v iperf3 >/dev/null || skip "iperf3 not installed (apt-get install iperf3)"

cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p sluice -p sluicectl
SLUICE="$TARGET/release/sluice"
CTL="$TARGET/release/sluicectl"

P="slb$$"
G="${P}g"; S="${P}s"; R="${P}r"
SOCK="/tmp/${P}.sock"
SPID=""
cleanup() {
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null || true
    ip link del "${P}g0" 2>/dev/null || true
    ip link del "${P}s0" 2>/dev/null || true
    for n in "$G" "$S" "$R"; do ip netns del "$n" 2>/dev/null || true; done
    rm -f "$SOCK" "/tmp/${P}.log"
}
trap cleanup EXIT

ip netns add "$G"; ip netns add "$S"; ip netns add "$R"
ip link add "${P}g0" type veth peer name eth0 netns "$G"
ip link add "${P}s0" type veth peer name eth0 netns "$S"
for n in "$G" "$S"; do
    ip -n "$n" link set lo up
    ip -n "$n" link set eth0 up
    ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
done
ip -n "$G" addr add 10.97.1.2/24 dev eth0; ip -n "$G" route add default via 10.97.1.1
ip -n "$S" addr add 10.97.2.2/24 dev eth0; ip -n "$S" route add default via 10.97.2.1

rx_sink() { ip netns exec "$S" cat /sys/class/net/eth0/statistics/rx_packets; }

# One run: prints forwarded packets per second.
run_once() {
    ip netns exec "$S" iperf3 -s -1 -B 10.97.2.2 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    local r0 r1
    r0=$(rx_sink)
    ip netns exec "$G" iperf3 -c 10.97.2.2 -u -b 0 -l "$SIZE" -t "$SECS" >/dev/null 2>&1 || true
    r1=$(rx_sink)
    kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true
    echo $(( (r1 - r0) / SECS ))
}

stats() { # min median max of the arguments
    printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "%d %d %d\n", a[1], a[int((NR+1)/2)], a[NR]}'
}

warm() { # wait for the path to work (ARP on both sides)
    for _ in $(seq 1 20); do
        ip netns exec "$G" ping -c1 -W1 10.97.2.2 >/dev/null 2>&1 && return 0 || sleep 0.2
    done
    echo "bench-netns: no path from generator to sink" >&2; exit 1
}

# --- Sluice -------------------------------------------------------------------------------
"$SLUICE" unix { cli-listen "$SOCK" } buffers { buffers-per-numa 32768 } >/tmp/${P}.log 2>&1 &
SPID=$!
for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
for c in "create host-interface name ${P}g0" "create host-interface name ${P}s0" \
         "set interface state host-${P}g0 up" "set interface state host-${P}s0 up" \
         "set interface ip address host-${P}g0 10.97.1.1/24" \
         "set interface ip address host-${P}s0 10.97.2.1/24"; do
    "$CTL" -s "$SOCK" $c >/dev/null
done
warm
SL=()
for i in $(seq 1 "$RUNS"); do SL+=("$(run_once)"); done
"$CTL" -s "$SOCK" show errors | grep -Ev ' info ' || true
kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""

# --- Linux kernel ---------------------------------------------------------------------------
ip link set "${P}g0" netns "$R"; ip link set "${P}s0" netns "$R"
ip -n "$R" addr add 10.97.1.1/24 dev "${P}g0"; ip -n "$R" addr add 10.97.2.1/24 dev "${P}s0"
ip -n "$R" link set "${P}g0" up; ip -n "$R" link set "${P}s0" up; ip -n "$R" link set lo up
ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
warm
KR=()
for i in $(seq 1 "$RUNS"); do KR+=("$(run_once)"); done
ip -n "$R" link del "${P}g0" 2>/dev/null || true
ip -n "$R" link del "${P}s0" 2>/dev/null || true

read -r smin smed smax <<<"$(stats "${SL[@]}")"
read -r kmin kmed kmax <<<"$(stats "${KR[@]}")"
echo "UDP ${SIZE}-byte payload, ${SECS}s x ${RUNS} runs, packets/s received by the sink:"
printf '  %-22s min %9d  median %9d  max %9d\n' "Sluice (af_packet)" "$smin" "$smed" "$smax"
printf '  %-22s min %9d  median %9d  max %9d\n' "Linux ip_forward" "$kmin" "$kmed" "$kmax"
if [ "$kmed" -gt 0 ]; then
    awk -v s="$smed" -v k="$kmed" 'BEGIN {printf "  Sluice / Linux (medians): %.2f\n", s / k}'
fi
