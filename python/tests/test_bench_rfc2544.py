"""The RFC 2544 NDR/PDR search against simulated DUTs with known loss curves (the one place a
simulated DUT is right: the search is arithmetic on trial outcomes)."""

import pytest

from sluice_bench.rfc2544 import SearchConfig, SimulatedDut, Trial, ndr_pdr, search


def pdr_point(dut: SimulatedDut, loss: float) -> float:
    """Where the simulated loss curve crosses `loss` (between NDR and capacity)."""
    return dut.ndr_pps + (dut.capacity_pps - dut.ndr_pps) * loss / dut.knee_loss


@pytest.mark.parametrize("ndr,capacity", [(400_000, 500_000), (1_234_567, 1_300_000),
                                          (20_000, 900_000), (700_000, 700_001)])
def test_finds_ndr_and_pdr_within_resolution(ndr, capacity):
    dut = SimulatedDut(ndr, capacity, knee_loss=0.01)
    cfg = SearchConfig(max_rate=2_000_000, resolution=0.01, max_trials=30)
    n, p = ndr_pdr(dut, cfg)
    assert n.best is not None and p.best is not None
    assert ndr * (1 - 1.5 * cfg.resolution) <= n.rate_pps <= ndr
    truth = min(pdr_point(dut, cfg.pdr_loss), capacity)
    assert truth * (1 - 1.5 * cfg.resolution) <= p.rate_pps <= truth * 1.0001
    assert n.best.loss_ratio == 0.0
    assert p.best.loss_ratio <= cfg.pdr_loss
    assert n.rate_pps <= p.rate_pps
    assert not n.tester_limited and not p.tester_limited


def test_ndr_search_reuses_the_pdr_trials():
    dut = SimulatedDut(400_000, 500_000)
    cfg = SearchConfig(max_rate=2_000_000, resolution=0.01, max_trials=30)
    n, p = ndr_pdr(dut, cfg)
    assert len(dut.calls) == len(n.trials) + len(p.trials)
    alone = SimulatedDut(400_000, 500_000)
    search(alone, 0.0, cfg)
    assert len(n.trials) < len(alone.calls)


def test_tester_limited_result_is_flagged_not_inflated():
    dut = SimulatedDut(5_000_000, 6_000_000, tester_max_pps=800_000)
    n, p = ndr_pdr(dut, SearchConfig(max_rate=2_000_000))
    assert n.rate_pps == p.rate_pps == 800_000  # what was offered, not the 2 Mpps asked
    assert n.tester_limited and p.tester_limited
    assert len(dut.calls) == 1


def test_dut_that_forwards_nothing_gives_zero():
    dut = SimulatedDut(0, 1, knee_loss=1.0)
    cfg = SearchConfig(max_rate=1_000_000, min_rate=1_000, max_trials=50)
    n, p = ndr_pdr(dut, cfg)
    assert n.rate_pps == 0 and p.rate_pps == 0
    assert n.best is None and p.best is None
    assert min(dut.calls) >= cfg.min_rate * (1 - cfg.step_down) ** 20


def test_max_trials_bounds_the_search():
    dut = SimulatedDut(400_000, 500_000)
    cfg = SearchConfig(max_rate=2_000_000, resolution=1e-6, max_trials=5)
    r = search(dut, 0.0, cfg)
    assert len(r.trials) == 5
    assert r.best is not None and r.best.loss_ratio == 0.0


def test_two_trial_search_still_reports_a_passing_rate():
    # A steep loss curve (the usual case): overload, then one step below the delivered rate.
    dut = SimulatedDut(100_000, 105_000)
    r = search(dut, 0.005, SearchConfig(max_rate=300_000, max_trials=2))
    assert len(r.trials) == 2
    assert r.best is not None and r.rate_pps <= pdr_point(dut, 0.005)


def test_rates_are_offered_rates_not_targets():
    def short(rate):  # the tester reaches 90 % of what it is asked, DUT lossless below 1M
        off = rate * 0.9
        return Trial(rate, off, int(off), int(off) if off < 1_000_000 else int(off * 0.9))
    r = search(short, 0.0, SearchConfig(max_rate=2_000_000, resolution=0.01))
    assert r.rate_pps < 1_000_000 and r.rate_pps == r.best.offered_pps
    assert r.tester_limited  # every trial fell 10 % short of its target


def test_tester_driver_refusals_make_a_trial_tester_limited():
    assert Trial(1000, 1000, tx=990, rx=990, tx_fail=10).tester_limited()
    assert not Trial(1000, 1000, tx=1000, rx=990, tx_fail=0).tester_limited()


def test_trial_accounting():
    t = Trial(1000, 1000, tx=1000, rx=995)
    assert t.lost == 5 and t.loss_ratio == pytest.approx(0.005)
    assert t.passes(0.005) and not t.passes(0.0)
    assert Trial(1000, 1000, tx=10, rx=10).passes(0.0)
    assert not Trial(1000, 0, tx=0, rx=0).passes(0.5)  # nothing sent proves nothing
    assert Trial(1000, 1000, tx=10, rx=12).lost == 0  # duplicates never make loss negative
    assert Trial(1000, 1000, tx=100, rx=50).delivered_pps == 500
