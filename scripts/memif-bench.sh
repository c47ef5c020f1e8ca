#!/bin/sh
# Mpps over a memif link between two Sluice instances on this host, 64-byte frames:
#   A: synthetic pg stream -> l2 xconnect -> memif1/0 (master, tx)
#   B: memif1/0 (slave, rx) -> l2 xconnect -> pg1 (no capture: pg-tx frees)
# Prints B's memif rx rate and A's tx-error (ring full) rate over SECONDS (default 10), and
# `show runtime` of both. Each instance runs single-threaded; on a 2-core machine each gets
# one core. Usage: scripts/memif-bench.sh [seconds]
set -eu
SECS=${1:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --release -q -p sluice -p sluicectl
S=$T/release/sluice
C=$T/release/sluicectl
D=$(mktemp -d /tmp/sluice-memif-bench.XXXXXX)
for x in a b; do
  printf 'unix { nodaemon cli-listen %s/%s.sock }\nbuffers { buffers-per-numa 32768 }\n' "$D" $x > "$D/$x.conf"
done
"$S" -c "$D/a.conf" > "$D/a.log" 2>&1 & PA=$!
"$S" -c "$D/b.conf" > "$D/b.log" 2>&1 & PB=$!
trap 'kill $PA $PB 2>/dev/null; rm -rf "$D"' EXIT
while [ ! -S "$D/a.sock" ] || [ ! -S "$D/b.sock" ]; do sleep 0.1; done
a() { "$C" -s "$D/a.sock" "$@"; }
b() { "$C" -s "$D/b.sock" "$@"; }
a create memif socket id 1 filename "$D/memif.sock" >/dev/null
a create interface memif id 0 socket-id 1 master >/dev/null
b create memif socket id 1 filename "$D/memif.sock" >/dev/null
b create interface memif id 0 socket-id 1 slave >/dev/null
for x in a b; do $x create packet-generator interface pg0 >/dev/null; $x create packet-generator interface pg1 >/dev/null
  $x set interface state memif1/0 up; $x set interface state pg0 up; $x set interface state pg1 up; done
a set interface l2 xconnect pg0 memif1/0
b set interface l2 xconnect memif1/0 pg1
until b show memif memif1/0 | grep -q "link up"; do sleep 0.1; done
cat > "$D/stream.cli" <<EOS
packet-generator new {
  name bench
  size 64-64
  node ethernet-input
  interface pg0
  data {
    IP4: 02:00:00:00:00:10 -> 02:fe:00:00:00:00
    UDP: 10.0.0.16 -> 10.1.0.1
    UDP: 1024 -> 53
    incrementing 18
  }
}
EOS
a exec "$D/stream.cli"
rx() { b show interface memif1/0 | awk '/rx packets/ {print $NF}'; }
txe() { a show interface memif1/0 | awk '/tx-error/ {print $NF}'; }
a packet-generator enable bench
sleep 1
R0=$(rx); E0=$(txe); T0=$(date +%s.%N)
sleep "$SECS"
R1=$(rx); E1=$(txe); T1=$(date +%s.%N)
a packet-generator disable bench
awk -v r0="$R0" -v r1="$R1" -v e0="${E0:-0}" -v e1="${E1:-0}" -v t0="$T0" -v t1="$T1" 'BEGIN {
  d = t1 - t0; printf "memif rx on B: %.2f Mpps (64-byte frames, %.1f s); ring-full drops on A: %.2f Mpps\n", (r1 - r0) / d / 1e6, d, (e1 - e0) / d / 1e6 }'
echo "--- A (pg -> memif-tx) ---"; a show runtime
echo "--- B (memif-input -> pg-tx) ---"; b show runtime
