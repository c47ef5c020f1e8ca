#!/usr/bin/env bash
# Forwarding through Sluice (af_packet, af_xdp, tap) vs the Linux kernel between network
# namespaces, and what the kernel's I/O paths allow at best on one core: packets per second,
# the router's CPU, packets per second per core used.
#
#   generator ns (eth0) --veth-- (g0) router ns (s0) --veth-- (eth0) sink ns
#
# Generator: a Sluice traffic tester (`tester stream`, af_packet PACKET_MMAP tx ring with
# qdisc bypass, 1000 UDP flows, unlimited rate) in the generator namespace, the same for
# every router. --drivers picks the variants, in order:
#   af_packet, af_xdp  Sluice routes g0 -> s0 (`create host-interface` / `create interface
#                      af_xdp`: native XDP on the veth, copy mode); rate = sink eth0 rx.
#   linux              the kernel routes (ip_forward=1, same veths); rate = sink eth0 rx.
#   tap                Sluice routes tap0 -> tap1, whose host sides are the generator's and
#                      the sink's eth0 (`create tap ... host-ns ... host-if-name eth0`, the
#                      veth pairs are removed for this variant; the generator's af_packet
#                      goes through the qdisc); rate = sink eth0 rx.
#   af_packet-tx,      tx ceiling: Sluice's own tester on CPU 0 sends straight out of s0 to
#   af_xdp-tx          the sink (no rx, no routing); rate = sink eth0 rx.
#   af_packet-rx,      rx ceiling: the normal generator sends to g0, Sluice receives, looks
#   af_xdp-rx          the destination up and drops it (`ip route add 10.97.2.0/24 via
#                      drop`, no s0); rate = Sluice's rx packets counter of g0.
# With both ceilings of a driver measured, the forwarding bound per core is printed:
# 1 / (1/rx + 1/tx) in pps per core, next to the measured forwarding and Linux per core.
#
# CPU placement on a 2-core machine (docs/interfaces.md, "Benchmark"):
#   CPU 1: the generator (taskset) and the sink's receive (RPS on the sink's eth0),
#   CPU 0: the router: Sluice (taskset: every thread); the kernel's receive of g0/s0 (RPS
#          mask 1); for af_xdp the veth's NAPI runs in a kthread (`threaded` on g0/s0)
#          pinned to CPU 0 — otherwise XDP and the copy into the UMEM would run on the
#          generator's CPU, in its sendto.
# Router cores = CPU 0's busy time per second: elapsed - delta(idle + iowait) of cpu0 in
# /proc/stat. Under NO_HZ those two are measured with ktime (get_cpu_idle_time_us), not
# sampled by the tick, so this counts every bit of work on CPU 0 (Sluice, softirq, NAPI
# threads, kworkers) once. The per-part figures (Sluice utime+stime, CPU 0 softirq, NAPI
# threads) are tick-sampled and printed for information only: a softirq tick that lands
# while Sluice runs counts in both Sluice's stime and CPU 0's softirq, and softirq work an
# IPI does on an otherwise idle CPU (tick stopped) is never sampled.
# Foreign load: before each variant's series, CPU 0's and CPU 1's busy fraction over a 2 s
# window with no traffic (routers idle) is measured and printed; above 3 % on CPU 0 the
# output says loudly that the results include other work.
# Addresses are private and live only in namespaces this script creates and removes.
#
#   scripts/bench-netns.sh [--runs N] [--seconds S] [--sizes "64 1514"]
#                          [--drivers "af_packet af_xdp linux"]
#
# RXMODE=interrupt|adaptive|polling (default polling) sets Sluice's rx mode on its router
# interfaces; VERBOSE=1 prints `show runtime` and `show <driver>` after each variant;
# AFP_OPTS="v2" adds words to the router's `create host-interface` (XDP_OPTS likewise for
# af_xdp); SLUICE_BIN=<path> runs another sluice binary as the router (paired old/new runs);
# ROUTER_BUFFERS=<n> sets the router's buffers-per-numa (default 32768; <= 3072 puts af_xdp's
# UMEM on the buffer arena); TAP_GEN_OPTS="" lets the tap variant's generator keep qdisc
# bypass (default qdisc-bypass-disable, as in the 2026-11-23 series);
# RATE=<pps> paces the tester (default 1e9: as fast as it can); QUIET_WAIT=<s> waits up to
# <s> seconds before each variant for a 2 s window in which CPU 0 is quiet (<= 3 % busy).
# Sizes are frame lengths on the veth without FCS (1514 = a 1518-byte frame with FCS; the
# veth MTU is 1500). Needs root, iproute2, ethtool, python3 and 2 CPUs.
set -euo pipefail

