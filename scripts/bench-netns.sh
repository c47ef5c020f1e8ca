#!/usr/bin/env bash
# Forwarding through Sluice (af_packet, then af_xdp) vs the Linux kernel, between network
# namespaces.
#
#   generator ns --veth--> router --veth--> sink ns
#
# The router is Sluice (two interfaces on the host ends of the veths, IPv4 routing), attached
# once with af_packet (`create host-interface`) and once with af_xdp (`create interface
# af_xdp`, native XDP, copy mode), or, for comparison, a namespace with ip_forward=1 holding
# the same veth ends. Sluice's CPU use (user + system time of the process, % of one core)
# is printed per run. The generator computes its own checksums (`ethtool -K eth0 tx off`,
# which af_xdp needs, see docs/interfaces.md) in every variant. Traffic: `iperf3 -u` (UDP, unlimited rate,
# small datagrams) from the generator; the rate is what the sink's eth0 received, so it
# counts only forwarded packets. Prints min/median/max over N runs and the ratio of medians.
# Addresses are private and live only in namespaces this script creates and removes.
#
#   scripts/bench-netns.sh [--runs N] [--seconds S] [--size BYTES] [--drivers "af_packet af_xdp"]
#
# Needs root, iproute2 and iperf3 (Debian: apt-get install iperf3). A shared 2-core VM runs
# the generator, the router and the sink on the same cores: read the ratio, not the
# absolute numbers.
set -euo pipefail

RUNS=3
SECS=5
SIZE=64
DRIVERS="af_packet af_xdp"
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --drivers) DRIVERS="$2"; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--seconds S] [--size BYTES] [--drivers \"af_packet af_xdp\"]" >&2; exit 2 ;;
    esac
done

skip() { echo "bench-netns: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v iperf3 >/dev/null || skip "iperf3 not installed (apt-get install iperf3)"
command -v ethtool >/dev/null || skip "ethtool not installed (apt-get install ethtool)"

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
    ip netns exec "$n" ethtool -K eth0 tx off >/dev/null
done
ip -n "$G" addr add 10.97.1.2/24 dev eth0; ip -n "$G" route add default via 10.97.1.1
ip -n "$S" addr add 10.97.2.2/24 dev eth0; ip -n "$S" route add default via 10.97.2.1

rx_sink() { ip netns exec "$S" cat /sys/class/net/eth0/statistics/rx_packets; }

# CPU time (user + system, clock ticks) of process $1.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# One run: prints forwarded packets per second and, when $SPID is set, Sluice's CPU use in
# percent of one core.
run_once() {
    ip netns exec "$S" iperf3 -s -1 -B 10.97.2.2 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    local r0 r1 c0 c1 t0 t1
    r0=$(rx_sink)
    [ -n "$SPID" ] && c0=$(cpu_ticks "$SPID")
    t0=$(date +%s%N)
    ip netns exec "$G" iperf3 -c 10.97.2.2 -u -b 0 -l "$SIZE" -t "$SECS" >/dev/null 2>&1 || true
    t1=$(date +%s%N)
    r1=$(rx_sink)
    [ -n "$SPID" ] && c1=$(cpu_ticks "$SPID")
    kill "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true
    if [ -n "$SPID" ]; then
        awk -v r=$((r1 - r0)) -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v ns=$((t1 - t0)) -v s="$SECS" \
            'BEGIN {printf "%d %d\n", r / s, 100 * c / hz / (ns / 1e9)}'
    else
        echo "$(( (r1 - r0) / SECS )) 0"
    fi
}

stats() { # min median max of the arguments
    printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "%d %d %d\n", a[1], a[int((NR+1)/2)], a[NR]}'
}

warm() { # wait for the path to work (ARP on both sides; each router has other MACs)
    ip -n "$G" neigh flush all; ip -n "$S" neigh flush all
    for _ in $(seq 1 20); do
        ip netns exec "$G" ping -c1 -W1 10.97.2.2 >/dev/null 2>&1 && return 0 || sleep 0.2
    done
    echo "bench-netns: no path from generator to sink" >&2; return 1
}

# --- Sluice ---------------------------------------------------------------------------------
declare -A RES CPU
for drv in $DRIVERS; do
    case "$drv" in
        af_packet) mk() { echo "create host-interface name $1"; }; ifn() { echo "host-$1"; } ;;
        af_xdp) mk() { echo "create interface af_xdp host-if $1 name $1/0 ${XDP_OPTS:-}"; }; ifn() { echo "$1/0"; } ;;
        *) echo "bench-netns: unknown driver $drv" >&2; exit 2 ;;
    esac
    "$SLUICE" unix { cli-listen "$SOCK" } buffers { buffers-per-numa 32768 } >/tmp/${P}.log 2>&1 &
    SPID=$!
    for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
    for c in "$(mk ${P}g0)" "$(mk ${P}s0)" \
             "set interface state $(ifn ${P}g0) up" "set interface state $(ifn ${P}s0) up" \
             "set interface ip address $(ifn ${P}g0) 10.97.1.1/24" \
             "set interface ip address $(ifn ${P}s0) 10.97.2.1/24"; do
        "$CTL" -s "$SOCK" $c >/dev/null
    done
    warm || { "$CTL" -s "$SOCK" show interface; "$CTL" -s "$SOCK" show errors; "$CTL" -s "$SOCK" show ip neighbors; "$CTL" -s "$SOCK" show af_xdp; cat /tmp/${P}.log; exit 1; }
    PPS=(); PCT=()
    for i in $(seq 1 "$RUNS"); do read -r pps cpu <<<"$(run_once)"; PPS+=("$pps"); PCT+=("$cpu"); done
    RES[$drv]="${PPS[*]}"; CPU[$drv]="${PCT[*]}"
    "$CTL" -s "$SOCK" show errors | grep -Ev ' info ' || true
    [ -n "${VERBOSE:-}" ] && "$CTL" -s "$SOCK" show runtime && "$CTL" -s "$SOCK" show "$drv"
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
    rm -f "$SOCK"
