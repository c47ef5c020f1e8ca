"""SRv6 (plugins/tunnels srv6, docs/tunnels.md) checked against scapy's IPv6 and
IPv6ExtHdrSegmentRouting layers byte for byte: H.Encaps of a steered prefix, T.Encaps.L2 of
an L2-steered interface, End, End.DT4, and every malformed SRH case counted by its reason. pg0 is the IPv6 underlay (peer
2001:db8::2), pg1 a LAN."""

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrRouting, IPv6ExtHdrSegmentRouting
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest

ENCAP = ("sr-pl-rewrite-encaps", "packets encapsulated")
END = ("sr-localsid", "End: forwarded to the next segment")
DECAP = ("sr-localsid", "decapsulated (End.DX4/DX6/DT4/DT6)")
SL_BEYOND = ("sr-localsid", "SRH segments left beyond the last entry")
LAST_ENTRY = ("sr-localsid", "SRH last entry beyond its length")
ROUTING_TYPE = ("sr-localsid", "routing header type is not 4 (SRH)")
TRUNCATED = ("sr-localsid", "shorter than its headers")
SL_ZERO = ("sr-localsid", "End with segments left 0")
SL_NOT_ZERO = ("sr-localsid", "decapsulating SID with segments left not 0")
BAD_INNER = ("sr-localsid", "inner packet is not of the behaviour's family")
XCONNECT = ("l2-input", "L2 cross-connect frames")
INSERT = ("sr-pl-rewrite-insert", "SRH inserted")

ME = "2001:db8::1"
PEER = "2001:db8::2"


