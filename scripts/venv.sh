#!/usr/bin/env bash
# Creates or refreshes .venv from the pinned python/requirements.txt (pytest, scapy, matplotlib)
# when it is missing or the requirements changed. Used by scripts/test.sh and `sluice-bench run`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  else
    echo "sluice: python3-venv is required (apt-get install python3-venv)" >&2
    exit 1
  fi
fi
if [ ! -x .venv/bin/pytest ] || ! cmp -s python/requirements.txt .venv/.requirements 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r python/requirements.txt
  cp python/requirements.txt .venv/.requirements
fi
