"""VPP beside Sluice in the harness: the VPP rows say why when there is no VPP or it does not
start (and the rest of the suite runs), `show runtime` parsing, and — when there is a VPP
install (VPP_PREFIX, else /work/vpp/install, as the memif interop tests) — real engine and
tunnel paths in it."""

import os
import stat
from pathlib import Path

import pytest

from bench_fakes import FakeDut, FakeTester, FakeTopology
from sluice_bench import report
from sluice_bench import runner as runner_mod
from sluice_bench import vpp
from sluice_bench.rfc2544 import SearchConfig
from sluice_bench.scenarios import SCENARIOS
from sluice_bench.suites import Suite

#: The VPP install of the real-VPP tests: VPP_PREFIX, else /work/vpp/install when it holds one.
REAL_VPP = os.environ.get("VPP_PREFIX") or (
    "/work/vpp/install" if Path("/work/vpp/install/bin/vpp").is_file() else None)
needs_vpp = pytest.mark.skipif(not REAL_VPP, reason="no VPP install (VPP_PREFIX or /work/vpp/install)")

VPP_RUNTIME = """\
Thread 0 vpp_main (lcore 1)
Time 1.2, 10 sec internal node vector rate 256.00 loops/sec 39062.50
  vector rates in 8.3333e6, out 8.3333e6, drop 0.0000e0, punt 0.0000e0
             Name                 State         Calls          Vectors        Suspends         Clocks       Vectors/Call
ethernet-input                   active              39063        10000000               0          6.10e1          256.00
ip4-input-no-checksum            active              39063        10000000               0          4.10e1          256.00
ip4-lookup                       active              39063        10000000               0          4.20e1          256.00
ip4-rewrite                      active              39063        10000000               0          1.90e1          256.00
pg-input                         polling             39063        10000000               0          4.00e1          256.00
pg1-output                       active              39063        10000000               0          9.00e0          256.00
pg1-tx                           active              39063        10000000               0          3.60e1          256.00
unix-epoll-input                 polling              1000               0               0          1.20e3            0.00
"""


def test_show_runtime_rows_become_clocks_per_packet():
    rt = vpp.parse_runtime(VPP_RUNTIME)
    assert set(rt) == {"ethernet-input", "ip4-input-no-checksum", "ip4-lookup", "ip4-rewrite",
                       "pg-input", "pg1-output", "pg1-tx"}  # nodes without packets left out
    assert rt["ethernet-input"]["clocks"] == pytest.approx(61.0)
    assert rt["pg1-tx"]["vectors"] == 10_000_000
    assert rt["ip4-lookup"]["vpc"] == pytest.approx(256.0, rel=1e-3)
    nodes = vpp._median_nodes([rt], 10_000_000)
    assert [n for n, _ in nodes][:2] == ["pg-input", "ethernet-input"]  # path order
    assert [n for n, _ in nodes][-2:] == ["pg1-output", "pg1-tx"]


def test_no_prefix_or_a_bad_prefix_says_why(tmp_path, monkeypatch):
    monkeypatch.delenv("VPP_PREFIX", raising=False)
    assert "--vpp-prefix" in vpp.prefix_problem(vpp.prefix_from(None))
    missing = tmp_path / "nowhere"
    assert "vpp is missing" in vpp.prefix_problem(missing)
    monkeypatch.setenv("VPP_PREFIX", str(missing))
    assert vpp.prefix_from(None) == missing
    dut = vpp.make_vpp_dut("vpp-af_packet", missing)
    assert "vpp is missing" in dut.unsupported(SCENARIOS["ip4-oneway"])


def _fake_prefix(tmp_path: Path, vpp_script: str) -> Path:
    """An install whose `vpp` is a real program that fails the way a broken VPP does."""
    bindir = tmp_path / "prefix" / "bin"
    plugdir = tmp_path / "prefix" / "lib" / "x86_64-linux-gnu" / "vpp_plugins"
    bindir.mkdir(parents=True)
    plugdir.mkdir(parents=True)
    for name, body in (("vpp", vpp_script), ("vppctl", "#!/bin/sh\nexit 1\n")):
        f = bindir / name
        f.write_text(body)
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    for p in ("af_packet", "memif", "af_xdp", "nat"):
        (plugdir / f"{p}_plugin.so").write_bytes(b"")
    return tmp_path / "prefix"


def test_a_vpp_that_does_not_start_fails_with_its_log(tmp_path):
    prefix = _fake_prefix(tmp_path, "#!/bin/sh\necho 'vpp: statseg: out of memory' >&2\nexit 3\n")
    v = vpp.VppInstance(prefix, "broken")
    with pytest.raises(vpp.VppError, match="status 3.*out of memory"):
        v.start(timeout=10)
    assert v.dir is not None and not v.dir.exists()  # its runtime directory is gone


class LocalTopology(FakeTopology):
    """No namespaces: the fake VPP runs as a plain child process."""

    def wrapper(self, ns):
        return []


