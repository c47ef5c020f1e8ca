"""The statistics segment read from Python (`sluice_stats`) and by `sluicectl stats`: the
values equal `show interface` / `show errors` / `show runtime`, every read is one consistent
snapshot, and bad sockets or arguments fail with a clear error."""

import subprocess
import time
from pathlib import Path

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from sluice_stats import CombinedCounter, SimpleCounter, StatsClient, StatsError, matches
from sluice_test import SluiceTestCase
from sluice_test.instance import sluice_binary


def frames(n):
    return [raw(Ether(dst="02:33:00:00:00:01", src="02:44:00:00:00:02") /
                IP(src="192.0.2.1", dst="198.51.100.1") / UDP() / Raw(b"x" * (i % 50)))
            for i in range(n)]


class TestStatsSegment(SluiceTestCase):
    extra_config = "statseg { update-interval 0.02 }"

    def setup_test(self):
        self.pg0, self.pg1 = self.create_pg_interfaces(range(2))
        self.vpp.cli("test l2patch rx pg0 tx pg1")
        self.sock = self.vpp.dir / "stats.sock"

    def settle(self, st):
        """Waits for two segment updates after the traffic (the final counts)."""
        hb = st["/sys/heartbeat"]
        self.wait_for(lambda: st["/sys/heartbeat"] >= hb + 2, "two segment updates")

    def test_python_reader_equals_show_output(self):
        sent = frames(60)
        self.send_and_expect(self.pg0, sent, self.pg1, node="l2-patch")
        # pg1 has no patch: dropped with a counted reason.
        self.send_and_assert_no_replies(self.pg1, frames(7), "pg1 has no patch",
                                        node="l2-patch")
        with StatsClient(self.sock) as st:
            self.settle(st)
            d = st.dump("^/if/", "^/err/", "^/interfaces/pg", "^/sys/")
            names = d["/if/names"]
            assert names[:3] == ["local0", "pg0", "pg1"]
            ifc = self.get_interface_counters()
            rx, tx = d["/if/rx"], d["/if/tx"]
            assert isinstance(rx, CombinedCounter) and isinstance(d["/if/drops"], SimpleCounter)
            for i, name in enumerate(names):
                if not name:
                    continue
                shown = ifc[name]
                assert rx.sum_packets(i) == shown.get("rx packets", 0), name
                assert rx.sum_bytes(i) == shown.get("rx bytes", 0), name
                assert tx.sum_packets(i) == shown.get("tx packets", 0), name
                assert tx.sum_bytes(i) == shown.get("tx bytes", 0), name
                assert d["/if/drops"].sum(i) == shown.get("drops", 0), name
            assert rx.sum_packets(1) == 60 and tx.sum_packets(2) == 60
            assert tx.sum_bytes(2) == sum(len(f) for f in sent)
            assert d["/interfaces/pg1/drops"].sum(0) == 7
            # Errors: per node, the segment's counters add up to what `show errors` shows.
            shown_errs = {}
            for (node, _reason), v in self.get_counters().items():
                shown_errs[node] = shown_errs.get(node, 0) + v
            seg_errs = {}
            for n, v in d.items():
                if n.startswith("/err/"):
                    node = n[len("/err/"):].rsplit("/", 1)[0]
                    seg_errs[node] = seg_errs.get(node, 0) + v.sum(0)
            assert {k: v for k, v in seg_errs.items() if v} == \
                {k: v for k, v in shown_errs.items() if v}
            assert d["/err/l2-patch/no_patch"].sum(0) == 7
            assert d["/err/l2-patch/patched"].sum(0) == 60
            assert d["/sys/num_worker_threads"] == 0.0
            assert d["/sys/boottime"] < time.time()
            # The header and ls agree.
            h = st.header()
            assert h["n_threads"] == 1 and h["entries"] == len(st.ls())
            assert st.kinds("^/if/rx$") == {"/if/rx": "combined"}
            with pytest.raises(KeyError):
                st["/no/such/entry"]
            self.assert_no_leaks(timeout=0)

    def test_reads_while_traffic_flows_never_go_back(self):
        with StatsClient(self.sock) as st:
            last = {}
            moved = 0
            for burst in range(5):
                self.send_and_expect(self.pg0, frames(40), self.pg1, node="l2-patch")
                for _ in range(5):
                    d = st.dump("^/if/rx$", "^/if/tx$", "^/sys/heartbeat$")
                    for name in ("/if/rx", "/if/tx"):
                        for t, row in enumerate(d[name]):
                            for i, v in enumerate(row):
                                k = (name, t, i)
                                if k in last:
                                    assert v[0] >= last[k][0] and v[1] >= last[k][1], k
                                    moved += v != last[k]
                                last[k] = v
                    time.sleep(0.01)
            assert moved > 0

    def test_sluicectl_stats_commands(self):
        ctl = Path(sluice_binary()).with_name("sluicectl")
        if not ctl.is_file():
            pytest.skip(f"{ctl} not built (cargo build -p sluicectl)")
        self.send_and_expect(self.pg0, frames(25), self.pg1, node="l2-patch")
        cli = ["-s", str(self.vpp.sock_path)]

        def run(*args):
            return subprocess.run([str(ctl), *cli, "stats", *args], capture_output=True,
                                  text=True, timeout=30)

        with StatsClient(self.sock) as st:
            self.settle(st)
            r = run("ls", "/if/rx")
            assert r.returncode == 0, r.stderr
            assert r.stdout.split() == st.ls("/if/rx")
            r = run("dump", "^/if/rx$")
            assert r.returncode == 0, r.stderr
            rx = st["/if/rx"]
            assert f"[1 @ 0]: {rx[0][1][0]} packets, {rx[0][1][1]} bytes /if/rx" in r.stdout
            assert rx[0][1][0] == 25
            r = run("poll", "interval", "0.05", "count", "2", "^/if/rx$")
            assert r.returncode == 0, r.stderr
            assert r.stdout.count("--- ") == 2
            assert "/if/rx[pg0]: 25 packets" in r.stdout
        r = run("frob")
        assert r.returncode == 1 and "unknown stats command `frob'" in r.stderr
        r = run("socket-name", str(self.vpp.dir / "nope.sock"), "ls")
        assert r.returncode == 2 and "cannot connect" in r.stderr

    def test_a_socket_that_is_not_a_stats_socket_is_refused(self):
        with pytest.raises(StatsError, match="cannot get the statistics segment"):
            StatsClient(self.vpp.dir / "nope.sock")
        # The CLI socket sends no fd: refused after the timeout, the daemon keeps serving.
        with pytest.raises(StatsError):
            StatsClient(self.vpp.sock_path, timeout=0.3)
        assert "pg0" in self.vpp.cli("show interface")


def test_patterns():
    assert matches("/if/rx", "/if")
    assert matches("/if/rx", "^/if/rx$")
    assert not matches("/if/rx-miss", "/if/rx$")
    assert matches("/interfaces/pg0/rx", "/interfaces/*/rx")
    assert not matches("/if/rx", "^rx")
    assert matches("/err/a[1]/x", "a[1]")
