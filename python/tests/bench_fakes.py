"""Fakes for testing the harness's run logic without root: a topology that creates nothing, a
DUT with a known loss curve (rfc2544.SimulatedDut) and a tester that answers like
`show tester json` would for that DUT. Only the run/report plumbing is tested with these;
the real tester and DUTs are exercised by test_bench_smoke.py."""

from __future__ import annotations

from sluice_bench.duts import Dut
from sluice_bench.rfc2544 import SimulatedDut
from sluice_bench.topology import Topology

SCHEME = "fake log-linear"


class FakeTopology(Topology):
    active_dut = None

    def create(self):
        pass

    def destroy(self):
        pass


class FakeDut(Dut):
    def __init__(self, name, ndr_pps, capacity_pps, base_latency_ns, unsupported=None,
                 cpu_metric="process_s"):
        self.name = name
        self.sim = SimulatedDut(ndr_pps, capacity_pps, knee_loss=0.01)
        self.base_latency_ns = base_latency_ns
        self._unsupported = unsupported or {}
        self.cpu_metric = cpu_metric

    def unsupported(self, sc):
        return self._unsupported.get(sc.kind) or super().unsupported(sc)

    def start(self, topo, sc):
        topo.active_dut = self
        return {p.dut_if: p.dut_mac for p in topo.ports}

    def stop(self, failed=False):
        pass

    def counters(self):
        return {"fake": True}


class FakeTester:
    def __init__(self, _binary, topo):
        self.topo = topo

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def run(self, streams, duration_s, before=None, after=None):
        dut = self.topo.active_dut
        if before:
            before()
        if after:
            after()
        total = sum(s.rate_pps for s in streams if not s.latency)
        loss = dut.sim.loss_ratio(total)
        out = {}
        for s in streams:
            tx = int(round(s.rate_pps * duration_s))
            rx = tx - int(round(tx * loss))
            if total > dut.sim.ndr_pps and rx == tx and tx > 0:
                rx -= 1
            lat = int(dut.base_latency_ns * (1 + 2 * (total / dut.sim.capacity_pps) ** 2))
            out[s.name] = {
                "tx_packets": tx, "tx_bytes": tx * s.size, "tx_fail": 0,
                "rx_packets": rx, "rx_bytes": rx * s.size, "lost": tx - rx,
                "reordered": 0, "duplicate": 0,
                "latency_ns": {"min": lat // 2, "avg": float(lat), "max": lat * 4,
                               "p50": lat, "p90": lat * 2, "p99": lat * 3, "p999": lat * 4},
                "jitter_ns": lat / 10,
                "histogram": {"bucket_scheme": SCHEME, "counts": [
                    [lat // 2, rx // 2], [lat, rx - rx // 2 - rx // 100], [lat * 3, rx // 100]]
                    if rx else []},
                "running": False, "elapsed_s": duration_s, "offered_rate_pps": s.rate_pps,
            }
        return {"streams": out, "wall_s": duration_s}
