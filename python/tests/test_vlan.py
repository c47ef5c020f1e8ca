"""VLAN sub-interfaces: 802.1Q, 802.1ad + inner 802.1Q; routed and cross-connected; tags
matched exactly, popped on input and pushed on output; unknown tags dropped with a reason."""

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

import pytest

from sluice_test import CliError, SluiceTestCase

TAGGED_DROP = ("ethernet-input", "VLAN-tagged frame, no sub-interface")


class TestVlan(SluiceTestCase):

    def setup_test(self):
        self.create_pg_interfaces(range(2), up=True)
        self.pg0, self.pg1 = self.pg_interfaces
        out = self.vpp.cli("create sub-interfaces pg0 100").strip()
        assert out == "pg0.100", out
        out = self.vpp.cli("create sub-interfaces pg1 7 dot1ad 200 inner-dot1q 300").strip()
        assert out == "pg1.7", out
        for c in ["set interface state pg0.100 up", "set interface state pg1.7 up",
                  "set interface ip address pg0.100 10.100.0.1/24",
                  "set interface ip address pg1.7 10.107.0.1/24",
                  "ip neighbor pg0.100 10.100.0.2 02:00:00:00:64:02",
                  "ip neighbor pg1.7 10.107.0.2 02:00:00:00:6b:02"]:
            self.vpp.cli(c)
        self.snapshot_counters()

    def teardown_test(self):
        for s in ("pg0.100", "pg1.7"):
            self.vpp.cli(f"delete sub-interface {s}")

    def test_route_between_dot1q_and_qinq_sub_interfaces(self):
        pkts = [Ether(raw(Ether(dst=self.pg0.local_mac, src="02:00:00:00:64:02")
                          / Dot1Q(vlan=100)
                          / IP(src="10.100.0.2", dst="10.107.0.2", ttl=9)
                          / UDP(sport=1000 + i, dport=53) / Raw(b"v" * (20 + i))))
                for i in range(20)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        for sent, got in zip(pkts, rx):
            assert got.dst == "02:00:00:00:6b:02" and got.src == self.pg1.local_mac
            assert got.type == 0x88a8, "outer 802.1ad tag pushed"
            assert got[Dot1AD].vlan == 200 and got[Dot1AD].type == 0x8100
            assert got[Dot1Q].vlan == 300 and got[Dot1Q].type == 0x0800
            assert got[IP].ttl == 8 and got[IP].dst == "10.107.0.2"
            assert raw(got[UDP]) == raw(sent[UDP])
        # And back: the QinQ sub-interface receives, the dot1q one sends.
        back = [Ether(raw(Ether(dst=self.pg1.local_mac, src="02:00:00:00:6b:02")
                          / Dot1AD(vlan=200) / Dot1Q(vlan=300)
                          / IP(src="10.107.0.2", dst="10.100.0.2") / UDP() / Raw(b"b")))]
        rx = self.send_and_expect(self.pg1, back, self.pg0)
        assert rx[0][Dot1Q].vlan == 100 and rx[0][IP].src == "10.107.0.2"
        self.assert_counters({})
        ifc = self.get_interface_counters()
        assert ifc["pg0.100"]["rx packets"] == 20 and ifc["pg1.7"]["tx packets"] == 20
        assert ifc["pg1.7"]["rx packets"] == 1 and ifc["pg0.100"]["tx packets"] == 1

    def test_unknown_tags_dropped_and_untagged_not_matched(self):
        frames = [
            Ether(dst=self.pg0.local_mac, src="02:00:00:00:64:02") / Dot1Q(vlan=101)
            / IP(src="10.100.0.2", dst="10.107.0.2") / UDP(),
            # The right outer VLAN with the wrong inner one.
            Ether(dst=self.pg1.local_mac, src="02:00:00:00:6b:02") / Dot1AD(vlan=200)
            / Dot1Q(vlan=301) / IP(src="10.107.0.2", dst="10.100.0.2") / UDP(),
        ]
        self.send_and_assert_no_replies(self.pg0, frames[:1])
        self.send_and_assert_no_replies(self.pg1, frames[1:])
        self.assert_counters({TAGGED_DROP: 2})

    def test_cross_connect_sub_interface_pops_and_pushes(self):
        self.vpp.cli("set interface l2 xconnect pg0.100 pg1")
        self.vpp.cli("set interface l2 xconnect pg1 pg0.100")
        try:
            tagged = Ether(dst="02:aa:00:00:00:01", src="02:bb:00:00:00:01") / Dot1Q(vlan=100) \
                / IP(src="1.1.1.1", dst="2.2.2.2") / UDP() / Raw(b"x" * 30)
            rx = self.send_and_expect(self.pg0, [tagged], self.pg1)
            assert Dot1Q not in rx[0], "tag popped on the way in"
            assert raw(rx[0][IP]) == raw(tagged[IP])
            plain = Ether(dst="02:bb:00:00:00:01", src="02:aa:00:00:00:01") \
                / IP(src="2.2.2.2", dst="1.1.1.1") / UDP() / Raw(b"y" * 30)
            rx = self.send_and_expect(self.pg1, [plain], self.pg0)
            assert rx[0][Dot1Q].vlan == 100, "tag pushed on the way out"
            assert raw(rx[0][IP]) == raw(plain[IP])
        finally:
            self.vpp.cli("set interface l3 pg0.100")
            self.vpp.cli("set interface l3 pg1")

    def test_bad_cli_names_the_token(self):
        for cmd, want in [("create sub-interfaces pg0 5000", "5000"),
                          ("create sub-interfaces pg0 5 dot1q 0", "0"),
                          ("create sub-interfaces pg0 9 dot1q 100", "already"),
                          ("create sub-interfaces pg0.100 1", "sub-interface")]:
            with pytest.raises(CliError) as e:
                self.vpp.cli(cmd)
            assert want in e.value.msg, (cmd, e.value.msg)
