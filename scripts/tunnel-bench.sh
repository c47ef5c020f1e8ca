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
#        scripts/tunnel-bench.sh --vpp [--runs N] [--packets N]
#          VXLAN decap (1 and SLUICE_BENCH_TUNNELS tunnels, each xconnected to pg1) in
#          Sluice's engine, then in FD.io VPP ($VPP_PREFIX, default /work/vpp/install) with
#          the same pcaps, the same CLI and show-runtime clocks (python/sluice_bench/vpp.py:
#          one VPP per case on core 0, a warm-up then N runs).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -j 2 -p sluice-bench >&2
bin=target/release/sluice-bench
if [ "${1:-}" = "--vpp" ]; then
    shift
    runs=5 packets=2000000
    while [ $# -gt 0 ]; do
        case "$1" in
        --runs) runs=$2; shift 2 ;;
        --packets) packets=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
        esac
    done
    n=${SLUICE_BENCH_TUNNELS:-10000}
    inputs=$(mktemp -d /tmp/tunnel-bench-vpp.XXXXXX)
    trap 'rm -rf "$inputs"' EXIT
    echo "== Sluice (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    SLUICE_BENCH_TUNNELS=$n "$bin" tunnel --runs "$runs" --packets "$packets" \
        --only "vxlan decap" --keep-inputs "$inputs"
    echo "== VPP (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    py=${PYTHON:-/work/main/.venv/bin/python}
    [ -x "$py" ] || py=python3
    VPP_PREFIX=${VPP_PREFIX:-/work/vpp/install} PYTHONPATH=python "$py" - "$inputs" "$n" "$runs" "$packets" <<'PY'
import statistics, struct, sys
from pathlib import Path
from sluice_bench import vpp


def vni_plus_one(src: Path, dst: Path) -> None:
    """A copy of a VXLAN pcap with every VNI + 1 (VPP refuses VNI 0: "vni not specified";
    its tunnels are made with VNI t + 1)."""
    d = bytearray(src.read_bytes())
    at = 24
    while at + 16 <= len(d):
        n = struct.unpack_from("<I", d, at + 8)[0]
        off = at + 16 + 14 + 20 + 8 + 4
        vni = int.from_bytes(d[off:off + 3], "big") + 1
        d[off:off + 3] = vni.to_bytes(3, "big")
        at += 16 + n
    dst.write_bytes(bytes(d))


inputs, n, runs, packets = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prefix = vpp.prefix_from(None)
problem = vpp.prefix_problem(prefix)
if problem:
    sys.exit(f"VPP: {problem}")
print("| case | Mpps min | median | max | path clk/pkt | clocks/packet per node |")
print("|---|---|---|---|---|---|")
for tunnels in (1, n):
    name = f"vxlan decap, {tunnels} tunnel{'s' if tunnels > 1 else ''}"
    pcap = inputs / f"vpp-{tunnels}.pcap"
    vni_plus_one(inputs / (name.replace(" ", "_").replace(",", "_") + ".pcap"), pcap)
    v = vpp.VppInstance(prefix, f"tun{tunnels}").start()
    try:
        vpp._pg_setup(v)
        v.cli("set interface ip address pg0 10.0.0.1/24")
        v.cli("ip neighbor pg0 10.0.0.2 02:00:00:00:00:02 static")
        lines = []
        for t in range(tunnels):
            lines += [f"create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni {t + 1} instance {t}",
                      f"set interface state vxlan_tunnel{t} up",
                      f"set interface l2 xconnect vxlan_tunnel{t} pg1"]
        v.exec_lines(lines)
        # VPP's l2-output needs the output interface in L2 mode.
        v.cli("set interface l2 xconnect pg1 vxlan_tunnel0")
        mpps, rts, drops = vpp.replay(v, pcap, packets, runs)
        nodes = vpp._median_nodes(rts, packets)
        path = sum(c for nd, c in nodes if nd != "pg-input")
        print(f"| {name} | {min(mpps):.2f} | {statistics.median(mpps):.2f} | {max(mpps):.2f} "
              f"| {path:.1f} | {', '.join(f'{nd} {c:.1f}' for nd, c in nodes)} |"
              + (f" {drops} dropped" if drops else ""))
    finally:
        v.stop()
        v.remove_dir()
PY
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
