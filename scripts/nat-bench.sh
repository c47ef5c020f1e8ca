#!/usr/bin/env bash
# NAT44-ED and ACL benchmarks (not a test). Two parts:
#  1. engine path, one core, pg input (no kernel): `sluice-bench nat` (in2out/out2in Mpps
#     with 1k/100k[/1M] established sessions, setup rate, memory per session, the clocks NAT
#     adds to the plain IPv4 path) and `sluice-bench acl` (1/100/1k[/10k] rules);
#  2. end to end against Linux (root, veth + namespaces, the harness of python/sluice_bench):
#     the `nat44-oneway` scenario (Sluice NAT44-ED vs nftables masquerade + conntrack) and
#     `ip4-oneway` as the reference, RFC 2544 NDR/PDR at 64 bytes.
# Results print as Markdown; part 2 writes bench/results/<date>-smoke/ (report.md).
#
# Usage: scripts/nat-bench.sh [--quick] [--engine-only] [--runs N]
#   --quick        engine: skip the 1M-session and 10k-rule cases, fewer packets
#   --engine-only  skip part 2
# Instruction counts per node (stable on a shared VM; docs/nat.md has the table):
#   valgrind --tool=callgrind --demangle=no --callgrind-out-file=/tmp/cg.out \
#     target/release/sluice-bench nat --quick --runs 1 --packets 204800 --only "1000 in2out"
#   scripts/callgrind-nodes.py /tmp/cg.out 204800
source "$(dirname "$0")/common.sh"
quick=""; engine_only=0; runs=3; packets=4000000
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick"; packets=2000000 ;;
    --engine-only) engine_only=1 ;;
    --runs) runs=$2; shift ;;
    *) echo "usage: $0 [--quick] [--engine-only] [--runs N]" >&2; exit 2 ;;
  esac
  shift
done
echo "== load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
nice cargo build -j 2 --release -q -p sluice-bench -p sluice
./target/release/sluice-bench nat $quick --runs "$runs" --packets "$packets"
./target/release/sluice-bench acl $quick --runs "$runs" --packets "$packets"
if [ "$engine_only" = 1 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED part 2: needs root (namespaces, veths)"; exit 0
fi
if ! command -v nft >/dev/null; then
  echo "note: nft (nftables) not installed: the Linux NAT row will say so (apt-get install nftables)"
fi
./scripts/venv.sh
./target/release/sluice-bench run --suite smoke --no-build --no-engine \
  --scenarios ip4-oneway,nat44-oneway --duts linux,sluice-af_packet --sizes 64
