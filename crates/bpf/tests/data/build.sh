#!/bin/sh
# Rebuilds the committed XDP test objects from their LLVM IR (needs llc; LLVM 14 needs -opaque-pointers).
cd "$(dirname "$0")" && for f in xdp_drop_icmp xdp_btf_xsks; do llc -march=bpf -filetype=obj -O2 -opaque-pointers "$f.ll" -o "$f.o" 2>/dev/null || llc -march=bpf -filetype=obj -O2 "$f.ll" -o "$f.o"; done
