#!/usr/bin/env bash
# Tunnel benchmarks (plugins/tunnels, docs/tunnels.md): VXLAN encap (L2 bridge into the
# tunnel), VXLAN decap with 1 and N tunnels (frames spread over every VNI; N from
# SLUICE_BENCH_TUNNELS, default 10000), GRE L3, IP-in-IP and GTP-U encap/decap, SRv6
# T.Encaps and End.DX4; pg in, pg-tx out, one core, 64-byte inner frames.
#
# Usage: scripts/tunnel-bench.sh [--runs N] [--packets N] [--quick]
#          Mpps (min/median/max) and show-runtime clocks/packet per node.
#        scripts/tunnel-bench.sh --callgrind [--packets N]
#          instructions per packet of every node under callgrind (noise-free), one run of
#          each case (scripts/callgrind-nodes.py).
#        scripts/tunnel-bench.sh --vpp [--runs N] [--packets N] [--only CASE]
#          every case (or those whose name contains CASE) in Sluice's engine, then in FD.io
#          VPP ($VPP_PREFIX, default /work/vpp/install; its vxlan, gre, ipip and gtpu
#          plugins) with the same pcaps and VPP's CLI for the same setup, side by side:
#          Mpps, Sluice/VPP, path and tunnel-node clocks (python/sluice_bench/vpp.py
#          `tunnel_table`: case by case, Sluice then VPP right after it, so both see about
#          the same load; one VPP per case on core 0, a warm-up then N runs; a case VPP does
#          not forward completely out of pg1 is reported as an error, not a result; exit
#          status 1 when any case is an error row).
#        NO_BUILD=1 skips the release build; BIN=<sluice-bench> runs another binary (a
#        baseline's) and implies NO_BUILD.
#        scripts/tunnel-bench.sh --memif [SECONDS [RUNS]]
#          VXLAN decap (1 and SLUICE_BENCH_TUNNELS tunnels) over a memif pair of two Sluice
#          daemons (A: pg -> memif on CPU 0; B: memif -> decap -> pg1 on CPU 1): Mpps out
#          of B's pg1, vxlan4-input and memif-input clocks (Sluice only). A case whose
#          pg1 tx differs from B's memif rx or with error counters is an error row (exit
#          1); one whose output is within 5% of A's offered rate is generator-bound.
set -euo pipefail
cd "$(dirname "$0")/.."
# NO_BUILD=1: use the binary as it is; BIN=path: another sluice-bench (a baseline's).
[ -n "${NO_BUILD:-}" ] || [ -n "${BIN:-}" ] || cargo build --release -j 2 -p sluice-bench >&2
bin=${BIN:-target/release/sluice-bench}
if [ "${1:-}" = "--vpp" ]; then
    shift
    runs=5 packets=2000000 only=()
    while [ $# -gt 0 ]; do
        case "$1" in
        --runs) runs=$2; shift 2 ;;
        --packets) packets=$2; shift 2 ;;
        --only) only=(--only "$2"); shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
        esac
    done
    inputs=$(mktemp -d /tmp/tunnel-bench-vpp.XXXXXX)
    trap 'rm -rf "$inputs"' EXIT
    echo "== Sluice, then VPP, case by case (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    py=${PYTHON:-$PWD/.venv/bin/python}
    [ -x "$py" ] || py=python3
    # Sluice's engine replays packets/2 per run (sluice-bench's convention), VPP the same.
    # Exit status: 1 when any case is an error row (the table still lists every case).
    rc=0
    SLUICE_BENCH_TUNNELS=${SLUICE_BENCH_TUNNELS:-10000} VPP_PREFIX=${VPP_PREFIX:-/work/vpp/install} \
        PYTHONPATH=python "$py" -u - "$bin" "$inputs" "$runs" "$packets" "${only[@]}" <<'PY' || rc=$?
import json, os, subprocess, sys
from pathlib import Path
from sluice_bench import vpp

bin_, inputs, runs, packets = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
only = sys.argv[6] if len(sys.argv) > 6 else None
prefix = vpp.prefix_from(None)
if problem := vpp.prefix_problem(prefix):
    sys.exit(f"VPP: {problem}")


def sluice_run(case: str) -> dict:
    j = inputs / "sluice.json"
    # --quick leaves out the many-tunnel cases, which "gre encap" would also match.
    quick = [] if "tunnels" in case else ["--quick"]
    subprocess.run([bin_, "tunnel", "--runs", str(runs), "--packets", str(packets), *quick,
                    "--only", case, "--keep-inputs", str(inputs), "--json", str(j)],
                   check=True, stdout=subprocess.DEVNULL)
    return json.loads(j.read_text())


