"""IPv4 MTU handling in ip4-rewrite: a packet of exactly the MTU passes; over the MTU with
DF set, an ICMP fragmentation-needed (type 3 code 4) carrying the next-hop MTU goes back to
the sender; over the MTU without DF, the packet is dropped with the counted reason (Sluice
does not fragment) and nothing is emitted."""

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, IPerror, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute, assert_icmp_checksum, assert_ip4_checksum

ICMP_SENT = ("ip4-icmp-error", "ICMP errors sent")
MTU_DROP = ("ip4-rewrite", "ip4 MTU exceeded and DF not set (no fragmentation)")


class TestIp4Mtu(Ip4RouterTest):

    def packet(self, ip_len, df):
        payload = bytes(ip_len - 28)
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=self.pg0.remote_ip4, dst="10.2.0.9", ttl=20,
                              flags="DF" if df else 0, id=77)
                         / UDP(sport=5, dport=6) / Raw(payload)))

    def test_df_over_mtu_gets_frag_needed_and_non_df_is_dropped(self):
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.vpp.cli("set interface mtu 1000 pg1")
        self.snapshot_counters()
        # Exactly the MTU, with and without DF: forwarded.
        rx = self.send_and_expect(self.pg0, [self.packet(1000, True), self.packet(1000, False)],
                                  self.pg1)
        assert all(len(p[IP]) == 1000 and p[IP].ttl == 19 for p in rx)
        self.assert_counters({})
        # One byte over, DF: fragmentation needed, MTU 1000, back out of pg0 to the sender.
        big = self.packet(1001, True)
        rx = self.send_and_expect(self.pg0, [big], self.pg0)
        err = rx[0]
        assert err.dst == self.pg0.remote_mac and err.src == self.pg0.local_mac
        assert (err[IP].src, err[IP].dst) == (self.pg0.local_ip4, self.pg0.remote_ip4)
        assert (err[ICMP].type, err[ICMP].code) == (3, 4)
        assert err[ICMP].nexthopmtu == 1000, err[ICMP].show(dump=True)
        quoted = err[IPerror]
        assert (quoted.src, quoted.dst, quoted.id) == (self.pg0.remote_ip4, "10.2.0.9", 77)
        assert len(err[IP]) <= 576
        assert_ip4_checksum(err)
        assert_icmp_checksum(err)
        self.assert_counters({ICMP_SENT: 1})
        # One byte over without DF: dropped with its reason, nothing emitted anywhere.
        self.send_and_assert_no_replies(self.pg0, [self.packet(1001, False)] * 3,
                                        "non-DF over the MTU")
        self.assert_counters({MTU_DROP: 3})
        # The MTU back up: the same packets pass.
        self.vpp.cli("set interface mtu 1500 pg1")
        rx = self.send_and_expect(self.pg0, [big, self.packet(1001, False)], self.pg1)
        assert all(len(p[IP]) == 1001 for p in rx)
        self.assert_counters({})
