#!/usr/bin/env bash
# Opt-in exploration of the property tests: `scripts/test.sh` (CI) runs them from one fixed
# seed, so it replays the same cases every time. This runs the test binaries of every crate
# with a proptest dev-dependency N times (default 5), each time with a new random
# PROPTEST_RNG_SEED, printing the seed first; the first failing run stops the script with
# the seed and the command that replays it. Not part of the default run.
#
#   scripts/proptest-explore.sh [N]
#
# Failures are not written to proptest-regressions/ files: turn the case the failure prints
# into a named regression test beside the property (docs/testing.md).
source "$(dirname "$0")/common.sh"
runs=${1:-5}
case $runs in
'' | *[!0-9]*)
  echo "usage: $0 [N]: N, the number of random seeds, must be a number, not \`$runs'" >&2
  exit 2
  ;;
esac

# The packages that use proptest (the workspace's manifests naming it), by package name.
pkgs=()
while IFS= read -r toml; do
  pkgs+=(-p "$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$toml" | head -n1)")
done < <(git ls-files '*/Cargo.toml' | xargs grep -l '^proptest')
if [ ${#pkgs[@]} -eq 0 ]; then
  echo "sluice: no package uses proptest" >&2
  exit 1
fi

# Build once; each test executable with its package's manifest, from cargo's JSON.
echo "== building the test binaries of ${pkgs[*]}"
list=$(cargo test --locked --no-run --message-format=json "${pkgs[@]}" |
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["manifest_path"], m["executable"])
')
if [ -z "$list" ]; then
  echo "sluice: no test binary was built" >&2
  exit 1
fi

export PROPTEST_DISABLE_FAILURE_PERSISTENCE=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= runs; i++)); do
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  echo "== run $i of $runs: PROPTEST_RNG_SEED=$seed"
  while read -r manifest exe; do
    # As cargo runs it: from the package's directory.
    if ! (cd "$(dirname "$manifest")" && PROPTEST_RNG_SEED=$seed "$exe" -q) >"$out" 2>&1; then
      cat "$out"
      echo "sluice: $(basename "$exe") failed with PROPTEST_RNG_SEED=$seed; replay:" \
        "PROPTEST_RNG_SEED=$seed cargo test --manifest-path $manifest" >&2
      exit 1
    fi
  done <<<"$list"
done
echo "== $runs random seeds, no failure"
