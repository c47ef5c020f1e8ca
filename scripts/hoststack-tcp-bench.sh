#!/usr/bin/env bash
# Host stack TCP benchmark (not a test; root, release build). Kernel peers in namespaces talk
# across veth pairs to
#   kernel — a Linux TCP socket in a second namespace, and
#   sluice — Sluice on the other end of a veth (AF_PACKET v2 rx rings) with `sluice-tcp`
#            attached over shared-memory FIFOs,
# interleaved in every run. Measured:
#   - bulk: <MiB> of random bytes each way (kernel → peer and peer → kernel), sha256 checked
#     on both ends, throughput in MB/s;
#   - rr: request/response round trips of 64 bytes on one connection (a Python kernel client
#     against a kernel echo server or `sluice-tcp echo`), p50/p99 in µs;
#   - conn: connections per second, each one byte echoed then closed: a Python kernel client
#     against the side's echo server (accept + close), and the side as the client
#     (`sluice-tcp conn`) against a Python echo server in the peer's namespace (connect +
#     close); and a Python client under LD_PRELOAD=libsluice_preload.so (Sluice's stack)
#     against the kernel echo server (for the kernel side: the kernel client's connect rate
#     above, not measured twice);
#   - iperf3: <MiB> with iperf3's client under LD_PRELOAD (sluice side; a kernel client on
#     the kernel side) against a kernel `iperf3 -s` in the peer's namespace, both directions
#     (client → server, and -R), the receiver's MB/s.
# Printed as min / median / max over the runs with the ratio of the medians.
#
# Usage: scripts/hoststack-tcp-bench.sh [runs (3)] [MiB (64)] [round trips (2000)]
# (NO_BUILD=1: use the release binaries as they are; FIFO=<bytes>: Sluice's session FIFO
# size, default 1 MiB, advertised through window scaling; SESSION_EXTRA="<keys>": more keys
# of Sluice's session section, e.g. "tcp-delayed-ack 0"; NCONN=<n>: connections per
# connection-rate sample, default 500; SLUICE=<path>, SLUICE_TCP=<path>, PRELOAD=<path>: the
# sluice and sluice-tcp binaries and libsluice_preload.so, e.g. older builds for a
# before/after comparison; RXMODE=polling|interrupt|adaptive: rx mode of Sluice's veth,
# default polling; STARTUP="<sections>": appended to Sluice's startup.conf; NO_IPERF=1:
# without the iperf3 rows, which are left out too when iperf3 is not installed; IDLE_CPU=<s>:
# after the runs, the CPU time (user + system) each Sluice thread used over <s> s with the
# echo server attached and no traffic: a thread that sleeps shows ~0, one that spins ~<s> s)
source "$(dirname "$0")/common.sh"
runs=${1:-3}
mib=${2:-64}
nrr=${3:-2000}
fifo=${FIFO:-1048576}
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, AF_PACKET)"; exit 0
fi
[ -n "${NO_BUILD:-}" ] || cargo build -j 2 --release -q -p sluice -p sluicectl -p sluice-session -p sluice-preload
bin=$PWD/target/release
tcp=${SLUICE_TCP:-$bin/sluice-tcp}
preload=${PRELOAD:-$bin/libsluice_preload.so}
iperf=1
if [ -n "${NO_IPERF:-}" ]; then
  iperf=; echo "iperf3 rows left out: NO_IPERF is set"
elif ! command -v iperf3 >/dev/null; then
  iperf=; echo "iperf3 rows left out: iperf3 is not installed (apt-get install iperf3)"
