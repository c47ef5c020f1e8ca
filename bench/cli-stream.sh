#!/usr/bin/env bash
# Benchmark (not a test): peak RSS and time of `show ip fib` with N routes, streamed (what
# sluicectl gets: pieces of 4096 routes) vs built whole (the same command as an `exec` script
# line, which is never streamed, and is then refused over the 16 MiB frame limit).
#
#   BIN=target/release bench/cli-stream.sh [routes]     # default target/debug, 1000000
# Peak RSS is the daemon's VmHWM, reset before each case (/proc/<pid>/clear_refs).
set -euo pipefail
BIN=${BIN:-target/debug}
N=${1:-1000000}
dir=$(mktemp -d /tmp/sluice-clistream.XXXXXX)
printf 'unix { nodaemon cli-listen %s/cli.sock capture-dir %s }\nbuffers { buffers-per-numa 4096 page-size 4k }\n' "$dir" "$dir" >"$dir/startup.conf"
"$BIN/sluice" -c "$dir/startup.conf" >"$dir/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf $dir' EXIT
for _ in $(seq 100); do [ -S "$dir/cli.sock" ] && break; sleep 0.1; done
cli() { "$BIN/sluicectl" -s "$dir/cli.sock" "$@"; }
cli create loopback interface >/dev/null
cli set interface state loop0 up
cli set interface ip address loop0 10.0.0.1/24
cli ip route add count "$N" 20.0.0.0/32 via 10.0.0.2
hwm() { awk '/VmHWM/ {print $2}' /proc/$PID/status; }
rss() { awk '/VmRSS/ {print $2}' /proc/$PID/status; }
echo "routes $N rss-before-kB $(rss)"
echo 5 > /proc/$PID/clear_refs
t0=$(date +%s.%N); cli show ip fib | wc -c > "$dir/bytes"; t1=$(date +%s.%N)
echo "streamed bytes $(cat $dir/bytes) seconds $(awk "BEGIN{print $t1-$t0}") peak-rss-kB $(hwm)"
echo 5 > /proc/$PID/clear_refs
echo "show ip fib" > "$dir/fib.cli"
t0=$(date +%s.%N); cli exec "$dir/fib.cli" > "$dir/out" 2>&1 || true; t1=$(date +%s.%N); head -c 120 "$dir/out"; echo
echo "whole seconds $(awk "BEGIN{print $t1-$t0}") peak-rss-kB $(hwm)"
