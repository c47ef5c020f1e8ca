#!/usr/bin/env bash
# Forwarding through Sluice (af_packet, af_xdp) vs the Linux kernel between network
# namespaces: packets per second at the sink, CPU used by the router, pps per core used.
#
#   generator ns (eth0) --veth-- (g0) router ns (s0) --veth-- (eth0) sink ns
#
# Generator: a Sluice traffic tester (`tester stream`, af_packet PACKET_MMAP tx ring with
# qdisc bypass, 1000 UDP flows, unlimited rate) in the generator namespace, the same for all
# three routers. The router is, in turn: Sluice with af_packet (`create host-interface`),
# Sluice with af_xdp (`create interface af_xdp`, native XDP on the veth, copy mode), and the
# kernel (ip_forward=1 in the router namespace). The rate is what the sink's eth0 counted
# (rx_packets), so only forwarded packets count.
#
# CPU placement on a 2-core machine (docs/benchmarking.md, "Sluice vs the kernel"):
#   CPU 1: the generator (taskset) and the sink's receive (RPS on the sink's eth0),
#   CPU 0: the router: Sluice (taskset: every thread); the kernel's receive of g0
#          (RPS on g0 for the kernel and af_packet; for af_xdp the veth's NAPI runs in a
#          kthread, `threaded` on g0, pinned to CPU 0 — otherwise XDP and the copy into the
#          UMEM would run on the generator's CPU, in its sendto).
# Router CPU = Sluice's user+system time + CPU 0 softirq time (/proc/stat) + the g0/s0 NAPI
# threads' time, per second of the run. For the kernel the same minus Sluice. CPU 0's and
# CPU 1's total busy time are printed too (other engineers' builds show up there).
# Addresses are private and live only in namespaces this script creates and removes.
#
#   scripts/bench-netns.sh [--runs N] [--seconds S] [--sizes "64 1514"]
#                          [--drivers "af_packet af_xdp linux"]
#
# RXMODE=interrupt|adaptive|polling (default polling) sets Sluice's rx mode on both interfaces.
# AFP_OPTS="v2" adds words to the router's `create host-interface` (XDP_OPTS likewise for
# af_xdp); SLUICE_BIN=<path> runs another sluice binary as the router (paired old/new runs).
# Sizes are frame lengths on the veth without FCS (1514 = a 1518-byte frame with FCS; the
# veth MTU is 1500). Needs root, iproute2, ethtool, python3 and 2 CPUs.
set -euo pipefail