cases = [c for c in vpp.tunnel_cases(int(os.environ["SLUICE_BENCH_TUNNELS"]))
         if only is None or only in c]
rows = vpp.tunnel_table(sluice_run, cases, prefix, inputs, packets // 2, runs)
# tunnel_table returns only the cases that gave a result; the rest are error rows.
if errors := len(cases) - len(rows):
    sys.exit(f"== {errors} of {len(cases)} cases failed (error rows above)")
PY
    echo "== done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    exit "$rc"
fi
if [ "${1:-}" = "--memif" ]; then
    # VXLAN decap over memif, Sluice only: A replays sluice-bench's VXLAN decap pcap from
    # pg0 into memif1/0 (master, L2 xconnect) on CPU 0; B receives on memif1/0 (slave,
    # the underlay 10.0.0.1/24, its MAC the pcap's destination), decapsulates and sends
    # each tunnel xconnected out of pg1 on CPU 1. B's pg1 tx packets over the window.
    shift
    secs=${1:-5} runs=${2:-3}
    n=${SLUICE_BENCH_TUNNELS:-10000}
    S=target/release/sluice C=target/release/sluicectl
    [ -x "$S" ] && [ -x "$C" ] || cargo build --release -j 2 -p sluice -p sluicectl >&2
    D=$(mktemp -d /tmp/tunnel-bench-memif.XXXXXX)
    pids=()
    down() {
        local p
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
        pids=()
    }
    trap 'down; rm -rf "$D"' EXIT
    a() { "$C" -s "$D/a.sock" "$@"; }
    b() { "$C" -s "$D/b.sock" "$@"; }
    count() { awk -v i="$2" -v n="$3" '$1 == i {f = 1} f && $0 ~ n {print $NF; exit}' <<<"$1"; }
    clk() { awk -v n="$1" '$1 == n {print $6 + 0}' <<<"$2"; }
    up() {  # up X CPU
        rm -f "$D/$1.sock"
        printf 'unix { nodaemon cli-listen %s/%s.sock }\nbuffers { buffers-per-numa 32768 }\n' \
            "$D" "$1" > "$D/$1.conf"
        taskset -c "$2" "$S" -c "$D/$1.conf" > "$D/$1.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 200); do [ -S "$D/$1.sock" ] && return 0; sleep 0.05; done
        echo "sluice $1 did not start: $(cat "$D/$1.log")" >&2
        exit 1
    }
    failed=0
    echo "| case | Mpps out of pg1, min / median / max | A into the ring, Mpps | vxlan4-input clk/pkt | memif-input clk/pkt | load |"
    echo "|---|---|---|---|---|---|"
    for tunnels in 1 "$n"; do
        name="vxlan decap, $tunnels tunnel"
        [ "$tunnels" -eq 1 ] || name+=s
        SLUICE_BENCH_TUNNELS=$tunnels "$bin" tunnel --runs 1 --packets 8192 --only "$name" \
            --keep-inputs "$D" > /dev/null
        pcap="$D/$(tr ' ,' '__' <<<"$name").pcap"
        # The first frame's destination MAC (pcap header 24 bytes, record header 16).
        mac=$(od -An -tx1 -j40 -N6 "$pcap" | tr -s ' \n' ':' | sed 's/^://; s/:$//')
        for t in $(seq 0 $((tunnels - 1))); do
            echo "create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni $t instance $t"
            echo "set interface state vxlan_tunnel$t up"
            echo "set interface l2 xconnect vxlan_tunnel$t pg1"
        done > "$D/tunnels.cli"
        mpps=() offered=() cv=() cm=() bad=()
        for r in $(seq "$runs"); do
            rm -f "$D/memif.sock"
            up a 0
            up b 1
            for x in a b; do
                $x create memif socket id 1 filename "$D/memif.sock" > /dev/null
            done
            a create interface memif id 0 socket-id 1 master > /dev/null
            b create interface memif id 0 socket-id 1 slave > /dev/null
            a create packet-generator interface pg0 > /dev/null
            b create packet-generator interface pg1 > /dev/null
            for c in "set interface state memif1/0 up" "set interface state pg0 up"; do a $c; done
            a set interface l2 xconnect pg0 memif1/0
            a packet-generator new pcap "$pcap" source pg0 name s limit 0 > /dev/null
            for c in "set interface mac address memif1/0 $mac" "set interface state memif1/0 up" \
                "set interface state pg1 up" "set interface ip address memif1/0 10.0.0.1/24" \
                "ip neighbor memif1/0 10.0.0.2 02:00:00:00:00:02 static" "exec $D/tunnels.cli"; do
                b $c > /dev/null
            done
            linked=0
            for _ in $(seq 150); do
                b show memif memif1/0 | grep -q "link up" && { linked=1; break; }
                sleep 0.1
            done
            if [ "$linked" = 0 ]; then
                echo "memif link between A and B not up after 15 s: $(b show memif memif1/0)" >&2
                exit 1
            fi
            a packet-generator enable s
            sleep 1
            b clear runtime
            b clear errors
            bi=$(b show interface)  # one snapshot of B's pg1 tx and memif rx
            i0=$(count "$bi" pg1 'tx packets') m0=$(count "$bi" memif1/0 'rx packets')
            o0=$(count "$(a show interface memif1/0)" memif1/0 'tx packets')
            t0=$(date +%s.%N)
            sleep "$secs"
            bi=$(b show interface)  # one snapshot of B's pg1 tx and memif rx
            i1=$(count "$bi" pg1 'tx packets') m1=$(count "$bi" memif1/0 'rx packets')
            o1=$(count "$(a show interface memif1/0)" memif1/0 'tx packets')
            t1=$(date +%s.%N)
            rt=$(b show runtime)
            # Every packet B received must leave pg1 (at each snapshot up to a few frames
            # are between memif-input and pg-tx: 0.1% or 4096 slack) and no node may
            # count an error.
            got=$((i1 - i0)) in=$((m1 - m0))
            slack=$((in / 1000 > 4096 ? in / 1000 : 4096))
            errs=$(b show errors | awk 'NR > 1 && $1 > 0 && $NF == "error"')
            if [ $((got > in ? got - in : in - got)) -gt "$slack" ] || [ -n "$errs" ]; then
                bad+=("run $r: B memif rx $in, pg1 tx $got; errors: ${errs:-none}")
            fi
            rate() { awk -v a="$1" -v b="$2" -v x="$t0" -v y="$t1" 'BEGIN {printf "%.2f", (b - a) / (y - x) / 1e6}'; }
            mpps+=("$(rate "$i0" "$i1")") offered+=("$(rate "$o0" "$o1")")
            cv+=("$(clk vxlan4-input "$rt")") cm+=("$(clk memif-input "$rt")")
            down
        done
        mmm() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {printf "%s / %s / %s", v[1], v[int((NR + 1) / 2)], v[NR]}'; }
        if [ ${#bad[@]} -gt 0 ]; then
            echo "| $name (memif) | error: $(printf '%s; ' "${bad[@]}" | tr '\n' ' ') | | | | |"
            failed=1
            continue
        fi
        # Out within 5% of what A offered: A (the generator) is the bottleneck, not B.
        bound=$(awk -v o="${mpps[*]}" -v f="${offered[*]}" 'BEGIN {
            n = split(o, x, " "); split(f, y, " "); g = 1
            for (i = 1; i <= n; i++) if (x[i] < 0.95 * y[i]) g = 0
            if (g) print " (generator-bound)" }')
        echo "| $name (memif)$bound | $(mmm "${mpps[@]}") | $(mmm "${offered[@]}") | $(mmm "${cv[@]}") | $(mmm "${cm[@]}") | $(cut -d' ' -f1 /proc/loadavg) |"
    done
    exit "$failed"
fi
if [ "${1:-}" != "--callgrind" ]; then
    exec "$bin" tunnel "$@"
fi
shift
packets=409600
while [ $# -gt 0 ]; do
    case "$1" in
    --packets) packets=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
out=$(mktemp /tmp/tunnel-bench-cg.XXXXXX)
trap 'rm -f "$out"' EXIT
# One case per profile: the encap node is one type for every protocol. Each case runs a
# warm-up and a measured run of packets/2, so its nodes see `packets` packets.
for c in "vxlan encap" "vxlan decap, 1 tunnel" "gre encap" "gre decap" "ipip encap" "ipip decap" \
    "gtpu encap" "gtpu decap" "srv6 t.encaps" "srv6 end.dx4"; do
    echo "== $c"
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$out" \
        "$bin" tunnel --quick --runs 1 --packets "$packets" --only "$c" >/dev/null 2>&1
    scripts/callgrind-nodes.py "$out" "$packets"
done
