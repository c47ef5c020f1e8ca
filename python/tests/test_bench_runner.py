"""The run logic (warm-up, NDR/PDR, latency points, not-supported and error entries, raw JSON)
with fake DUTs and tester; no root needed."""

import json
import re
from pathlib import Path

import pytest

from bench_fakes import FakeDut, FakeTester, FakeTopology
from sluice_bench import rawdata
from sluice_bench import runner as runner_mod
from sluice_bench.rfc2544 import SearchConfig
from sluice_bench.suites import Suite


@pytest.fixture
def fake_run(tmp_path, monkeypatch):
    duts = {
        "sluice-af_packet": FakeDut("sluice-af_packet", 900_000, 950_000, 20_000,
                                    unsupported={"nat44": "Sluice has no NAT44 yet"}),
        "linux": FakeDut("linux", 400_000, 450_000, 60_000, cpu_metric="kernel_s",
                         unsupported={"vxlan": "this kernel has no VXLAN"}),
    }
    monkeypatch.setattr(runner_mod, "make_dut", lambda name, _bin, *_: duts[name])
    suite = Suite("test", [("ip4-oneway", [64, 1518]), ("nat44-oneway", [64]),
                           ("ip6-oneway", [64]), ("vxlan-encap", [64])],
                  ["sluice-af_packet", "linux"],
                  search=SearchConfig(max_rate=2_000_000, resolution=0.02),
                  trial_s=1.0, warmup_s=0.5, latency_fractions=[0.1, 0.5, 0.9],
                  loss_rates=[100_000, 600_000])
    r = runner_mod.Runner(suite, tmp_path / "out", tmp_path / "sluice", None, [0], [1])
    r.topology_factory = FakeTopology
    r.tester_factory = FakeTester
    r.progress.stream = open(tmp_path / "progress.txt", "w")
    return r, tmp_path


def test_runner_records_ndr_pdr_latency_and_not_supported(fake_run):
    r, tmp = fake_run
    data = r.run()
    res = {(x["scenario"], x["dut"], x["frame_size"]): x for x in data["results"]}
    assert len(res) == 10
    sl = res[("ip4-oneway", "sluice-af_packet", 64)]
    assert sl["status"] == "ok"
    assert 900_000 * 0.97 <= sl["ndr_pps"] <= 900_000
    assert sl["pdr_pps"] >= sl["ndr_pps"]
    assert sl["ndr_trial"]["rx"] == sl["ndr_trial"]["tx"] > 0
    assert [p["fraction"] for p in sl["latency"]] == [0.1, 0.5, 0.9]
    lat = sl["latency"][1]["trial"]["extra"]["latency"]
    assert lat["samples"] > 0 and lat["histogram"]["counts"]
    assert sl["warmup"]["rx"] > 0
    # Loss at the same fixed offered rates for every DUT: none below either DUT's NDR, some
    # for Linux (NDR 400k) at 600k.
    lx = res[("ip4-oneway", "linux", 64)]
    assert [p["rate_pps"] for p in sl["fixed_loss"]] == [100_000, 600_000]
    assert all(p["trial"]["loss_ratio"] == 0 for p in sl["fixed_loss"])
    assert lx["fixed_loss"][0]["trial"]["loss_ratio"] == 0
    assert lx["fixed_loss"][1]["trial"]["loss_ratio"] > 0
    assert res[("nat44-oneway", "sluice-af_packet", 64)] == {
        "scenario": "nat44-oneway", "dut": "sluice-af_packet", "frame_size": 64,
        "status": "not supported", "reason": "Sluice has no NAT44 yet"}
    assert res[("nat44-oneway", "linux", 64)]["status"] == "ok"
    ip6 = res[("ip6-oneway", "linux", 64)]
    # IPv6 frames carry 40-byte headers: the 64-byte row is sent as 84 bytes + FCS.
    assert ip6["status"] == "ok" and ip6["tester_size"] == 84
    vx = res[("vxlan-encap", "linux", 64)]
    assert vx["status"] == "not supported" and "VXLAN" in vx["reason"]
    on_disk = rawdata.load(tmp / "out")
    assert on_disk["results"] == json.loads(json.dumps(data["results"]))
    progress = (tmp / "progress.txt").read_text()
    assert "10/10" in progress and "trial" in progress