RUNS=3
SECS=5
SIZES="64 1514"
DRIVERS="af_packet af_xdp linux"
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        --sizes | --size) SIZES="$2"; shift 2 ;;
        --drivers) DRIVERS="$2"; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--seconds S] [--sizes \"64 1514\"] [--drivers \"af_packet af_xdp linux\"]" >&2; exit 2 ;;
    esac
done

skip() { echo "bench-netns: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v ethtool >/dev/null || skip "ethtool not installed (apt-get install ethtool)"
command -v python3 >/dev/null || skip "python3 not installed"
[ "$(nproc)" -ge 2 ] || skip "needs 2 CPUs (generator and router on different cores)"

. "$(dirname "$0")/common.sh"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p sluice -p sluicectl
SLUICE="$TARGET/release/sluice"
ROUTER_BIN="${SLUICE_BIN:-$SLUICE}"
CTL="$TARGET/release/sluicectl"
HZ=$(getconf CLK_TCK)

P="slb$$"
G="${P}g"; S="${P}s"; R="${P}r"
GSOCK="/tmp/${P}g.sock"; SOCK="/tmp/${P}.sock"
GPID=""; SPID=""
cleanup() {
    for p in "$SPID" "$GPID"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
    done
    for n in "$G" "$S" "$R"; do ip netns del "$n" 2>/dev/null || true; done
    rm -f "$SOCK" "$GSOCK" "/tmp/${P}.log" "/tmp/${P}g.log"
}
trap cleanup EXIT

ip netns add "$G"; ip netns add "$S"; ip netns add "$R"
ip -n "$R" link add name g0 type veth peer name eth0 netns "$G"
ip -n "$R" link add name s0 type veth peer name eth0 netns "$S"
for n in "$G" "$S" "$R"; do
    ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$n" link set lo up
done
for n in "$G" "$S"; do
    ip -n "$n" link set eth0 up
    ip netns exec "$n" ethtool -K eth0 tx off >/dev/null
    # The generator's and the sink's kernel receive work goes to CPU 1.
    echo 2 | ip netns exec "$n" tee /sys/class/net/eth0/queues/rx-0/rps_cpus >/dev/null
done
ip -n "$R" link set g0 up; ip -n "$R" link set s0 up
# The router's receive of g0 and s0 goes to CPU 0 (RPS: veth delivers through netif_rx).
for d in g0 s0; do echo 1 | ip netns exec "$R" tee /sys/class/net/$d/queues/rx-0/rps_cpus >/dev/null; done
ip -n "$G" addr add 10.97.1.2/24 dev eth0; ip -n "$G" route add default via 10.97.1.1
ip -n "$S" addr add 10.97.2.2/24 dev eth0; ip -n "$S" route add default via 10.97.2.1

# The generator: a Sluice tester on CPU 1, sending on the generator's eth0.
ip netns exec "$G" taskset -c 1 "$SLUICE" unix { cli-listen "$GSOCK" } \
    buffers { buffers-per-numa 32768 } >"/tmp/${P}g.log" 2>&1 &
GPID=$!
for _ in $(seq 1 100); do [ -S "$GSOCK" ] && break; sleep 0.1; done
gctl() { "$CTL" -s "$GSOCK" "$@"; }
gctl create host-interface name eth0 >/dev/null
gctl set interface state host-eth0 up >/dev/null

rx_sink() { ip netns exec "$S" cat /sys/class/net/eth0/statistics/rx_packets; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# CPU 0 softirq, CPU 0 busy, CPU 1 busy (ticks).
cpustat() { awk '$1 == "cpu0" {s = $8; b0 = $2+$3+$4+$7+$8+$9} $1 == "cpu1" {b1 = $2+$3+$4+$7+$8+$9} END {print s, b0, b1}' /proc/stat; }
napi_pids() { # the router's veth NAPI threads, if threaded
    for p in /proc/[0-9]*; do
        case "$(cat "$p/comm" 2>/dev/null)" in napi/g0-* | napi/s0-*) echo "${p#/proc/}" ;; esac
    done
}
napi_ticks() { local t=0 p; for p in $NAPI; do t=$((t + $(ticks "$p"))); done; echo "$t"; }
now() { date +%s%N; }

# One run: "sink_pps router_cpu_cores offered_pps cpu0_busy cpu1_busy".
run_once() {
    local size="$1" mac="$2" r0 r1 c0 c1 n0 n1 t0 t1 s0 s1 b00 b01 b10 b11 off
    gctl tester stream add name b interface host-eth0 size "$size" rate 1e9 duration "$SECS" \
        dst-mac "$mac" src 10.97.1.10-10.97.1.250 dst 10.97.2.2 dport 9 flows 1000 >/dev/null
    r0=$(rx_sink); c0=0; [ -n "$SPID" ] && c0=$(ticks "$SPID"); n0=$(napi_ticks)
    read -r s0 b00 b10 <<<"$(cpustat)"; t0=$(now)
    gctl tester start >/dev/null
    sleep "$SECS"
    while gctl show tester json | grep -q '"running": true'; do sleep 0.05; done
    sleep 0.1
    r1=$(rx_sink); c1=0; [ -n "$SPID" ] && c1=$(ticks "$SPID"); n1=$(napi_ticks)
    read -r s1 b01 b11 <<<"$(cpustat)"; t1=$(now)
    off=$(gctl show tester json | python3 -c '
import json, sys
s = json.load(sys.stdin)["streams"]["b"]
print("%.0f" % (s["tx_packets"] / (s["elapsed_s"] or 1e-9)))')
    gctl tester stream del name b >/dev/null
    awk -v r=$((r1 - r0)) -v c=$((c1 - c0 + s1 - s0 + n1 - n0)) -v hz="$HZ" -v ns=$((t1 - t0)) -v off="$off" \
        -v b0=$((b01 - b00)) -v b1=$((b11 - b10)) \
        'BEGIN {t = ns / 1e9; printf "%d %.3f %d %.2f %.2f\n", r / t, c / hz / t, off, b0 / hz / t, b1 / hz / t}'
}


warm() { # wait for the path to work (ARP on both sides; each router has other MACs)
    ip -n "$G" neigh flush all; ip -n "$S" neigh flush all
    for _ in $(seq 1 20); do
        ip netns exec "$G" ping -c1 -W1 10.97.2.2 >/dev/null 2>&1 && return 0 || sleep 0.2
    done
    echo "bench-netns: no path from generator to sink" >&2; return 1
}

declare -A RES
# Runs every size against the router now in place; $1 = driver, $2 = the router's g0 MAC.
measure() {
    local drv="$1" mac="$2" size i pps cpu off b0 b1
    for size in $SIZES; do
        local PPS=() CPU=() PPC=() OFF=() B0=() B1=()
        for i in $(seq 1 "$RUNS"); do
            read -r pps cpu off b0 b1 <<<"$(run_once "$size" "$mac")"
            PPS+=("$pps"); CPU+=("$cpu"); OFF+=("$off"); B0+=("$b0"); B1+=("$b1")
            PPC+=("$(awk -v p="$pps" -v c="$cpu" 'BEGIN {printf "%d", (c > 0) ? p / c : 0}')")
        done
        RES[$drv,$size]="$(stats "${PPS[@]}")|$(stats "${CPU[@]}")|$(stats "${PPC[@]}")|$(stats "${OFF[@]}")|$(stats "${B0[@]}")|$(stats "${B1[@]}")"
    done
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for drv in $DRIVERS; do
    NAPI=""
    case "$drv" in
        af_packet | af_xdp)
            case "$drv" in
                af_packet) mk() { echo "create host-interface name $1 ${AFP_OPTS:-}"; }; ifn() { echo "host-$1"; } ;;
                af_xdp) mk() { echo "create interface af_xdp host-if $1 name $1/0 ${XDP_OPTS:-}"; }; ifn() { echo "$1/0"; } ;;
            esac
            ip netns exec "$R" taskset -c 0 "$ROUTER_BIN" unix { cli-listen "$SOCK" } \
                buffers { buffers-per-numa 32768 } >"/tmp/${P}.log" 2>&1 &
            SPID=$!
            for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
            for c in "$(mk g0)" "$(mk s0)" \
                     "set interface state $(ifn g0) up" "set interface state $(ifn s0) up" \
                     "set interface ip address $(ifn g0) 10.97.1.1/24" \
                     "set interface ip address $(ifn s0) 10.97.2.1/24" \
                     "set interface rx-mode $(ifn g0) ${RXMODE:-polling}" \
                     "set interface rx-mode $(ifn s0) ${RXMODE:-polling}"; do
                "$CTL" -s "$SOCK" $c >/dev/null
            done
            if [ "$drv" = af_xdp ] && [[ " ${XDP_OPTS:-} " != *" generic-xdp "* ]]; then
                # Native XDP gives the veth a NAPI instance; run it in a thread on CPU 0.
                for d in g0 s0; do echo 1 | ip netns exec "$R" tee /sys/class/net/$d/threaded >/dev/null; done
                NAPI=$(napi_pids)
                for p in $NAPI; do taskset -pc 0 "$p" >/dev/null; done
                if [ "${RXMODE:-polling}" = polling ] && [ -z "${NO_BUSY_POLL:-}" ]; then
                    # Busy polling: a polling Sluice runs the veth NAPI itself (recvfrom on the
                    # XSK, SO_PREFER_BUSY_POLL). Deferring the NAPI's re-arm (200 µs, 2 rounds)
                    # keeps the NAPI thread from taking it back while Sluice polls.
                    for d in g0 s0; do
                        echo 2 | ip netns exec "$R" tee /sys/class/net/$d/napi_defer_hard_irqs >/dev/null
                        echo 200000 | ip netns exec "$R" tee /sys/class/net/$d/gro_flush_timeout >/dev/null
                    done
                fi
                echo "af_xdp: $("$CTL" -s "$SOCK" show af_xdp | grep -Eo 'native|generic' | head -1) XDP, NAPI threads: $NAPI"
            fi
            warm || { for c in "show interface" "show errors" "show ip neighbors" "show $drv"; do "$CTL" -s "$SOCK" $c; done; cat "/tmp/${P}.log"; exit 1; }
            MAC=$("$CTL" -s "$SOCK" show hardware-interfaces | awk -v n="$(ifn g0)" '$1 == n {f = 1} f && /Ethernet address/ {print $3; exit}')
            measure "$drv" "$MAC"
            "$CTL" -s "$SOCK" show errors | grep -Ev ' info ' || true
            [ -n "${VERBOSE:-}" ] && "$CTL" -s "$SOCK" show runtime && "$CTL" -s "$SOCK" show "$drv"
            kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
            rm -f "$SOCK"
            # Back to the veths' defaults for the next router (a NAPI left threaded or
            # deferred would move the kernel's forwarding off CPU 0 and out of the count).
            for d in g0 s0; do
                for k in threaded napi_defer_hard_irqs gro_flush_timeout; do
                    echo 0 | ip netns exec "$R" tee /sys/class/net/$d/$k >/dev/null 2>&1 || true
                done
            done
            ;;
        linux)
            ip -n "$R" addr add 10.97.1.1/24 dev g0; ip -n "$R" addr add 10.97.2.1/24 dev s0
            ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
            warm
            measure linux "$(ip netns exec "$R" cat /sys/class/net/g0/address)"
            ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=0
            ip -n "$R" addr flush dev g0; ip -n "$R" addr flush dev s0
            ;;
        *) echo "bench-netns: unknown driver $drv" >&2; exit 2 ;;
    esac
