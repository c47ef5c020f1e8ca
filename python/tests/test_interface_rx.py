"""What an interface accepts on receive: an L3 interface drops unicast frames for another
MAC (`l3 mac mismatch`) unless `set interface promiscuous on`; an L2 (bridged) interface
takes every frame anyway; an admin-down interface drops everything it receives, counted
(`subinterface down`, VPP's reason) and in its `drops`."""

from scapy.compat import raw
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute

MISMATCH = ("ethernet-input", "l3 mac mismatch")
DOWN = ("ethernet-input", "subinterface down")
OTHER_MAC = "02:aa:bb:cc:dd:ee"


class TestInterfaceRx(Ip4RouterTest):

    def setup_test(self):
        super().setup_test()
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.snapshot_counters()

    def packets(self, n, dst_mac=None):
        pkts = []
        for i in range(n):
            p = self.udp_from(self.pg0, "10.2.0.1", sport=1000 + i)
            p.dst = dst_mac or p.dst
            pkts.append(p)
        return pkts

    def test_promiscuous_disables_the_l3_mac_filter(self):
        other = self.packets(3, OTHER_MAC)
        self.send_and_assert_no_replies(self.pg0, other, "frames for another MAC")
        self.assert_counters({MISMATCH: 3})
        self.vpp.cli("set interface promiscuous on pg0")
        assert "promiscuous: on" in self.vpp.cli("show hardware-interfaces pg0")
        rx = self.send_and_expect(self.pg0, other, self.pg1)
        assert len(rx) == 3 and all(p.dst == self.pg1.remote_mac for p in rx)
        # Broadcast and our own MAC are still accepted; the counters did not move.
        self.send_and_expect(self.pg0, self.packets(2), self.pg1)
        self.assert_counters({})
        self.vpp.cli("set interface promiscuous off pg0")
        assert "promiscuous" not in self.vpp.cli("show hardware-interfaces pg0")
        self.send_and_assert_no_replies(self.pg0, other, "promiscuous off again")
        self.assert_counters({MISMATCH: 3})

    def test_promiscuous_bad_lines_name_the_token(self):
        for line, token in [("set interface promiscuous maybe pg0", "`maybe'"),
                            ("set interface promiscuous on pg9", "`pg9'"),
                            ("set interface promiscuous on pg0 extra", "`extra'")]:
            self.assert_cli_error(line, token)

    def test_admin_down_interface_drops_what_it_receives(self):
        before = self.get_interface_counters().get("pg0", {})
        self.vpp.cli("set interface state pg0 down")
        try:
            # Also frames that would otherwise be forwarded, ARP and broadcast.
            pkts = self.packets(4) + self.packets(1, "ff:ff:ff:ff:ff:ff")
            self.send_and_assert_no_replies(self.pg0, pkts, "rx on an admin-down interface")
            self.assert_counters({DOWN: 5})
            after = self.get_interface_counters()["pg0"]
            assert after.get("drops", 0) - before.get("drops", 0) == 5, after
        finally:
            self.vpp.cli("set interface state pg0 up")
        self.send_and_expect(self.pg0, self.packets(2), self.pg1)
        self.assert_counters({})


class TestBridgedInterfaceTakesEveryFrame(Ip4RouterTest):
    n_pg = 2

    def test_bridged_interface_is_not_filtered(self):
        self.vpp.cli("create bridge-domain 5 learn 1 forward 1 flood 1 uu-flood 1")
        for i in (0, 1):
            self.vpp.cli(f"set interface l2 bridge pg{i} 5")
        try:
            p = Ether(raw(Ether(dst=OTHER_MAC, src="02:00:00:00:00:77") / Raw(b"x" * 60)))
            rx = self.send_and_expect(self.pg0, [p], self.pg1)
            assert rx[0].dst == OTHER_MAC
            assert self.get_counters().get(MISMATCH, 0) == self._counter_baseline.get(
                MISMATCH, 0)
        finally:
            for i in (0, 1):
                self.vpp.cli(f"set interface l3 pg{i}")
            self.vpp.cli("create bridge-domain 5 del")