RUNS=3
SECS=5
SIZES="64 1514"
DRIVERS="af_packet af_xdp linux"
KNOWN="af_packet af_xdp linux tap af_packet-tx af_xdp-tx af_packet-rx af_xdp-rx"
usage() {
    echo "usage: $0 [--runs N] [--seconds S] [--sizes \"64 1514\"] [--drivers \"$KNOWN\"]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        --sizes | --size) SIZES="$2"; shift 2 ;;
        --drivers) DRIVERS="$2"; shift 2 ;;
        *) usage ;;
    esac
done
for drv in $DRIVERS; do
    [[ " $KNOWN " == *" $drv "* ]] || { echo "bench-netns: unknown driver \`$drv'" >&2; usage; }
done

skip() { echo "bench-netns: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v ethtool >/dev/null || skip "ethtool not installed (apt-get install ethtool)"
command -v python3 >/dev/null || skip "python3 not installed"
[ "$(nproc)" -ge 2 ] || skip "needs 2 CPUs (generator and router on different cores)"
if [[ " $DRIVERS " == *" tap "* ]] && [ ! -e /dev/net/tun ]; then skip "tap: no /dev/net/tun"; fi

. "$(dirname "$0")/common.sh"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p sluice -p sluicectl
SLUICE="$TARGET/release/sluice"
ROUTER_BIN="${SLUICE_BIN:-$SLUICE}"
CTL="$TARGET/release/sluicectl"
HZ=$(getconf CLK_TCK)
GEN_RATE="${RATE:-1e9}"
IDLE_WARN=0.03 # CPU 0 busy fraction with no traffic above which results include other work

P="slb$$"
G="${P}g"; S="${P}s"; R="${P}r"
SOCKDIR=$(mktemp -d /tmp/slb.XXXXXX) # private: sluice refuses sockets in a world-writable dir
GSOCK="$SOCKDIR/g.sock"; SOCK="$SOCKDIR/r.sock"
GPID=""; SPID=""
cleanup() {
    for p in "$SPID" "$GPID"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
    done
    for n in "$G" "$S" "$R"; do ip netns del "$n" 2>/dev/null || true; done
    rm -rf "$SOCKDIR"; rm -f "/tmp/${P}.log" "/tmp/${P}g.log"
}
trap cleanup EXIT

ip netns add "$G"; ip netns add "$S"; ip netns add "$R"
for n in "$G" "$S" "$R"; do
    ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$n" link set lo up
done

# The generator: a Sluice tester on CPU 1, sending on the generator's eth0.
ip netns exec "$G" taskset -c 1 "$SLUICE" unix { nodaemon cli-listen "$GSOCK" } \
    buffers { buffers-per-numa 32768 } >"/tmp/${P}g.log" 2>&1 &
GPID=$!
for _ in $(seq 1 100); do [ -S "$GSOCK" ] && break; sleep 0.1; done
gctl() { "$CTL" -s "$GSOCK" "$@"; }
rctl() { "$CTL" -s "$SOCK" "$@"; }

# The generator's and the sink's eth0 (veth peers or tap host sides): up, addressed, their
# kernel receive on CPU 1 (RPS: veth and tun deliver through the backlog), the generator's
# tester attached ($1: extra `create host-interface` options).
hosts_up() {
    local n q
    for n in "$G" "$S"; do
        ip -n "$n" link set eth0 up
        ip netns exec "$n" ethtool -K eth0 tx off >/dev/null 2>&1 || true
        for q in $(ip netns exec "$n" sh -c 'echo /sys/class/net/eth0/queues/rx-*'); do
            echo 2 | ip netns exec "$n" tee "$q/rps_cpus" >/dev/null
        done
    done
    ip -n "$G" addr replace 10.97.1.2/24 dev eth0; ip -n "$G" route replace default via 10.97.1.1
    ip -n "$S" addr replace 10.97.2.2/24 dev eth0; ip -n "$S" route replace default via 10.97.2.1
    gctl create host-interface name eth0 ${1:-} >/dev/null
    gctl set interface state host-eth0 up >/dev/null
}
hosts_down() { gctl delete host-interface name eth0 >/dev/null; }

# The veth topology (every variant but tap); TOPO says which one is in place.
TOPO=none
veths_up() {
    [ "$TOPO" = veth ] && return 0
    ip -n "$R" link add name g0 type veth peer name eth0 netns "$G"
    ip -n "$R" link add name s0 type veth peer name eth0 netns "$S"
    ip -n "$R" link set g0 up; ip -n "$R" link set s0 up
    # The router's receive of g0 and s0 goes to CPU 0 (RPS: veth delivers through netif_rx).
    for d in g0 s0; do echo 1 | ip netns exec "$R" tee /sys/class/net/$d/queues/rx-0/rps_cpus >/dev/null; done
    hosts_up
    TOPO=veth
}
veths_down() {
    [ "$TOPO" = veth ] || return 0
    hosts_down
    ip -n "$R" link del g0; ip -n "$R" link del s0
    TOPO=none
}

start_router() {
    ip netns exec "$R" taskset -c 0 "$ROUTER_BIN" unix { nodaemon cli-listen "$SOCK" } \
        buffers { buffers-per-numa "${ROUTER_BUFFERS:-32768}" } >"/tmp/${P}.log" 2>&1 &
    SPID=$!
    for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
}
stop_router() {
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
    rm -f "$SOCK"
}
router_failed() {
    for c in "show interface" "show errors" "show ip neighbors"; do rctl $c || true; done
    cat "/tmp/${P}.log"; exit 1
}

rx_sink() { ip netns exec "$S" cat /sys/class/net/eth0/statistics/rx_packets; }
rx_sluice() { # Sluice's rx packets counter of $GIF (printed only when non-zero)
    rctl show interface "$GIF" | awk '/rx packets/ {n = $NF} END {print n + 0}'
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# "ns cpu0_idle cpu0_softirq cpu1_idle": time and /proc/stat ticks (idle = idle + iowait).
snap() {
    awk -v t="$(date +%s%N)" '$1 == "cpu0" {i0 = $5 + $6; s0 = $8} $1 == "cpu1" {i1 = $5 + $6}
        END {print t, i0, s0, i1}' /proc/stat
}
# busy <snap before> <snap after>: "cpu0 cpu1" busy fractions in between.
busy() {
    awk -v a="$1" -v b="$2" -v hz="$HZ" 'BEGIN {
        split(a, x, " "); split(b, y, " "); t = (y[1] - x[1]) / 1e9
        c0 = 1 - (y[2] - x[2]) / hz / t; c1 = 1 - (y[4] - x[4]) / hz / t
        printf "%.3f %.3f\n", (c0 < 0) ? 0 : c0, (c1 < 0) ? 0 : c1 }'
}
napi_pids() { # the router's veth NAPI threads, if threaded
    for p in /proc/[0-9]*; do
        case "$(cat "$p/comm" 2>/dev/null)" in napi/g0-* | napi/s0-*) echo "${p#/proc/}" ;; esac
    done
}
napi_ticks() { local t=0 p; for p in $NAPI; do t=$((t + $(ticks "$p"))); done; echo "$t"; }