def test_vpp_rows_say_why_and_the_rest_of_the_suite_runs(tmp_path, monkeypatch):
    prefix = _fake_prefix(tmp_path, "#!/bin/sh\necho 'no hugepages' >&2\nexit 1\n")
    sluice = FakeDut("sluice-af_packet", 900_000, 950_000, 20_000)
    orig = runner_mod.make_dut

    def make(name, b, p=None):
        return sluice if name == "sluice-af_packet" else orig(name, b, p)
    monkeypatch.setattr(runner_mod, "make_dut", make)
    suite = Suite("test", [("ip4-oneway", [64])],
                  ["vpp-af_packet", "sluice-af_packet", "vpp-af_xdp"],
                  search=SearchConfig(max_rate=2_000_000, resolution=0.05),
                  trial_s=0.5, warmup_s=0.5, latency_fractions=[0.5])
    r = runner_mod.Runner(suite, tmp_path / "out", tmp_path / "sluice", None, [0], [1],
                          vpp_prefix=prefix)
    r.topology_factory = LocalTopology
    r.tester_factory = FakeTester
    r.progress.stream = open(tmp_path / "progress.txt", "w")
    data = r.run()
    res = {x["dut"]: x for x in data["results"]}
    assert res["sluice-af_packet"]["status"] == "ok"
    for d in ("vpp-af_packet", "vpp-af_xdp"):
        assert res[d]["status"] == "error"
        assert "VPP exited with status 1 during start-up" in res[d]["reason"]
        assert "no hugepages" in res[d]["reason"]
    md = report.markdown(data, [])
    assert "| ip4-oneway | vpp-af_packet | 64 | error | VppError: VPP exited" in md


def test_engine_rows_without_vpp_say_why():
    data = {"engine": {"cases": [], "vpp": {"skipped": "no VPP install given"}}}
    assert report.vpp_engine_table(data) == ["VPP rows skipped: no VPP install given."]


@needs_vpp
def test_real_vpp_forwards_the_ip4_engine_path(tmp_path):
    """pg0 → ethernet-input → ip4 → pg1 in a real VPP with a pcap of sluice-bench's shape:
    every packet forwarded, clocks read per node."""
    prefix = Path(REAL_VPP)
    if why := vpp.prefix_problem(prefix):
        pytest.skip(why)
    from scapy.all import IP, UDP, Ether, wrpcap
    frames = [Ether(dst="02:fe:00:00:00:00", src="02:00:00:00:00:10") /
              IP(src="10.0.0.16", dst=f"20.0.{i}.1") / UDP(sport=1024 + i, dport=53) /
              (b"\0" * 18) for i in range(64)]
    wrpcap(str(tmp_path / "ip4-1.pcap"), frames)
    (tmp_path / "ip4-1.routes").write_text("20.0.0.0/8\n")
    case = {"family": "ip4", "name": "1 route", "routes": 1, "mpps": [1, 1, 1], "nodes": []}
    out = vpp.run_engine(prefix, tmp_path, [case], packets=200_000, runs=1,
                         main_core=os.cpu_count() - 1)
    assert not out["errors"], out["errors"]
    (c,) = out["cases"]
    assert c["dropped"] == 0 and c["mpps"][1] > 0
    names = [n for n, _ in c["nodes"]]
    assert "ethernet-input" in names and "ip4-lookup" in names and "ip4-rewrite" in names
    assert any(n.endswith("-tx") for n in names)


def test_io_split_puts_driver_nodes_apart_from_processing():
    sp = report.io_split(VPP_RUNTIME)
    assert sp["packets"] == 10_000_000
    assert sp["rx"] == pytest.approx(40.0)          # pg-input
    assert sp["tx"] == pytest.approx(36.0)          # pg1-tx
    assert sp["processing"] == pytest.approx(61 + 41 + 42 + 19 + 9)


class RecordingVpp:
    def __init__(self):
        self.lines: list[str] = []

    def cli(self, line: str) -> str:
        self.lines.append(line)
        return ""

    cli_try = cli


def test_learning_flood_starts_every_run_from_an_empty_mac_table(tmp_path):
    """VPP's side of Sluice's learning flood: learning on, the flood pcap, and before every
    run (untimed) the table emptied to the one static MAC — `clear l2fib` takes static
    entries too, so the static MAC is added back."""
    v = RecordingVpp()
    case = {"family": "l2", "name": "bridge, learning flood (new source MACs)"}
    pcap, setup_s = vpp.case_setup(v, case, tmp_path)
    assert pcap == tmp_path / "l2-flood.pcap" and setup_s is None
    assert "create bridge-domain 1 learn 1" in v.lines
    assert v.lines[-2:] == ["clear l2fib", "l2fib add 02:10:00:00:00:00 1 pg1 static"]
    assert vpp.run_cli(case) == v.lines[-2:]
    assert vpp.run_cli({"family": "l2", "name": "bridge, 1 MAC"}) == []
    with pytest.raises(vpp.VppError, match="no VPP equivalent"):
        vpp.case_setup(v, {"family": "mpls", "name": "x"}, tmp_path)


