"""GTP-U (plugins/tunnels gtpu, docs/tunnels.md) checked against scapy.contrib.gtp byte
for byte: G-PDU encap and decap (with a sequence number and a PDU session container
extension header), Echo Request → Echo Response, an Error Indication for an unknown TEID,
and the malformed cases counted by reason. The kernel here has no GTP module, so scapy is
the peer: pg0 is the underlay (peer 10.0.0.2), pg1 a LAN."""

from scapy.compat import raw
from scapy.contrib.gtp import (GTPEchoRequest, GTPEchoResponse, GTPHeader,
                               GTPPDUSessionContainer, GTP_U_Header, IE_Recovery)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest

DECAP = ("gtpu4-input", "G-PDUs decapsulated")
ENCAP = ("gtpu4-encap", "packets encapsulated")
ECHO = ("gtpu4-input", "Echo Requests answered")
NO_TUNNEL = ("gtpu4-input", "no tunnel for (src, dst, TEID)")
INDICATIONS = ("gtpu4-input", "Error Indications sent for unknown TEIDs")
BAD_VERSION = ("gtpu4-input", "GTP version not 1 or protocol type GTP'")
BAD_LENGTH = ("gtpu4-input", "GTP length disagrees with the UDP length")
BAD_INNER = ("gtpu4-input", "G-PDU payload is neither IPv4 nor IPv6")


class TestGtpu(Ip4RouterTest):
    n_pg = 2

    def setup_test(self):
        super().setup_test()
        out = self.vpp.cli("create gtpu tunnel src 10.0.0.1 dst %s teid 100 tteid 200"
                           % self.pg0.remote_ip4)
        assert out.strip() == "gtpu_tunnel0"
        self.vpp.cli("set interface state gtpu_tunnel0 up")
        self.vpp.cli("set interface ip address gtpu_tunnel0 10.99.0.1/30")
        self.vpp.cli("ip route add 198.51.100.0/24 via gtpu_tunnel0")
        self.snapshot_counters()

    def teardown_test(self):
        self.vpp.cli("ip route del 198.51.100.0/24 via gtpu_tunnel0")
        self.vpp.cli("create gtpu tunnel src 10.0.0.1 dst %s teid 100 del"
                     % self.pg0.remote_ip4)

    def from_peer(self, gtp, sport=2152):
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=self.pg0.remote_ip4, dst="10.0.0.1")
                         / UDP(sport=sport, dport=2152) / gtp))

    def to_peer(self, gtp, dport=2152):
        return (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                / IP(src="10.0.0.1", dst=self.pg0.remote_ip4, ttl=64, id=0, flags=0)
                / UDP(sport=2152, dport=dport, chksum=0) / gtp)

    def test_gpdu_encap_and_decap_match_scapy(self):
        pkts = [self.udp_from(self.pg1, "198.51.100.%d" % (i + 1), payload=b"gtp-%d" % i)
                for i in range(3)]
        rx = self.send_and_expect(self.pg1, pkts, self.pg0)
        for p, s in zip(rx, pkts):
            inner = s[IP].copy()
            inner.ttl -= 1
            del inner.chksum
            want = self.to_peer(GTP_U_Header(teid=200, gtp_type=255) / IP(raw(inner)))
            assert raw(p) == raw(want), p.show2(dump=True)
        user = IP(src="198.51.100.9", dst=self.pg1.remote_ip4) / UDP(sport=3, dport=4) \
            / Raw(b"down")
        back = [self.from_peer(GTP_U_Header(teid=100, gtp_type=255) / user),
                self.from_peer(GTP_U_Header(teid=100, gtp_type=255, S=1, seq=7) / user),
                self.from_peer(GTP_U_Header(teid=100, gtp_type=255, E=1,
                                            next_ex=0x85)
                               / GTPPDUSessionContainer(type=0, QFI=9) / user)]
        rx = self.send_and_expect(self.pg0, back, self.pg1)
        for p in rx:
            assert p[IP].ttl == 63 and raw(p[IP][UDP]) == raw(IP(raw(user))[UDP])
        self.assert_counters({ENCAP: 3, DECAP: 3})

    def test_echo_and_error_indication(self):
        req = self.from_peer(GTPHeader(seq=0x1234, S=1, teid=0) / GTPEchoRequest(),
                             sport=40000)
        rx = self.send_and_expect(self.pg0, [req], self.pg0)
        r = rx[0]
        assert r[UDP].sport == 2152 and r[UDP].dport == 40000
        assert r[IP].dst == self.pg0.remote_ip4
        g = GTPHeader(raw(r[UDP].payload))
        assert g.gtp_type == 2 and g.seq == 0x1234
        assert GTPEchoResponse in g and IE_Recovery in g
        unknown = self.from_peer(GTP_U_Header(teid=7, gtp_type=255) / IP() / UDP())
        rx = self.send_and_expect(self.pg0, [unknown], self.pg0)
        g = raw(rx[0][UDP].payload)
        assert g[1] == 26, "Error Indication"
        # TEID Data I (16) with the TEID, GTP-U Peer Address (133) with our address.
        assert g[12:17] == bytes([16, 0, 0, 0, 7])
        assert g[17:24] == bytes([133, 0, 4, 10, 0, 0, 1])
        self.assert_counters({ECHO: 1, NO_TUNNEL: 1, INDICATIONS: 1})

    def test_malformed_counted(self):
        user = IP(dst=self.pg1.remote_ip4) / UDP()
        bad = [
            (self.from_peer(GTP_U_Header(version=2, teid=100, gtp_type=255) / user),
             BAD_VERSION),
            (self.from_peer(GTP_U_Header(teid=100, gtp_type=255, length=99) / user),
             BAD_LENGTH),
            (self.from_peer(GTP_U_Header(teid=100, gtp_type=255) / Raw(b"\x50" * 20)),
             BAD_INNER),
        ]
        for p, _ in bad:
            self.send_and_assert_no_replies(self.pg0, [p], "malformed GTP-U")
        self.assert_counters({k: 1 for _, k in bad}, timeout=2.0)