done

# --- Linux kernel ---------------------------------------------------------------------------
ip link set "${P}g0" netns "$R"; ip link set "${P}s0" netns "$R"
ip -n "$R" addr add 10.97.1.1/24 dev "${P}g0"; ip -n "$R" addr add 10.97.2.1/24 dev "${P}s0"
ip -n "$R" link set "${P}g0" up; ip -n "$R" link set "${P}s0" up; ip -n "$R" link set lo up
ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
warm
KR=()
for i in $(seq 1 "$RUNS"); do read -r pps _ <<<"$(run_once)"; KR+=("$pps"); done
ip -n "$R" link del "${P}g0" 2>/dev/null || true
ip -n "$R" link del "${P}s0" 2>/dev/null || true

read -r kmin kmed kmax <<<"$(stats "${KR[@]}")"
echo "UDP ${SIZE}-byte payload, ${SECS}s x ${RUNS} runs, packets/s received by the sink:"
for drv in $DRIVERS; do
    # shellcheck disable=SC2086
    read -r smin smed smax <<<"$(stats ${RES[$drv]})"
    # shellcheck disable=SC2086
    read -r cmin cmed cmax <<<"$(stats ${CPU[$drv]})"
    printf '  %-22s min %9d  median %9d  max %9d   Sluice CPU %d/%d/%d %% of a core\n' \
        "Sluice ($drv)" "$smin" "$smed" "$smax" "$cmin" "$cmed" "$cmax"
    if [ "$kmed" -gt 0 ]; then
        awk -v s="$smed" -v k="$kmed" -v d="$drv" 'BEGIN {printf "  %-22s %.2f\n", "  / Linux (medians)", s / k}'
    fi
done
printf '  %-22s min %9d  median %9d  max %9d\n' "Linux ip_forward" "$kmin" "$kmed" "$kmax"
