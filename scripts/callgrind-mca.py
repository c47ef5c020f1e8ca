#!/usr/bin/env python3
"""What bounds a node's clocks: llvm-mca on the instructions it runs once a packet.

    valgrind --tool=callgrind --demangle=no --dump-instr=yes --callgrind-out-file=cg.out \
        target/release/sluice-bench ip4 --quick --runs 1 --packets 409600
    scripts/callgrind-mca.py cg.out target/release/sluice-bench 409600 <symbol part> [cpu]

`<symbol part>` picks the function (a substring of its mangled name, e.g. the `17h…` hash
that `scripts/callgrind-nodes.py` rows end with, or `Ip4Lookup`). The instructions executed
about once a packet (0.9 to 1.1 times the packet count) are taken from `objdump` of the
binary in address order, branches kept as forward jumps, and given to `llvm-mca -mcpu=<cpu>`
(default `znver3`, the closest model to this VM's Zen 4 in LLVM 14). It prints how many of
them have a memory operand, the block's throughput and the bottleneck analysis: the
resource that bounds a node (the load/store pipes, the ALUs) says what is worth removing.
Instructions run per group of packets (ip4-lookup's groups of four) are not in the block.
"""
import collections, os, re, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from callgrind_profile import Profile, records

path, binary, packets, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cpu = sys.argv[5] if len(sys.argv) > 5 else "znver3"

prof = Profile()
cost = collections.Counter()
for r in records(path, prof):
    # The cost of a call line is the callee's: only the function's own instructions count.
    if not r.call and want in r.fn and r.costs:
        instr = prof.column("instr")
        if instr is None:
            sys.exit(f"{path}: no instruction addresses (record with --dump-instr=yes)")
        cost[(r.fn, r.pos[instr])] += r.costs[0]

fns = sorted({f for f, _ in cost})
if len(fns) != 1:
    sys.exit(f"{len(fns)} functions match {want!r}: {[f[-40:] for f in fns]}")
sym = fns[0]
hot = {a for (_, a), c in cost.items() if 0.9 * packets <= c <= 1.1 * packets}
dis = subprocess.run(
    ["objdump", "-d", "--no-show-raw-insn", "-M", "att", f"--disassemble={sym}", binary],
    capture_output=True, text=True, check=True).stdout
asm = []
for line in dis.splitlines():
    m = re.match(r"\s+([0-9a-f]+):\s+(.*)", line)
    if not m or int(m.group(1), 16) not in hot:
        continue
    ins = re.sub(r"<[^>]*>", "", re.sub(r"\s*#.*", "", m.group(2))).strip()
    op = ins.split()[0]
    if op.startswith(("call", "ret")) or op == "jmp":
        continue
    if op.startswith("j"):
        ins = f"{op} 1f"
    asm.append(ins)
src = "\n".join(asm) + "\n1:\n"
print(f"{sym[-40:]}: {len(asm)} instructions a packet, "
      f"{sum('(' in i for i in asm)} with a memory operand")
mca = subprocess.run(["llvm-mca", f"-mcpu={cpu}", "-iterations=1000", "-bottleneck-analysis",
                      "-instruction-info=false", "-resource-pressure=false"],
                     input=src, capture_output=True, text=True)
if mca.returncode != 0:
    sys.exit(f"llvm-mca failed ({mca.returncode}): {mca.stderr.strip()}")
out = mca.stdout
keep = False
for line in out.splitlines():
    if line.startswith(("Block RThroughput", "IPC")):
        print(line)
    if line.startswith("Cycles with backend pressure"):
        keep = True
    if keep:
        if not line.strip() or line.startswith("Critical sequence"):
            break
        if "[ 0.00% ]" not in line:
            print(line)
