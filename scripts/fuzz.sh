#!/usr/bin/env bash
# Coverage-guided fuzzing of Sluice's parsers with cargo-fuzz (libFuzzer + AddressSanitizer).
# Opt-in tooling, not part of scripts/test.sh. Installs what it needs: a nightly toolchain
# (rustup) and a pinned cargo-fuzz (cargo install). Usage:
#   scripts/fuzz.sh [target|all] [seconds]     # default: all targets, 180 s each
# Each target's corpus grows in fuzz/corpus/<target>/ (git-ignored), seeded from
# fuzz/seeds/<target>/ when that exists; crashes land in fuzz/artifacts/<target>/ and make
# the script exit non-zero. Ends with one line per target: runs, exec/s, coverage, corpus.
source "$(dirname "$0")/common.sh"
TARGET=${1:-all}
SECS=${2:-180}
CARGO_FUZZ_VERSION=0.13.1

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "== rustup toolchain install nightly"
  rustup toolchain install nightly --profile minimal
fi
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "== cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

# A target dir of its own: the sanitizer flags would otherwise rebuild the workspace's.
FUZZ_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}/fuzz
if [ "$TARGET" = all ]; then
  mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
else
  targets=("$TARGET")
fi

summary=()
failed=0
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${SECS}s"
  mkdir -p "fuzz/corpus/$t"
  dirs=("fuzz/corpus/$t")
  [ -d "fuzz/seeds/$t" ] && dirs+=("fuzz/seeds/$t")
  log="$FUZZ_TARGET_DIR/fuzz-$t.log"
  mkdir -p "$FUZZ_TARGET_DIR"
  rc=0
  cargo +nightly fuzz run --fuzz-dir fuzz --target-dir "$FUZZ_TARGET_DIR" "$t" "${dirs[@]}" -- \
    -max_total_time="$SECS" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  grep -E 'INITED|DONE|panicked|ERROR|SUMMARY|Test unit written' "$log" || true
  runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  eps=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
  cov=$(grep -Eo 'DONE +cov: [0-9]+' "$log" | tail -1 | awk '{print $3}')
  corp=$(find "fuzz/corpus/$t" -type f | wc -l)
  if [ "$rc" -ne 0 ]; then
    failed=1
    tail -40 "$log"
    summary+=("$t: FAILED (exit $rc): see fuzz/artifacts/$t/ and $log")
  else
    summary+=("$t: ${runs:-?} runs, ${eps:-?} exec/s, cov ${cov:-?}, corpus $corp files, no crash")
  fi
done
echo "== summary (${SECS}s per target)"
printf '%s\n' "${summary[@]}"
exit $failed
