"""Tests of the test framework itself: its checks must catch what they claim to catch, a
failing test must log the daemon's state, and a missing binary must fail, not skip."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from scapy.layers.inet import IP

from ip4_base import Ip4RouterTest
from sluice_test import (CliError, InterfaceAddress, IpNeighbor, IpRoute, SluiceError,
                         SluiceInstance)
from sluice_test.parsers import parse_pg_streams

PYTHON_DIR = Path(__file__).resolve().parents[1]


class TestFramework(Ip4RouterTest):
    n_pg = 3

    def test_cli_errors_raise_with_the_quoted_token(self):
        with pytest.raises(CliError) as e:
            self.vpp.cli("set interface state pg9 up")
        assert e.value.msg == "unknown interface `pg9'"
        with pytest.raises(CliError) as e:
            self.vpp.cli("ip route add 10.0.0.0/33 via 10.0.1.2")
        assert "`10.0.0.0/33'" in e.value.msg
        # The connection survives errors.
        assert "pg0" in self.vpp.cli("show interface")

    def test_config_objects_add_query_remove(self):
        pg2 = self.pg_interfaces[2]
        addr = InterfaceAddress(self, pg2, "10.0.42.1/24").add_config()
        nbr = IpNeighbor(self, pg2, "10.0.42.9", "02:00:00:00:42:09").add_config()
        route = IpRoute(self, "10.77.0.0/16", via="10.0.42.9", interface=pg2).add_config()
        other = IpRoute(self, "10.77.0.0/16", via=self.pg1.remote_ip4)
        assert route.query() and nbr.query() and addr.query()
        assert not other.query(), "a path that was never added"
        assert self._configs[-3:] == [addr, nbr, route]
        route.remove_config()
        assert not route.query()
        with pytest.raises(CliError, match="no route"):
            route.remove_config()
        nbr.remove_config()
        assert not nbr.query()
        addr.remove_config()
        assert not addr.query()
        assert route not in self._configs and addr not in self._configs
        # Left configured on purpose: the teardown removes it (and the leak check runs).
        IpRoute(self, "10.78.0.0/16", via=self.pg1.remote_ip4).add_config()

    def test_streams_are_named_uniquely_and_deleted(self):
        a = self.pg0.add_stream([self.udp_from(self.pg0, "10.0.1.2")])
        b = self.pg0.add_stream([self.udp_from(self.pg0, "10.0.1.2")])
        assert a.name != b.name and a.pcap != b.pcap
        assert set(parse_pg_streams(self.vpp.cli("show packet-generator"))) == {a.name, b.name}
        self.pg_start()
        assert parse_pg_streams(self.vpp.cli("show packet-generator")) == {}

    def test_assert_counters_catches_unexpected_and_wrong_deltas(self):
        pkt = self.udp_from(self.pg0, "192.0.2.1")  # no route
        base = self.snapshot_counters()
        self.send_and_assert_no_replies(self.pg0, [pkt, pkt])
        no_route = ("ip4-lookup", "no route to destination")
        with pytest.raises(AssertionError, match="no route to destination: changed by 2"):
            self.assert_counters({})
        with pytest.raises(AssertionError, match="expected 1"):
            self.assert_counters({no_route: 1})
        with pytest.raises(AssertionError, match="unknown counter"):
            self.assert_counters({("ip4-lookup", "no such reason"): 0})
        self.assert_counters({no_route: 2}, since=base)
        # The baseline moved: nothing changed since.
        self.assert_counters({})

    def test_send_and_assert_no_replies_catches_output(self):
        self.pg1.resolve_arp(5)
        fwd = self.udp_from(self.pg0, self.pg1.remote_host_ip4(5))
        with pytest.raises(AssertionError, match="tx counters moved {'pg1': 1}"):
            self.send_and_assert_no_replies(self.pg0, [fwd], "forwarded")

    def test_send_and_expect_checks_the_count_and_interface(self):
        fwd = self.udp_from(self.pg0, self.pg1.remote_ip4)
        with pytest.raises(AssertionError, match="transmitted 2 packet"):
            self.send_and_expect(self.pg0, [fwd, fwd], self.pg1, n_rx=3, timeout=0.5)
        with pytest.raises(AssertionError, match="pg2 transmitted 0 packet"):
            self.send_and_expect(self.pg0, [fwd], self.pg_interfaces[2], timeout=0.5)
        rx = self.send_and_expect(self.pg0, [fwd], self.pg1)
        assert rx[0][IP].dst == self.pg1.remote_ip4


def run_inner_pytest(tmp_path: Path, body: str, env_extra=None) -> subprocess.CompletedProcess:
    """Runs a generated test file in a child pytest with this framework's configuration."""
    (tmp_path / "conftest.py").write_text((PYTHON_DIR / "tests" / "conftest.py").read_text())
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(body))
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYTHON_DIR / "pytest.ini"),
         "--rootdir", str(tmp_path), "-p", "no:cacheprovider", "-q", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60)