# One run: "rate cores offered cpu1 sluice softirq napi" (cores, cpu1 and the three parts in
# CPU-seconds per second). MODE: fwd|rx = the generator sends, tx = the router's tester sends
# out of $SIF; the rate is the sink's rx (fwd, tx) or Sluice's rx on $GIF (rx).
run_once() {
    local size="$1" mac="$2" tc=gctl tif=host-eth0 rate=rx_sink r0 r1 c0=0 c1=0 n0 n1 a b off
    [ "$MODE" = tx ] && { tc=rctl; tif="$SIF"; }
    [ "$MODE" = rx ] && rate=rx_sluice
    $tc tester stream add name b interface "$tif" size "$size" rate "$GEN_RATE" duration "$SECS" \
        dst-mac "$mac" src 10.97.1.10-10.97.1.250 dst 10.97.2.2 dport 9 flows 1000 >/dev/null
    r0=$($rate); [ -n "$SPID" ] && c0=$(ticks "$SPID"); n0=$(napi_ticks); a=$(snap)
    $tc tester start >/dev/null
    sleep "$SECS"
    while $tc show tester json | grep -q '"running": true'; do sleep 0.05; done
    sleep 0.1
    r1=$($rate); [ -n "$SPID" ] && c1=$(ticks "$SPID"); n1=$(napi_ticks); b=$(snap)
    off=$($tc show tester json | python3 -c '
import json, sys
s = json.load(sys.stdin)["streams"]["b"]
print("%.0f" % (s["tx_packets"] / (s["elapsed_s"] or 1e-9)))')
    $tc tester stream del name b >/dev/null
    awk -v r=$((r1 - r0)) -v a="$a" -v b="$b" -v busy="$(busy "$a" "$b")" -v hz="$HZ" \
        -v off="$off" -v c=$((c1 - c0)) -v n=$((n1 - n0)) 'BEGIN {
        split(a, x, " "); split(b, y, " "); split(busy, u, " "); t = (y[1] - x[1]) / 1e9
        printf "%d %.3f %d %.3f %.3f %.3f %.3f\n", r / t, u[1], off, u[2],
            c / hz / t, (y[3] - x[3]) / hz / t, n / hz / t }'
}