fi
tmp=$(mktemp -d)
CS=htb$$cs; CK=htb$$ck; K=htb$$k; V=htb$$v; NX=htb$$x
pids=()
groups=()
# SLUICE and SLUICE_TCP may be wrappers, e.g. one that execs strace, which does not end on
# SIGTERM while its child runs: those run in a session of their own (setsid), and stop
# <pid> ends the whole process group, with SIGKILL after 10 s.
stop() {
  kill -TERM -- "-$1" 2>/dev/null || return 0
  local i
  for i in $(seq 100); do kill -0 -- "-$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  set +e # every step runs, whatever failed before (a helper that already exited, a wait)
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${groups[@]}"; do stop "$p"; done
  [ -n "${pid:-}" ] && stop "$pid"
  ip link del "$V" 2>/dev/null
  # The kernel helpers run under `ip netns exec` in a subshell: kill them by namespace.
  for n in "${nss[@]}"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null
    ip netns del "$n" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
for n in "$CS" "$CK" "$K"; do ns_add "$n"; done
# The programs under LD_PRELOAD run in $NX, where the kernel has no address (not even
# loopback): a socket that falls back to the kernel (the preload library could not attach)
# fails at once instead of reaching the host's network.
ip netns add "$NX"; nss+=("$NX")
ip link add "$V" type veth peer name eth0 netns "$CS"
echo 1 >"/proc/sys/net/ipv6/conf/$V/disable_ipv6"
ip link set "$V" up
ip -n "$CS" addr add 10.78.0.2/24 dev eth0; ip -n "$CS" link set eth0 up
ip -n "$CK" link add eth0 type veth peer name eth1 netns "$K"
ip -n "$CK" addr add 10.79.0.2/24 dev eth0; ip -n "$CK" link set eth0 up
ip -n "$K" addr add 10.79.0.1/24 dev eth1; ip -n "$K" link set eth1 up

printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\nsession { enable app-socket %s/app.sock fifo-size %s %s }\n%s\n' "$tmp" "$tmp" "$fifo" "${SESSION_EXTRA:-}" "${STARTUP:-}" >"$tmp/c.conf"
setsid "${SLUICE:-$bin/sluice}" -c "$tmp/c.conf" >"$tmp/sluice.log" 2>&1 &
pid=$!
sluice_up() {
  kill -0 "$pid" 2>/dev/null || { echo "FAILED: Sluice did not start:"; tail -5 "$tmp/sluice.log"; exit 1; }
  [ -S "$tmp/cli.sock" ] && [ -S "$tmp/app.sock" ]
}
wait_until "Sluice's CLI and app sockets" sluice_up
C() { "$bin/sluicectl" -s "$tmp/cli.sock" "$@"; }
C create host-interface v2 name "$V" >/dev/null
[ -z "${RXMODE:-}" ] || C set interface rx-mode "host-$V" "$RXMODE"
C set interface state "host-$V" up
C set interface ip address "host-$V" 10.78.0.1/24
C ping 10.78.0.2 repeat 2 interval 0.1 >/dev/null
head -c "${mib}M" /dev/urandom >"$tmp/data"
want=$(sha256sum <"$tmp/data" | cut -d' ' -f1)

# Kernel helpers (Python): a sink printing "<bytes> <sha256>", a sender, an echo server and
# a round-trip client printing "p50 p99" in µs.
cat >"$tmp/k.py" <<'EOF'
import hashlib, socket, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "sink":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, port)); l.listen(1); print("ready", flush=True)
    c, _ = l.accept(); h = hashlib.sha256(); n = 0
    while True:
        d = c.recv(1 << 20)
        if not d: break
        h.update(d); n += len(d)
    c.close(); print(n, h.hexdigest(), flush=True)
elif mode == "send":
    s = socket.create_connection((host, port)); f = open(sys.argv[4], "rb")
    while True:
        d = f.read(1 << 20)
        if not d: break
        s.sendall(d)
    s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
elif mode == "echo":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((host, port)); l.listen(8); print("ready", flush=True)
    while True:
        c, _ = l.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:  # a client's reset ends its connection, not the server
            while True:
                d = c.recv(65536)
                if not d: break
                c.sendall(d)
        except ConnectionError:
            pass
        c.close()
elif mode == "conn":
    n = int(sys.argv[4]); t0 = time.perf_counter()
    for _ in range(n):
        s = socket.create_connection((host, port)); s.sendall(b"c")
        if s.recv(1) != b"c": sys.exit("conn: no echo")
        s.close()
    print("%.0f" % (n / (time.perf_counter() - t0)))
elif mode == "rr":
    n = int(sys.argv[4]); s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); m = b"x" * 64; lat = []
    for _ in range(n):
        t = time.perf_counter(); s.sendall(m); got = 0
        while got < 64: got += len(s.recv(64 - got))
        lat.append((time.perf_counter() - t) * 1e6)
    s.close(); lat.sort()
    print("%.1f %.1f" % (lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]))
EOF
K_() { local ns=$1; shift; ip netns exec "$ns" python3 "$tmp/k.py" "$@"; }
# A command with its sockets on Sluice's stack (in $NX).
pre() { ip netns exec "$NX" env SLUICE_APP_SOCKET="$tmp/app.sock" LD_PRELOAD="$preload" "$@"; }
mbps() { echo "$1 * 1048576 / $2 / 1000000" | bc -l; }
now() { date +%s.%N; }

