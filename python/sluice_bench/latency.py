"""Latency statistics: merging the tester's per-stream histograms and summarising them.

The tester (`show tester json`) reports per stream `latency_ns {min, avg, max, p50, p90, p99,
p999}`, `jitter_ns` and `histogram {bucket_scheme, counts: [[lower_ns, count], ...]}` (non-zero
buckets only, log-linear, <= 1 % relative error). A result often needs several streams or
trials combined (both directions of a bidirectional test, repeated trials): percentiles cannot
be averaged, so the histograms are merged bucket by bucket and the percentiles recomputed from
the merged counts. min/max combine exactly, the average is weighted by packets, and the jitter
(RFC 3550 mean |D| of consecutive transit differences, per stream) by the number of
consecutive pairs.
"""

from __future__ import annotations

from typing import Iterable

#: Percentiles the report shows, as (key, quantile).
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999))


def merge_histograms(hists: Iterable[dict]) -> dict:
    """Sums histograms bucket by bucket. All must share one `bucket_scheme` (else ValueError);
    an empty input gives an empty histogram."""
    scheme = None
    acc: dict[int, int] = {}
    for h in hists:
        if not h:
            continue
        s = h.get("bucket_scheme")
        if scheme is None:
            scheme = s
        elif s != scheme:
            raise ValueError(f"cannot merge histograms of different bucket schemes: {scheme!r} and {s!r}")
        for lower, count in h.get("counts", []):
            if count < 0:
                raise ValueError(f"negative bucket count {count} at {lower} ns")
            acc[int(lower)] = acc.get(int(lower), 0) + int(count)
    return {"bucket_scheme": scheme,
            "counts": [[k, acc[k]] for k in sorted(acc) if acc[k] > 0]}


def histogram_total(h: dict) -> int:
    return sum(c for _, c in h.get("counts", []))


def percentile(h: dict, q: float) -> float | None:
    """The lower bound of the bucket holding the q-quantile sample (nearest-rank: the
    ceil(q * N)-th smallest sample), None for an empty histogram. With the tester's
    <= 1 % bucket width that is within 1 % of the true value."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    total = histogram_total(h)
    if total == 0:
        return None
    rank = max(1, -(-int(round(q * total * 1_000_000)) // 1_000_000))  # ceil without float error
    seen = 0
    for lower, count in h["counts"]:
        seen += count
        if seen >= rank:
            return float(lower)
    return float(h["counts"][-1][0])


def summarize(streams: Iterable[dict]) -> dict | None:
    """Combines the latency of several tester streams (each a `show tester json` stream
    object). Returns {samples, min, avg, max, p50, p90, p99, p999, jitter_ns, histogram} in ns,
    or None when no stream received a packet."""
    # A stream without samples has every latency field null (tester contract).
    streams = [s for s in streams if s.get("rx_packets", 0) > 0
               and (s.get("latency_ns") or {}).get("avg") is not None]
    if not streams:
        return None
    hist = merge_histograms(s.get("histogram") or {} for s in streams)
    n = sum(s["rx_packets"] for s in streams)
    lat = [s["latency_ns"] for s in streams]
    out: dict = {
        "samples": n,
        "min": min(x["min"] for x in lat),
        "max": max(x["max"] for x in lat),
        "avg": sum(x["avg"] * s["rx_packets"] for x, s in zip(lat, streams)) / n,
    }
    if histogram_total(hist) > 0:
        for key, q in PERCENTILES:
            v = percentile(hist, q)
            # A bucket's lower bound can sit below the exact minimum: clamp into [min, max].
            out[key] = min(max(v, out["min"]), out["max"]) if v is not None else None
    elif len(streams) == 1:
        for key, _ in PERCENTILES:
            out[key] = lat[0].get(key)
    else:
        for key, _ in PERCENTILES:
            out[key] = None
    pairs = [(s.get("jitter_ns"), s["rx_packets"] - 1) for s in streams]
    pairs = [(j, w) for j, w in pairs if j is not None and w > 0]
    w = sum(w for _, w in pairs)
    out["jitter_ns"] = sum(j * w for j, w in pairs) / w if w else None
    out["histogram"] = hist
    return out