def test_failing_test_logs_trace_errors_and_pcaps(tmp_path):
    r = run_inner_pytest(tmp_path, """
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from sluice_test import SluiceTestCase

        class TestInner(SluiceTestCase):
            def test_expects_a_packet_that_never_comes(self):
                pg0, pg1 = self.create_pg_interfaces(range(2), ip4=True, resolve=True)
                p = (Ether(dst=pg0.local_mac, src=pg0.remote_mac)
                     / IP(src=pg0.remote_ip4, dst="192.0.2.1") / UDP())
                self.send_and_expect(pg0, [p], pg1, timeout=0.2)
    """)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "1 failed" in out, out
    assert "sluice diagnostics" in out, out
    assert "### show trace" in out and "pg-input" in out, out
    assert "### show errors" in out and "no route to destination" in out, out
    pcaps = [w for w in out.split() if w.endswith(".pcap")]
    assert any("pg0-in" in p for p in pcaps) and any("pg1-out" in p for p in pcaps), out
    # The failed test's directory is kept for inspection; remove it here.
    kept = [Path(p).parent for p in pcaps if Path(p).exists()]
    assert kept, f"pcap files not kept: {pcaps}"
    for d in set(kept):
        if d.name.startswith("sluice-test_expects"):
            subprocess.run(["rm", "-rf", str(d)], check=True)


def test_missing_binary_fails_with_a_clear_message(tmp_path):
    r = run_inner_pytest(tmp_path, """
        from sluice_test import SluiceTestCase

        class TestInner(SluiceTestCase):
            def test_needs_the_daemon(self):
                self.vpp.cli("show version")
    """, env_extra={"SLUICE_BIN": str(tmp_path / "no-such-sluice")})
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "1 error" in out and " skipped" not in out.splitlines()[-1], out
    assert "cannot run the functional tests" in out and "no-such-sluice" in out, out


def test_missing_default_binary_names_the_build_command(tmp_path, monkeypatch):
    import sluice_test.instance as inst

    monkeypatch.delenv("SLUICE_BIN", raising=False)
    monkeypatch.setattr(inst, "REPO_ROOT", tmp_path)
    with pytest.raises(SluiceError, match="cargo build -p sluice"):
        SluiceInstance("missing").start()


def test_checksum_helpers_reject_corrupted_packets():
    from scapy.compat import raw
    from scapy.layers.inet import ICMP, UDP
    from scapy.layers.l2 import Ether

    from sluice_test import assert_icmp_checksum, assert_ip4_checksum, assert_udp_checksum

    good = Ether(raw(Ether() / IP(src="10.0.0.2", dst="10.0.1.2") / UDP(sport=1, dport=2)
                     / b"data"))
    assert_ip4_checksum(good)
    assert_udp_checksum(good)
    bad_ip = good.copy()
    bad_ip[IP].chksum ^= 0x0101
    with pytest.raises(AssertionError, match="IPv4 checksum"):
        assert_ip4_checksum(Ether(raw(bad_ip)))
    bad_udp = good.copy()
    bad_udp[UDP].chksum ^= 0x0101
    with pytest.raises(AssertionError, match="UDP checksum"):
        assert_udp_checksum(Ether(raw(bad_udp)))
    echo = Ether(raw(Ether() / IP() / ICMP() / b"x"))
    assert_icmp_checksum(echo)
    echo[ICMP].chksum ^= 1
    with pytest.raises(AssertionError, match="ICMP checksum"):
        assert_icmp_checksum(Ether(raw(echo)))
