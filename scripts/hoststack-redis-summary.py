#!/usr/bin/env python3
"""Summary rows of runs of scripts/hoststack-redis-bench.sh (MODES with kernel and others).

Usage: hoststack-redis-summary.py <OUT csv>...   (each with its <OUT minus .csv>-sched.csv)

Prints the table of docs/hoststack.md's "Where the multi-client tails come from": per run
and mode other than the kernel (named "<run> (<mode>)" when a run has several), over the
multi-client cells (clients > 1), the (b) / kernel ratio of the p99.9 medians
(min / median / max) and how many cells have (b)'s median p99.9 <= the kernel's; the p50
ratio likewise; the 1-client p50 ratios per payload; the medians over the cells of both
p99.9 medians (ms); and from the scheduling CSV, summed over the multi-client cells and
samples: the run-queue wait of the whole path per request (us, kernel / the mode), the mean
wait per time slice (us) of redis-server under the kernel and the mode and of Sluice (the
clients' Sluice in (c)), and that Sluice's CPU per request (us). Medians are over the runs (an even count: the mean of the middle two).
"""

import collections
import csv
import statistics
import sys
from pathlib import Path


def rows(path):
    """The CSV's rows as dicts, `#` lines skipped."""
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def summary(path):
    """The markdown rows of one run, one per mode other than the kernel."""
    path = Path(path)
    name = path.name.removesuffix(".csv")
    pct = collections.defaultdict(list)
    for r in rows(path):
        key = (r["mode"], int(r["clients"]), int(r["payload"]))
        pct[key].append((float(r["p50"]), float(r["p99.9"])))
    cells = sorted({(c, d) for (_, c, d) in pct})
    modes = sorted({m for (m, _, _) in pct} - {"kernel"})
    med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v))
           for k, v in pct.items()}
    tot, n = sched(path.with_name(name + "-sched.csv"), path)
    return [row(name if len(modes) == 1 else f"{name} ({m})", m, cells, med, tot, n)
            for m in modes]


def sched(sched_path, path):
    """Per (mode, process) over the multi-client samples: [cpu ms, wait ms, slices,
    samples]; and the requests per sample."""
    tot = collections.defaultdict(lambda: [0.0, 0.0, 0, 0])
    for r in rows(sched_path):
        if int(r["clients"]) == 1:
            continue
        t = tot[(r["mode"], r["process"])]
        t[0] += float(r["cpu_ms"])
        t[1] += float(r["wait_ms"])
        t[2] += int(r["slices"])
        t[3] += 1
    # Requests per sample: from the bench's comment line (`... <runs> <requests> ...`).
    with open(path) as f:
        words = f.readline().split()
    return tot, int(words[words.index("scripts/hoststack-redis-bench.sh") + 2])


def row(name, mode, cells, med, tot, n):
    """One mode's row against the kernel."""
    r50, r999, met, one, k999, s999 = [], [], 0, [], [], []
    for c, d in cells:
        (k50, k9), (s50, s9) = med[("kernel", c, d)], med[(mode, c, d)]
        if c == 1:
            one.append(s50 / k50)
            continue
        r50.append(s50 / k50)
        r999.append(s9 / k9)
        met += s9 <= k9
        k999.append(k9)
        s999.append(s9)

    def path_wait(m):
        procs = [v for (mm, _), v in tot.items() if mm == m]
        samples = max(v[3] for v in procs)
        return sum(v[1] for v in procs) * 1e3 / (samples * n)

    def per_slice(m, proc):
        v = tot.get((m, proc))
        return f"{v[1] * 1e3 / max(v[2], 1):.0f}" if v else "—"

    def cpu(m, proc):
        v = tot.get((m, proc))
        return f"{v[0] * 1e3 / (v[3] * n):.1f}" if v else "—"

    def mmm(xs):
        return f"{min(xs):.2f} / {statistics.median(xs):.2f} / {max(xs):.2f}"

    return (
        f"| {name} | {mmm(r999)} | {met} | {mmm(r50)} | {' / '.join(f'{x:.2f}' for x in one)} "
        f"| {statistics.median(k999):.1f} / {statistics.median(s999):.1f} "
        f"| {path_wait('kernel'):.0f} / {path_wait(mode):.0f} "
        f"| {per_slice('kernel', 'redis-server')} / {per_slice(mode, 'redis-server')} / "
        f"{per_slice(mode, 'sluice')} | {cpu(mode, 'sluice')} |"
    )


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        print("\n".join(summary(p)))


if __name__ == "__main__":
    main()
