"""Latency statistics: histogram merging, percentiles, combining streams."""

import pytest

from sluice_bench.latency import merge_histograms, percentile, summarize

SCHEME = "log-linear 1ns-10s 1%"


def hist(*counts):
    return {"bucket_scheme": SCHEME, "counts": [list(c) for c in counts]}


def test_merge_sums_equal_buckets_and_sorts():
    m = merge_histograms([hist((300, 1), (100, 2)), hist((100, 3), (200, 4)), {}])
    assert m == {"bucket_scheme": SCHEME, "counts": [[100, 5], [200, 4], [300, 1]]}


def test_merge_refuses_different_schemes():
    with pytest.raises(ValueError, match="different bucket schemes"):
        merge_histograms([hist((1, 1)), {"bucket_scheme": "other", "counts": [[1, 1]]}])


def test_percentiles_are_nearest_rank_bucket_bounds():
    h = hist((100, 50), (200, 40), (300, 9), (1000, 1))
    assert percentile(h, 0.5) == 100
    assert percentile(h, 0.51) == 200
    assert percentile(h, 0.9) == 200
    assert percentile(h, 0.99) == 300
    assert percentile(h, 0.999) == 1000
    assert percentile(h, 0.0) == 100
    assert percentile(hist(), 0.5) is None
    with pytest.raises(ValueError):
        percentile(h, 1.5)


def stream(rx, lo, avg, hi, jitter, h):
    return {"rx_packets": rx, "latency_ns": {"min": lo, "avg": avg, "max": hi, "p50": 0,
                                             "p90": 0, "p99": 0, "p999": 0},
            "jitter_ns": jitter, "histogram": h}


def test_summarize_combines_directions():
    a = stream(100, 900, 1000.0, 5000, 10.0, hist((1000, 90), (5000, 10)))
    b = stream(300, 1900, 2000.0, 2100, 30.0, hist((2000, 300)))
    s = summarize([a, b])
    assert s["samples"] == 400
    assert (s["min"], s["max"]) == (900, 5000)
    assert s["avg"] == pytest.approx((100 * 1000 + 300 * 2000) / 400)
    assert s["jitter_ns"] == pytest.approx((99 * 10 + 299 * 30) / 398)
    assert s["p50"] == 2000  # 90 samples at 1000, then 300 at 2000
    assert s["p99"] == 5000
    assert s["histogram"]["counts"] == [[1000, 90], [2000, 300], [5000, 10]]


def test_summarize_clamps_bucket_bounds_into_min_max():
    s = summarize([stream(10, 1005, 1010.0, 1020, 1.0, hist((1000, 10)))])
    assert s["p50"] == 1005 and s["p999"] == 1005


def test_summarize_ignores_streams_without_samples():
    assert summarize([{"rx_packets": 0, "latency_ns": None}]) is None
    empty = {k: None for k in ("min", "avg", "max", "p50", "p90", "p99", "p999")}
    assert summarize([{"rx_packets": 5, "latency_ns": empty, "jitter_ns": None}]) is None
    assert summarize([]) is None
