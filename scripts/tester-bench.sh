#!/usr/bin/env bash
# Pacing accuracy and maximum transmit rate of the Sluice traffic tester over af_packet.
#
#   sluice (tester) host-ta --veth-- host-tb (tester-rx), both ends in one namespace
#
# For each target rate (default 100k, 500k, 1M pps and "max" = 1e9, i.e. as fast as the
# tester and the driver go) and each of N runs: one 64-byte stream for S seconds, then
# `show tester json`. Prints min/median/max over the runs of the rate the driver accepted
# (tx_packets / elapsed), its error against the target, tx-fail (tx ring full), what came
# back on the other end, and the median latency. Release build; the namespace is created
# and removed by this script; no address is configured anywhere.
#
#   scripts/tester-bench.sh [--runs N] [--seconds S] [--size BYTES] [--workers N] [--tx-worker W]
#                           [--rates "100000 1e9"] [--no-rx]
#
# --workers N starts N worker threads (af_packet rx queues go to worker 0 first);
# --tx-worker W sends from worker W (default: the main thread); --no-rx leaves the other veth
# end to the kernel (which drops the frames), to measure the transmit side alone.
#
# Needs root, iproute2 and python3. A shared 2-core VM: the tester, the kernel's veth work
# and the receive side share the cores, so the maximum is a property of this machine.
set -euo pipefail

RUNS=3
SECS=2
SIZE=64
WORKERS=0
TXW=""
RX=1
RATES="100000 500000 1000000 1e9"
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --seconds) SECS="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --workers) WORKERS="$2"; shift 2 ;;
        --tx-worker) TXW="$2"; shift 2 ;;
        --rates) RATES="$2"; shift 2 ;;
        --no-rx) RX=0; shift ;;
        *) echo "usage: $0 [--runs N] [--seconds S] [--size BYTES] [--workers N] [--tx-worker W] [--rates \"R ...\"] [--no-rx]" >&2; exit 2 ;;
    esac
done

skip() { echo "tester-bench: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v python3 >/dev/null || skip "python3 not installed"

. "$(dirname "$0")/common.sh"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p sluice -p sluicectl
SLUICE="$TARGET/release/sluice"
CTL="$TARGET/release/sluicectl"

P="sltb$$"
SOCKDIR=$(mktemp -d /tmp/sltb.XXXXXX) # private: sluice refuses sockets in a world-writable dir
SOCK="$SOCKDIR/cli.sock"
SPID=""
cleanup() {
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null || true
    ip netns del "$P" 2>/dev/null || true
    rm -rf "$SOCKDIR"; rm -f "/tmp/${P}.log"
}
trap cleanup EXIT

ip netns add "$P"
ip netns exec "$P" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
ip -n "$P" link add ta type veth peer name tb
for l in lo ta tb; do ip -n "$P" link set "$l" up; done

CPU=""
[ "$WORKERS" -gt 0 ] && CPU="cpu { workers $WORKERS }"
ip netns exec "$P" "$SLUICE" unix { nodaemon cli-listen "$SOCK" } buffers { buffers-per-numa 65536 } $CPU \
    >"/tmp/${P}.log" 2>&1 &
SPID=$!
for _ in $(seq 1 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
ctl() { "$CTL" -s "$SOCK" "$@"; }
ctl create host-interface name ta >/dev/null
ctl set interface state host-ta up >/dev/null
if [ "$RX" = 1 ]; then
    for c in "create host-interface name tb" "set interface state host-tb up" \
             "set interface tester-rx host-tb"; do
        ctl $c >/dev/null
    done
fi
W=""
[ -n "$TXW" ] && W="worker $TXW"

# One run: prints "accepted_pps offered_pps tx_fail rx_packets tx_packets p50_ns".
run_once() {
    local rate="$1"
    ctl tester stream add name b interface host-ta size "$SIZE" rate "$rate" duration "$SECS" \
        dst-mac 02:fe:00:00:00:02 src 10.0.0.1-10.0.0.255 dst 10.1.0.1 flows 1000 $W >/dev/null
    ctl tester start >/dev/null
    sleep "$SECS"
    while ctl show tester json | grep -q '"running": true'; do sleep 0.05; done
    sleep 0.2
    ctl show tester json | python3 -c '
import json, sys
s = json.load(sys.stdin)["streams"]["b"]
e = s["elapsed_s"] or 1e-9
p50 = s["latency_ns"]["p50"]
print("%.0f %.0f %d %d %d %s" % (s["tx_packets"] / e, s["offered_rate_pps"], s["tx_fail"],
      s["rx_packets"], s["tx_packets"], "-" if p50 is None else p50))
print("run: tx %d elapsed %.6f" % (s["tx_packets"], s["elapsed_s"]), file=sys.stderr)'
    ctl tester stream del name b >/dev/null
}


echo "tester: ${SIZE}-byte frames, ${SECS}s x ${RUNS} runs, af_packet over veth, $WORKERS worker(s), tx on ${W:-the main thread}, $( [ "$RX" = 1 ] && echo "rx on host-tb" || echo "no rx" ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %32s %9s %9s %8s %10s %9s %12s\n' "target" "accepted pps min/median/max" "error" "tx-fail" "rx/tx" "p50 lat" "vec/call" "drv clk/pkt"
for r in $RATES; do
    ctl clear runtime >/dev/null
    ACC=(); FAIL=0; RXP=0; TX=0; LAT=()
    for i in $(seq 1 "$RUNS"); do
        read -r acc off fail rx tx p50 <<<"$(run_once "$r")"
        ACC+=("$acc"); FAIL=$((FAIL + fail)); RXP=$((RXP + rx)); TX=$((TX + tx)); LAT+=("$p50")
    done
    read -r amin amed amax <<<"$(stats "${ACC[@]}")"
    read -r _ lmed _ <<<"$(stats "${LAT[@]}")"
    label="$r"; [ "$r" = "1e9" ] && label="max"
    err=$(awk -v a="$amed" -v r="$r" 'BEGIN { if (r >= 1e9) print "-"; else printf "%+.2f%%", (a - r) * 100 / r }')
    ratio=$(awk -v a="$RXP" -v b="$TX" 'BEGIN { if (b > 0 && a > 0) printf "%.4f", a / b; else print "-" }')
    # tester-tx vectors per call, and interface-output + af-packet-tx clocks per packet: a
    # vector's last frame leaves about vec x clk / TSC-Hz after its timestamp.
    rt=$(ctl show runtime)
    vec=$(awk '$1 == "tester-tx" { print $NF }' <<<"$rt")
    clk=$(awk '$1 == "interface-output" || $1 == "af-packet-tx" { s += $(NF-1) } END { printf "%.0f", s }' <<<"$rt")
    printf '%-10s %10s %10s %10s %9s %9s %8s %7s ns %9s %12s\n' "$label" "$amin" "$amed" "$amax" "$err" "$FAIL" "$ratio" "$lmed" "$vec" "$clk"
done
echo "show runtime of the last target:"
ctl show runtime | grep -E 'Name|tester|interface-output|af-packet' || true
ctl show errors | grep -E 'tester|af-packet' || true