class TestSrv6(Ip4RouterTest):
    n_pg = 2

    def setup_test(self):
        super().setup_test()
        for c in ["set interface ip address pg0 %s/64" % ME,
                  "ip neighbor pg0 %s %s static" % (PEER, self.pg0.remote_mac),
                  "ip route add fc00:a::/32 via %s pg0" % PEER,
                  "set sr encaps source addr %s" % ME,
                  "sr policy add bsid fc00:5::b1 next fc00:a::1 next fc00:a::2 encap",
                  "sr steer l3 198.51.100.0/24 via bsid fc00:5::b1",
                  "sr localsid address fc00:5::e behavior end",
                  "sr localsid address fc00:5::d4 behavior end.dt4 0"]:
            self.vpp.cli(c)
        self.snapshot_counters()

    def teardown_test(self):
        self.vpp.cli("sr localsid del address fc00:5::e")
        self.vpp.cli("sr localsid del address fc00:5::d4")
        self.vpp.cli("sr steer del l3 198.51.100.0/24 via bsid fc00:5::b1")
        self.vpp.cli("sr policy del bsid fc00:5::b1")
        self.vpp.cli("ip route del fc00:a::/32 via %s pg0" % PEER)

    def from_peer(self, dst, payload, nh=None):
        ip6 = IPv6(src=PEER, dst=dst, hlim=64)
        if nh is not None:
            ip6.nh = nh
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac) / ip6
                         / payload))

    def send_and_assert_nothing_forwarded(self, p):
        """Like `send_and_assert_no_replies`, but a packet reaching a local SID counts as
        tx on the SID's interface (`sr-localsid<n>`: that is its hit counter), so only
        the pg interfaces must stay silent."""
        def pg_tx():
            c = self.get_interface_counters()
            return [c.get(i.name, {}).get("tx packets", 0) for i in self.pg_interfaces]
        before = pg_tx()
        self.pg0.add_stream([p])
        self.pg_start()
        assert pg_tx() == before, p.show2(dump=True)

    def test_encap_matches_scapy(self):
        pkts = [self.udp_from(self.pg1, "198.51.100.%d" % (i + 1), payload=b"sr-%d" % i)
                for i in range(3)]
        rx = self.send_and_expect(self.pg1, pkts, self.pg0)
        for p, s in zip(rx, pkts):
            inner = s[IP].copy()
            inner.ttl -= 1
            del inner.chksum
            want = (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                    / IPv6(src=ME, dst="fc00:a::1", hlim=64, tc=0, fl=0)
                    / IPv6ExtHdrSegmentRouting(addresses=["fc00:a::2", "fc00:a::1"],
                                               segleft=1, lastentry=1)
                    / IP(raw(inner)))
            assert raw(p) == raw(want), p.show2(dump=True)
        self.assert_counters({ENCAP: 3})

    def test_insert_matches_scapy(self):
        """`sr policy add ... insert`: the SRH goes behind the packet's own IPv6 header,
        its destination kept as segment 0."""
        for c in ["sr policy add bsid fc00:5::b2 next fc00:a::1 next fc00:a::2 insert",
                  "sr steer l3 fd99::/64 via bsid fc00:5::b2"]:
            self.vpp.cli(c)
        try:
            pkts = [self.from_peer("fd99::%d" % (i + 1),
                                   UDP(sport=7, dport=9) / Raw(b"ins-%d" % i))
                    for i in range(3)]
            rx = self.send_and_expect(self.pg0, pkts, self.pg0)
            for p, s in zip(rx, pkts):
                want = (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                        / IPv6(src=PEER, dst="fc00:a::1", hlim=63)
                        / IPv6ExtHdrSegmentRouting(
                            addresses=[s[IPv6].dst, "fc00:a::2", "fc00:a::1"],
                            segleft=2, lastentry=2)
                        / s[UDP])
                assert raw(p) == raw(want), p.show2(dump=True)
            self.assert_counters({INSERT: 3})
        finally:
            self.vpp.cli("sr policy del bsid fc00:5::b2")

    def test_insert_to_bsid_matches_scapy(self):
        """A packet to an insert policy's BSID: the BSID is consumed, the SRH holds the
        segment list only (VPP's rewrite_bsid), segments left and last entry n - 1."""
        self.vpp.cli("sr policy add bsid fc00:5::b3 next fc00:a::1 next fc00:a::2 insert")
        try:
            pkts = [self.from_peer("fc00:5::b3",
                                   UDP(sport=7, dport=9) / Raw(b"bsid-%d" % i))
                    for i in range(3)]
            rx = self.send_and_expect(self.pg0, pkts, self.pg0)
            for p, s in zip(rx, pkts):
                want = (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                        / IPv6(src=PEER, dst="fc00:a::1", hlim=63)
                        / IPv6ExtHdrSegmentRouting(
                            addresses=["fc00:a::2", "fc00:a::1"],
                            segleft=1, lastentry=1)
                        / s[UDP])
                assert raw(p) == raw(want), p.show2(dump=True)
            self.assert_counters({INSERT: 3})
        finally:
            self.vpp.cli("sr policy del bsid fc00:5::b3")

    def test_end_and_dt4_match_scapy(self):
        srh = IPv6ExtHdrSegmentRouting(addresses=["fc00:a::9", "fc00:5::e"], segleft=1,
                                       lastentry=1)
        end = self.from_peer("fc00:5::e", srh / UDP(sport=1, dport=2) / Raw(b"end"))
        rx = self.send_and_expect(self.pg0, [end], self.pg0)
        want = end[IPv6].copy()
        want.dst = "fc00:a::9"
        want.hlim = 63
        want[IPv6ExtHdrSegmentRouting].segleft = 0
        assert raw(rx[0][IPv6]) == raw(want)
        inner = IP(src="198.51.100.9", dst=self.pg1.remote_ip4) / UDP(sport=3, dport=4) \
            / Raw(b"dt4")
        dt4 = self.from_peer("fc00:5::d4", IPv6ExtHdrSegmentRouting(
            addresses=["fc00:5::d4"], segleft=0, lastentry=0) / inner)
        rx = self.send_and_expect(self.pg0, [dt4], self.pg1)
        got = rx[0][IP]
        assert got.ttl == 63 and raw(got[UDP]) == raw(IP(raw(inner))[UDP])
        self.assert_counters({END: 1, DECAP: 1})

    def test_malformed_srh_counted(self):
        two = ["fc00:a::9", "fc00:5::e"]
        udp = UDP(sport=1, dport=2) / Raw(b"x")
        bad = [
            (self.from_peer("fc00:5::e", IPv6ExtHdrSegmentRouting(
                addresses=two, segleft=2, lastentry=1) / udp), SL_BEYOND),
            (self.from_peer("fc00:5::e", IPv6ExtHdrSegmentRouting(
                addresses=two, segleft=1, lastentry=5) / udp), LAST_ENTRY),
            (self.from_peer("fc00:5::e", IPv6ExtHdrRouting(
                addresses=two, segleft=1) / udp), ROUTING_TYPE),
            (self.from_peer("fc00:5::e", Raw(raw(IPv6ExtHdrSegmentRouting(
                addresses=two, segleft=1))[:20]), nh=43), TRUNCATED),
            (self.from_peer("fc00:5::e", IPv6ExtHdrSegmentRouting(
                addresses=two, segleft=0, lastentry=1) / udp), SL_ZERO),
            (self.from_peer("fc00:5::d4", IPv6ExtHdrSegmentRouting(
                addresses=two, segleft=1, lastentry=1) / IP() / udp), SL_NOT_ZERO),
            (self.from_peer("fc00:5::d4", IPv6ExtHdrSegmentRouting(
                addresses=two[:1], segleft=0, lastentry=0, nh=41) / IP() / udp), BAD_INNER),
        ]
        for p, _ in bad:
            self.send_and_assert_nothing_forwarded(p)
        want = {}
        for _, k in bad:
            want[k] = want.get(k, 0) + 1
        self.assert_counters(want, timeout=2.0)

    def test_steer_l2_encaps_whole_frame(self):
        """T.Encaps.L2 (`sr steer l2`): frames in on pg1 leave pg0 whole (Ethernet header
        included) behind an outer IPv6 header toward the policy's first segment, next
        header 143, with an SRH only for a segment list of two or more."""
        self.vpp.cli("sr policy add bsid fc00:5::b2 next fc00:a::7 encap")
        try:
            for bsid, segs in [("fc00:5::b2", ["fc00:a::7"]),
                               ("fc00:5::b1", ["fc00:a::1", "fc00:a::2"])]:
                self.vpp.cli("sr steer l2 pg1 via bsid %s" % bsid)
                assert "L2 pg1\t%s" % bsid in self.vpp.cli("show sr steering-policies")
                # Not addressed to the router: L2 steering takes every frame.
                frames = [Ether(raw(Ether(dst="02:00:00:00:aa:%02x" % i,
                                          src="02:00:00:00:bb:01")
                                    / IP(src="10.9.0.1", dst="10.9.0.2")
                                    / UDP(sport=7, dport=9) / Raw(b"l2-%d" % i)))
                          for i in range(3)]
                rx = self.send_and_expect(self.pg1, frames, self.pg0)
                for p, f in zip(rx, frames):
                    outer = IPv6(src=ME, dst=segs[0], hlim=64, tc=0, fl=0)
                    if len(segs) == 1:
                        outer.nh = 143
                    else:
                        outer = outer / IPv6ExtHdrSegmentRouting(
                            addresses=segs[::-1], segleft=len(segs) - 1,
                            lastentry=len(segs) - 1, nh=143)
                    want = (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                            / outer / Raw(raw(f)))
                    assert raw(p) == raw(want), p.show2(dump=True)
                    assert raw(p)[-len(raw(f)):] == raw(f)
                self.vpp.cli("sr steer del l2 pg1")
                assert "L2 pg1" not in self.vpp.cli("show sr steering-policies")
            self.assert_counters({ENCAP: 6, XCONNECT: 6})
            # Back in L3 mode: a frame not for the router is not steered any more.
            self.send_and_assert_no_replies(self.pg1, frames)
            self.assert_cli_error("sr steer l2 pg1 via bsid fc00:5::99", "fc00:5::99")
            self.assert_cli_error("sr steer l2 pg1 via bsid bogus", "`bogus'")
            self.assert_cli_error("sr steer l2 nosuchif via bsid fc00:5::b2", "nosuchif")
            self.assert_cli_error("sr steer l4 pg1 via bsid fc00:5::b2", "`l4'")
            self.assert_cli_error("sr steer del l2 pg1", "pg1 is not L2-steered")
        finally:
            self.vpp.cli("sr policy del bsid fc00:5::b2")
