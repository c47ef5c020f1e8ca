#!/usr/bin/env bash
# P4 pipeline benchmark (issue 18): PVPP's router program single/multi/auto node and with
# each optimisation off, against the native IPv4 path configured the same, 1 route and 100k
# LPM entries, one core, 64-byte frames; plus load time with 100k const entries.
# Usage: scripts/p4-bench.sh [--runs N] [--packets N] [--quick]
#        scripts/p4-bench.sh --callgrind [--routes N] [--packets N] [case...]
#   --callgrind: instructions per packet under callgrind (noise-free): the graph after
#   pg-input (ethernet-input to pg-tx, dispatch included) and the P4 node(s), for `native` and each case (`p4 load` options;
#   default: single (generated code), single on the vector interpreter (no-gen), multi, auto
#   on the vector interpreter (no-gen) and on the generated code, and each optimisation off).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--callgrind" ]; then
    exec cargo run --release -j 2 -p sluice-p4 --example p4_bench -- "$@"
fi
shift
routes=1 packets=20000
while [ $# -gt 0 ]; do
    case "$1" in
    --routes) routes=$2; shift 2 ;;
    --packets) packets=$2; shift 2 ;;
    *) break ;;
    esac
done
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
    cases=("mode single" "mode single no-gen" "mode multi" "mode auto no-gen" "mode auto" "mode single no-flat no-resolve no-redundant no-dual"
        "mode single no-flat" "mode single no-resolve" "mode single no-redundant" "mode single no-dual")
fi
cargo build --release -j 2 -p sluice-p4 --example p4_bench >&2
bin=target/release/examples/p4_bench
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| case ($routes routes) | graph instr/pkt (after pg-input) | P4 nodes instr/pkt | x native (instr) |"
echo "|---|---|---|---|"
base=
for c in native "${cases[@]}"; do
    out=$tmp/cg.out
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --only "$c" --routes "$routes" \
        --runs 1 --packets "$packets" >/dev/null 2>&1
    # Warm-up run + one measured run: 2 x packets through the graph.
    n=$((2 * packets))
    incl() { callgrind_annotate --inclusive=yes --threshold=100 "$out" 2>/dev/null | { grep -F "$1" || true; } |
        head -1 | awk '{gsub(",","",$1); print $1}'; }
    g=$(incl "sluice_graph::runtime::ThreadGraph::run_once")
    pg=$(incl "<sluice_vnet::pg::PgInput as sluice_graph::node::NodeFn>::poll")
    p=$(incl "<sluice_p4::node::P4Node as sluice_graph::node::NodeFn>::frame")
    g=$(awk -v g="${g:-0}" -v q="${pg:-0}" -v n=$n 'BEGIN{printf "%.1f", (g-q)/n}')
    p=$(awk -v p="${p:-0}" -v n=$n 'BEGIN{printf "%.1f", p/n}')
    [ -z "$base" ] && base=$g
    r=$(awk -v b="$base" -v g="$g" 'BEGIN{printf "%.3f", b/g}')
    echo "| $c | $g | $p | $r |"
done
