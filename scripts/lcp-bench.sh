#!/usr/bin/env bash
# linux-cp netlink sync benchmark (not a test; root). A Sluice in its own namespace pairs a
# loopback with a Linux twin in a control-plane namespace; `ip -batch` there adds N routes
# (/24s via a neighbour on the twin's subnet), then deletes them. Per run:
#   linux   — how long `ip -batch` took (the kernel's own time to take the routes),
#   sluice  — from the start of `ip -batch` until `show lcp` counts all N in Sluice's FIB,
#   behind  — sluice - linux: how far Sluice finishes after Linux,
#   bytes/route — Sluice's RSS growth over the add, divided by N.
# Printed as min / median / max over the runs. The full BGP table through BIRD is
# scripts/lcp-bgp-bench.sh.
#
# FWD=1 also forwards while the table churns: a packet-generator stream on Sluice's main
# thread (as the netlink sync) sends 64-byte packets to the first routed /24 (out of loop0
# to a static neighbour); its rate is sampled with the routes installed and idle, then
# during the delete + add of the N routes, and printed as Mpps and the churn/idle ratio.
#
# Usage: [FWD=1] scripts/lcp-bench.sh [routes (200000)] [runs (5)]
source "$(dirname "$0")/common.sh"
n=${1:-200000}
runs=${2:-5}
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, taps)"; exit 0
fi
cargo build -j 2 --release -q -p sluice -p sluicectl
bin=$PWD/target/release
tmp=$(mktemp -d)
S=lcpb$$S; L=lcpb$$L
cleanup() {
  # set -e is on here too: every step may fail harmlessly (already gone).
  if [ -n "${pid:-}" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  ip netns del "$S" 2>/dev/null || true; ip netns del "$L" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
python3 - "$n" "$tmp" <<'PY'
import sys
n, tmp = int(sys.argv[1]), sys.argv[2]
for verb in ("add", "del"):
    with open(f"{tmp}/{verb}.batch", "w") as f:
        for i in range(n):
            f.write(f"route {verb} {11 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24 via 10.88.0.2\n")
PY
now() { date +%s.%N; }
routes() { "$bin/sluicectl" -s "$tmp/cli.sock" show lcp | sed -n 's/.*: routes \([0-9]*\) .*/\1/p'; }
rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }
declare -a la sa ba bpr ld sd bd fi_ fc fr
echo "== $n routes, $runs runs; load average $(cut -d' ' -f1-3 /proc/loadavg) (2-core shared VM)"
for r in $(seq 1 "$runs"); do
  ip netns add "$S"; ip netns add "$L"
  printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\nlinux-cp { default netns %s }\n' "$tmp" "$L" >"$tmp/c.conf"
  ip netns exec "$S" "$bin/sluice" -c "$tmp/c.conf" >"$tmp/log.$r" 2>&1 &
  pid=$!
  until [ -S "$tmp/cli.sock" ]; do sleep 0.05; done
  C() { "$bin/sluicectl" -s "$tmp/cli.sock" "$@" >/dev/null; }
  C create loopback interface; C set interface state loop0 up
  C lcp create loop0 host-if lcpbtw
  ip -n "$L" addr add 10.88.0.1/24 dev lcpbtw
  until [ "$("$bin/sluicectl" -s "$tmp/cli.sock" show interface address | grep -c 10.88.0.1)" = 1 ]; do sleep 0.01; done
  if [ "${FWD:-0}" = 1 ]; then
    C set ip neighbor loop0 10.88.0.2 02:00:00:00:00:02 static
    C create packet-generator interface pg0; C set interface state pg0 up
    C set interface ip address pg0 10.99.0.1/24
    C "packet-generator new { name fwd limit -1 size 64-64 node ip4-input interface pg0 data { UDP: 10.99.0.2 -> 11.0.0.1 UDP: 1 -> 2 } }"
  fi
  r0=$(rss)
  t0=$(now); ip -n "$L" -batch "$tmp/add.batch"; t1=$(now)
  until [ "$(routes)" = "$n" ]; do sleep 0.01; done; t2=$(now)
  r1=$(rss)
  if [ "${FWD:-0}" = 1 ]; then
    # Packets the stream injected (pg0 rx) per second: idle, then while the routes churn.
    injected() { "$bin/sluicectl" -s "$tmp/cli.sock" show interface pg0 | awk '/rx packets/ {print $NF; exit}'; }
    C packet-generator enable-stream fwd
    sleep 1; p0=$(injected); f0=$(now); sleep 3; p1=$(injected); f1=$(now)
    fi_+=("$(echo "($p1 - $p0) / ($f1 - $f0) / 1000000" | bc -l)")
    p2=$(injected); f2=$(now)
    ip -n "$L" -batch "$tmp/del.batch"
    until [ "$(routes)" = 0 ]; do sleep 0.01; done
    ip -n "$L" -batch "$tmp/add.batch"
    until [ "$(routes)" = "$n" ]; do sleep 0.01; done
    p3=$(injected); f3=$(now)
    fc+=("$(echo "($p3 - $p2) / ($f3 - $f2) / 1000000" | bc -l)")
    fr+=("$(echo "${fc[-1]} / ${fi_[-1]}" | bc -l)")
    C packet-generator disable-stream fwd
  fi
  t3=$(now); ip -n "$L" -batch "$tmp/del.batch"; t4=$(now)
  until [ "$(routes)" = 0 ]; do sleep 0.01; done; t5=$(now)
  "$bin/sluicectl" -s "$tmp/cli.sock" show lcp | tail -1 >"$tmp/sync.$r"
  la+=("$(echo "$t1 - $t0" | bc -l)"); sa+=("$(echo "$t2 - $t0" | bc -l)"); ba+=("$(echo "$t2 - $t1" | bc -l)")
  ld+=("$(echo "$t4 - $t3" | bc -l)"); sd+=("$(echo "$t5 - $t3" | bc -l)"); bd+=("$(echo "$t5 - $t4" | bc -l)")
  bpr+=("$(echo "($r1 - $r0) / $n" | bc -l)")
  kill "$pid"; wait "$pid" 2>/dev/null; pid=
  ip netns del "$S"; ip netns del "$L"; rm -f "$tmp/cli.sock"
done
printf '\n| %s routes | min | median | max |\n|---|---|---|---|\n' "$n"
row() { local name=$1; shift; read -r a b c < <(stats "$@"); printf '| %s | %.3f | %.3f | %.3f |\n' "$name" "$a" "$b" "$c"; }
row "add: linux (ip -batch) s" "${la[@]}"
row "add: in Sluice's FIB s" "${sa[@]}"
row "add: Sluice behind Linux s" "${ba[@]}"
row "del: linux (ip -batch) s" "${ld[@]}"
row "del: gone from Sluice's FIB s" "${sd[@]}"
row "del: Sluice behind Linux s" "${bd[@]}"
row "Sluice RSS bytes per route" "${bpr[@]}"
if [ "${FWD:-0}" = 1 ]; then
  row "forwarding, routes idle Mpps" "${fi_[@]}"
  row "forwarding while $n routes are deleted and re-added Mpps" "${fc[@]}"
  row "churn / idle" "${fr[@]}"
fi
echo; echo "last run's sync counters: $(cat "$tmp/sync.$runs")"
