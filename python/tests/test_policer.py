"""Policers (plugins/policer, VPP's policer CLI) over pg with scapy and the deterministic
clock (`test policer clock manual`): exact conform/exceed/violate counts for 1r2c (pps and
kbps), 1r3c (RFC 2697), 2r3c-2698 and 2r3c-4115, refill by advancing the clock, DSCP
marking, input and output, the API, CLI errors."""

import re

import pytest

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_papi import ApiError, Retval
from sluice_test import IpRoute

IN4 = "policer-input-ip4"
OUT4 = "policer-output-ip4"
CONFORM = "conform packets"
EXCEED = "exceed packets"
VIOLATE = "violate packets"
DROP = "dropped by the policer action"


class TestPolicer(Ip4RouterTest):
    n_pg = 2

    def setup_test(self):
        self.create_pg_interfaces(range(2), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1 = self.pg_interfaces
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.vpp.cli("test policer clock manual")
        self.snapshot_counters()

    def pkts(self, n, ip_len=100, tos=0):
        """`n` UDP packets of `ip_len` IP bytes, numbered by source port."""
        return [Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                          / IP(src=self.pg0.remote_ip4, dst="10.2.0.1", tos=tos)
                          / UDP(sport=1000 + i, dport=9) / Raw(b"x" * (ip_len - 28))))
                for i in range(n)]

    def show(self, name):
        return self.vpp.cli(f"show policer name {name}")

    def test_1r2c_pps_exact_with_refill(self):
        self.vpp.cli("configure policer name p1 cir 1000 cb 3 rate pps type 1r2c "
                     "conform-action transmit exceed-action drop")
        self.vpp.cli("policer input name p1 pg0")
        rx = self.send_and_expect(self.pg0, self.pkts(5), self.pg1, n_rx=3)
        assert [p[UDP].sport for p in rx] == [1000, 1001, 1002]
        self.assert_counters({(IN4, CONFORM): 3, (IN4, EXCEED): 2, (IN4, DROP): 2})
        # 1000 pps: 2 ms refills exactly 2 packets.
        self.vpp.cli("test policer clock advance 2000")
        self.send_and_expect(self.pg0, self.pkts(5), self.pg1, n_rx=2)
        self.assert_counters({(IN4, CONFORM): 2, (IN4, EXCEED): 3, (IN4, DROP): 3})
        # 1999 us later: one token short of 2; 1 us more completes it.
        self.vpp.cli("test policer clock advance 1999")
        self.send_and_expect(self.pg0, self.pkts(2), self.pg1, n_rx=1)
        self.vpp.cli("test policer clock advance 1")
        self.send_and_expect(self.pg0, self.pkts(2), self.pg1, n_rx=1)
        s = self.show("p1")
        assert 'Name "p1" Type 1r2c cir 1000 eir 0 cb 3 eb 0' in s, s
        assert "conform 7 packets/700 bytes, exceed 7 packets/700 bytes" in s, s
        assert "applied input on sw_if_index: 1" in s, s
        # Unapplied: everything passes.
        self.vpp.cli("policer input unapply name p1 pg0")
        self.send_and_expect(self.pg0, self.pkts(6), self.pg1, n_rx=6)

    def test_1r2c_kbps_counts_ip_bytes(self):
        # 8 kbps = 1000 bytes/s, 1000-byte burst: ten 100-byte packets; 100 ms: 100 more.
        self.vpp.cli("configure policer name k cir 8 cb 1000 rate kbps type 1r2c")
        self.vpp.cli("policer input name k pg0")
        self.send_and_expect(self.pg0, self.pkts(12), self.pg1, n_rx=10)
        self.vpp.cli("test policer clock advance 100000")
        self.send_and_expect(self.pg0, self.pkts(2), self.pg1, n_rx=1)
        self.assert_counters({(IN4, CONFORM): 11, (IN4, EXCEED): 3, (IN4, DROP): 3})

    def test_1r3c_srtcm_marks_exceed(self):
        self.vpp.cli("policer add name s type 1r3c cir 1000 cb 2 eb 3 rate pps "
                     "conform-action transmit exceed-action mark-and-transmit AF11 "
                     "violate-action drop")
        self.vpp.cli("policer input name s pg0")
        rx = self.send_and_expect(self.pg0, self.pkts(7, tos=1), self.pg1, n_rx=5)
        assert [p[IP].tos for p in rx] == [1, 1, (10 << 2) | 1, (10 << 2) | 1, (10 << 2) | 1]
        for p in rx:   # the header checksum was updated with the DSCP
            q = IP(raw(p[IP]))
            del q.chksum
            assert IP(raw(q)).chksum == p[IP].chksum
        self.assert_counters({(IN4, CONFORM): 2, (IN4, EXCEED): 3, (IN4, VIOLATE): 2,
                              (IN4, DROP): 2})
        # 5 ms: 5 tokens, 2 fill C and 3 overflow into E.
        self.vpp.cli("test policer clock advance 5000")
        assert "Tokens: committed 2 excess 3" in self.show("s")

    def test_2r3c_2698_and_4115(self):
        self.vpp.cli("policer add name t type 2r3c-2698 cir 1000 cb 2 eir 2000 eb 4 rate pps "
                     "conform-action transmit exceed-action mark-and-transmit EF "
                     "violate-action drop")
        self.vpp.cli("policer input name t pg0")
        rx = self.send_and_expect(self.pg0, self.pkts(6), self.pg1, n_rx=4)
        assert [p[IP].tos >> 2 for p in rx] == [0, 0, 46, 46]
        self.vpp.cli("test policer clock advance 1000")   # C +1, P +2
        rx = self.send_and_expect(self.pg0, self.pkts(3), self.pg1, n_rx=2)
        assert [p[IP].tos >> 2 for p in rx] == [0, 46]
        self.assert_counters({(IN4, CONFORM): 3, (IN4, EXCEED): 3, (IN4, VIOLATE): 3,
                              (IN4, DROP): 3})
        # RFC 4115 on output: the excess bucket fills at its own rate, capped at eb.
        self.vpp.cli("policer input unapply name t pg0")
        self.vpp.cli("policer add name f type 2r3c-4115 cir 1000 cb 2 eir 3000 eb 1 rate pps "
                     "exceed-action transmit violate-action drop")
        self.vpp.cli("policer output name f pg1")
        self.send_and_expect(self.pg0, self.pkts(4), self.pg1, n_rx=3)
        self.vpp.cli("test policer clock advance 1000")
        self.send_and_expect(self.pg0, self.pkts(3), self.pg1, n_rx=2)
        self.assert_counters({(OUT4, CONFORM): 3, (OUT4, EXCEED): 2, (OUT4, VIOLATE): 2,
                              (OUT4, DROP): 2})

    def test_api(self):
        a = self.vpp.api()
        act = {"type": "transmit", "dscp": 0}
        drop = {"type": "drop", "dscp": 0}
        a.policer_add_del(is_add=True, name="api", type="type_1r2c", rate_type="pps",
                          cir=1000, eir=0, cb=2, eb=0, conform_action=act,
                          exceed_action=drop, violate_action=drop)
        a.policer_input(name="api", sw_if_index=self.pg0.index + 1, apply=True)
        self.send_and_expect(self.pg0, self.pkts(3), self.pg1, n_rx=2)
        d = a.policer_dump(name="api")
        assert [(x.name, x.cb, x.conform_packets, x.exceed_packets, x.conform_bytes)
                for x in d] == [("api", 2, 2, 1, 200)], d
        with pytest.raises(ApiError) as ei:
            a.policer_add_del(is_add=False, name="api")
        assert ei.value.retval == Retval.IN_USE, str(ei.value)
        a.policer_input(name="api", sw_if_index=self.pg0.index + 1, apply=False)
        # On output too: attached, the policer is in use; detached, it can go.
        a.policer_output(name="api", sw_if_index=self.pg1.index + 1, apply=True)
        with pytest.raises(ApiError) as ei:
            a.policer_add_del(is_add=False, name="api")
        assert ei.value.retval == Retval.IN_USE, str(ei.value)
        a.policer_output(name="api", sw_if_index=self.pg1.index + 1, apply=False)
        a.policer_add_del(is_add=False, name="api")
        assert a.policer_dump(name="") == []

    def test_cli_errors(self):
        self.assert_cli_error("configure policer name x cir 0 cb 10", "cir `0'")
        self.assert_cli_error("configure policer name x cir 10 cb 10 type 3r9c", "`3r9c'")
        self.assert_cli_error("configure policer name x type 2r3c-2698 cir 100 cb 10 "
                              "eir 50 eb 10", "`50'")
        self.assert_cli_error("configure policer name x cir 10 cb 10 conform-action "
                              "mark-and-transmit XX", "`XX'")
        self.assert_cli_error("configure policer name x cir 10 cb 10 color-aware",
                              "`color-aware'")
        self.assert_cli_error("configure policer name x cir 10 cb 10 bogus", "`bogus'")
        self.assert_cli_error("policer input name nope pg0", "`nope'")
        self.vpp.cli("configure policer name x cir 10 cb 10")
        self.assert_cli_error("policer input name x pg9", "`pg9'")
        self.assert_cli_error("policer del name y", "`y'")
        self.assert_cli_error("show policer name y", "`y'")
        assert re.search(r"Rate type kbps, color-blind, conform action transmit, "
                         r"exceed action drop, violate action drop", self.show("x"))
