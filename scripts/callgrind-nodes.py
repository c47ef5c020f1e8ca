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
import re, sys, collections
path, packets = sys.argv[1], int(sys.argv[2])
names = {}
def name(tok):
    m = re.match(r"\((\d+)\)(?: (.*))?", tok)
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return m.group(1)
files = {}
def fname(tok):
    m = re.match(r"\((\d+)\)(?: (.*))?", tok)
    if m.group(2):
        files[m.group(1)] = m.group(2)
    return files[m.group(1)]
incl = collections.Counter()
events = ["Ir"]
extra = collections.defaultdict(lambda: collections.Counter())
lines = collections.defaultdict(collections.Counter)
cur = None; curfile = None; in_call = False
# Position columns (`positions: line`, or `instr line` with --dump-instr=yes), each given
# absolute (decimal or 0x hex), relative (+n/-n) or unchanged (*).
npos, line_col = 1, 0
pos = [0]
for raw in open(path):
    s = raw.rstrip("\n")
    if s.startswith("events:"):
        events = s.split()[1:]
        continue
    if s.startswith("positions:"):
        cols = s.split()[1:]
        npos, line_col = len(cols), cols.index("line") if "line" in cols else 0
        pos = [0] * npos
        continue
    if s.startswith("fn="):
        cur = name(s[3:]); in_call = False; continue
    if s.startswith(("fl=", "fi=", "fe=")):
        curfile = fname(s[3:]); continue
    if s.startswith(("cfn=", "cfi=", "cfl=", "cob=", "ob=")):
        if s.startswith("cfn="): name(s[4:])
        if s.startswith(("cfi=", "cfl=")): fname(s[4:])
        continue
    if s.startswith("calls="):
        in_call = True; continue
    if not s or not (s[0].isdigit() or s[0] in "+-*"):
        continue
    parts = s.split()
    for i, p in enumerate(parts[:npos]):
        if p == "*": pass
        elif p[0] in "+-": pos[i] += int(p, 0)
        else: pos[i] = int(p, 0)
    line = pos[line_col]
    cost = int(parts[npos]) if len(parts) > npos else 0
    if cur is None: continue
    incl[cur] += cost
    for k, v in zip(events[1:], parts[npos + 1:]):
        extra[cur][k] += int(v)
    if not in_call and curfile:
        lines[cur][("/".join(curfile.split("/")[-2:]), line)] += cost
    in_call = False
rows = []
for fid, n in names.items():
    if "PerPacket" in n and "frame" in n or ("NodeFn" in n and ("5frame" in n or "4poll" in n)):
        src = sorted(k for k in lines[fid] if k[0].endswith(("nodes.rs", "node.rs", "output.rs", "l2.rs", "tunnel.rs", "vxlan.rs", "gre.rs", "ipip.rs")) and k[1] > 0)
        rows.append((n, incl[fid], src[:1], src[-1:], extra[fid]))
for n, c, a, b, e in sorted(rows, key=lambda r: -r[1]):
    if c > packets:
        cache = ""
        if "D1mr" in events:
            d1 = (e["D1mr"] + e["D1mw"]) / packets
            ll = (e["DLmr"] + e["DLmw"]) / packets
            cache = f"  D1 miss {d1:5.2f}/pkt  LL miss {ll:5.2f}/pkt"
        print(f"{c/packets:8.1f} instr/pkt  {c:>12}{cache}  {a} .. {b}  {n[:90]}")
if len(sys.argv) > 3:
    for fid, n in names.items():
        if incl[fid] > packets and lines[fid]:
            print("==", n[:100], incl[fid] / packets)
            for (f, l), c in sorted(lines[fid].items(), key=lambda kv: kv[0]):
                if c > packets / 10:
                    print(f"   {f}:{l} {c/packets:.1f}")