done

echo "${SECS}s x ${RUNS} runs per cell, min/median/max; load average before $LOAD0, after $(cut -d' ' -f1-3 /proc/loadavg)"
echo "pps = received by the sink; cores = router CPU-seconds per second; pps/core = pps / cores (per run);"
echo "offered = generator tx pps; cpu0/cpu1 = busy fraction of each CPU (all processes)"
for size in $SIZES; do
    echo "frame ${size} B (without FCS):"
    for drv in $DRIVERS; do
        label="Sluice ($drv)"; [ "$drv" = linux ] && label="Linux ip_forward"
        IFS='|' read -r p c pc o b0 b1 <<<"${RES[$drv,$size]}"
        printf '  %-18s pps %-26s cores %-18s pps/core %-26s offered %-26s cpu0 %-15s cpu1 %s\n' \
            "$label" "${p// //}" "${c// //}" "${pc// //}" "${o// //}" "${b0// //}" "${b1// //}"
    done
    if [[ " $DRIVERS " == *" linux "* ]]; then
        read -r _ kp _ <<<"$(cut -d'|' -f1 <<<"${RES[linux,$size]}")"
        read -r _ kc _ <<<"$(cut -d'|' -f3 <<<"${RES[linux,$size]}")"
        for drv in $DRIVERS; do
            [ "$drv" = linux ] && continue
            read -r _ sp _ <<<"$(cut -d'|' -f1 <<<"${RES[$drv,$size]}")"
            read -r _ sc _ <<<"$(cut -d'|' -f3 <<<"${RES[$drv,$size]}")"
            awk -v d="$drv" -v sp="$sp" -v kp="$kp" -v sc="$sc" -v kc="$kc" \
                'BEGIN {printf "  %-18s / Linux (medians): raw %.2fx, per core used %.2fx\n", d, kp ? sp / kp : 0, kc ? sc / kc : 0}'
        done
    fi
done
