#!/usr/bin/env bash
# Engine benchmarks (not tests). Arguments go to sluice-bench, e.g. `--runs 5 --packets 20000000`.
source "$(dirname "$0")/common.sh"
cargo build --release -p sluice-bench
mkdir -p bench/results
out="bench/results/engine-$(date +%Y%m%d-%H%M%S).json"
./target/release/sluice-bench engine --json "$out" "$@"
echo "results: $out"
