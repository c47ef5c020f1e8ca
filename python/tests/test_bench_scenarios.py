"""Scenario data the harness sends: RFC 2544 frame sizes (FCS included) mapped to the tester's
size, FIB scenarios spreading destinations over the installed routes, and memif kept out of
the Linux ratios. No root needed."""

import ipaddress

from bench_fakes import FakeDut, FakeTester, FakeTopology
from sluice_bench import report
from sluice_bench import runner as runner_mod
from sluice_bench.rfc2544 import SearchConfig
from sluice_bench import scenarios
from sluice_bench.scenarios import SCENARIOS, filler_prefixes, filler_range, streams
from sluice_bench.suites import Suite
from sluice_bench.topology import MTU


def test_rfc2544_frame_sizes_include_the_fcs():
    # 1518 with FCS = 1514 handed to the driver = a 1500-byte IP packet: the standard MTU.
    assert scenarios.tester_size(1518) == 1514 and 1514 - 14 == MTU == 1500
    assert [scenarios.tester_size(s) for s in (512, 889, 1280)] == [508, 885, 1276]
    # 60 bytes cannot hold headers (42) + the 22-byte signature: 64 stays 64 (+ FCS).
    assert scenarios.tester_size(64) == 64


def test_fib_scenarios_spread_destinations_over_the_filler_routes():
    topo = FakeTopology([0], [1], tag="x")
    macs = {p.dut_if: p.dut_mac for p in topo.ports}
    sc = SCENARIOS["ip4-fib-255k"]
    (main,) = streams(sc, topo, macs, 64)
    lo, hi = (ipaddress.ip_address(a) for a in main.dst.split("-"))
    first = ipaddress.ip_network(filler_prefixes(1)[0])
    assert lo == first.network_address
    # The range ends at the last address of the last filler /24 (routes - 1 of them).
    assert int(hi) - int(lo) + 1 == (sc.routes - 1) * 256
    assert filler_range(2) == "20.0.0.0-20.0.1.255"
    assert f" dst {main.dst} " in main.add_command(10)
    # The latency stream and the one-route scenario keep one far host.
    (lat,) = streams(sc, topo, macs, 64, latency=True)
    (one,) = streams(SCENARIOS["ip4-oneway"], topo, macs, 64)
    assert "-" not in lat.dst and "-" not in one.dst


def test_memif_is_reported_on_its_own_never_as_a_linux_ratio(tmp_path, monkeypatch):
    class FastDut(FakeDut):
        max_rate = 8_000_000.0

    duts = {
        "sluice-memif": FastDut("sluice-memif", 5_000_000, 5_500_000, 5_000),
        "sluice-af_packet": FakeDut("sluice-af_packet", 300_000, 350_000, 20_000),
        "linux": FakeDut("linux", 400_000, 450_000, 60_000, cpu_metric="kernel_s"),
    }
    monkeypatch.setattr(runner_mod, "make_dut", lambda name, _bin: duts[name])
    suite = Suite("t", [("ip4-oneway", [64])], list(duts),
                  search=SearchConfig(max_rate=1_000_000, resolution=0.05),
                  trial_s=1.0, warmup_s=0.5, latency_fractions=[0.5])
    r = runner_mod.Runner(suite, tmp_path / "out", tmp_path / "sluice", None, [0], [1])
    r.topology_factory = FakeTopology
    r.tester_factory = FakeTester
    r.progress.stream = open(tmp_path / "progress.txt", "w")
    data = r.run()
    res = {x["dut"]: x for x in data["results"]}
    # The DUT's own max_rate lifts the first trial above the suite's 1 Mpps.
    assert res["sluice-memif"]["max_rate"] == 8_000_000.0
    assert res["sluice-memif"]["ndr_pps"] > 4_000_000
    assert res["linux"]["max_rate"] == 1_000_000
    assert res["linux"]["tester_size"] == 64
    hl = "\n".join(report.headline(data))
    assert "sluice-af_packet" in hl and "memif" not in hl
    md = report.markdown(data, [])
    assert "## Sluice over memif" in md and "| ip4-oneway | sluice-memif | 64 B |" in md
    assert "FCS included" in md