def test_a_broken_dut_becomes_an_error_entry_and_the_suite_goes_on(fake_run):
    r, _ = fake_run
    broken = FakeDut("linux", 0, 1, 1000)
    broken.sim.knee_loss = 1.0  # delivers nothing: the warm-up must catch it
    orig = runner_mod.make_dut
    runner_mod.make_dut = lambda name, b, *r: broken if name == "linux" else orig(name, b, *r)
    data = r.run()
    errs = [x for x in data["results"] if x["status"] == "error"]
    assert {x["scenario"] for x in errs} == {"ip4-oneway", "nat44-oneway", "ip6-oneway",
                                             "vxlan-encap"}
    assert all("forwarded nothing during the warm-up" in x["reason"] for x in errs)
    assert any(x["status"] == "ok" and x["dut"] == "sluice-af_packet" for x in data["results"])


def test_a_dut_that_dies_mid_trial_fails_that_trial_and_is_restarted(fake_run, monkeypatch):
    r, _ = fake_run
    r.suite.cases = [("ip4-oneway", [64])]
    r.suite.duts = ["sluice-af_packet"]

    class Crashy(FakeDut):
        trials = 0
        restarts = 0

        def counter_snapshot(self):
            if self.alive():
                Crashy.trials += 1  # twice per trial (before and after)
            return {}

        def alive(self):
            return not (Crashy.trials == 6 and Crashy.restarts == 0)

        def log_tail(self):
            return "panicked at 'index out of bounds'"

        def restart(self, topo, sc):
            Crashy.restarts += 1
            return super().restart(topo, sc)

    dut = Crashy("sluice-af_packet", 900_000, 950_000, 20_000)
    monkeypatch.setattr(runner_mod, "make_dut", lambda name, b, *r: dut)
    data = r.run()
    (res,) = data["results"]
    assert res["status"] == "ok" and Crashy.restarts == 1
    failed = [t for t in res["trials"] if t["extra"].get("failed")]
    assert len(failed) == 1 and "index out of bounds" in failed[0]["extra"]["failed"]
    assert failed[0]["rx"] > 0  # it would have passed on loss alone; the crash fails it
    assert 900_000 * 0.9 <= res["ndr_pps"] <= 900_000  # the search went on after the restart


def test_raw_data_is_written_gzipped_and_read_back_in_either_form(tmp_path):
    """A default run's raw data is several MB of JSON: it is written as results.json.gz (the
    form committed under bench/results/), the same data giving the same bytes, and a plain
    results.json of an older run is still read (and superseded by the next save)."""
    data = {"suite": "x", "results": [{"n": i, "s": "frame" * 50} for i in range(200)]}
    (tmp_path / "results.json").write_text(json.dumps({"old": True}))
    assert rawdata.load(tmp_path) == {"old": True}
    p = rawdata.save(tmp_path, data)
    assert p.name == "results.json.gz" and not (tmp_path / "results.json").exists()
    assert p.read_bytes()[:2] == b"\x1f\x8b"
    assert p.stat().st_size < len(json.dumps(data)) / 5
    assert rawdata.load(tmp_path) == data
    first = p.read_bytes()
    rawdata.save(tmp_path, data)
    assert p.read_bytes() == first
    with pytest.raises(FileNotFoundError, match="results.json.gz"):
        rawdata.load(tmp_path / "nothing")


def test_the_vpp_learning_flood_replays_sluice_bench_s_packet_count():
    # Without --packets sluice-bench ran its default, which VPP's count-bound cases replay
    # (not --vpp-packets).
    assert runner_mod.engine_packets(["--runs", "3"]) == runner_mod.SLUICE_BENCH_PACKETS
    assert runner_mod.engine_packets(["--packets", "4096", "--runs", "1"]) == 4096
    main_rs = (Path(__file__).resolve().parents[2] / "bench/src/main.rs").read_text()
    m = re.search(r"default_value_t = ([0-9_]+)\)\]\n\s*packets: u64", main_rs)
    assert m, "sluice-bench's --packets default not found in bench/src/main.rs"
    assert int(m.group(1).replace("_", "")) == runner_mod.SLUICE_BENCH_PACKETS
