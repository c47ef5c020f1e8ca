"""GRE (L3, TEB with key) and IP-in-IP (4in4, 6in4) checked against scapy's GRE, IP and
IPv6 layers byte for byte (plugins/tunnels, docs/tunnels.md). The kernel here has no
GRE/IPIP modules, so scapy is the peer: pg0 is the underlay (peer 10.0.0.2), pg1 a LAN."""

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest

GRE_DECAP = ("gre4-input", "packets decapsulated")
GRE_ENCAP = ("gre4-encap", "packets encapsulated")
GRE_NO_TUNNEL = ("gre4-input", "no tunnel for (src, dst, key)")
IPIP_DECAP = ("ipip4-input", "packets decapsulated")
IPIP_ENCAP = ("ipip4-encap", "packets encapsulated")
IPIP_BAD = ("ipip4-input", "inner IP version does not match the protocol")


class TunnelTest(Ip4RouterTest):
    n_pg = 2

    def lan_udp(self, dst, tag):
        return Ether(raw(Ether(dst=self.pg1.local_mac, src=self.pg1.remote_mac)
                         / IP(src=self.pg1.remote_ip4, dst=dst) / UDP(sport=1, dport=2)
                         / Raw(tag)))

    def from_peer(self, payload, proto=None):
        ip = IP(src=self.pg0.remote_ip4, dst="10.0.0.1")
        if proto is not None:
            ip.proto = proto
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac) / ip
                         / payload))

    def to_peer(self, payload, proto):
        return (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                / IP(src="10.0.0.1", dst=self.pg0.remote_ip4, ttl=64, id=0, flags=0,
                     proto=proto) / payload)

    @staticmethod
    def routed(p):
        """The IP packet of `p` as Sluice forwards it (TTL - 1, checksum redone)."""
        ip = p[IP].copy()
        ip.ttl -= 1
        del ip.chksum
        return IP(raw(ip))


class TestGre(TunnelTest):

    def setup_test(self):
        super().setup_test()
        assert self.vpp.cli("create gre tunnel src 10.0.0.1 dst %s" % self.pg0.remote_ip4
                            ).strip() == "gre0"
        self.vpp.cli("set interface state gre0 up")
        self.vpp.cli("set interface ip address gre0 10.99.0.1/30")
        self.vpp.cli("ip route add 198.51.100.0/24 via gre0")
        self.snapshot_counters()

    def teardown_test(self):
        self.vpp.cli("ip route del 198.51.100.0/24 via gre0")
        self.vpp.cli("create gre tunnel src 10.0.0.1 dst %s del" % self.pg0.remote_ip4)

    def test_l3_encap_and_decap_match_scapy(self):
        pkts = [self.lan_udp("198.51.100.%d" % (i + 1), b"gre-%d" % i) for i in range(3)]
        rx = self.send_and_expect(self.pg1, pkts, self.pg0)
        for p, s in zip(rx, pkts):
            assert raw(p) == raw(self.to_peer(GRE(proto=0x0800) / self.routed(s), 47))
        back = [self.from_peer(GRE() / IP(src="198.51.100.9", dst=self.pg1.remote_ip4)
                               / UDP(sport=3, dport=4) / Raw(b"back"))]
        rx = self.send_and_expect(self.pg0, back, self.pg1)
        assert raw(rx[0][IP]) == raw(self.routed(back[0][GRE]))
        # A key of 0 is no key (as in VPP): the tunnel without key takes the K bit with 0.
        zero = [self.from_peer(GRE(key_present=1, key=0)
                               / IP(src="198.51.100.9", dst=self.pg1.remote_ip4)
                               / UDP(sport=3, dport=4) / Raw(b"key0"))]
        rx = self.send_and_expect(self.pg0, zero, self.pg1)
        assert raw(rx[0][IP]) == raw(self.routed(zero[0][GRE]))
        self.vpp.cli("create gre tunnel src 10.0.0.1 dst %s key 7" % self.pg0.remote_ip4)
        self.vpp.cli("set interface state gre1 up")
        keyed = [self.from_peer(GRE(key_present=1, key=8) / IP(dst=self.pg1.remote_ip4))]
        self.send_and_assert_no_replies(self.pg0, keyed, "wrong key")
        self.vpp.cli("create gre tunnel src 10.0.0.1 dst %s key 7 del" % self.pg0.remote_ip4)
        self.assert_counters({GRE_ENCAP: 3, GRE_DECAP: 2, GRE_NO_TUNNEL: 1}, timeout=2.0)


class TestIpip(TunnelTest):

    def setup_test(self):
        super().setup_test()
        assert self.vpp.cli("create ipip tunnel src 10.0.0.1 dst %s" % self.pg0.remote_ip4
                            ).strip() == "ipip0"
        self.vpp.cli("set interface state ipip0 up")
        self.vpp.cli("set interface ip address pg1 2001:db8:1::1/64")
        self.vpp.cli("ip neighbor pg1 2001:db8:1::2 %s static" % self.pg1.remote_mac)
        self.vpp.cli("ip route add 198.51.100.0/24 via ipip0")
        self.vpp.cli("ip route add 2001:db8:51::/48 via ipip0")
        self.snapshot_counters()

    def teardown_test(self):
        self.vpp.cli("ip route del 198.51.100.0/24 via ipip0")
        self.vpp.cli("ip route del 2001:db8:51::/48 via ipip0")
        self.vpp.cli("ip neighbor del pg1 2001:db8:1::2")
        self.vpp.cli("set interface ip address del pg1 2001:db8:1::1/64")
        self.vpp.cli("delete ipip tunnel ipip0")

    def test_4in4_and_6in4_match_scapy(self):
        p4 = self.lan_udp("198.51.100.1", b"4in4")
        p6 = Ether(raw(Ether(dst=self.pg1.local_mac, src=self.pg1.remote_mac)
                       / IPv6(src="2001:db8:1::2", dst="2001:db8:51::1")
                       / UDP(sport=1, dport=2) / Raw(b"6in4")))
        rx = self.send_and_expect(self.pg1, [p4, p6], self.pg0)
        assert raw(rx[0]) == raw(self.to_peer(self.routed(p4), 4))
        inner6 = p6[IPv6].copy()
        inner6.hlim -= 1
        assert raw(rx[1]) == raw(self.to_peer(inner6, 41))
        back = [self.from_peer(IP(src="198.51.100.1", dst=self.pg1.remote_ip4)
                               / UDP(sport=2, dport=1) / Raw(b"back4")),
                self.from_peer(IPv6(src="2001:db8:51::1", dst="2001:db8:1::2")
                               / UDP(sport=2, dport=1) / Raw(b"back6"))]
        rx = self.send_and_expect(self.pg0, back, self.pg1)
        assert raw(rx[0][IP]) == raw(self.routed(back[0][IP].payload))
        assert rx[1][IPv6].hlim == 63 and raw(rx[1][Raw]) == b"back6"
        bad = [self.from_peer(IPv6(src="2001:db8:51::1", dst="2001:db8:1::2"), proto=4)]
        self.send_and_assert_no_replies(self.pg0, bad, "protocol 4 carrying IPv6")
        self.assert_counters({IPIP_ENCAP: 2, IPIP_DECAP: 2, IPIP_BAD: 1}, timeout=2.0)
