#!/usr/bin/env python3
"""Per-node inclusive instruction counts (per packet) from a callgrind profile.

    valgrind --tool=callgrind --demangle=no --callgrind-out-file=cg.out \
        target/release/sluice-bench ip4 --quick --runs 1 --packets 409600
    scripts/callgrind-nodes.py cg.out 409600 [lines]

Record with --demangle=no: every monomorphised `PerPacket<N>::frame` then keeps its own symbol
(demangled, they all read `PerPacket<N>::frame` and callgrind merges them). Each row shows the
first and last source line of the node files its inlined code covers, which tells the nodes
apart (ip4-input and ip4-rewrite are in crates/vnet/src/ip4/nodes.rs, ethernet-input in
crates/vnet/src/ethernet/node.rs). The
packet count is what the nodes processed (with `--runs 1 --packets 409600`, ip4-lookup is
called 1,600 times with full 256-packet frames). Add a third argument to list the costly source lines of each.

With `--cache-sim=yes` (e.g. `--cache-sim=yes --D1=32768,8,64 --LL=1048576,8,64`, this VM's
L1d and per-core L2) each row also shows the node's D1 misses (reads + writes) and LL misses
per packet.
"""
import collections, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind_profile import Profile, records

path, packets = sys.argv[1], int(sys.argv[2])
prof = Profile()
incl = collections.Counter()
extra = collections.defaultdict(collections.Counter)
lines = collections.defaultdict(collections.Counter)
line_col = 0
for r in records(path, prof):
    line_col = prof.column("line") or 0
    cost = r.costs[0] if r.costs else 0
    incl[r.fn] += cost
    for k, v in zip(prof.events[1:], r.costs[1:]):
        extra[r.fn][k] += v
    if not r.call and r.file:
        lines[r.fn][("/".join(r.file.split("/")[-2:]), r.pos[line_col])] += cost
events = prof.events
rows = []
for n in incl:
    if "PerPacket" in n and "frame" in n or ("NodeFn" in n and ("5frame" in n or "4poll" in n)):
        src = sorted(k for k in lines[n] if k[0].endswith(("nodes.rs", "node.rs", "output.rs", "l2.rs", "tunnel.rs", "vxlan.rs", "gre.rs", "ipip.rs")) and k[1] > 0)
        rows.append((n, incl[n], src[:1], src[-1:], extra[n]))
for n, c, a, b, e in sorted(rows, key=lambda r: -r[1]):
    if c > packets:
        cache = ""
        if "D1mr" in events:
            d1 = (e["D1mr"] + e["D1mw"]) / packets
            ll = (e["DLmr"] + e["DLmw"]) / packets
            cache = f"  D1 miss {d1:5.2f}/pkt  LL miss {ll:5.2f}/pkt"
        print(f"{c/packets:8.1f} instr/pkt  {c:>12}{cache}  {a} .. {b}  {n[:90]}")
if len(sys.argv) > 3:
    for n in incl:
        if incl[n] > packets and lines[n]:
            print("==", n[:100], incl[n] / packets)
            for (f, l), c in sorted(lines[n].items(), key=lambda kv: kv[0]):
                if c > packets / 10:
                    print(f"   {f}:{l} {c/packets:.1f}")