warm() { # wait for the path to work (ARP on both sides; each router has other MACs)
    ip -n "$G" neigh flush all; ip -n "$S" neigh flush all
    for _ in $(seq 1 20); do
        ip netns exec "$G" ping -c1 -W1 10.97.2.2 >/dev/null 2>&1 && return 0 || sleep 0.2
    done
    echo "bench-netns: no path from generator to sink" >&2; return 1
}

declare -A RES IDLE
WARNED=""
# idle_window <variant> before|after: CPU 0 and CPU 1 busy fractions over 2 s with no
# traffic, before and after a variant's series. Before, with QUIET_WAIT=<s>, the window is
# repeated until CPU 0 is quiet or <s> seconds have passed.
idle_window() {
    local a b b0 b1 own c0=0 c1=0 n0 n1 t0=$SECONDS
    while :; do
        [ -n "$SPID" ] && c0=$(ticks "$SPID"); n0=$(napi_ticks); a=$(snap)
        sleep 2
        [ -n "$SPID" ] && c1=$(ticks "$SPID"); n1=$(napi_ticks); b=$(snap)
        read -r b0 b1 <<<"$(busy "$a" "$b")"
        own=$(awk -v c=$((c1 - c0 + n1 - n0)) -v hz="$HZ" -v a="$a" -v b="$b" \
            'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.3f", c / hz / ((y[1] - x[1]) / 1e9)}')
        awk -v b="$b0" -v w="$IDLE_WARN" 'BEGIN {exit !(b > w)}' || break
        [ "$2" = before ] && [ $((SECONDS - t0)) -lt "${QUIET_WAIT:-0}" ] || break
    done
    IDLE[$1]+="${IDLE[$1]:+ -> }$b0/$b1"
    echo "$1: idle $2 (2 s, no traffic) CPU 0 $b0, CPU 1 $b1 busy (the router's Sluice and NAPI threads: $own); load average $(cut -d' ' -f1-3 /proc/loadavg)"
    if awk -v b="$b0" -v w="$IDLE_WARN" 'BEGIN {exit !(b > w)}'; then
        WARNED+=" $1($2)"
        echo "WARNING: $1: CPU 0 is $b0 busy with no traffic $2 the series (> $IDLE_WARN): its results include other work"
    fi
}

# Runs every size against the variant now in place; $1 = variant, $2 = destination MAC.
measure() {
    local drv="$1" mac="$2" size i rate cores off c1 sl so na
    idle_window "$drv" before
    for size in $SIZES; do
        local RATES=() CORES=() PPC=() OFF=() C1=() SL=() SO=() NA=()
        for i in $(seq 1 "$RUNS"); do
            read -r rate cores off c1 sl so na <<<"$(run_once "$size" "$mac")"
            RATES+=("$rate"); CORES+=("$cores"); OFF+=("$off"); C1+=("$c1")
            SL+=("$sl"); SO+=("$so"); NA+=("$na")
            PPC+=("$(awk -v p="$rate" -v c="$cores" 'BEGIN {printf "%d", (c > 0) ? p / c : 0}')")
        done
        RES[$drv,$size]="$(stats "${RATES[@]}")|$(stats "${CORES[@]}")|$(stats "${PPC[@]}")|$(stats "${OFF[@]}")|$(stats "${C1[@]}")|$(stats "${SL[@]}")|$(stats "${SO[@]}")|$(stats "${NA[@]}")"
    done
    idle_window "$drv" after
}

mac_of() { # Sluice's MAC of interface $1
    rctl show hardware-interfaces | awk -v n="$1" '$1 == n {f = 1} f && /Ethernet address/ {print $3; exit}'
}

