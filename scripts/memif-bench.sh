#!/usr/bin/env bash
# Mpps over a memif link on this host, one core per process (taskset: the sender on CPU 0,
# the receiver on CPU 1), frames of SIZE bytes (default 64). Pairs, measured in the same run,
# interleaved RUNS times, each run with fresh processes; min/median/max at the end:
#   sluice             A: pg -> l2 xconnect -> memif1/0 (master, tx)              [CPU 0]
#                      B: memif1/0 (slave, rx) -> l2 xconnect -> pg1 (pg-tx frees) [CPU 1]
#   sluice-s2m         the same with the roles swapped: A is the slave, B the master
#   sluice-testpmd     A (master) as above ==> dpdk-testpmd net_memif client, rxonly [CPU 1]
#   testpmd-sluice     dpdk-testpmd net_memif server, txonly SIZE-byte frames      [CPU 0]
#                      ==> B (slave) as above
#   sluice-s2m-testpmd A (slave) ==> dpdk-testpmd net_memif server, rxonly       [CPU 1]
#   vpp                the `sluice' pair with FD.io VPP as A and B (same CLI, the same
#                      mode: VPP's slave B gets `no-zero-copy' in copy mode, VPP's default
#                      zero-copy in zc mode; both cross-connects set both ways as VPP's
#                      l2-output needs), from the
#                      install at VPP_PREFIX (default /work/vpp/install); in the default
#                      pairs when that install exists, else skipped with a reason
# Modes (MEMIF_BENCH_MODES, default "copy"; "copy zc" alternates them within every run):
# `zc' makes every Sluice slave `zero-copy' (with `buffers { shared }'): B's rx in `sluice'
# and `testpmd-sluice', A's tx in `sluice-s2m' and `sluice-s2m-testpmd', and VPP's B in
# `vpp'. `sluice-testpmd' has no Sluice slave and runs in copy mode only.
# Rates: Sluice's from `show interface` counter deltas over the window (rx packets of B; of A
# tx packets = written into the ring, tx-error = dropped because the ring was full, their
# sum = offered to memif1/0), testpmd's from `show port stats` (Rx-pps / Tx-pps
# since the previous show, i.e. over the same window); clocks/packet of memif-tx and
# memif-input from `show runtime` cleared at the window's start (the per-run lines add
# memif-input's packets per call: testpmd publishes 32-packet bursts, so near 256 there means
# the receiver is behind; a Sluice sender publishes whole 256-packet frames). The testpmd pairs are
# skipped with a reason when testpmd is not installed (scripts/testpmd-memif.sh).
# Usage: scripts/memif-bench.sh [seconds per run (5)] [runs (5)] [SIZE (64)]
# MEMIF_BENCH_PAIRS="sluice testpmd-sluice" measures only the pairs named (default: sluice
# sluice-testpmd testpmd-sluice, and vpp when VPP is installed; the s2m pairs on request).
# MEMIF_BENCH_KEEP=1 keeps the temp dir (logs, `show runtime` of every run) and prints its path.
# MEMIF_BENCH_RATE=<pps> (the sluice pairs only; the others are skipped): a no-loss check
# at a fixed offered rate instead of the maximum. A's stream sends exactly pps * seconds
# packets at that rate (pg `rate' and `limit'); once it is done and B's counters stopped
# moving (the pipeline drained), each run reports A's offered rate, what went into the ring
# and what the full ring dropped (tx-error), B's rx and rx-miss, what B's pg1 delivered, and
# loss = sent - received on pg1 (0 is the pass). MEMIF_BENCH_RING=<slots> (the Sluice pairs
# only: a VPP or testpmd end keeps its default) sets the memif ring size of both ends
# (2..16384, default: the interfaces' default, 1024): at 16 Mpps a 1024-slot
# ring holds 64 us, less than one scheduler time slice of a receiver that loses its core.
set -euo pipefail
SECS=${1:-5}
RUNS=${2:-5}
SIZE=${3:-64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
. "$ROOT/scripts/common.sh"
cargo build --release -q -p sluice -p sluicectl
S=$T/release/sluice
C=$T/release/sluicectl
TESTPMD="$ROOT/scripts/testpmd-memif.sh"
D=$(mktemp -d /tmp/sluice-memif-bench.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'cleanup; if [ -n "${MEMIF_BENCH_KEEP:-}" ]; then echo "kept $D"; else rm -rf "$D"; fi' EXIT

VPP=${VPP_PREFIX:-/work/vpp/install}
a() { "$C" -s "$D/a.sock" "$@"; }
b() { "$C" -s "$D/b.sock" "$@"; }
counter() { awk -v n="$2" '$0 ~ n {print $NF; f=1} END {if (!f) print 0}' <<<"$1"; }
# Column of node $1 in `show runtime` text $3: 6 = clocks/packet, 7 = vectors/call.
runtime() { awk -v n="$1" -v c="$2" '$1 == n {print $c + 0}' <<<"$3"; }
now() { date +%s.%N; }
mpps() { awk -v a="$1" -v b="$2" -v t0="$3" -v t1="$4" 'BEGIN {printf "%.2f", (b - a) / (t1 - t0) / 1e6}'; }
until_link_up() {
  for _ in $(seq 150); do "$1" show memif memif1/0 | grep -q "link up" && return 0; sleep 0.1; done
  echo "memif link did not come up" >&2
  return 1
}
# Other work on the machine shows in the numbers: every run line ends with the load average.
load() { echo "load $(cut -d' ' -f1 /proc/loadavg)"; }
# A process's main thread from /proc: "<ns on the CPU> <ns waiting for it> <involuntary switches>".
sched() {
  echo "$(cut -d' ' -f1,2 "/proc/$1/schedstat") $(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "/proc/$1/status")"
}
# Between two `sched' samples: ms waited for the CPU (runnable, not running), and switches.
sched_ms() { awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.1f", (y[2] - x[2]) / 1e6}'; }
sched_delta() { awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.1f ms for its CPU (%d preemptions)", (y[2] - x[2]) / 1e6, y[3] - x[3]}'; }
record() { printf '%s %s|%s|%s\n' "$1" "$MODE" "$2" "$3" >> "$D/results"; }

# The pg stream of the sender (the same CLI for Sluice and VPP).
write_stream() {
  cat > "$D/stream.cli" <<EOS
packet-generator new {
  name bench
  size $SIZE-$SIZE
  node ethernet-input$LIMIT
  interface pg0
  data {
    IP4: 02:00:00:00:00:10 -> 02:fe:00:00:00:00
    UDP: 10.0.0.16 -> 10.1.0.1
    UDP: 1024 -> 53
    incrementing 18
  }
}
EOS
}

# One Sluice instance X (a|b) on CPU $2: memif1/0 on the bench socket as master|slave ($3),
# pg0 -> memif1/0 (a) or memif1/0 -> pg1 (b). A slave is zero-copy when MODE is zc.
sluice_up() {
  local x=$1 cpu=$2 role=$3 shared="" zc=""
  if [ "$role" = slave ] && [ "$MODE" = zc ]; then
    shared=" shared"
    zc=" zero-copy"
  fi
  rm -f "$D/$x.sock"
  printf 'unix { nodaemon cli-listen %s/%s.sock }\nbuffers { buffers-per-numa 32768%s }\n' "$D" "$x" "$shared" > "$D/$x.conf"
  taskset -c "$cpu" "$S" -c "$D/$x.conf" > "$D/$x.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 200); do [ -S "$D/$x.sock" ] && break; sleep 0.05; done
  if [ ! -S "$D/$x.sock" ]; then
    echo "sluice $x did not start:" >&2
    cat "$D/$x.log" >&2
    exit 1
  fi
  $x create memif socket id 1 filename "$D/memif.sock" >/dev/null
  $x create interface memif id 0 socket-id 1 "$role"$zc${RING:+ ring-size $RING} >/dev/null
  $x set interface state memif1/0 up
  if [ "$x" = a ]; then
    a create packet-generator interface pg0 >/dev/null
    a set interface state pg0 up
    a set interface l2 xconnect pg0 memif1/0
    write_stream
    a exec "$D/stream.cli"
  else
    b create packet-generator interface pg1 >/dev/null
    b set interface state pg1 up
    b set interface l2 xconnect memif1/0 pg1
  fi
}

# testpmd on CPU $1 (both its lcores), interactive on a fifo: ROLE, then testpmd options.
testpmd_up() {
  local cpu=$1
  shift
  rm -f "$D/tp.in" "$D/tp.log"
  mkfifo "$D/tp.in"
  TESTPMD_LCORES="0@$cpu,1@$cpu" taskset -c "$cpu" stdbuf -oL "$TESTPMD" "$1" "$D/memif.sock" -i "${@:2}" \
    < "$D/tp.in" > "$D/tp.log" 2>&1 &
  PIDS+=($!)
  exec 3> "$D/tp.in"
  tp_ready
}
# Waits until testpmd's port has started (up to 120 s: start-up without hugepages takes many
# seconds on a loaded machine). A DPDK memif server accepts slaves only from then on, and it
# crashes when a slave it has not yet accepted went away meanwhile (docs/memif.md).
tp_ready() {
  for _ in $(seq 1200); do
    grep -q "^Checking link statuses" "$D/tp.log" && grep -q "^Done" "$D/tp.log" && return 0
    if ! kill -0 "${PIDS[-1]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "testpmd did not start its port:" >&2
  tail -20 "$D/tp.log" >&2
  exit 1
}
# A testpmd that died must not kill this script with SIGPIPE: writes fail instead, and
# tp_stats reports that testpmd did not answer.
trap '' PIPE
tp() { echo "$*" >&3 2>/dev/null || true; }
# `show port stats 0` and wait for its output; prints "Rx-pps Tx-pps" (since the last show).
tp_stats() {
  local n
  n=$(grep -c "Rx-pps:" "$D/tp.log" || true)
  tp show port stats 0
  for _ in $(seq 100); do
    [ "$(grep -c "Rx-pps:" "$D/tp.log" || true)" -gt "$n" ] && [ "$(grep -c "Tx-pps:" "$D/tp.log" || true)" -gt "$n" ] && break
    sleep 0.05
  done
  if [ "$(grep -c "Tx-pps:" "$D/tp.log" || true)" -le "$n" ]; then
    echo "testpmd did not answer \`show port stats' (exited?):" >&2
    tail -20 "$D/tp.log" >&2
    exit 1
  fi
  echo "$(grep "Rx-pps:" "$D/tp.log" | tail -1 | awk '{print $2}') $(grep "Tx-pps:" "$D/tp.log" | tail -1 | awk '{print $2}')"
}
testpmd_down() {
  tp quit 2>/dev/null || true
  exec 3>&-
  cleanup
}

# Window bookkeeping: snap_start/snap_end take `show interface memif1/0` of the Sluice side(s)
# given (runtime cleared at the start); sender/receiver turn the deltas into records and set
# MSG_A / MSG_B for the run's line.
snap_start() {
  local x
  for x in "$@"; do $x clear runtime; done
  for x in "$@"; do eval "I0_$x=\$($x show interface memif1/0)"; done
  T0=$(now)
}
snap_end() {
  local x
  for x in "$@"; do eval "I1_$x=\$($x show interface memif1/0)"; done
  T1=$(now)
}
delta() { mpps "$(counter "$1" "$3")" "$(counter "$2" "$3")" "$T0" "$T1"; }
sender() {
  local pair=$1 r=$2 tx err into ctx
  into=$(delta "$I0_a" "$I1_a" 'tx packets')
  err=$(delta "$I0_a" "$I1_a" 'tx-error')
  tx=$(awk -v a="$into" -v b="$err" 'BEGIN {printf "%.2f", a + b}')
  ctx=$(runtime memif-tx 6 "$(a show runtime | tee "$D/runtime-$pair-$r-a.txt")")
  record "$pair" "A into ring Mpps" "$into"
  record "$pair" "A ring-full Mpps" "$err"
  record "$pair" "A memif-tx clk/pkt" "$ctx"
  MSG_A="A offered $tx Mpps (ring full $err), memif-tx $ctx clk/pkt"
}
receiver() {
  local pair=$1 r=$2 rx miss rtb crx vrx
  rx=$(delta "$I0_b" "$I1_b" 'rx packets')
  miss=$(delta "$I0_b" "$I1_b" 'rx-miss')
  rtb=$(b show runtime | tee "$D/runtime-$pair-$r-b.txt")
  crx=$(runtime memif-input 6 "$rtb")
  vrx=$(runtime memif-input 7 "$rtb")
  record "$pair" "B memif rx Mpps" "$rx"
  record "$pair" "B rx-miss Mpps" "$miss"
  record "$pair" "B memif-input clk/pkt" "$crx"
  MSG_B="B rx $rx Mpps (rx-miss $miss), memif-input $crx clk/pkt at $vrx pkts/call"
}
# The measurement window of a pair with testpmd, Sluice side $1; testpmd's stats in TP_ST.
tp_window() {
  tp_stats > /dev/null
  snap_start "$1"
  sleep "$SECS"
  TP_ST=$(tp_stats)
  snap_end "$1"
}
# Prints testpmd's Rx-pps (field 1) or Tx-pps (field 2) of `tp_stats` output $2, in Mpps.
tp_mpps() { awk -v p="$2" -v f="$1" 'BEGIN {split(p, v, " "); printf "%.2f", v[f] / 1e6}'; }

# Sluice A (sender, CPU 0) -> Sluice B (receiver, CPU 1); $2: A's role.
run_sluice() {
  local r=$1 arole=$2 brole pair
  if [ "$arole" = master ]; then brole=slave pair=sluice; else brole=master pair=sluice-s2m; fi
  rm -f "$D/memif.sock"
  sluice_up a 0 "$arole"
  sluice_up b 1 "$brole"
  until_link_up a
  until_link_up b
  a packet-generator enable bench
  sleep 1
  snap_start a b
  sleep "$SECS"
  snap_end a b
  sender "$pair" "$r"
  receiver "$pair" "$r"
  a packet-generator disable bench
  echo "run $r $pair $MODE: $MSG_B; $MSG_A; $(load)"
  cleanup
}

# The no-loss check (MEMIF_BENCH_RATE) of the `sluice' pair, $2: A's role. A's stream
# stops by itself after its limit; the counters are read once B's stopped moving.
run_sluice_rate() {
  local r=$1 arole=$2 brole pair sent into full rx miss out loss secs n0 n1 timeout=""
  if [ "$arole" = master ]; then brole=slave pair=sluice; else brole=master pair=sluice-s2m; fi
  rm -f "$D/memif.sock"
  sluice_up a 0 "$arole"
  sluice_up b 1 "$brole"
  until_link_up a
  until_link_up b
  a clear runtime
  b clear runtime
  local pa=${PIDS[0]} pb=${PIDS[1]} sa0 sb0 sa1 sb1 waited
  sa0=$(sched "$pa")
  sb0=$(sched "$pb")
  T0=$(now)
  a packet-generator enable bench
  # Either wait running out is reported as `timeout' in the run's line.
  local ok=0
  for _ in $(seq $((SECS * 40 + 400))); do
    a show packet-generator | grep -q '^bench  *Yes' || { ok=1; break; }
    sleep 0.05
  done
  [ $ok = 1 ] || timeout="$timeout timeout (A's stream still running);"
  T1=$(now)
  sa1=$(sched "$pa")
  sb1=$(sched "$pb")
  # Drained: B's rx counter unchanged over 0.2 s.
  n1=-1
  ok=0
  for _ in $(seq 50); do
    n0=$n1
    n1=$(counter "$(b show interface memif1/0)" 'rx packets')
    [ "$n0" = "$n1" ] && { ok=1; break; }
    sleep 0.2
  done
  [ $ok = 1 ] || timeout="$timeout timeout (B's rx not drained);"
  I1_a=$(a show interface)
  I1_b=$(b show interface)
  # `show interface' lists every interface: an unindented line starts one (its first counter
  # on the same line), the indented lines after it hold its other counters.
  ifc() { awk -v i="$2" -v n="$3" '/^[^ \t]/ {cur = $1} cur == i && $0 ~ n {print $NF; f = 1} END {if (!f) print 0}' <<<"$1"; }
  sent=$(ifc "$I1_a" pg0 'rx packets')
  into=$(ifc "$I1_a" memif1/0 'tx packets')
  full=$(ifc "$I1_a" memif1/0 'tx-error')
  rx=$(ifc "$I1_b" memif1/0 'rx packets')
  miss=$(ifc "$I1_b" memif1/0 'rx-miss')
  out=$(ifc "$I1_b" pg1 'tx packets')
  loss=$((sent - out))
  secs=$(awk -v a="$T0" -v b="$T1" 'BEGIN {printf "%.2f", b - a}')
  ctx=$(runtime memif-tx 6 "$(a show runtime | tee "$D/runtime-$pair-$r-a.txt")")
  rtb=$(b show runtime | tee "$D/runtime-$pair-$r-b.txt")
  crx=$(runtime memif-input 6 "$rtb")
  vrx=$(runtime memif-input 7 "$rtb")
  record "$pair" "A offered Mpps" "$(mpps 0 "$sent" "$T0" "$T1")"
  record "$pair" "A ring-full packets" "$full"
  record "$pair" "B rx-miss packets" "$miss"
  record "$pair" "loss packets" "$loss"
  record "$pair" "A memif-tx clk/pkt" "$ctx"
  record "$pair" "B memif-input clk/pkt" "$crx"
  waited="A waited $(sched_delta "$sa0" "$sa1"), B $(sched_delta "$sb0" "$sb1")"
  record "$pair" "A waited for CPU ms" "$(sched_ms "$sa0" "$sa1")"
  record "$pair" "B waited for CPU ms" "$(sched_ms "$sb0" "$sb1")"
  echo "run $r $pair $MODE at $RATE pps: sent $sent in ${secs}s, into ring $into, ring full $full; B rx $rx, rx-miss $miss, out on pg1 $out; loss $loss; memif-tx $ctx clk/pkt, memif-input $crx clk/pkt at $vrx pkts/call; $waited;$timeout $(load)"
  b show memif memif1/0 | grep 'poll gaps' | sed 's/^ */  B rx /' || true
  cleanup
}

# Sluice A (sender, CPU 0) -> testpmd rxonly (CPU 1); $2: A's role (testpmd takes the other).
run_sluice_testpmd() {
  local r=$1 arole=$2 pair rx
  rm -f "$D/memif.sock"
  if [ "$arole" = master ]; then
    pair=sluice-testpmd
    sluice_up a 0 master
    testpmd_up 1 client --forward-mode=rxonly
  else
    pair=sluice-s2m-testpmd
    testpmd_up 1 server --forward-mode=rxonly
    for _ in $(seq 300); do [ -S "$D/memif.sock" ] && break; sleep 0.1; done
    sluice_up a 0 slave
  fi
  until_link_up a
  tp start
  # DPDK's client re-initialises its rings when it processes CONNECTED (docs/memif.md).
  sleep 1
  a packet-generator enable bench
  sleep 1
  tp_window a
  rx=$(tp_mpps 1 "$TP_ST")
  record "$pair" "testpmd rx Mpps" "$rx"
  sender "$pair" "$r"
  a packet-generator disable bench
  echo "run $r $pair $MODE: testpmd rx $rx Mpps; $MSG_A; $(load)"
  # Stop the testpmd server before its client (see run_testpmd_sluice).
  testpmd_down
}

run_testpmd_sluice() {
  local r=$1 tx
  rm -f "$D/memif.sock"
  testpmd_up 0 server --forward-mode=txonly --txpkts="$SIZE"
  for _ in $(seq 300); do [ -S "$D/memif.sock" ] && break; sleep 0.1; done
  sluice_up b 1 slave
  until_link_up b
  tp start
  sleep 1
  tp_window b
  tx=$(tp_mpps 2 "$TP_ST")
  record testpmd-sluice "testpmd tx Mpps" "$tx"
  receiver testpmd-sluice "$r"
  tp stop
  echo "run $r testpmd-sluice $MODE: testpmd tx $tx Mpps; $MSG_B; $(load)"
  # Stop the testpmd server before its client: the Debian testpmd memif server may crash
  # when its client disconnects (the numbers are recorded above either way).
  testpmd_down
}

# One VPP instance X (va|vb) on CPU $2 with memif1/0 as master|slave ($3), configured as
# `sluice_up' does (pg0 -> memif1/0 on va, memif1/0 -> pg1 on vb). Only the memif plugin is
# loaded; 4 KiB pages (nothing reserves hugepages here).
va() { "$VPP/bin/vppctl" -s "$D/va.sock" "$@"; }
vb() { "$VPP/bin/vppctl" -s "$D/vb.sock" "$@"; }
vpp_up() {
  local x=$1 cpu=$2 role=$3 lib
  lib=$(dirname "$(find -L "$VPP" -name memif_plugin.so | head -1)")
  mkdir -p "$D/$x.run"
  rm -f "$D/$x.sock"
  cat > "$D/$x.conf" <<EOS
unix { nodaemon cli-listen $D/$x.sock runtime-dir $D/$x.run log $D/$x-internal.log }
api-segment { prefix mb$$$x }
socksvr { socket-name $D/$x-api.sock }
cpu { main-core $cpu }
plugins { path $lib plugin default { disable } plugin memif_plugin.so { enable } }
buffers { buffers-per-numa 32768 page-size 4k }
memory { main-heap-size 512M main-heap-page-size 4k }
statseg { size 32M page-size 4k socket-name $D/$x-stats.sock }
EOS
  LD_LIBRARY_PATH="$VPP/lib/x86_64-linux-gnu:$VPP/lib" taskset -c "$cpu" "$VPP/bin/vpp" -c "$D/$x.conf" > "$D/$x.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 300); do [ -S "$D/$x.sock" ] && $x show version >/dev/null 2>&1 && break; sleep 0.1; done
  if ! $x show version >/dev/null 2>&1; then
    echo "vpp $x did not start:" >&2
    tail -20 "$D/$x.log" >&2
    exit 1
  fi
  $x create memif socket id 1 filename "$D/memif.sock" >/dev/null
  # VPP's slave is zero-copy unless told `no-zero-copy' (its default): set as MODE says.
  local zc=()
  if [ "$role" = slave ] && [ "$MODE" = copy ]; then zc=(no-zero-copy); fi
  $x create interface memif id 0 socket-id 1 "$role" "${zc[@]}" >/dev/null
  $x set interface state memif1/0 up
  $x set interface rx-mode memif1/0 polling
  if [ "$x" = va ]; then
    va create packet-generator interface pg0 >/dev/null
    va set interface state pg0 up
    va set interface l2 xconnect pg0 memif1/0
    va set interface l2 xconnect memif1/0 pg0
    # VPP's `exec' takes one command a line: the stream of write_stream on one line.
    va packet-generator new name bench size "$SIZE-$SIZE" node ethernet-input interface pg0 \
      data "{ IP4: 02:00:00:00:00:10 -> 02:fe:00:00:00:00 UDP: 10.0.0.16 -> 10.1.0.1 UDP: 1024 -> 53 incrementing 18 }"
  else
    vb create packet-generator interface pg1 >/dev/null
    vb set interface state pg1 up
    vb set interface l2 xconnect memif1/0 pg1
    vb set interface l2 xconnect pg1 memif1/0
  fi
}
vpp_link_up() {
  for _ in $(seq 150); do "$1" show memif memif1/0 2>/dev/null | grep -q "flags.* connected" && return 0; sleep 0.1; done
  echo "vpp memif link did not come up" >&2
  "$1" show memif >&2
  return 1
}

# VPP A (sender, CPU 0) -> VPP B (receiver, CPU 1), as run_sluice.
run_vpp() {
  local r=$1 rx miss into err crx vrx ctx
  rm -f "$D/memif.sock"
  vpp_up va 0 master
  vpp_up vb 1 slave
  vpp_link_up va
  vpp_link_up vb
  va packet-generator enable-stream bench
  sleep 1
  va clear runtime
  vb clear runtime
  I0_a=$(va show interface memif1/0)
  I0_b=$(vb show interface memif1/0)
  T0=$(now)
  sleep "$SECS"
  I1_a=$(va show interface memif1/0)
  I1_b=$(vb show interface memif1/0)
  T1=$(now)
  into=$(delta "$I0_a" "$I1_a" 'tx packets')
  err=$(delta "$I0_a" "$I1_a" 'tx-error')
  rx=$(delta "$I0_b" "$I1_b" 'rx packets')
  miss=$(delta "$I0_b" "$I1_b" 'rx-miss')
  ctx=$(runtime memif1/0-tx 6 "$(va show runtime | tee "$D/runtime-vpp-$r-a.txt")")
  crx=$(runtime memif-input 6 "$(vb show runtime | tee "$D/runtime-vpp-$r-b.txt")")
  vrx=$(runtime memif-input 7 "$(cat "$D/runtime-vpp-$r-b.txt")")
  record vpp "A into ring Mpps" "$into"
  record vpp "A ring-full Mpps" "$err"
  record vpp "A memif-tx clk/pkt" "$ctx"
  record vpp "B memif rx Mpps" "$rx"
  record vpp "B rx-miss Mpps" "$miss"
  record vpp "B memif-input clk/pkt" "$crx"
  va packet-generator disable-stream bench
  echo "run $r vpp $MODE: B rx $rx Mpps (rx-miss $miss), memif-input $crx clk/pkt at $vrx pkts/call; A into ring $into Mpps (ring full $err), memif1/0-tx $ctx clk/pkt; $(load)"
  cleanup
}

have_vpp=0
if [ -x "$VPP/bin/vpp" ] && [ -x "$VPP/bin/vppctl" ] && [ -n "$(find -L "$VPP" -name memif_plugin.so 2>/dev/null | head -1)" ]; then
  have_vpp=1
fi

have_testpmd=1
if ! msg=$("$TESTPMD" --check); then
  have_testpmd=0
  echo "$msg (testpmd pairs not measured)"
fi
echo "memif benchmark: $SIZE-byte frames, ${SECS}s windows, $RUNS runs, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
DEFAULT_PAIRS="sluice sluice-testpmd testpmd-sluice"
if [ $have_vpp = 1 ]; then DEFAULT_PAIRS="$DEFAULT_PAIRS vpp"; fi
PAIRS=${MEMIF_BENCH_PAIRS:-$DEFAULT_PAIRS}
MODES=${MEMIF_BENCH_MODES:-copy}
RATE=${MEMIF_BENCH_RATE:-}
RING=${MEMIF_BENCH_RING:-}
LIMIT=""
if [ -n "$RATE" ]; then
  if ! [[ $RATE =~ ^[0-9]+$ ]] || [ "$RATE" -eq 0 ]; then
    echo "MEMIF_BENCH_RATE \`$RATE': packets per second, a positive integer" >&2
    exit 2
  fi
  LIMIT="
  rate $RATE
  limit $((RATE * SECS))"
  echo "no-loss check: $RATE pps for ${SECS}s per run (the sluice pairs only)"
fi
if [ -n "$RING" ] && ! [[ $RING =~ ^(2|4|8|16|32|64|128|256|512|1024|2048|4096|8192|16384)$ ]]; then
  echo "MEMIF_BENCH_RING \`$RING': a power of two from 2 to 16384" >&2
  exit 2
fi
echo "pairs: $PAIRS; modes: $MODES"
for r in $(seq "$RUNS"); do
  for p in $PAIRS; do
    for MODE in $MODES; do
      case $MODE in
        copy | zc) ;;
        *) echo "unknown mode \`$MODE' in MEMIF_BENCH_MODES (copy|zc)" >&2; exit 2 ;;
      esac
      if [ -n "$RATE" ]; then
        case $p in
          sluice) run_sluice_rate "$r" master ;;
          sluice-s2m) run_sluice_rate "$r" slave ;;
          *) [ "$r" = 1 ] && echo "MEMIF_BENCH_RATE: pair $p not measured (the sluice pairs only)" ;;
        esac
        continue
      fi
      case $p in
        sluice | sluice-s2m) ;;
        *) [ -n "$RING" ] && [ "$r" = 1 ] && echo "MEMIF_BENCH_RING: pair $p keeps the default ring size on its non-Sluice end (the Sluice pairs only)" ;;
      esac
      case $p in
        sluice) run_sluice "$r" master ;;
        sluice-s2m) run_sluice "$r" slave ;;
        sluice-testpmd) if [ $have_testpmd = 1 ] && [ "$MODE" = copy ]; then run_sluice_testpmd "$r" master; fi ;;
        sluice-s2m-testpmd) if [ $have_testpmd = 1 ]; then run_sluice_testpmd "$r" slave; fi ;;
        testpmd-sluice) if [ $have_testpmd = 1 ]; then run_testpmd_sluice "$r"; fi ;;
        vpp)
          if [ $have_vpp = 0 ]; then
            [ "$r" = 1 ] && echo "no VPP with the memif plugin at $VPP (VPP_PREFIX): vpp pair not measured"
          else
            run_vpp "$r"
          fi
          ;;
        *) echo "unknown pair \`$p' in MEMIF_BENCH_PAIRS" >&2; exit 2 ;;
      esac
    done
  done
done
echo
printf '%-24s %-24s %8s %8s %8s\n' pair metric min median max
# One row per pair and metric, in the order of the pair (with its mode) and the metric.
cut -d'|' -f1,2 "$D/results" | sort -s -u | while IFS='|' read -r p m; do
  mapfile -t v < <(awk -F'|' -v p="$p" -v m="$m" '$1 == p && $2 == m {print $3 + 0}' "$D/results")
  read -r lo med hi <<<"$(stats "${v[@]}")"
  printf '%-24s %-24s %8.2f %8.2f %8.2f\n' "$p" "$m" "$lo" "$med" "$hi"
done
