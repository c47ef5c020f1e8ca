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
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -j 2 -p sluice-bench >&2
bin=target/release/sluice-bench
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
