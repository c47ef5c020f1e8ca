#!/usr/bin/env bash
# Bulk configuration benchmark (not a test): how long `exec <file>` takes for route tables
# written as one `ip route add` CLI line per prefix. Files:
#   real4 — the real IPv4 table of ../shared/data (901,899 lines, 10/8 left out),
#   real6 — the real IPv6 table (160,147 lines),
#   1m4   — 1,000,000 /24s from 11.0.0.0 (one per line).
# Each run starts a fresh daemon (pg0/pg1 with addresses and a neighbour), times
# `sluicectl exec` (wall) and the daemon's CPU time (utime + stime from /proc) over it, checks
# the FIB holds every route, and stops the daemon. Several binaries are run alternately
# (old, new, old, new, ...) so that the shared machine's load hits them alike. Printed per
# binary and file: wall and CPU seconds min / median / max over the runs, and lines/s of the
# median wall time.
#
# Usage: scripts/exec-bench.sh [runs (5)] [absolute path of a sluice binary ...]
#        (default: target/release/sluice, built first)
source "$(dirname "$0")/common.sh"
runs=${1:-5}
shift || true
if [ $# -eq 0 ]; then
  cargo build -j 2 --release -q -p sluice -p sluicectl
  set -- "$PWD/target/release/sluice"
fi
ctl=$PWD/target/release/sluicectl
data=${SLUICE_DATA:-../shared/data}/full-table-prefixes-2024.txt.gz
tmp=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
files=(1m4)
python3 - "$tmp" <<'PY'
import sys
tmp = sys.argv[1]
with open(f"{tmp}/1m4.cli", "w") as f:
    for i in range(1_000_000):
        f.write(f"ip route add {11 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}.0/24 via 10.0.1.2\n")
PY
if [ -r "$data" ]; then
  zcat "$data" | grep -v : | grep -v '^10\.' | sed 's|.*|ip route add & via 10.0.1.2|' >"$tmp/real4.cli"
  zcat "$data" | grep : | sed 's|.*|ip route add & via fd01::2|' >"$tmp/real6.cli"
  files=(real4 real6 1m4)
else
  echo "($data not found: the real tables are skipped)"
fi
# EXEC_CHUNK=<lines>: exec a file that execs chunks of that many lines (binaries from before
# 2026-11-28 read at most 4 MiB per script: EXEC_CHUNK=90000 lets them load the tables too).
if [ -n "${EXEC_CHUNK:-}" ]; then
  for f in "${files[@]}"; do
    split -l "$EXEC_CHUNK" -d -a 3 "$tmp/$f.cli" "$tmp/$f.part."
    for p in "$tmp/$f.part."*; do echo "exec $p"; done >"$tmp/$f.top"
  done
fi
cat >"$tmp/setup.cli" <<'EOF'
create packet-generator interface pg0
create packet-generator interface pg1
set interface state pg0 up
set interface state pg1 up
set interface ip address pg0 10.0.0.1/24
set interface ip address pg1 10.0.1.1/24
set interface ip address pg1 fd01::1/64
ip neighbor pg1 10.0.1.2 02:00:00:00:01:02
ip neighbor pg1 fd01::2 02:00:00:00:01:02
EOF
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
declare -A wall cpus
echo "== exec of route files, $runs runs per binary and file; load average $(cut -d' ' -f1-3 /proc/loadavg) (2-core shared VM)"
for r in $(seq 1 "$runs"); do
  for b in "$@"; do
    for f in "${files[@]}"; do
      sock=$tmp/cli.sock
      "$b" unix { nodaemon cli-listen "$sock" startup-config "$tmp/setup.cli" } >"$tmp/log" 2>&1 &
      pid=$!
      until [ -S "$sock" ]; do sleep 0.05; done
      sleep 0.2
      lines=$(wc -l <"$tmp/$f.cli")
      c0=$(cpu "$pid")
      t0=$(date +%s.%N)
      run=$tmp/$f.cli; [ -n "${EXEC_CHUNK:-}" ] && run=$tmp/$f.top
      "$ctl" -s "$sock" exec "$run" >"$tmp/out" 2>&1 || { echo "exec failed: $(tail -2 "$tmp/out")"; exit 1; }
      t1=$(date +%s.%N)
      c1=$(cpu "$pid")
      fam=ip; [ "$f" = real6 ] && fam=ip6
      n=$("$ctl" -s "$sock" show $fam fib summary | sed -n 's/.*routes \([0-9]*\).*/\1/p' | head -1)
      [ "$n" -ge "$lines" ] || { echo "$b $f: only $n routes of $lines"; exit 1; }
      kill "$pid"; wait "$pid" 2>/dev/null; pid=; rm -f "$sock"
      wall[$b,$f]+="$(echo "$t1 - $t0" | bc) "
      cpus[$b,$f]+="$(echo "($c1 - $c0) / $(getconf CLK_TCK)" | bc -l) "
    done
  done
done
printf '| binary | file | lines | wall s min | median | max | CPU s min | median | max | lines/s (median wall) |\n|---|---|---|---|---|---|---|---|---|---|\n'
for b in "$@"; do
  for f in "${files[@]}"; do
    lines=$(wc -l <"$tmp/$f.cli")
    # shellcheck disable=SC2086
    read -r wmin wmed wmax < <(stats ${wall[$b,$f]})
    # shellcheck disable=SC2086
    read -r cmin cmed cmax < <(stats ${cpus[$b,$f]})
    printf '| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |\n' "$b" "$f" "$lines" \
      "$wmin" "$wmed" "$wmax" "$cmin" "$cmed" "$cmax" "$(echo "$lines / $wmed" | bc -l)"
  done
done
