#!/usr/bin/env python3
"""Plot scripts/hoststack-redis-bench.sh's samples: p50/p95/p99/p99.9 per clients × payload
cell for each mode (kernel, sluice, both-veth, both-memif), as seed 004's figures 15-17.

Usage: .venv/bin/python scripts/hoststack-plot.py [samples.csv] [-o out.png|.svg]
(default input target/hoststack-redis.csv, output beside it with the suffix .png). One
panel per payload (rows) and percentile (columns); x: clients, y: latency in ms (log
scale); per mode the median over the runs with a bar from the min to the max.
"""

import argparse
import csv
import statistics
import sys
from pathlib import Path

PCTS = ("p50", "p95", "p99", "p99.9")
MODES = ("kernel", "sluice", "both-veth", "both-memif")
LABELS = {
    "kernel": "(a) kernel ↔ kernel",
    "sluice": "(b) client through Sluice ↔ kernel",
    "both-veth": "(c) both through Sluice, veth",
    "both-memif": "(c) both through Sluice, memif",
}


def load(lines):
    """The samples of a CSV (an iterable of lines): ([comment lines], {(mode, clients,
    payload, pct): [ms, ...]}). Raises ValueError naming the file's line of a malformed row
    or of a mode not in MODES, when the closing `# load average after` line is missing (a
    run that did not complete) or when a mode lacks a clients × payload cell another mode
    has."""
    comments, rows, linenos, last = [], [], [], ""
    for lineno, line in enumerate(lines, 1):
        if line.startswith("#"):
            comments.append(line[1:].strip())
        elif line.strip():
            rows.append(line)
            linenos.append(lineno)
        if line.strip():
            last = line
    samples = {}
    reader = csv.DictReader(rows)
    want = {"mode", "clients", "payload", "run", *PCTS}
    if reader.fieldnames is None or not want <= set(reader.fieldnames):
        raise ValueError(f"header {reader.fieldnames}: expected {sorted(want)}")
    # The file's line of every row (comment and blank lines are not the reader's).
    for n, r in zip(linenos[1:], reader):
        try:
            key = (r["mode"], int(r["clients"]), int(r["payload"]))
            vals = [float(r[p]) for p in PCTS]
        except (TypeError, ValueError) as e:
            raise ValueError(f"line {n}: {e}") from None
        if key[0] not in MODES:
            raise ValueError(f"line {n}: unknown mode {key[0]!r} (expected one of {MODES})")
        for p, v in zip(PCTS, vals):
            samples.setdefault((*key, p), []).append(v)
    if not last.startswith("# load average after"):
        raise ValueError("no closing `# load average after` line: the run did not complete")
    cells = {k[1:3] for k in samples}
    for m in sorted({k[0] for k in samples}):
        missing = sorted(c for c in cells if (m, *c, PCTS[0]) not in samples)
        if missing:
            raise ValueError(f"mode {m}: no samples for (clients, payload) {missing}")
    return comments, samples


def summary(samples):
    """{key: (min, median, max)} of every cell's samples."""
    return {k: (min(v), statistics.median(v), max(v)) for k, v in samples.items()}


def plot(comments, samples, out):
    """Draws the samples (as load() returns them) into `out`; returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(samples)
    modes = [m for m in MODES if any(k[0] == m for k in s)]
    clients = sorted({k[1] for k in s})
    payloads = sorted({k[2] for k in s})
    fig, axes = plt.subplots(
        len(payloads),
        len(PCTS),
        figsize=(4 * len(PCTS), 3 * len(payloads)),
        sharex=True,
        squeeze=False,
    )
    width = 0.8 / len(modes)
    for i, d in enumerate(payloads):
        for j, p in enumerate(PCTS):
            ax = axes[i][j]
            for mi, m in enumerate(modes):
                xs, med, lo, hi = [], [], [], []
                for ci, c in enumerate(clients):
                    v = s.get((m, c, d, p))
                    if v is None:
                        continue
                    xs.append(ci + (mi - (len(modes) - 1) / 2) * width)
                    lo.append(v[1] - v[0])
                    med.append(v[1])
                    hi.append(v[2] - v[1])
                ax.bar(
                    xs,
                    med,
                    width,
                    yerr=[lo, hi],
                    capsize=2,
                    label=LABELS.get(m, m),
                    color=f"C{MODES.index(m)}",
                )
            ax.set_yscale("log")
            ax.set_title(f"{d} B, {p}", fontsize=10)
            ax.grid(True, axis="y", which="both", alpha=0.3)
            if j == 0:
                ax.set_ylabel("ms")
            if i == len(payloads) - 1:
                ax.set_xticks(range(len(clients)))
                ax.set_xticklabels([str(c) for c in clients])
                ax.set_xlabel("clients")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(modes), fontsize=9)
    title = "redis-benchmark SET latency (median of runs, bars min–max)"
    if comments:
        title += "\n" + " ".join(comments[:2])
    fig.suptitle(title, fontsize=8, y=0.005, va="bottom")
    fig.tight_layout(rect=(0, 0.03 + 0.12 / len(payloads), 1, 1 - 0.15 / len(payloads)))
    fig.savefig(out, dpi=80)
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", default="target/hoststack-redis.csv")
    ap.add_argument("-o", "--out", help="output file (.png or .svg)")
    a = ap.parse_args(argv)
    path = Path(a.csv)
    try:
        with open(path, encoding="utf-8") as f:
            comments, samples = load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"hoststack-plot: {path}: {e}")
    if not samples:
        sys.exit(f"hoststack-plot: {path}: no samples")
    out = Path(a.out) if a.out else path.with_suffix(".png")
    plot(comments, samples, out)
    print(out)


if __name__ == "__main__":
    main()