@needs_vpp
def test_real_vpp_learns_the_flood_in_every_run(tmp_path):
    prefix = Path(REAL_VPP)
    if why := vpp.prefix_problem(prefix):
        pytest.skip(why)
    from scapy.all import Ether, wrpcap
    frames = [Ether(dst="02:10:00:00:00:00", src=f"06:00:00:00:{i >> 8:02x}:{i & 255:02x}",
                    type=0x88b5) / (b"\0" * 46) for i in range(512)]
    wrpcap(str(tmp_path / "l2-flood.pcap"), frames)
    case = {"family": "l2", "name": "bridge, learning flood (new source MACs)", "mpps": [1, 1, 1],
            "nodes": []}
    out = vpp.run_engine(prefix, tmp_path, [case], packets=100_000, runs=2,
                         main_core=os.cpu_count() - 1, count_bound_packets=50_000)
    assert not out["errors"], out["errors"]
    (c,) = out["cases"]
    assert c["dropped"] == 0 and c["mpps"][1] > 0
    assert c["packets"] == 50_000  # the flood replays Sluice's count: the same work
    names = [n for n, _ in c["nodes"]]
    assert "l2-learn" in names and "l2-fwd" in names and any(n.endswith("-tx") for n in names)


def test_vxlan_decap_pcap_gets_every_vni_plus_one(tmp_path):
    # pcap global header, then two records: Ethernet + IPv4 + UDP + VXLAN with VNI 0 and 0xfffe.
    def frame(vni: int) -> bytes:
        return bytes(14 + 20 + 8 + 4) + vni.to_bytes(3, "big") + b"\0" + bytes(14)
    body = b""
    for vni in (0, 0xFFFE):
        f = frame(vni)
        body += bytes(8) + len(f).to_bytes(4, "little") * 2 + f
    src, dst = tmp_path / "in.pcap", tmp_path / "out.pcap"
    src.write_bytes(bytes(24) + body)
    vpp.vni_plus_one(src, dst)
    d = dst.read_bytes()
    at = 24 + 16 + 14 + 20 + 8 + 4
    assert d[at:at + 3] == (1).to_bytes(3, "big")
    at += len(frame(0)) + 16
    assert d[at:at + 3] == (0xFFFF).to_bytes(3, "big")
    assert len(d) == len(src.read_bytes())


def test_tunnel_cli_mirrors_the_sluice_cases():
    # Tunnel t of the many-tunnel cases: its own peer (GTP-U: its own TEID), its own route.
    enc = vpp.tunnel_cli("gre encap, 3 tunnels", 3)
    assert "create gre tunnel src 10.0.0.1 dst 10.0.0.2" in enc
    assert "create gre tunnel src 10.0.0.1 dst 10.1.0.3" in enc
    assert "ip route add 198.18.0.2/32 via gre2" in enc
    assert "set interface ip address pg1 10.0.0.1/24" in enc
    dec = vpp.tunnel_cli("gtpu decap, 3 tunnels", 3)
    assert "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 9 decap-next ip4" in dec
    assert "set interface unnumbered gtpu_tunnel2 use pg1" in dec
    assert "set interface ip address pg0 10.0.0.1/24" in dec
    one = vpp.tunnel_cli("ipip encap", 1)
    assert "ip route add 198.51.100.0/24 via ipip0" in one
    assert vpp._tunnel_count("vxlan decap, 10000 tunnels") == 10000
    assert vpp.tunnel_cli("srv6 end.dx4", 1)[-1] == \
        "sr localsid address fc00:5::d4 behavior end.dx4 pg1 198.51.100.2"
    with pytest.raises(vpp.VppError):
        vpp.tunnel_cli("geneve encap", 1)


@needs_vpp
@pytest.mark.parametrize("case", ["gre decap", "vxlan decap, 1 tunnel"])
def test_real_vpp_runs_a_tunnel_case(tmp_path, case):
    """`run_tunnel_case` in a real VPP with sluice-bench's own pcap (~10k packets): every
    packet out of pg1, none dropped, the tunnel node's clocks read."""
    prefix = Path(REAL_VPP)
    if why := vpp.prefix_problem(prefix):
        pytest.skip(why)
    plugin = case.split()[0]  # gre_plugin.so, vxlan_plugin.so
    if not vpp.has_plugin(prefix, plugin):
        pytest.skip(f"VPP install {prefix} has no {plugin} plugin (a partial build)")
    root = Path(__file__).resolve().parents[2]
    bench = Path(os.environ.get("SLUICE_BENCH_BIN", root / "target/release/sluice-bench"))
    if not bench.is_file():
        pytest.skip(f"{bench} not built (cargo build --release -p sluice-bench)")
    import subprocess
    subprocess.run([str(bench), "tunnel", "--quick", "--runs", "1", "--packets", "20000",
                    "--only", case, "--keep-inputs", str(tmp_path)],
                   check=True, stdout=subprocess.DEVNULL)
    r = vpp.run_tunnel_case(prefix, tmp_path, case, packets=10_000, runs=1,
                            main_core=os.cpu_count() - 1)
    assert r["dropped"] == 0 and r["out"] >= 10_000, r
    assert r["mpps"][1] > 0
    assert r["tunnel_node"], r["nodes"]
