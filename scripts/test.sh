#!/usr/bin/env bash
# Quick start, command 2: the whole test suite. This is what CI runs.
source "$(dirname "$0")/common.sh"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked 2>&1 | tee /tmp/sluice-test-$$.log
# One summary line for CI: N passed, N failed.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "%d passed, %d failed, %d skipped\n", p, f, i }' /tmp/sluice-test-$$.log
rm -f /tmp/sluice-test-$$.log