# Echo servers for the round trips (kept for the whole run).
K_ "$K" echo 10.79.0.1 7001 >"$tmp/kecho" & pids+=($!)
setsid "$tcp" --socket "$tmp/app.sock" echo --listen 0.0.0.0:7001 2>"$tmp/secho" & groups+=($!)
K_ "$CK" echo 10.79.0.2 7002 >"$tmp/kecho2" & pids+=($!)
K_ "$CS" echo 10.78.0.2 7002 >"$tmp/secho2" & pids+=($!)
echoes_ready() {
  grep -q ready "$tmp/kecho" && grep -q ready "$tmp/secho" && grep -q ready "$tmp/kecho2" \
    && grep -q ready "$tmp/secho2"
}
wait_until "the echo servers" echoes_ready
nconn=${NCONN:-500}
# iperf3 servers on the kernel: (a)'s in $K, (b)'s in $CS (the peer of Sluice's veth).
if [ -n "$iperf" ]; then
  ip netns exec "$K" iperf3 -s -B 10.79.0.1 -p 5201 >/dev/null 2>&1 & pids+=($!)
  ip netns exec "$CS" iperf3 -s -B 10.78.0.2 -p 5201 >/dev/null 2>&1 & pids+=($!)
  iperfs_ready() {
    ip netns exec "$K" ss -ltn | grep -q 10.79.0.1:5201 \
      && ip netns exec "$CS" ss -ltn | grep -q 10.78.0.2:5201
  }
  wait_until "the iperf3 servers" iperfs_ready
fi
# iperf_mbps <side> [-R]: one iperf3 run of $mib MiB, the receiver's MB/s.
iperf_mbps() {
  local side=$1; shift
  if [ "$side" = kernel ]; then
    ip netns exec "$CK" iperf3 -c 10.79.0.1 -p 5201 -n "${mib}M" -J "$@" >"$tmp/iperf.json"
  else
    pre iperf3 -c 10.78.0.2 -p 5201 -n "${mib}M" -J "$@" >"$tmp/iperf.json"
  fi || { echo "FAILED: iperf3 $side $*:" >&2; tail -5 "$tmp/iperf.json" >&2; return 1; }
  iperf3_rx 8e6 1 <"$tmp/iperf.json"
}

