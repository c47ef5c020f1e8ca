#!/usr/bin/env python3
"""Instructions per packet of the DPDK plugin's nodes, split by who executes them.

    shim=$(mktemp -u /tmp/sluice-dpdk-shim-XXXXXX.so)
    SLUICE_DPDK_SHIM_FILE=$shim valgrind --tool=callgrind --demangle=no \
        --callgrind-out-file=cg.out target/release/examples/dpdk_bench [ring] --packets 409600
    scripts/callgrind-dpdk.py cg.out 409600; rm -f "$shim"

SLUICE_DPDK_SHIM_FILE makes the plugin load its shim from that file instead of a memfd, so
that callgrind names the shim's functions (a memfd's are `???` and the shim's share cannot
be told apart); it must name a file that does not exist yet (created mode 0600, never
through a symlink; an existing file is refused).

For `dpdk-input` (`DpdkInput::poll`) and `dpdk-tx` (`DpdkTx::frame`) it prints the inclusive
count and its split over the code that ran: Sluice (the Rust binary: the node and the buffer
pool), the shim (plugins/dpdk/src/shim.c with the DPDK inline functions it compiles: mbuf
fields, the mempool per-lcore cache), the PMD (`librte_net_*`: the driver's rx/tx burst
functions) and the other DPDK libraries (`librte_*`: mempool ring, mbuf bulk free, ...). A
callee's cost is shared among its callers in proportion to the calls' inclusive cost
(exact when, as here, a function has one caller on the path); libc called from DPDK code
counts as DPDK's. A third argument lists the costliest non-Sluice functions and each
node's callees.
"""
import collections
import re
import sys

path, packets = sys.argv[1], int(sys.argv[2])
fn_names, ob_names = {}, {}


def ref(tok, table):
    m = re.match(r"\((\d+)\)(?: (.*))?", tok)
    if m.group(2):
        table[m.group(1)] = m.group(2)
    return m.group(1)


self_cost = collections.defaultdict(int)  # fn -> own instructions
fn_ob = {}  # fn -> object id
calls = collections.defaultdict(collections.Counter)  # caller -> callee -> inclusive
cur = cur_ob = None
call_to = call_ob = None
npos = 1
for raw in open(path):
    s = raw.rstrip("\n")
    if s.startswith("positions:"):
        npos = len(s.split()) - 1
        continue
    if s.startswith("ob="):
        cur_ob = ref(s[3:], ob_names)
        continue
    if s.startswith("fn="):
        cur = ref(s[3:], fn_names)
        fn_ob.setdefault(cur, cur_ob)
        call_to = None
        continue
    if s.startswith("cob="):
        call_ob = ref(s[4:], ob_names)
        continue
    if s.startswith("cfn="):
        call_to = ref(s[4:], fn_names)
        continue
    if s.startswith("calls="):
        continue
    if not s or not (s[0].isdigit() or s[0] in "+-*"):
        if not s.startswith(("fl=", "fi=", "fe=", "cfi=", "cfl=")):
            call_to = None
        continue
    parts = s.split()
    cost = int(parts[npos]) if len(parts) > npos else 0
    if cur is None:
        continue
    if call_to is not None:
        calls[cur][call_to] += cost
        if call_ob is not None:
            fn_ob.setdefault(call_to, call_ob)
        call_to = None
        call_ob = None
    else:
        self_cost[cur] += cost

incl = {}


def inclusive(f):
    return self_cost[f] + sum(calls[f].values())


def kind(f):
    ob = ob_names.get(fn_ob.get(f), "")
    if ob in ("???", "") or "shim" in ob or "memfd:" in ob:
        return "shim"
    if "librte_net_" in ob:
        return "pmd"
    if "librte_" in ob:
        return "dpdk"
    if "libc.so" in ob or "ld-linux" in ob:
        return "libc"
    return "sluice"


memo = {}


def split(f, stack=()):
    """Inclusive cost of `f` by kind."""
    if f in memo:
        return memo[f]
    out = collections.Counter({kind(f): self_cost[f]})
    for g, c in calls[f].items():
        if g in stack or g == f:
            out[kind(g)] += c
            continue
        tot = inclusive(g)
        sub = split(g, stack + (f,))
        for k, v in sub.items():
            out[k] += v * c / tot if tot else 0
    if kind(f) in ("pmd", "dpdk"):
        # What DPDK code calls in libc (TLS lookups for the lcore id) is DPDK's.
        out[kind(f)] += out.pop("libc", 0)
    memo[f] = out
    return out


KINDS = ["sluice", "shim", "pmd", "dpdk", "libc"]
print(f"{'node':12} {'total':>7} " + " ".join(f"{k:>7}" for k in KINDS) + "   (instr/pkt)")
sums = collections.Counter()
for label, pat in [("dpdk-input", r"DpdkInput.*4poll"), ("dpdk-tx", r"DpdkTx.*5frame")]:
    fs = [f for f, n in fn_names.items() if re.search(pat, n)]
    if not fs:
        print(f"{label}: not in the profile")
        continue
    tot = collections.Counter()
    for f in fs:
        tot.update(split(f))
    sums.update(tot)
    t = sum(tot.values())
    print(f"{label:12} {t / packets:7.1f} " + " ".join(f"{tot[k] / packets:7.1f}" for k in KINDS))
t = sum(sums.values())
print(f"{'both':12} {t / packets:7.1f} " + " ".join(f"{sums[k] / packets:7.1f}" for k in KINDS))
print(f"ours (sluice + shim): {(sums['sluice'] + sums['shim']) / packets:.1f}, "
      f"DPDK's (PMD + libraries): {(sums['pmd'] + sums['dpdk']) / packets:.1f}")
if len(sys.argv) > 3:
    top = sorted(((self_cost[f], f) for f in self_cost if kind(f) != "sluice"), reverse=True)
    for c, f in top[:25]:
        print(f"{c / packets:8.1f} {kind(f):6} {fn_names.get(f, f)[:80]} {ob_names.get(fn_ob.get(f), '')[-40:]}")
if len(sys.argv) > 3:
    for label, pat in [("dpdk-input", r"DpdkInput.*4poll"), ("dpdk-tx", r"DpdkTx.*5frame")]:
        for f in [f for f, n in fn_names.items() if re.search(pat, n)]:
            print(f"== {label} self {self_cost[f] / packets:.1f}, calls:")
            for g, c in calls[f].most_common(12):
                print(f"   {c / packets:8.1f} {kind(g):6} {fn_names.get(g, g)[:90]}")