# Sluice on veth (af_packet, af_xdp and their -tx / -rx ceilings).
sluice_veth() {
    local drv="$1" base="${1%%-*}" ifs d c mac
    MODE=fwd; ifs="g0 s0"
    case "$drv" in *-tx) MODE=tx; ifs="s0" ;; *-rx) MODE=rx; ifs="g0" ;; esac
    veths_up
    case "$base" in
        af_packet) mk() { echo "create host-interface name $1 ${AFP_OPTS:-}"; }; ifn() { echo "host-$1"; } ;;
        af_xdp) mk() { echo "create interface af_xdp host-if $1 name $1/0 ${XDP_OPTS:-}"; }; ifn() { echo "$1/0"; } ;;
    esac
    GIF=$(ifn g0); SIF=$(ifn s0)
    start_router
    for d in $ifs; do
        for c in "$(mk "$d")" "set interface state $(ifn "$d") up" \
                 "set interface rx-mode $(ifn "$d") ${RXMODE:-polling}"; do
            rctl $c >/dev/null
        done
    done
    case "$MODE" in
        fwd) rctl set interface ip address "$GIF" 10.97.1.1/24 >/dev/null
             rctl set interface ip address "$SIF" 10.97.2.1/24 >/dev/null ;;
        rx) rctl set interface ip address "$GIF" 10.97.1.1/24 >/dev/null
            rctl ip route add 10.97.2.0/24 via drop >/dev/null ;;
    esac
    NAPI=""
    if [ "$base" = af_xdp ] && [[ " ${XDP_OPTS:-} " != *" generic-xdp "* ]]; then
        # Native XDP gives the veth a NAPI instance; run it in a thread on CPU 0.
        for d in $ifs; do echo 1 | ip netns exec "$R" tee /sys/class/net/$d/threaded >/dev/null; done
        NAPI=$(napi_pids)
        for p in $NAPI; do taskset -pc 0 "$p" >/dev/null; done
        if [ "${RXMODE:-polling}" = polling ] && [ -z "${NO_BUSY_POLL:-}" ]; then
            # Busy polling: a polling Sluice runs the veth NAPI itself (recvfrom on the
            # XSK, SO_PREFER_BUSY_POLL). Deferring the NAPI's re-arm (200 µs, 2 rounds)
            # keeps the NAPI thread from taking it back while Sluice polls.
            for d in $ifs; do
                echo 2 | ip netns exec "$R" tee /sys/class/net/$d/napi_defer_hard_irqs >/dev/null
                echo 200000 | ip netns exec "$R" tee /sys/class/net/$d/gro_flush_timeout >/dev/null
            done
        fi
        echo "$drv: $(rctl show af_xdp | grep -Eo "native|generic" | head -1) XDP, NAPI threads:" $NAPI
    fi
    case "$MODE" in
        fwd) warm || router_failed; mac=$(mac_of "$GIF") ;;
        rx) mac=$(mac_of "$GIF") ;;
        tx) mac=$(ip netns exec "$S" cat /sys/class/net/eth0/address) ;;
    esac
    measure "$drv" "$mac"
    rctl show errors | grep -Ev ' info ' || true
    [ -n "${VERBOSE:-}" ] && rctl show runtime && rctl show "$base"
    stop_router
    # Back to the veths' defaults for the next router (a NAPI left threaded or deferred
    # would move the kernel's forwarding off CPU 0).
    for d in g0 s0; do
        for k in threaded napi_defer_hard_irqs gro_flush_timeout; do
            echo 0 | ip netns exec "$R" tee /sys/class/net/$d/$k >/dev/null 2>&1 || true
        done
    done
    NAPI=""
}

# Sluice with two taps whose host sides are the generator's and the sink's eth0.
sluice_tap() {
    veths_down
    MODE=fwd; GIF=tap0; SIF=tap1; NAPI=""
    start_router
    for c in "create tap id 0 host-if-name eth0 host-ns $G host-ip4-addr 10.97.1.2/24" \
             "create tap id 1 host-if-name eth0 host-ns $S host-ip4-addr 10.97.2.2/24" \
             "set interface state tap0 up" "set interface state tap1 up" \
             "set interface ip address tap0 10.97.1.1/24" \
             "set interface ip address tap1 10.97.2.1/24" \
             "set interface rx-mode tap0 ${RXMODE:-polling}" \
             "set interface rx-mode tap1 ${RXMODE:-polling}"; do
        rctl $c >/dev/null || router_failed
    done
    # The generator goes through the host side's qdisc here: tun drops what Sluice has not
    # read yet once its 1000-packet ring is full, and with qdisc bypass that drop used to stop
    # the generator's tx ring (see docs/interfaces.md, "Benchmark"); the qdisc absorbs it.
    # TAP_GEN_OPTS="" runs the generator with qdisc bypass, as for the other variants.
    hosts_up "${TAP_GEN_OPTS-qdisc-bypass-disable}"
    warm || router_failed
    measure tap "$(mac_of tap0)"
    rctl show errors | grep -Ev ' info ' || true
    [ -n "${VERBOSE:-}" ] && rctl show runtime && rctl show tap
    hosts_down
    stop_router # closes the taps: their host sides disappear
}

