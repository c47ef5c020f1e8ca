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
