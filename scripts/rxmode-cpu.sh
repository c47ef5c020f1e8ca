#!/usr/bin/env bash
# CPU use of Sluice per rx mode (polling, interrupt, adaptive), idle and with traffic.
#
#   af_packet: ns A --veth-- Sluice (2 host-interfaces, IPv4 routing) --veth-- ns B
#   af_xdp:    the same veths, a second Sluice with 2 af_xdp interfaces (native XDP)
#   memif:     Sluice M (master, pg stream) ==memif== Sluice S (slave, measured)
#
# Both Sluice layouts use `cpu { workers 1 }` (rx queues on the worker, the main thread runs
# the CLI and process nodes). CPU = (utime + stime) of the Sluice process from
# /proc/<pid>/stat over S seconds, in % of one core (all threads summed); idle figures are
# min/median/max over N runs. With traffic (one run each):
#   - ping 100/s: `ping -i 0.01` A -> B (light load: polling mode spins 10 ms after every
#     packet, interrupt mode sleeps between them);
#   - ping flood: `ping -f` A -> B (packets lost must stay ~0 in every mode);
#   - memif 10 kpps: a rate-limited pg stream on M, received by S.
# Addresses are private and live only in namespaces this script creates and removes.
#
#   scripts/rxmode-cpu.sh [--runs N] [--seconds S]
#
# Needs root, iproute2 and ping (iputils-ping). Timings on a shared VM are noisy: compare the
# modes measured in one run.
set -euo pipefail

RUNS=3
SECS=10
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--seconds S]" >&2; exit 2 ;;
    esac
done

skip() { echo "rxmode-cpu: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v ping >/dev/null || skip "ping not installed (apt-get install iputils-ping)"

. "$(dirname "$0")/common.sh"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p sluice -p sluicectl
SLUICE="$TARGET/release/sluice"
CTL="$TARGET/release/sluicectl"
HZ=$(getconf CLK_TCK)

P="slc$$"
A="${P}a"; B="${P}b"
D=$(mktemp -d "/tmp/${P}.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
    ip link del "${P}a0" 2>/dev/null || true
    ip link del "${P}b0" 2>/dev/null || true
    for n in "$A" "$B"; do ip netns del "$n" 2>/dev/null || true; done
    rm -rf "$D"
}
trap cleanup EXIT

# start <name>: a Sluice with one worker; sets $PID_<name>.
start() {
    printf 'unix { nodaemon cli-listen %s/%s.sock }\ncpu { workers 1 }\nbuffers { buffers-per-numa 16384 page-size 4k }\n' \
        "$D" "$1" > "$D/$1.conf"
    "$SLUICE" -c "$D/$1.conf" > "$D/$1.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    eval "PID_$1=$pid"
    until [ -S "$D/$1.sock" ]; do sleep 0.05; done
}
ctl() { local n=$1; shift; "$CTL" -s "$D/$n.sock" "$@"; }

ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# cpu <pid> <seconds> [command...]: % of one core used by <pid> while sleeping or running
# the command (which must last about <seconds>).
cpu() {
    local pid=$1 secs=$2; shift 2
    local t0 c0 t1 c1
    c0=$(ticks "$pid"); t0=$(date +%s.%N)
    if [ $# -gt 0 ]; then "$@"; else sleep "$secs"; fi
    c1=$(ticks "$pid"); t1=$(date +%s.%N)
    awk -v c="$((c1 - c0))" -v hz="$HZ" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.2f", 100 * c / hz / (t1 - t0) }'
}
# mmm v1 v2 ...: "min / median / max"
mmm() { stats "$@" | awk '{ printf "%6.2f / %6.2f / %6.2f", $1, $2, $3 }'; }
row() { printf '  %-10s %-28s %s\n' "$1" "$2" "$3"; }

echo "Sluice CPU use by rx mode, % of one core (utime+stime of the process), ${SECS} s per sample"
echo

# ---------------------------------------------------------------------------------------
# af_packet
ip netns add "$A"; ip netns add "$B"
ip link add "${P}a0" type veth peer name eth0 netns "$A"
ip link add "${P}b0" type veth peer name eth0 netns "$B"
for n in A B; do
    ns=${!n}; net=$([ $n = A ] && echo 1 || echo 2)
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "10.97.$net.2/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "10.97.$net.1"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
done
for l in "${P}a0" "${P}b0"; do echo 1 > "/proc/sys/net/ipv6/conf/$l/disable_ipv6"; done
ping_a() { ip netns exec "$A" ping "$@" > "$D/ping.txt" 2>&1 || true; }

# measure_linux <driver> <sluice name>: one Sluice attached to both veths with <driver>.
measure_linux() {
    local drv=$1 n=$2 a b pid
    start "$n"
    case "$drv" in
        af_packet)
            a="host-${P}a0"; b="host-${P}b0"
            ctl "$n" create host-interface name "${P}a0" >/dev/null
            ctl "$n" create host-interface name "${P}b0" >/dev/null ;;
        af_xdp)
            a="${P}a0/0"; b="${P}b0/0"
            ctl "$n" create interface af_xdp host-if "${P}a0" name "$a" >/dev/null
            ctl "$n" create interface af_xdp host-if "${P}b0" name "$b" >/dev/null ;;
    esac
    for l in "$a" "$b"; do ctl "$n" set interface state "$l" up; done
    ctl "$n" set interface ip address "$a" 10.97.1.1/24
    ctl "$n" set interface ip address "$b" 10.97.2.1/24
    for n2 in "$A" "$B"; do ip -n "$n2" neigh flush all; done
    ip netns exec "$A" ping -c 2 -W 2 10.97.2.2 >/dev/null
    pid=$(eval echo "\$PID_$n")

    echo "$drv (two interfaces on worker 0; A pings B through Sluice)"
    row mode "test" "CPU %  (idle: min / median / max)"
    for mode in polling interrupt adaptive; do
        for l in "$a" "$b"; do ctl "$n" set interface rx-mode "$l" "$mode"; done
        sleep 1
        v=()
        for _ in $(seq "$RUNS"); do v+=("$(cpu "$pid" "$SECS")"); done
        row "$mode" "idle" "$(mmm "${v[@]}")"
        light=$(cpu "$pid" "$SECS" ping_a -q -i 0.01 -w "$SECS" 10.97.2.2)
        loss=$(grep -o '[0-9.]*% packet loss' "$D/ping.txt" || echo "?")
        row "$mode" "ping 100/s (${loss:-?})" "$light"
        flood=$(cpu "$pid" "$SECS" ping_a -q -f -w "$SECS" 10.97.2.2)
        sent=$(awk '/packets transmitted/ { print $1 " sent, " $4 " back" }' "$D/ping.txt")
        row "$mode" "ping -f (${sent:-?})" "$flood"
    done
    ctl "$n" show interface rx-placement | sed 's/^/    /'
    echo
    kill "$pid"; wait "$pid" 2>/dev/null || true
}
measure_linux af_packet af
measure_linux af_xdp xdp

