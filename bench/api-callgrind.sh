#!/usr/bin/env bash
# Daemon-side cost of a route add through the API and through the CLI, and of a dump, in
# instructions (callgrind): the stable measure on a shared machine, where wall-clock rates
# (bench/api.sh) depend on the load. Each case runs the release daemon under callgrind, sets
# up loop0 10.0.0.1/24, does its work, stops; the baseline (setup only) is subtracted and the
# difference divided by the routes.
#
#   RAW=raw.txt bench/api-callgrind.sh [routes]     # default 100000; RAW keeps the totals
#   CASES="api_pipelined api_batched" SKIP_BUILD=1 ...  # some cases, the binaries as built
#   SLUICE=/abs/old/sluice ...                          # another daemon binary (clients as built)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
SMALL=$((N / 10))
[ -n "${SKIP_BUILD:-}" ] || cargo build -q --release -p sluice -p sluicectl -p sluice-bench --bins
BIN=target/release
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
case_run() {
  local label=$1 work=$2 dir
  dir=$(mktemp -d /tmp/sluice-cg.XXXXXX)
  printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { buffers-per-numa 4096 page-size 4k }\n' "$dir" >"$dir/startup.conf"
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "${SLUICE:-$BIN/sluice}" -c "$dir/startup.conf" >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do [ -S "$dir/api.sock" ] && break; sleep 0.1; done
  cli() { "$BIN/sluicectl" -s "$dir/cli.sock" "$@"; }
  cli create loopback interface >/dev/null
  cli set interface state loop0 up
  cli set interface ip address loop0 10.0.0.1/24
  "$work" "$dir" >/dev/null
  kill -TERM "$pid"
  wait "$pid" || true
  echo "$label $(total "$dir/cg.out")"
  rm -rf "$dir"
}
none() { :; }
api_pipelined() { "$BIN/sluice-apibench" routes --socket "$1/api.sock" --n "$N" --window 4096; }
api_batched() { "$BIN/sluice-apibench" routes --socket "$1/api.sock" --n "$N" --window 8 --batch 8192; }
api_single() { "$BIN/sluice-apibench" routes --socket "$1/api.sock" --n "$SMALL" --window 1; }
cli_count() { "$BIN/sluicectl" -s "$1/cli.sock" ip route add count "$N" 20.0.0.0/32 via 10.0.0.2; }
cli_lines() {
  seq 0 $((SMALL - 1)) | awk '{ printf "ip route add 20.%d.%d.%d/32 via 10.0.0.2\n", int($1/65536), int($1/256)%256, $1%256 }' >"$1/r.cli"
  "$BIN/sluicectl" -s "$1/cli.sock" exec "$1/r.cli"
}
count_dump() { cli_count "$1"; "$BIN/sluice-apibench" dump --socket "$1/api.sock"; }
{
  base=$(case_run baseline none | awk '{print $2}')
  echo "baseline $base"
  for c in ${CASES:-api_pipelined api_batched api_single cli_count cli_lines count_dump}; do
    case_run "$c" "$c"
  done
} | tee "${RAW:-/dev/null}" | awk -v n="$N" -v small="$SMALL" '
  $1 == "baseline" { b = $2; next }
  { v[$1] = $2 - b }
  END {
    printf "instructions per route add: api pipelined %.0f, api batched %.0f, api one at a time %.0f, cli count %.0f, cli one line per route %.0f\n",
      v["api_pipelined"] / n, v["api_batched"] / n, v["api_single"] / small, v["cli_count"] / n, v["cli_lines"] / small
    printf "instructions per dumped route: %.0f\n", (v["count_dump"] - v["cli_count"]) / n
  }'
