#!/usr/bin/env bash
# DPDK I/O benchmark on one core, no NIC and no hugepages, all in one run:
#   1. Sluice: net_null0 -> dpdk-input -> IPv4 (one route) -> dpdk-tx -> net_null1, against
#      the same IPv4 path between two pg interfaces (the engine benchmark's pg path), runs
#      alternating, in one process (plugins/dpdk/examples/dpdk_bench.rs): Mpps and
#      clocks/packet of dpdk-input and dpdk-tx, min/median/max;
#   2. dpdk-testpmd io forwarding between the same two devices (net_null0 -> net_null1,
#      60-byte frames), RUNS runs of SECS seconds: Mpps from its per-second Tx-pps of port 1
#      (the first second dropped), min/median/max of the runs' medians.
# Both pinned to CPU $DPDK_BENCH_CPU (default 1). testpmd is skipped with a reason when it is
# not installed; the whole script when Sluice was built without DPDK (exit 77).
# Usage: scripts/dpdk-bench.sh [RUNS (5)] [SECS (2)]
set -euo pipefail
RUNS=${1:-5}
SECS=${2:-2}
CPU=${DPDK_BENCH_CPU:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
. "$ROOT/scripts/common.sh"
cargo build --release -q -p sluice-dpdk --example dpdk_bench
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
taskset -c "$CPU" "$T/release/examples/dpdk_bench" --runs "$RUNS" --secs "$SECS" 2> >(grep -v '^EAL\|^rte_' >&2) || rc=$?
if [ "$rc" = 77 ]; then
  echo "SKIP: Sluice was built without DPDK support"
  exit 77
fi
[ "$rc" = 0 ] || exit "$rc"

echo
echo "## dpdk-testpmd io forwarding, net_null0 -> net_null1, 60-byte frames, one core"
echo
if ! command -v dpdk-testpmd >/dev/null; then
  echo "SKIP: dpdk-testpmd is not installed (apt-get install dpdk)"
  exit 0
fi
HZ=$(awk '/^cpu MHz/ {print $4 * 1e6; exit}' /proc/cpuinfo)
meds=()
for r in $(seq "$RUNS"); do
  prefix="sluice-bench-$$-$r"
  # EAL start-up (loading every PMD) takes a few seconds: the window starts after it.
  out=$(timeout -s INT $((SECS + 6)) taskset -c "$CPU" dpdk-testpmd --no-huge -m 512 --no-pci \
    --file-prefix "$prefix" --lcores "0@$CPU,1@$CPU" --log-level=warning \
    --vdev net_null0,size=60 --vdev net_null1,size=60,no-rx=1 -- \
    --forward-mode=io --nb-cores=1 --auto-start --stats-period 1 --total-num-mbufs=32768 \
    --port-topology=chained 2>&1 || true)
  rm -rf "/var/run/dpdk/$prefix" 2>/dev/null || true
  # Tx-pps of port 1, one value per second; the first is the start-up second.
  m=$(awk '/statistics for port 1/ {p = 1} /statistics for port 0/ {p = 0}
           p && /Tx-pps:/ {print $2}' <<<"$out" | tail -n +2 | head -n "$SECS" | sort -n |
      awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)] / 1e6; else print 0}')
  echo "run $r: $m Mpps (load $(cut -d' ' -f1 /proc/loadavg))"
  meds+=("$m")
done
read -r mn md mx < <(stats "${meds[@]}")
echo
echo "| testpmd io-fwd | Mpps min | median | max |"
echo "|---|---|---|---|"
echo "| net_null0 -> net_null1 | $mn | $md | $mx |"
awk -v hz="$HZ" -v m="$md" 'BEGIN { if (m > 0) printf "\ntestpmd clocks/packet (CPU clock / median rate): %.1f\n", hz / (m * 1e6) }'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
