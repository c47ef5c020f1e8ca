#!/usr/bin/env bash
# P4 pipeline benchmark (issue 18): PVPP's router program single/multi/auto node and with
# each optimisation off, against the native IPv4 path configured the same, 1 route and 100k
# LPM entries, one core, 64-byte frames; plus load time with 100k const entries.
# Usage: scripts/p4-bench.sh [--runs N] [--packets N] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -j 2 -p sluice-p4 --example p4_bench -- "$@"