# ---------------------------------------------------------------------------------------
# memif
start m; start s
ctl m create memif socket id 1 filename "$D/memif.sock" >/dev/null
ctl m create interface memif id 0 socket-id 1 master >/dev/null
ctl s create memif socket id 1 filename "$D/memif.sock" >/dev/null
ctl s create interface memif id 0 socket-id 1 slave >/dev/null
for n in m s; do
    ctl $n create packet-generator interface pg0 >/dev/null
    ctl $n set interface state memif1/0 up
    ctl $n set interface state pg0 up
done
ctl m set interface l2 xconnect pg0 memif1/0
ctl s set interface l2 xconnect memif1/0 pg0
until ctl s show memif memif1/0 | grep -q "link up"; do sleep 0.1; done
cat > "$D/stream.cli" <<EOS
packet-generator new {
  name load
  limit $((SECS * 10000))
  rate 10000
  size 64-64
  node ethernet-input
  interface pg0
  data {
    IP4: 02:00:00:00:00:10 -> 02:fe:00:00:00:00
    UDP: 10.0.0.16 -> 10.1.0.1
    UDP: 1024 -> 53
    incrementing 18
  }
}
EOS
ctl m exec "$D/stream.cli"
rxs() { ctl s show interface memif1/0 | awk '/rx packets/ {print $NF}'; }

echo "memif (S = slave, rx ring on worker 0, measured; M = master, sends)"
row mode "test" "CPU % of S  (idle: min / median / max)"
for mode in polling interrupt adaptive; do
    for n in m s; do ctl $n set interface rx-mode memif1/0 "$mode"; done
    sleep 1
    v=()
    for _ in $(seq "$RUNS"); do v+=("$(cpu "$PID_s" "$SECS")"); done
    row "$mode" "idle" "$(mmm "${v[@]}")"
    r0=$(rxs)
    ctl m packet-generator enable load
    load=$(cpu "$PID_s" "$SECS")
    sleep 0.5
    r1=$(rxs)
    row "$mode" "10 kpps ($((r1 - r0)) received)" "$load"
done
ctl s show interface rx-placement | sed 's/^/    /'
