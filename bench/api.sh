#!/usr/bin/env bash
# Control-API benchmark (not a test): route adds through the API one request at a time,
# pipelined, and batched (`ip_route_add_del_multi`, 8192 prefixes a request, 8 in flight), against `ip route add count` and one CLI line per route; the time to dump the
# routes; and the encoding comparison (binary vs JSON). Every figure is measured RUNS times
# on a release build and reported as min / median / max.
#
#   bench/api.sh [runs] [routes]     # default: 5 runs, 1000000 routes
#   SLUICE=/abs/old/sluice SKIP_BUILD=1 OUT=old.txt bench/api.sh 3   # another daemon binary
#
# Routes are consecutive /32s from 20.0.0.0 via 10.0.0.2 (loop0 10.0.0.1/24), added to an
# otherwise empty table 0 and deleted (untimed) after each measurement. The one-at-a-time and
# one-CLI-line-per-route figures use 100000 routes (they are rates; a million would take
# minutes). Raw lines go to $OUT (default bench/results/api-<date>.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
N=${2:-1000000}
SMALL=100000
OUT=${OUT:-bench/results/api-$(date +%Y%m%d-%H%M%S).txt}
# SKIP_BUILD=1: use the release binaries already built.
[ -n "${SKIP_BUILD:-}" ] || cargo build -q --release -p sluice -p sluicectl -p sluice-bench --bins
BIN=target/release
dir=$(mktemp -d /tmp/sluice-apibench.XXXXXX)
cat >"$dir/startup.conf" <<CONF
unix { nodaemon cli-listen $dir/cli.sock }
buffers { buffers-per-numa 16384 page-size 4k }
CONF
"${SLUICE:-$BIN/sluice}" -c "$dir/startup.conf" >"$dir/log" 2>&1 &
PID=$!
cleanup() { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$dir/api.sock" ] && break; sleep 0.1; done
cli() { "$BIN/sluicectl" -s "$dir/cli.sock" "$@"; }
now() { date +%s.%N; }
cli create loopback interface >/dev/null
cli set interface state loop0 up
cli set interface ip address loop0 10.0.0.1/24
api() { "$BIN/sluice-apibench" "$@" --socket "$dir/api.sock"; }
del() { cli ip route del count "$1" 20.0.0.0/32 via 10.0.0.2; }
{
  echo "# bench/api.sh $(date -u +%FT%TZ) runs=$RUNS routes=$N small=$SMALL $(nproc) cpus"
  for r in $(seq "$RUNS"); do
    "$BIN/sluice-apibench" codec --n "$N" | sed 's/^/codec /'
    api routes --n "$SMALL" --window 1 | sed 's/^/api-single /'
    del "$SMALL"
    api routes --n "$N" --window 4096 | sed 's/^/api-pipelined /'
    del "$N"
    api routes --n "$N" --window 8 --batch 8192 | sed 's/^/api-batched /'
    api dump | sed 's/^/api-dump /'
    del "$N"
    t0=$(now); cli ip route add count "$N" 20.0.0.0/32 via 10.0.0.2; t1=$(now)
    echo "cli-count n $N seconds $(awk "BEGIN { print $t1 - $t0 }") run $r"
    del "$N"
    seq 0 $((SMALL - 1)) | awk '{ printf "ip route add 20.%d.%d.%d/32 via 10.0.0.2\n", int($1/65536), int($1/256)%256, $1%256 }' >"$dir/routes.cli"
    t0=$(now); cli exec "$dir/routes.cli"; t1=$(now)
    echo "cli-lines n $SMALL seconds $(awk "BEGIN { print $t1 - $t0 }") run $r"
    del "$SMALL"
  done
} | tee "$OUT"
python3 - "$OUT" <<'PY'
import re, statistics, sys
rows = {}
def add(k, v):
    rows.setdefault(k, []).append(v)
for line in open(sys.argv[1]):
    w = line.split()
    if not w or w[0] == "#":
        continue
    if w[0] == "codec":
        m = re.match(r"codec (binary|json) encode (\d+) ns/msg decode (\d+) ns/msg", line)
        if m:
            add(f"{m[1]} encode (ns/msg)", float(m[2])); add(f"{m[1]} decode (ns/msg)", float(m[3]))
        m = re.match(r"codec (binary|json) round trip ([\d.]+) M", line)
        if m:
            add(f"{m[1]} round trip (M msgs/s)", float(m[2]))
    elif w[0] in ("api-single", "api-pipelined", "api-batched"):
        kv = dict(zip(w[1::2], w[2::2]))
        add(f"{w[0]} route adds/s", float(kv["rate"]))
    elif w[0] == "api-dump":
        add(f"api dump of {w[3]} routes (s)", float(w[5]))
    elif w[0] in ("cli-count", "cli-lines"):
        n, s = float(w[2]), float(w[4])
        add(f"{w[0]} route adds/s", n / s)
print(f"{'measure':42} {'min':>12} {'median':>12} {'max':>12}")
for k, v in rows.items():
    print(f"{k:42} {min(v):12.4g} {statistics.median(v):12.4g} {max(v):12.4g}")
PY
