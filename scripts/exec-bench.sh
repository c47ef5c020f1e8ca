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
# Usage: scripts/exec-bench.sh [runs (5)] [absolute path of a sluice binary | vpp ...]
#        (default: target/release/sluice, built first, then vpp when installed)
# `vpp` runs FD.io VPP from $VPP_PREFIX (default /work/vpp/install) on the same files with the
# same setup lines (docs/benchmarking.md, "VPP beside Sluice": statseg size 1G for 1M routes).
# Every daemon runs at autogroup nice -15 (a shared machine's builds weigh alike on all).
source "$(dirname "$0")/common.sh"
runs=${1:-5}
shift || true
vpp_prefix=${VPP_PREFIX:-/work/vpp/install}
if [ $# -eq 0 ]; then
  cargo build -j 2 --release -q -p sluice -p sluicectl
  set -- "$PWD/target/release/sluice"
  [ -x "$vpp_prefix/bin/vpp" ] && set -- "$@" vpp
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
  zcat "$data" | tr -d '\r' | grep -v : | grep -v '^10\.' | sed 's|.*|ip route add & via 10.0.1.2|' >"$tmp/real4.cli"
  zcat "$data" | tr -d '\r' | grep : | sed 's|.*|ip route add & via fd01::2|' >"$tmp/real6.cli"
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
# Starts daemon $1 (a sluice binary or `vpp`) with the setup lines; sets pid and c (its CLI).
start() {
  sock=$tmp/cli.sock
  if [ "$1" = vpp ]; then
    mkdir -p "$tmp/vpp"
    cat >"$tmp/vpp/startup.conf" <<CONF
unix { nodaemon cli-listen $sock runtime-dir $tmp/vpp log $tmp/vpp/vpp.log startup-config $tmp/setup.cli }
api-segment { prefix eb$$ }
socksvr { socket-name $tmp/vpp/api.sock }
plugins { path $vpp_prefix/lib/x86_64-linux-gnu/vpp_plugins plugin dpdk_plugin.so { disable } }
buffers { buffers-per-numa 16384 page-size 4k }
memory { main-heap-size 2G main-heap-page-size 4k }
statseg { size 1G page-size 4k socket-name $tmp/vpp/stats.sock }
CONF
    LD_LIBRARY_PATH=$vpp_prefix/lib/x86_64-linux-gnu:$vpp_prefix/lib \
      "$vpp_prefix/bin/vpp" -c "$tmp/vpp/startup.conf" >"$tmp/log" 2>&1 &
    pid=$!
    c() { LD_LIBRARY_PATH=$vpp_prefix/lib/x86_64-linux-gnu:$vpp_prefix/lib "$vpp_prefix/bin/vppctl" -s "$sock" "$@"; }
    until [ -S "$sock" ] && c show version >/dev/null 2>&1; do sleep 0.1; done
    until c show interface pg1 2>/dev/null | grep -q pg1; do sleep 0.1; done
  else
    "$1" unix { nodaemon cli-listen "$sock" startup-config "$tmp/setup.cli" } >"$tmp/log" 2>&1 &
    pid=$!
    c() { "$ctl" -s "$sock" "$@"; }
    until [ -S "$sock" ]; do sleep 0.05; done
  fi
  echo -15 >"/proc/$pid/autogroup" 2>/dev/null || true
  sleep 0.2
}
# Routes in the family's FIBs (`ip` or `ip6`): the sum of `show ip[6] fib summary`'s
# prefix-length table (VPP's format, which Sluice prints too).
routes() {
  c show "$1" fib summary | tr -d '\r' | awk 'NF == 2 && $1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ { s += $2 } END { print s + 0 }'
}
declare -A wall cpus
echo "== exec of route files, $runs runs per binary and file; load average $(cut -d' ' -f1-3 /proc/loadavg) (2-core shared VM)"
for r in $(seq 1 "$runs"); do
  for b in "$@"; do
    for f in "${files[@]}"; do
      start "$b"
      lines=$(wc -l <"$tmp/$f.cli")
      c0=$(cpu "$pid")
      t0=$(date +%s.%N)
      run=$tmp/$f.cli; [ -n "${EXEC_CHUNK:-}" ] && run=$tmp/$f.top
      c exec "$run" >"$tmp/out" 2>&1 || { echo "exec failed: $(tail -2 "$tmp/out")"; exit 1; }
      t1=$(date +%s.%N)
      c1=$(cpu "$pid")
      fam=ip; [ "$f" = real6 ] && fam=ip6
      n=$(routes $fam)
      [ "$n" -ge "$lines" ] || { echo "$b $f: only $n routes of $lines: $(tail -c 300 "$tmp/out")"; exit 1; }
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
