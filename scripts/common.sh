# Shared setup for the scripts: find cargo, fetch dependencies once.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "sluice: a Rust toolchain (cargo, stable >= 1.82) is required: https://rustup.rs" >&2
    exit 1
  fi
fi
cargo fetch --locked >/dev/null 2>&1 || cargo fetch

# ns_add <name>: a network namespace with lo up, its name added to the array nss (the
# script's cleanup deletes every namespace in "${nss[@]}").
nss=()
ns_add() { ip netns add "$1"; nss+=("$1"); ip -n "$1" link set lo up; }

# iperf3_rx <divisor> <decimals>: the receiver's bits per second of `iperf3 -J` output
# (stdin) divided by <divisor> (8e6: MB/s, 1e9: Gbit/s); fails on output without it.
iperf3_rx() {
    python3 -c 'import json, sys
bps = json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]
print("%.*f" % (int(sys.argv[2]), bps / float(sys.argv[1])))' "$@"
}

# wait_until <what> <command...>: until the command succeeds, 30 s at most; then the script
# fails naming <what>.
wait_until() {
    local what=$1; shift
    for _ in $(seq 600); do
        "$@" && return 0
        sleep 0.05
    done
    echo "FAILED: $what (30 s)"; exit 1
}

# stats v1 v2 ...: "min median max" of the numbers (an even count's median is the mean of
# the middle two), for the benchmark scripts' min/median/max over repeated runs.
stats() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        print v[1], m, v[NR] }'
}
