"""The raw data of a run: `results.json.gz` in the run's directory.

A default-suite run records every trial's counters and latency histograms (a few MB of JSON),
so the harness writes it gzipped — the form that is committed under bench/results/. Runs made
before that wrote a plain `results.json`; `load` reads either.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

NAME = "results.json.gz"
LEGACY = "results.json"


def path(out_dir: Path) -> Path:
    return Path(out_dir) / NAME


def exists(out_dir: Path) -> bool:
    d = Path(out_dir)
    return (d / NAME).exists() or (d / LEGACY).exists()


def load(out_dir: Path) -> dict:
    """The run's data from `results.json.gz`, else `results.json`."""
    d = Path(out_dir)
    if (d / NAME).exists():
        return json.loads(gzip.decompress((d / NAME).read_bytes()))
    if (d / LEGACY).exists():
        return json.loads((d / LEGACY).read_text())
    raise FileNotFoundError(f"{d}: neither {NAME} nor {LEGACY}")


def save(out_dir: Path, data: dict) -> Path:
    """Writes `results.json.gz` atomically (mtime 0 in the gzip header, so the same data gives
    the same bytes) and removes a legacy `results.json` it supersedes."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    tmp = d / (NAME + ".tmp")
    tmp.write_bytes(gzip.compress(text.encode(), compresslevel=6, mtime=0))
    tmp.replace(d / NAME)
    (d / LEGACY).unlink(missing_ok=True)
    return d / NAME
