//! Sluice's eBPF object loader (used by the af_xdp plugin for `prog <file>`): [`elf`] reads
//! an XDP program and its maps from a clang/llc-built ELF object (hand-parsed ELF64, every
//! read bounds-checked); [`bpf`] creates the maps, loads the program through the `bpf(2)`
//! system call and attaches it (`Link`), with the built-in program that redirects every
//! packet to its AF_XDP socket.

pub mod bpf;
pub mod elf;