declare -A R
port=8000
echo "== $runs runs, $mib MiB each way, $nrr round trips of 64 B, FIFO $fifo B; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  for side in kernel sluice; do
    port=$((port + 1))
    # peer -> side
    if [ $side = kernel ]; then
      : >"$tmp/out"; K_ "$K" sink 10.79.0.1 $port >"$tmp/out" & sp=$!
      until grep -q ready "$tmp/out"; do sleep 0.02; done
      t0=$(now); K_ "$CK" send 10.79.0.1 $port "$tmp/data"; wait $sp; t1=$(now)
      got=$(tail -1 "$tmp/out" | cut -d' ' -f2)
    else
      : >"$tmp/err"; "$tcp" --socket "$tmp/app.sock" sink --listen 0.0.0.0:$port 2>"$tmp/err" | sha256sum >"$tmp/out" & sp=$!
      until grep -q ready "$tmp/err"; do sleep 0.02; done
      t0=$(now); K_ "$CS" send 10.78.0.1 $port "$tmp/data"; wait $sp; t1=$(now)
      got=$(cut -d' ' -f1 "$tmp/out")
    fi
    [ "$got" = "$want" ] || { echo "$side rx: sha256 mismatch ($got)"; exit 1; }
    R[$side,rx]+="$(mbps "$mib" "$(echo "$t1 - $t0" | bc)") "
    # side -> peer
    port=$((port + 1))
    if [ $side = kernel ]; then
      : >"$tmp/out"; K_ "$CK" sink 10.79.0.2 $port >"$tmp/out" & sp=$!
      until grep -q ready "$tmp/out"; do sleep 0.02; done
      t0=$(now); K_ "$K" send 10.79.0.2 $port "$tmp/data"; wait $sp; t1=$(now)
    else
      : >"$tmp/out"; K_ "$CS" sink 10.78.0.2 $port >"$tmp/out" & sp=$!
      until grep -q ready "$tmp/out"; do sleep 0.02; done
      t0=$(now); "$tcp" --socket "$tmp/app.sock" send --connect 10.78.0.2:$port <"$tmp/data" 2>/dev/null; wait $sp; t1=$(now)
    fi
    got=$(tail -1 "$tmp/out" | cut -d' ' -f2)
    [ "$got" = "$want" ] || { echo "$side tx: sha256 mismatch ($got)"; exit 1; }
    R[$side,tx]+="$(mbps "$mib" "$(echo "$t1 - $t0" | bc)") "
    # round trips
    if [ $side = kernel ]; then read -r p50 p99 < <(K_ "$CK" rr 10.79.0.1 7001 "$nrr")
    else read -r p50 p99 < <(K_ "$CS" rr 10.78.0.1 7001 "$nrr"); fi
    R[$side,p50]+="$p50 "; R[$side,p99]+="$p99 "
    # connections per second: the side as the server, then as the client
    if [ $side = kernel ]; then
      R[$side,accept]+="$(K_ "$CK" conn 10.79.0.1 7001 "$nconn") "
      kconn=$(K_ "$K" conn 10.79.0.2 7002 "$nconn")
      R[$side,connect]+="$kconn "
      # connections/s of a Python client: the kernel's is the measurement just made
      R[$side,preconn]+="$kconn "
    else
      R[$side,accept]+="$(K_ "$CS" conn 10.78.0.1 7001 "$nconn") "
      R[$side,connect]+="$("$tcp" --socket "$tmp/app.sock" conn --connect 10.78.0.2:7002 --count "$nconn" | cut -d' ' -f4) "
      # connections/s of a Python client on LD_PRELOAD
      R[$side,preconn]+="$(pre python3 "$tmp/k.py" conn 10.78.0.2 7002 "$nconn") "
    fi
    if [ -n "$iperf" ]; then
      R[$side,iperf]+="$(iperf_mbps $side) "
      R[$side,iperfr]+="$(iperf_mbps $side -R) "
    fi
  done
done
printf '\n| metric | kernel min / median / max | sluice min / median / max | sluice / kernel (medians) |\n|---|---|---|---|\n'
for m in rx tx p50 p99 accept connect preconn ${iperf:+iperf iperfr}; do
  # shellcheck disable=SC2086
  read -r ka kb kc < <(stats ${R[kernel,$m]})
  # shellcheck disable=SC2086
  read -r sa sb sc < <(stats ${R[sluice,$m]})
  case $m in
    rx) name="$mib MiB kernel peer → side, MB/s";; tx) name="$mib MiB side → kernel peer, MB/s";;
    p50) name="64 B round trip p50 µs";; p99) name="64 B round trip p99 µs";;
    accept) name="connections/s, kernel client → side";;
    connect) name="connections/s, side → kernel server";;
    preconn) name="connections/s, Python client (sluice: LD_PRELOAD) → kernel server";;
    iperf) name="iperf3 $mib MiB client (sluice: LD_PRELOAD) → kernel server, MB/s";;
    iperfr) name="iperf3 -R $mib MiB kernel server → client (sluice: LD_PRELOAD), MB/s";;
  esac
  printf '| %s | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %.2f |\n' "$name" "$ka" "$kb" "$kc" "$sa" "$sb" "$sc" "$(echo "$sb / $kb" | bc -l)"
done
if [ -n "${IDLE_CPU:-}" ]; then
  # <thread name> <utime + stime in ticks> per thread (fields 14 and 15 of stat, counted
  # after the parenthesised name, which may hold spaces).
  ticks() {
    local t
    for t in /proc/"$pid"/task/*; do
      echo "$(tr ' ' _ <"$t/comm") $(sed 's/.*) //' "$t/stat" | awk '{print $12 + $13}')"
    done
  }
  sleep 1; ticks >"$tmp/t0"; sleep "$IDLE_CPU"; ticks >"$tmp/t1"
  printf '\nCPU ms per Sluice thread over %s s idle: ' "$IDLE_CPU"
  paste "$tmp/t0" "$tmp/t1" | awk -v hz="$(getconf CLK_TCK)" '$1 == $3 {printf "%s %.0f  ", $1, ($4 - $2) * 1000 / hz}'
  echo
fi
echo
C show errors | grep -E 'tcp4-input|session-queue' || true
echo "buffers in use: $(C show buffers | awk '/default-numa-0/ {print $9}')"