linux_router() {
    veths_up
    MODE=fwd; NAPI=""
    ip -n "$R" addr add 10.97.1.1/24 dev g0; ip -n "$R" addr add 10.97.2.1/24 dev s0
    ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
    warm
    measure linux "$(ip netns exec "$R" cat /sys/class/net/g0/address)"
    ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=0
    ip -n "$R" addr flush dev g0; ip -n "$R" addr flush dev s0
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for drv in $DRIVERS; do
    case "$drv" in
        linux) linux_router ;;
        tap) sluice_tap ;;
        *) sluice_veth "$drv" ;;
    esac
done

label() {
    case "$1" in
        linux) echo "Linux ip_forward" ;;
        *-tx) echo "${1%-tx} tx only" ;;
        *-rx) echo "${1%-rx} rx only" ;;
        *) echo "Sluice $1" ;;
    esac
}
med() { cut -d'|' -f"$2" <<<"${RES[$1]}" | awk '{print $2}'; }
has() { [[ " $DRIVERS " == *" $1 "* ]]; }

echo "${SECS}s x ${RUNS} runs per cell, min/median/max; RXMODE=${RXMODE:-polling}; RATE=$GEN_RATE; load average before $LOAD0, after $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rate = pps received by the sink (tx only: sent by Sluice's tester; rx only: Sluice's rx counter);"
echo "cores = CPU 0 busy (elapsed - idle, /proc/stat): the router's CPU-seconds per second; pps/core = rate / cores (per run);"
echo "offered = tester tx pps; cpu1 = CPU 1 busy; idle = CPU 0/CPU 1 busy with no traffic before -> after the series;"
echo "parts (tick-sampled, information only, medians): Sluice utime+stime / CPU 0 softirq / NAPI threads"
for size in $SIZES; do
    echo "frame ${size} B (without FCS):"
    for drv in $DRIVERS; do
        IFS='|' read -r p c pc o b1 sl so na <<<"${RES[$drv,$size]}"
        printf '  %-18s rate %-26s cores %-18s pps/core %-26s offered %-26s cpu1 %-18s idle %-25s parts %s/%s/%s\n' \
            "$(label "$drv")" "${p// //}" "${c// //}" "${pc// //}" "${o// //}" "${b1// //}" \
            "${IDLE[$drv]}" "$(awk '{print $2}' <<<"$sl")" "$(awk '{print $2}' <<<"$so")" "$(awk '{print $2}' <<<"$na")"
    done
    kc=""
    if has linux; then
        kp=$(med "linux,$size" 1); kc=$(med "linux,$size" 3)
        for drv in af_packet af_xdp tap; do
            has "$drv" || continue
            awk -v d="$drv" -v sp="$(med "$drv,$size" 1)" -v kp="$kp" -v sc="$(med "$drv,$size" 3)" -v kc="$kc" \
                'BEGIN {printf "  %-18s / Linux (medians): raw %.2fx, per core used %.2fx\n", d, kp ? sp / kp : 0, kc ? sc / kc : 0}'
        done
    fi
    for base in af_packet af_xdp; do
        has "$base-rx" && has "$base-tx" || continue
        fw=""; has "$base" && fw=$(med "$base,$size" 3)
        awk -v d="$base" -v rx="$(med "$base-rx,$size" 3)" -v tx="$(med "$base-tx,$size" 3)" \
            -v fw="$fw" -v kc="$kc" 'BEGIN {
            bound = (rx > 0 && tx > 0) ? 1 / (1 / rx + 1 / tx) : 0
            printf "  %-18s ceilings per core (medians): rx %d, tx %d -> forwarding bound %d pps/core", d, rx, tx, bound
            if (fw != "") printf "; measured forwarding %d (%.2f of the bound)", fw, bound ? fw / bound : 0
            if (kc != "") printf "; Linux %d (bound / Linux %.2fx)", kc, kc ? bound / kc : 0
            printf "\n" }'
    done
done
if [ -n "$WARNED" ]; then
    echo "WARNING: CPU 0 was more than $IDLE_WARN busy with no traffic around:$WARNED — those results include other work (see the idle column)"
fi
