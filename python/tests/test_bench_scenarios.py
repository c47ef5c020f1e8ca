"""Scenario data the harness sends: RFC 2544 frame sizes (FCS included) mapped to the tester's
size, FIB scenarios spreading destinations over the installed routes, and memif kept out of
the Linux ratios. No root needed."""

import ipaddress

from bench_fakes import FakeDut, FakeTester, FakeTopology
from sluice_bench import report
from sluice_bench import runner as runner_mod
from sluice_bench.rfc2544 import SearchConfig
from sluice_bench import scenarios
from sluice_bench.scenarios import (SCENARIOS, filler6_prefixes, filler6_range, filler_prefixes,
                                   filler_range, streams)
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


def test_ip6_scenarios_send_ip6_streams_over_the_ip6_filler_routes():
    topo = FakeTopology([0], [1], tag="x")
    macs = {p.dut_if: p.dut_mac for p in topo.ports}
    # 14 + 40 + 8 + 22-byte signature: IPv6 frames are at least 84 bytes.
    assert scenarios.tester_size(64, ip6=True) == 84
    assert scenarios.tester_size(512, ip6=True) == 508
    sc = SCENARIOS["ip6-fib-255k"]
    assert sc.ip6 and sc.l3 and sc.routes == 255_000
    (main,) = streams(sc, topo, macs, 84)
    assert main.ip6 and main.dst_mac == topo.a.dut_mac
    lo, hi = (ipaddress.ip_address(a) for a in main.dst.split("-"))
    pfx = [ipaddress.ip_network(p) for p in filler6_prefixes(3)]
    assert [p.prefixlen for p in pfx] == [120] * 3
    assert lo == pfx[0].network_address and pfx[1].network_address == lo + 256
    # The range covers every address of the routes - 1 filler /120s: at most 2^32 (tester).
    n = int(hi) - int(lo) + 1
    assert n == (sc.routes - 1) * 256 and n <= 2 ** 32
    assert hi in ipaddress.ip_network(filler6_prefixes(sc.routes - 1)[-1])
    assert filler6_range(1) == "2001:2:0:f000::-2001:2:0:f000::ff"
    # Fillers, links and the networks behind the ports are disjoint, inside 2001:2::/48.
    bench = ipaddress.ip_network("2001:2::/48")
    nets = [ipaddress.ip_network(f"{p.net6}::/64") for p in topo.ports] + \
        [ipaddress.ip_network(p.behind6_prefix) for p in topo.ports] + \
        [ipaddress.ip_network(filler6_prefixes(sc.routes - 1)[-1])]
    assert all(n.subnet_of(bench) for n in nets)
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    cmd = main.add_command(10)
    assert " ip6 src 2001:2:0:10::1-2001:2:0:10::100 " in cmd and f" dst {main.dst} " in cmd
    assert main.flows == 256
    # Sources behind port A, the latency stream to one host behind port B, 84 bytes.
    (lat,) = streams(sc, topo, macs, 84, latency=True)
    assert lat.ip6 and lat.dst == "2001:2:0:20::1" and lat.size == 84 and lat.flows == 1
    (one,) = streams(SCENARIOS["ip6-oneway"], topo, macs, 84)
    assert one.ip6 and one.dst == "2001:2:0:20::1"
    assert ipaddress.ip_address(one.dst) in ipaddress.ip_network(topo.b.behind6_prefix)
    # IPv4 scenarios stay IPv4.
    (v4,) = streams(SCENARIOS["ip4-oneway"], topo, macs, 64)
    assert not v4.ip6 and " ip6 " not in v4.add_command(1)


def test_memif_is_reported_on_its_own_never_as_a_linux_ratio(tmp_path, monkeypatch):
    class FastDut(FakeDut):
        max_rate = 8_000_000.0

    duts = {
        "sluice-memif": FastDut("sluice-memif", 5_000_000, 5_500_000, 5_000),
        "sluice-af_packet": FakeDut("sluice-af_packet", 300_000, 350_000, 20_000),
        "linux": FakeDut("linux", 400_000, 450_000, 60_000, cpu_metric="kernel_s"),
    }
    monkeypatch.setattr(runner_mod, "make_dut", lambda name, _bin, *_: duts[name])
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
    assert "## memif DUTs" in md and "| ip4-oneway | sluice-memif | 64 B |" in md
    assert "FCS included" in md


def test_ip6_dut_configuration_linux_and_sluice(monkeypatch):
    """What each DUT is told for the IPv6 FIB scenario (commands recorded, nothing run)."""
    from sluice_bench import duts
    topo = FakeTopology([0], [1], tag="x")
    sc = SCENARIOS["ip6-fib-255k"]
    calls = []
    monkeypatch.setattr(duts, "nsexec", lambda ns, *a, input=None, **kw: calls.append((a, input)))
    duts.LinuxRouter().start(topo, sc)
    sysctls = [a[2] for a, _ in calls if a[0] == "sysctl"]
    assert f"net.ipv6.conf.{topo.a.dut_if}.disable_ipv6=0" in sysctls
    assert "net.ipv6.conf.all.forwarding=1" in sysctls
    assert "net.ipv6.conf.all.accept_dad=0" in sysctls
    (batch,) = [inp for a, inp in calls if a[:3] == ("ip", "-6", "-batch")]
    lines = batch.splitlines()
    assert f"addr add 2001:2:0:1::1/64 dev {topo.a.dut_if} nodad" in lines
    assert (f"neigh replace 2001:2:0:2::2 lladdr {topo.b.tester_mac} dev {topo.b.dut_if} "
            "nud permanent") in lines
    assert f"route add 2001:2:0:10::/64 via 2001:2:0:1::2 dev {topo.a.dut_if}" in lines
    fillers = [x for x in lines if x.startswith("route add 2001:2:0:f")]
    assert len(fillers) == sc.routes - 1
    assert fillers[0] == f"route add 2001:2:0:f000::/120 via 2001:2:0:2::2 dev {topo.b.dut_if}"

    class Vpp:
        def __init__(self):
            self.lines = []

        def cli(self, c):
            self.lines.append(c)
            return ""

    d = duts.SluiceAfPacket("sluice")
    d.vpp = Vpp()
    d._configure(topo, sc)
    hb = f"host-{topo.b.dut_if}"
    assert f"set interface ip address {hb} 2001:2:0:2::1/64" in d.vpp.lines
    assert f"ip route add 2001:2:0:20::/64 via 2001:2:0:2::2 {hb}" in d.vpp.lines
    assert (f"ip route add count {sc.routes - 1} 2001:2:0:f000::/120 via 2001:2:0:2::2 {hb}"
            in d.vpp.lines)
