#!/usr/bin/env bash
# Instructions per TCP connection in Sluice's host stack (not a test; root, release build,
# valgrind). Sluice runs under callgrind with a veth to a namespace; after a warm-up the
# counters are zeroed, then
#   accept  — a Python kernel client opens <n> connections to `sluice-tcp echo`, each
#             echoing one byte then closed;
#   connect — `sluice-tcp conn --count <n>` against a Python echo server in the namespace;
# each phase is dumped (`callgrind_control -d`) and printed per node with
# scripts/callgrind-nodes.py (instructions per connection). The whole daemon's count
# includes its busy loop between packets (it depends on timing); the nodes' counts do not.
#
# SET=<bytes> measures requests instead: redis-benchmark under LD_PRELOAD (one client, one
# connection) sends <n> SETs of <bytes> to a kernel redis-server in the namespace, printed
# per request (issue 19's 8 KiB cells; SESSION_EXTRA="tcp-tso on" for TSO).
#
# Usage: scripts/hoststack-conn-callgrind.sh [connections or requests (200)]
# (NO_BUILD=1: use the release binaries as they are; SLUICE=<path>: another sluice binary,
# e.g. an older build for a before/after comparison; KEEP=<dir>: keep the dumps there;
# SESSION_EXTRA="<keys>": more keys of Sluice's session section)
source "$(dirname "$0")/common.sh"
n=${1:-200}
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, AF_PACKET)"; exit 0
fi
command -v valgrind >/dev/null || { echo "SKIPPED: valgrind is not installed"; exit 0; }
[ -n "${NO_BUILD:-}" ] || cargo build -j 2 --release -q -p sluice -p sluicectl -p sluice-session -p sluice-preload
bin=$PWD/target/release
tmp=$(mktemp -d)
CS=hcc$$cs; V=hcc$$v
cleanup() {
  [ -n "${ep:-}" ] && kill "$ep" 2>/dev/null
  [ -n "${kp:-}" ] && kill "$kp" 2>/dev/null
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  ip link del "$V" 2>/dev/null
  ip netns pids "$CS" 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns del "$CS" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$tmp"/cg.out.* "$KEEP"/ 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$CS"; ip -n "$CS" link set lo up
ip link add "$V" type veth peer name eth0 netns "$CS"
echo 1 >"/proc/sys/net/ipv6/conf/$V/disable_ipv6"
ip link set "$V" up
ip -n "$CS" addr add 10.78.0.2/24 dev eth0; ip -n "$CS" link set eth0 up
printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\nsession { enable app-socket %s/app.sock %s }\n' "$tmp" "$tmp" "${SESSION_EXTRA:-}" >"$tmp/c.conf"
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$tmp/cg.out" \
  "${SLUICE:-$bin/sluice}" -c "$tmp/c.conf" >"$tmp/sluice.log" 2>&1 &
pid=$!
# Bounded waits: a daemon or server that died (or never gets ready) ends the run with its log.
waitfor() { # <tries of 0.1 s> <pid> <log> <condition...>
  local n=$1 p=$2 log=$3; shift 3
  until "$@"; do
    kill -0 "$p" 2>/dev/null && [ $((n -= 1)) -gt 0 ] || { cat "$log"; echo "not ready: $*" >&2; exit 1; }
    sleep 0.1
  done
}
waitfor 1200 "$pid" "$tmp/sluice.log" test -S "$tmp/cli.sock" -a -S "$tmp/app.sock"
C() { "$bin/sluicectl" -s "$tmp/cli.sock" "$@"; }
C create host-interface v2 name "$V" >/dev/null
C set interface state "host-$V" up
C set interface ip address "host-$V" 10.78.0.1/24
C ping 10.78.0.2 repeat 2 interval 0.1 >/dev/null
if [ -n "${SET:-}" ]; then
  command -v redis-server >/dev/null || { echo "SKIPPED: redis-server is not installed"; exit 0; }
  ip netns exec "$CS" redis-server --bind 10.78.0.2 --port 6379 --save '' --appendonly no \
    --protected-mode no --daemonize no --dir "$tmp" >"$tmp/redis.log" 2>&1 & kp=$!
  rb() { SLUICE_APP_SOCKET="$tmp/app.sock" LD_PRELOAD="$bin/libsluice_preload.so" \
    redis-benchmark -h 10.78.0.2 -p 6379 -c 1 -d "$SET" -t set -q -n "$1" >"$tmp/rb" 2>&1 \
    || { cat "$tmp/rb"; exit 1; }; }
  waitfor 600 "$kp" "$tmp/redis.log" grep -q "Ready to accept" "$tmp/redis.log"
  rb 200
  sleep 1
  callgrind_control -z "$pid" >/dev/null
  rb "$n"
  callgrind_control -d set "$pid" >/dev/null
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $(C show errors | grep -i 'tso\|GSO' | tr -s ' ' | paste -sd';')"
  echo "== $n SETs of $SET B (redis-benchmark under LD_PRELOAD -> kernel redis-server), instructions per request${SESSION_EXTRA:+ ($SESSION_EXTRA)}"
  echo "whole daemon: $(( $(awk '/^totals:/ {print $2}' "$tmp/cg.out.1") / n ))"
  python3 scripts/callgrind-nodes.py "$tmp/cg.out.1" "$n" | sed -n 1,12p | cut -c1-150
  exit 0
fi
cat >"$tmp/k.py" <<'PY'
import socket, sys
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "echo":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, port)); l.listen(8); print("ready", flush=True)
    while True:
        c, _ = l.accept()
        while True:
            d = c.recv(65536)
            if not d: break
            c.sendall(d)
        c.close()
