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
#          not forward completely out of pg1 is reported as an error, not a result).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -j 2 -p sluice-bench >&2
bin=target/release/sluice-bench
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
    py=${PYTHON:-/work/main/.venv/bin/python}
    [ -x "$py" ] || py=python3
    # Sluice's engine replays packets/2 per run (sluice-bench's convention), VPP the same.
    SLUICE_BENCH_TUNNELS=${SLUICE_BENCH_TUNNELS:-10000} VPP_PREFIX=${VPP_PREFIX:-/work/vpp/install} \
        PYTHONPATH=python "$py" -u - "$bin" "$inputs" "$runs" "$packets" "${only[@]}" <<'PY'
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
vpp.tunnel_table(sluice_run, cases, prefix, inputs, packets // 2, runs)
PY
    echo "== done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    exit 0
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
