#!/usr/bin/env bash
# Statistics segment benchmark (not a test).
#
# 1. `sluice-bench stats`: 1000 interfaces, 2 threads — the collector's update, a reader's
#    snapshot of /if/ and of the whole segment, a /metrics scrape over HTTP (min/median/max).
# 2. What the segment costs the forwarding path: `sluice --demo` (pg IPv4 router on one core:
#    pg-input -> ethernet-input -> ip4-input -> ip4-lookup -> ip4-rewrite -> interface-output
#    -> pg-tx) with the segment off (`statseg { disable }`), at the default 1 s interval and
#    at 10 ms, runs interleaved; `show runtime` clocks/packet summed over the path, and Mpps.
#
# Usage: scripts/stats-bench.sh [runs (5)] [seconds per demo run (3)]
source "$(dirname "$0")/common.sh"
runs=${1:-5}
secs=${2:-3}
cargo build -j 2 --release -q -p sluice -p sluice-bench
echo "== load average: $(cut -d' ' -f1-3 /proc/loadavg) (2-core shared VM: compare medians)"
./target/release/sluice-bench stats --runs 20

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A conf=(
  [off]="statseg { disable }"
  [1s]=""
  [10ms]="statseg { update-interval 0.01 }"
)
order=(off 1s 10ms)
for r in $(seq 1 "$runs"); do
  for c in "${order[@]}"; do
    printf 'unix { cli-listen %s/cli.sock }\nbuffers { page-size 4k }\n%s\n' "$tmp" "${conf[$c]}" >"$tmp/c.conf"
    ./target/release/sluice -c "$tmp/c.conf" --demo --seconds "$secs" >"$tmp/$c.$r.out" 2>/dev/null
  done
done

python3 - "$tmp" "$runs" "${order[@]}" <<'EOF'
import re, sys, statistics
tmp, runs, order = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
PATH = ["pg-input", "ethernet-input", "ip4-input", "ip4-lookup", "ip4-rewrite",
        "interface-output", "pg-tx"]

def parse(text):
    rt = text.split("sluice# show runtime", 1)[1].split("sluice# show interface", 1)[0]
    clk = {}
    for line in rt.splitlines():
        t = line.split()
        if t and t[0] in PATH:
            clk[t[0]] = float(t[-2])
    mpps = float(re.search(r"= ([0-9.]+) Mpps", text).group(1))
    return clk, mpps

def mmm(v):
    return f"{min(v):.1f} / {statistics.median(v):.1f} / {max(v):.1f}"

print(f"\n## Forwarding cost of the segment: sluice --demo, {runs} interleaved runs each\n")
print("| statseg | path clk/pkt min / median / max | Mpps min / median / max | "
      + " | ".join(PATH) + " (median clk/pkt) |")
print("|---|---|---|" + "---|" * len(PATH))
med = {}
for c in order:
    rows = [parse(open(f"{tmp}/{c}.{r}.out").read()) for r in range(1, runs + 1)]
    path = [sum(clk.get(n, 0.0) for n in PATH) for clk, _ in rows]
    med[c] = statistics.median(path)
    nodes = " | ".join(f"{statistics.median([clk.get(n, 0.0) for clk, _ in rows]):.1f}"
                       for n in PATH)
    print(f"| {c} | {mmm(path)} | {mmm([m for _, m in rows])} | {nodes} |")
for c in order[1:]:
    print(f"\nmedian path clk/pkt {c} - off: {med[c] - med['off']:+.1f}")
EOF