else:
    for _ in range(int(sys.argv[4])):
        s = socket.create_connection((host, port)); s.sendall(b"c")
        if s.recv(1) != b"c": sys.exit("conn: no echo")
        s.close()
PY
"$bin/sluice-tcp" --socket "$tmp/app.sock" echo --listen 0.0.0.0:7001 2>"$tmp/secho" & ep=$!
ip netns exec "$CS" python3 "$tmp/k.py" echo 10.78.0.2 7002 >"$tmp/kecho" 2>&1 & kp=$!
waitfor 600 "$ep" "$tmp/secho" grep -q ready "$tmp/secho"
waitfor 600 "$kp" "$tmp/kecho" grep -q ready "$tmp/kecho"
ip netns exec "$CS" python3 "$tmp/k.py" conn 10.78.0.1 7001 5
"$bin/sluice-tcp" --socket "$tmp/app.sock" conn --connect 10.78.0.2:7002 --count 5 >/dev/null
sleep 1
callgrind_control -z "$pid" >/dev/null
ip netns exec "$CS" python3 "$tmp/k.py" conn 10.78.0.1 7001 "$n" || exit 1
callgrind_control -d accept "$pid" >/dev/null
"$bin/sluice-tcp" --socket "$tmp/app.sock" conn --connect 10.78.0.2:7002 --count "$n" >/dev/null || exit 1
callgrind_control -d connect "$pid" >/dev/null
echo "buffers in use: $(C show buffers | awk '/default-numa-0/ {print $9}'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for k in 1 2; do
  [ $k = 1 ] && echo "== accept: $n connections (kernel client -> sluice-tcp echo), instructions per connection"
  [ $k = 2 ] && echo "== connect: $n connections (sluice-tcp conn -> kernel echo), instructions per connection"
  echo "whole daemon: $(( $(awk '/^totals:/ {print $2}' "$tmp/cg.out.$k") / n ))"
  # (sed reads it all: head would end the pipe early, a failure under pipefail)
  python3 scripts/callgrind-nodes.py "$tmp/cg.out.$k" "$n" | sed -n 1,8p | cut -c1-150
done
