"""Deleting the egress interface of a running stream: a VLAN sub-interface that routed
packets leave through is deleted while a rate-limited pg stream runs. The daemon keeps
going, every packet is either transmitted or dropped with a counted reason (none vanishes),
and no buffer leaks (the framework checks after every test)."""

import time

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from sluice_test import SluiceTestCase


class TestDeleteUnderTraffic(SluiceTestCase):

    def setup_test(self):
        self.create_pg_interfaces(range(2), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1 = self.pg_interfaces
        for c in ["create sub-interfaces pg1 10", "set interface state pg1.10 up",
                  "set interface ip address pg1.10 10.110.0.1/24",
                  "ip neighbor pg1.10 10.110.0.2 02:00:00:00:6e:02",
                  "ip route add 10.2.0.0/16 via 10.110.0.2 pg1.10"]:
            self.vpp.cli(c)
        self.snapshot_counters()

    def teardown_test(self):
        self.vpp.cli_try("ip route del 10.2.0.0/16 via 10.110.0.2 pg1.10")
        self.vpp.cli_try("delete sub-interface pg1.10")

    def test_sub_interface_deleted_while_it_transmits(self):
        pkts = [Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                          / IP(src=self.pg0.remote_ip4, dst=f"10.2.{i}.1", ttl=9)
                          / UDP(sport=3000 + i, dport=53) / Raw(b"d" * 30)))
                for i in range(32)]
        # Routed out tagged before the delete.
        rx = self.send_and_expect(self.pg0, pkts[:4], self.pg1)
        assert all(p[Dot1Q].vlan == 10 and p[IP].ttl == 8 for p in rx)
        self.snapshot_counters()
        total = 50_000
        before = self.get_interface_counters()
        stream = self.pg0.add_stream(pkts, limit=total, rate=40_000)
        self.pg1.enable_capture()
        self.pg_enable()
        deadline = time.monotonic() + 10
        while self.stream_sent(stream) < total // 4:
            assert time.monotonic() < deadline, "stream did not start"
            time.sleep(0.01)
        self.vpp.cli("delete sub-interface pg1.10")
        at_delete = self.stream_sent(stream)
        assert at_delete < total, "stream finished before the delete"
        self.wait_for_streams([stream])
        after = self.get_interface_counters()
        assert self.vpp.alive()
        tx = after["pg1"].get("tx packets", 0) - before["pg1"].get("tx packets", 0)
        now = self.get_counters()
        drops = {k: v - self._counter_baseline.get(k, 0) for k, v in now.items()
                 if v != self._counter_baseline.get(k, 0)
                 and k not in self.counters_ignored}
        assert after["pg0"]["rx packets"] - before["pg0"].get("rx packets", 0) == total
        assert tx + sum(drops.values()) == total, (tx, drops)
        assert tx >= total // 4, "packets before the delete were sent"
        # Only reasons that mean "the egress is gone".
        allowed = {("ip4-lookup", "no route to destination"),
                   ("ip4-lookup", "ip4 drop route"),
                   ("interface-output", "output interface unknown or deleted"),
                   ("interface-output", "output interface is down")}
        assert set(drops) <= allowed, drops
        self.assert_counters(drops)
        got = self.pg1.stop_capture()
        assert len(got) == tx and all(p[Dot1Q].vlan == 10 for p in got)
        # The name is free again and a new sub-interface works.
        for c in ["create sub-interfaces pg1 10", "set interface state pg1.10 up",
                  "set interface ip address pg1.10 10.110.0.1/24",
                  "ip neighbor pg1.10 10.110.0.2 02:00:00:00:6e:02",
                  "ip route add 10.2.0.0/16 via 10.110.0.2 pg1.10"]:
            self.vpp.cli(c)
        rx = self.send_and_expect(self.pg0, pkts[:4], self.pg1)
        assert all(p[Dot1Q].vlan == 10 for p in rx)
