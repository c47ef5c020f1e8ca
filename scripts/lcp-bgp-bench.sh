#!/usr/bin/env bash
# Full Internet table by BGP through linux-cp (not a test; root, BIRD 2). Topology:
#
#   A (10.86.0.2) --veth-- Sluice (namespace S) --veth-- P (10.85.0.2, BIRD "peer")
#                            |  lcp twins ta/tp
#                          L (10.86.0.1, 10.85.0.1, fd85::1; BIRD "router", kernel export)
#
# P announces the real table (../shared/data/full-table-prefixes-2024.txt.gz, or the first N
# prefixes of it) by eBGP, IPv4 and IPv6 sessions, to the routing daemon in L, which peers
# through Sluice (BGP punted to the twin) and writes what it learns into L's kernel; Sluice's
# netlink listener follows the kernel into its FIB. Per run, from the moment L's daemon starts:
#   established — both BGP sessions up (from the daemon start); the rest from then:
#   bird        — the daemon holds every prefix (its own convergence, no Sluice in it),
#   kernel      — L's kernel holds every prefix (the daemon's kernel export),
#   sluice      — Sluice's FIB holds every prefix,
#   share       — (sluice - kernel) / kernel: what Sluice adds to the daemon's convergence,
# then churn (10 blocks of 10,000 announcements or withdrawals: the update rate the kernel
# took and how far behind Sluice was per block), then forwarding is checked (A pings addresses P owns inside sampled prefixes, through
# Sluice, over the learned routes), Sluice's RSS growth per route, and the withdrawal of the
# whole table (P disables its static protocols) until Sluice's FIB is empty again.
# Printed as min / median / max over the runs.
#
# Usage: scripts/lcp-bgp-bench.sh [prefixes (all: 1062046)] [runs (3)]
source "$(dirname "$0")/common.sh"
want=${1:-0}
runs=${2:-3}
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: needs root (namespaces, taps)"; exit 0
fi
for t in bird birdc ping python3 bc; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is not installed (apt-get install bird2 iputils-ping python3 bc)"; exit 0; }
done
cargo build -j 2 --release -q -p sluice -p sluicectl
bin=$PWD/target/release
table=${SLUICE_TABLE:-$(cd .. && pwd)/shared/data/full-table-prefixes-2024.txt.gz}
[ -f "$table" ] || { echo "SKIPPED: no table at $table (set SLUICE_TABLE)"; exit 0; }
tmp=$(mktemp -d)
S=bgpb$$S; L=bgpb$$L; P=bgpb$$P; A=bgpb$$A
cleanup() {
  # set -e is on here too: every step may fail harmlessly (already gone).
  for c in "$tmp"/*.ctl; do if [ -S "$c" ]; then birdc -s "$c" down >/dev/null 2>&1 || true; fi; done
  if [ -n "${pid:-}" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  for n in "$S" "$L" "$P" "$A"; do ip netns del "$n" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# P's configuration: every prefix as a static route (exported by BGP with P as next hop);
# sample addresses: the first address of 20 prefixes spread over the table, owned by P's
# loopback so that A's pings through Sluice are answered.
python3 - "$table" "$want" "$tmp" <<'PY'
import gzip, ipaddress, sys
path, want, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
v4, v6 = [], []
with gzip.open(path, "rt") as f:
    for line in f:
        p = line.strip()
        if p:
            (v6 if ":" in p else v4).append(str(ipaddress.ip_network(p, strict=False)))
v4, v6 = list(dict.fromkeys(v4)), list(dict.fromkeys(v6))
if want:
    k4 = min(len(v4), want * len(v4) // (len(v4) + len(v6)))
    v4, v6 = v4[:k4], v6[:want - k4]
# Martians a router refuses and what overlaps the bench's own subnets are left out.
def ok4(p):
    n = ipaddress.ip_network(p)
    return not (n.is_private or n.is_multicast or n.is_reserved or n.is_loopback
                or n.is_link_local or n.prefixlen < 8)
v4 = [p for p in v4 if ok4(p)]
v6 = [p for p in v6 if ipaddress.ip_network(p).is_global and ipaddress.ip_network(p).prefixlen >= 16]
with open(f"{tmp}/p.conf", "w") as f:
    f.write("router id 10.85.0.2;\nprotocol device { scan time 10; }\n")
    f.write("protocol static s4 { ipv4; \n")
    f.writelines(f"  route {p} blackhole;\n" for p in v4)
    f.write("}\nprotocol static s6 { ipv6; \n")
    f.writelines(f"  route {p} blackhole;\n" for p in v6)
    f.write("}\n")
    # Churn: 10,000 /32s P announces and withdraws as one block (disabled at start).
    f.write("protocol static churn { disabled; ipv4;\n")
    f.writelines(f"  route 10.{200 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}/32 blackhole;\n" for i in range(10000))
    f.write("}\n")
    for fam, me, peer in (("ipv4", "10.85.0.2", "10.85.0.1"), ("ipv6", "fd85::2", "fd85::1")):
        f.write(f"protocol bgp b{fam[-1]} {{ local {me} as 65002; neighbor {peer} as 65001;\n"
                f"  connect delay time 1; hold time 90; {fam} {{ import none; export all; next hop self; }}; }}\n")
with open(f"{tmp}/counts", "w") as f:
    f.write(f"{len(v4)} {len(v6)}\n")
step = max(1, len(v4) // 20)
with open(f"{tmp}/samples", "w") as f:
    for p in v4[::step][:20]:
        n = ipaddress.ip_network(p)
        f.write(f"{n.network_address + 1}\n")
PY
read -r n4 n6 <"$tmp/counts"
n=$((n4 + n6))
cat >"$tmp/l.conf" <<EOF
router id 10.85.0.1;
protocol device { scan time 10; }
protocol kernel k4 { ipv4 { import none; export where source = RTS_BGP; }; }
protocol kernel k6 { ipv6 { import none; export where source = RTS_BGP; }; }
protocol bgp b4 { local 10.85.0.1 as 65001; neighbor 10.85.0.2 as 65002; hold time 90; connect delay time 1;
  ipv4 { import all; export none; }; }
protocol bgp b6 { local fd85::1 as 65001; neighbor fd85::2 as 65002; hold time 90; connect delay time 1;
  ipv6 { import all; export none; }; }
EOF

now() { date +%s.%N; }
C() { "$bin/sluicectl" -s "$tmp/cli.sock" "$@"; }
sluice_routes() { C show lcp | sed -n 's/.*: routes \([0-9]*\) .*/\1/p'; }
# L's kernel: IPv4 prefixes from the trie statistics (main table), IPv6 from the route count
# in rt6_stats (hex), both read in constant time; minus the routes present before BGP.
kernel_routes() {
  local v4 v6
  v4=$(ip netns exec "$L" awk '/^Main:/ {m=1} m && /Prefixes:/ {print $2; exit}' /proc/net/fib_triestat)
  v6=$(ip netns exec "$L" cut -d' ' -f4 /proc/net/rt6_stats)
  echo $((v4 + 16#$v6))
}
bird_routes() {
  birdc -s "$tmp/l.ctl" show route count 2>/dev/null | awk '/routes for/ {s += $1} END {print s + 0}'
}
established() {
  [ "$(birdc -s "$tmp/l.ctl" show protocols 2>/dev/null | grep -c Established)" = 2 ]
}
rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }
wait_for() { # wait_for <seconds> <command...>: polls every 20 ms; fails after the timeout
  local until=$(($(date +%s) + $1)); shift
  until "$@"; do
    [ "$(date +%s)" -lt "$until" ] || { echo "timed out waiting for: $*" >&2; return 1; }
    sleep 0.02
  done
}
eq() { [ "$($1)" = "$2" ]; }
ge() { [ "$($1)" -ge "$2" ]; }

declare -a te tb tk ts bh sh bpr tw pk cr cl
echo "== $n prefixes ($n4 IPv4, $n6 IPv6), $runs runs; load average $(cut -d' ' -f1-3 /proc/loadavg) (2-core shared VM)"
for r in $(seq 1 "$runs"); do
  for x in "$S" "$L" "$P" "$A"; do ip netns add "$x"; ip -n "$x" link set lo up; done
  ip link add bgpb$$vp netns "$S" type veth peer name eth0 netns "$P"
  ip link add bgpb$$va netns "$S" type veth peer name eth0 netns "$A"
  for x in "$S"; do for v in bgpb$$vp bgpb$$va; do ip -n "$x" link set "$v" up; done; done
  ip -n "$P" addr add 10.85.0.2/24 dev eth0; ip -n "$P" addr add fd85::2/64 dev eth0 nodad
  ip -n "$P" link set eth0 up; ip -n "$P" route add 10.86.0.0/24 via 10.85.0.1
  while read -r a; do ip -n "$P" addr add "$a/32" dev lo; done <"$tmp/samples"
  ip -n "$A" addr add 10.86.0.2/24 dev eth0; ip -n "$A" link set eth0 up
  ip -n "$A" route add default via 10.86.0.1
  printf 'unix { nodaemon cli-listen %s/cli.sock }\nbuffers { page-size 4k }\nlinux-cp { default netns %s }\n' "$tmp" "$L" >"$tmp/s.conf"
  ip netns exec "$S" "$bin/sluice" -c "$tmp/s.conf" >"$tmp/log.$r" 2>&1 &
  pid=$!
  wait_for 20 test -S "$tmp/cli.sock"
  for v in vp va; do
    C create host-interface name bgpb$$$v >/dev/null
    C set interface state host-bgpb$$$v up >/dev/null
    C lcp create host-bgpb$$$v host-if t$v >/dev/null
  done
  ip -n "$L" addr add 10.85.0.1/24 dev tvp; ip -n "$L" addr add fd85::1/64 dev tvp nodad
  ip -n "$L" addr add 10.86.0.1/24 dev tva
  wait_for 20 eval 'C show interface address | grep -q fd85::1'
  # P loads the table first: its own load is not part of the measurement.
  ip netns exec "$P" bird -c "$tmp/p.conf" -s "$tmp/p.ctl"
  wait_for 600 eval '[ "$(birdc -s "$tmp/p.ctl" show route count 2>/dev/null | awk "/routes for/ {s += \$1} END {print s + 0}")" = "$n" ]'
  k0=$(kernel_routes); s0=$(sluice_routes); r0=$(rss)
  t0=$(now)
  ip netns exec "$L" bird -c "$tmp/l.conf" -s "$tmp/l.ctl"
  wait_for 120 established; t1=$(now)
  wait_for 900 ge bird_routes "$n"; t2=$(now)
  wait_for 900 ge kernel_routes $((k0 + n)); t3=$(now)
  wait_for 900 ge sluice_routes $((s0 + n)); t4=$(now)
  r1=$(rss)
  ok=0; total=0
  while read -r a; do
    total=$((total + 1))
    ip netns exec "$A" ping -c1 -W1 -q "$a" >/dev/null 2>&1 && ok=$((ok + 1))
  done <"$tmp/samples"
  pk+=("$ok")
  # Churn: P announces then withdraws 10,000 prefixes, 10 times; each time, how fast L's
  # kernel took the block (the achieved update rate) and how far Sluice finished behind it.
  kb=$(kernel_routes); sb=$(sluice_routes)
  for c in $(seq 1 10); do
    if [ $((c % 2)) = 1 ]; then verb=enable; k=$((kb + 10000)); s=$((sb + 10000)); else verb=disable; k=$kb; s=$sb; fi
    c0=$(now); birdc -s "$tmp/p.ctl" "$verb" churn >/dev/null
    wait_for 120 eq kernel_routes "$k"; c1=$(now)
    wait_for 120 eq sluice_routes "$s"; c2=$(now)
    cr+=("$(echo "10000 / ($c1 - $c0)" | bc -l)"); cl+=("$(echo "1000 * ($c2 - $c1)" | bc -l)")
  done
  "$bin/sluicectl" -s "$tmp/cli.sock" show lcp | tail -1 >"$tmp/sync.$r"
  t5=$(now)
  birdc -s "$tmp/p.ctl" disable s4 >/dev/null; birdc -s "$tmp/p.ctl" disable s6 >/dev/null
  wait_for 900 eq sluice_routes "$s0"; t6=$(now)
  te+=("$(echo "$t1 - $t0" | bc -l)"); tb+=("$(echo "$t2 - $t1" | bc -l)")
  tk+=("$(echo "$t3 - $t1" | bc -l)"); ts+=("$(echo "$t4 - $t1" | bc -l)")
  bh+=("$(echo "$t4 - $t3" | bc -l)")
  sh+=("$(echo "100 * ($t4 - $t3) / ($t3 - $t1)" | bc -l)")
  tw+=("$(echo "$t6 - $t5" | bc -l)")
  bpr+=("$(echo "($r1 - $r0) / $n" | bc -l)")
  echo "run $r: established ${te[-1]:0:6} s after start; then bird ${tb[-1]:0:6} s, kernel ${tk[-1]:0:6} s, sluice ${ts[-1]:0:6} s; pings $ok/$total; withdrawn in ${tw[-1]:0:6} s"
  birdc -s "$tmp/l.ctl" down >/dev/null 2>&1 || true
  birdc -s "$tmp/p.ctl" down >/dev/null 2>&1 || true
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  for x in "$S" "$L" "$P" "$A"; do ip netns del "$x"; done
  rm -f "$tmp/cli.sock" "$tmp"/*.ctl
done
printf '\n| %s prefixes | min | median | max |\n|---|---|---|---|\n' "$n"
row() { local name=$1; shift; read -r a b c < <(stats "$@"); printf '| %s | %.3f | %.3f | %.3f |\n' "$name" "$a" "$b" "$c"; }
row "daemon start to both BGP sessions up s" "${te[@]}"
row "session up to all prefixes in the daemon (BIRD) s" "${tb[@]}"
row "session up to all prefixes in L's kernel s" "${tk[@]}"
row "session up to all prefixes in Sluice's FIB s" "${ts[@]}"
row "Sluice behind the kernel s" "${bh[@]}"
row "Sluice's share: behind / (session up to kernel) %" "${sh[@]}"
row "churn: updates/s the kernel took (blocks of 10k)" "${cr[@]}"
row "churn: Sluice behind the kernel per block ms" "${cl[@]}"
row "withdrawal: Sluice's FIB empty again s" "${tw[@]}"
row "Sluice RSS bytes per route" "${bpr[@]}"
row "sampled destinations answered through Sluice (of 20)" "${pk[@]}"
echo; echo "last run's sync counters: $(cat "$tmp/sync.$runs")"
