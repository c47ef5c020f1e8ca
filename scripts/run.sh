#!/usr/bin/env bash
# Quick start, command 1: build and run the built-in demo (pg -> l2-patch -> pg, 64-byte
# IPv4/UDP, live rate, then show runtime). Extra arguments go to sluice, e.g. --seconds 10.
source "$(dirname "$0")/common.sh"
cargo build --release -p sluice -p sluicectl
# A private directory for the CLI socket (sluice refuses one in a world-writable directory).
dir=$(mktemp -d "${XDG_RUNTIME_DIR:-/tmp}/sluice-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
./target/release/sluice --demo "$@" unix { cli-listen "$dir/cli.sock" }
