#!/usr/bin/env bash
# DPDK I/O benchmark on one core, no NIC and no hugepages, all in one run, on two virtual
# device setups:
#   null: net_null0 -> dpdk-input -> IPv4 (one route) -> dpdk-tx -> net_null1 (the issue's
#         benchmark; net_null allocates and frees an mbuf per packet, about as costly as
#         testpmd's whole io forwarding);
#   ring: net_ring0 transmitting into its own receive ring, 512 packets injected once going
#         round dpdk-input -> IPv4 -> dpdk-tx (the PMD costs little: what is measured is
#         Sluice's part).
# For each: 1. Sluice against the same IPv4 path between two pg interfaces (the engine
# benchmark's pg path), runs alternating, in one process (plugins/dpdk/examples/dpdk_bench.rs):
# Mpps and clocks/packet of dpdk-input and dpdk-tx, min/median/max; 2. dpdk-testpmd io
# forwarding on the same devices (null: net_null0 -> net_null1, 60-byte frames; ring:
# net_ring0 looped, one burst of 32 sent first with --tx-first), RUNS runs of SECS seconds:
# Mpps from its per-second Tx-pps of the transmitting port (the first second dropped),
# min/median/max of the runs' medians, and clocks/packet (clock rate / median rate) in
# Sluice's clock: the TSC rate dpdk_bench prints (on x86-64 the TSC's nominal rate, the unit
# of Sluice's node clocks; where Sluice has no TSC, arm64 included, its clock counts
# nanoseconds, and so do these "clocks").
# Both pinned to CPU $DPDK_BENCH_CPU (default 1). testpmd is skipped with a reason when it is
# not installed; the whole script when Sluice was built without DPDK (exit 77). Each testpmd
# run's EAL runtime directory is removed after it (and on exit: scripts/dpdk-rundir.sh).
# Usage: scripts/dpdk-bench.sh [RUNS (5)] [SECS (2)] [SETUPS ("null ring")]
set -euo pipefail
RUNS=${1:-5}
SECS=${2:-2}
SETUPS=${3:-null ring}
CPU=${DPDK_BENCH_CPU:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
. "$ROOT/scripts/common.sh"
. "$ROOT/scripts/dpdk-rundir.sh"
cargo build --release -q -p sluice-dpdk --example dpdk_bench
OUT=$(mktemp /tmp/sluice-dpdk-bench-XXXXXX)
prefix=
trap 'rm -f "$OUT"; [ -z "$prefix" ] || rm -rf "$(dpdk_runtime_dir "$prefix")"' EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for setup in $SETUPS; do
  echo
  echo "## Sluice, $setup"
  echo
  rc=0
  taskset -c "$CPU" "$T/release/examples/dpdk_bench" "$setup" --runs "$RUNS" --secs "$SECS" \
    2> >(grep -v '^EAL\|^rte_' >&2) | tee -a "$OUT" || rc=${PIPESTATUS[0]}
  if [ "$rc" = 77 ]; then
    echo "SKIP: Sluice was built without DPDK support"
    exit 77
  fi
  [ "$rc" = 0 ] || exit "$rc"
done

if ! command -v dpdk-testpmd >/dev/null; then
  echo
  echo "SKIP: dpdk-testpmd is not installed (apt-get install dpdk)"
  exit 0
fi
# Sluice's clock rate, as dpdk_bench measured it ("TSC 2.445 GHz").
HZ=$(awk '/^TSC [0-9.]+ GHz/ {print $2 * 1e9; exit}' "$OUT")
if [ -z "$HZ" ]; then
  unit="unknown (dpdk_bench printed no TSC rate): no clocks/packet"
elif [ "$(uname -m)" = x86_64 ]; then
  unit="TSC clocks at $(awk -v h="$HZ" 'BEGIN {printf "%.3f", h / 1e9}') GHz"
else
  unit="nanoseconds (no TSC on $(uname -m): Sluice's clocks count ns)"
fi
rows=()
for setup in $SETUPS; do
  case $setup in
    null)
      what="net_null0 -> net_null1"
      port=1
      args=(--vdev net_null0,size=60 --vdev net_null1,size=60,no-rx=1 -- --port-topology=chained)
      ;;
    ring)
      what="net_ring0 looped (32 packets)"
      port=0
      args=(--vdev net_ring0 -- --port-topology=loop --tx-first)
      ;;
    *) echo "unknown setup $setup" >&2; exit 2 ;;
  esac
  echo
  echo "## dpdk-testpmd io forwarding, $what, one core"
  echo
  meds=()
  for r in $(seq "$RUNS"); do
    prefix="sluice-bench-$$-$setup-$r"
    # EAL start-up (loading every PMD) takes a few seconds: the window starts after it.
    out=$(timeout -s INT $((SECS + 6)) taskset -c "$CPU" dpdk-testpmd --no-huge -m 512 --no-pci \
      --file-prefix "$prefix" --lcores "0@$CPU,1@$CPU" --log-level=warning "${args[@]}" \
      --forward-mode=io --nb-cores=1 --auto-start --stats-period 1 --total-num-mbufs=32768 \
      2>&1 || true)
    rm -rf "$(dpdk_runtime_dir "$prefix")"
    # Tx-pps of the transmitting port, one value per second; the first is the start-up second.
    m=$(awk -v p="$port" '/statistics for port/ {on = ($6 == p)}
             on && /Tx-pps:/ {print $2}' <<<"$out" | tail -n +2 | head -n "$SECS" | sort -n |
        awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)] / 1e6}')
    if [ -z "$m" ]; then
      # No rate printed (EAL failed, no memory, ...): say why, never report 0 as measured.
      echo "sluice: dpdk-testpmd run $r gave no Tx-pps; its output ends:" >&2
      tail -n 20 <<<"$out" >&2
      exit 1
    fi
    echo "run $r: $m Mpps (load $(cut -d' ' -f1 /proc/loadavg))"
    meds+=("$m")
  done
  read -r mn md mx < <(stats "${meds[@]}")
  clk=$(awk -v hz="${HZ:-0}" -v m="$md" 'BEGIN { if (hz > 0 && m > 0) printf "%.1f", hz / (m * 1e6); else print "-" }')
  rows+=("| $what | $mn | $md | $mx | $clk |")
done
echo
echo "clocks: $unit"
echo
echo "| testpmd io-fwd | Mpps min | median | max | clocks/packet (median) |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
