"""IPv6 forwarding and the router's own IPv6: hop limit, rewrite, ECMP-free routes, neighbor
discovery (answering, learning, soliciting), ICMPv6 echo and errors (hop limit exceeded, no
route, port unreachable, packet too big), malformed headers."""

from scapy.compat import raw
from scapy.layers.inet6 import (ICMPv6DestUnreach, ICMPv6EchoReply, ICMPv6EchoRequest,
                                ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr,
                                ICMPv6NDOptSrcLLAddr, ICMPv6PacketTooBig, ICMPv6TimeExceeded,
                                IPerror6, IPv6, UDPerror)
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils6 import in6_getnsma, in6_getnsmac
from socket import AF_INET6, inet_ntop, inet_pton

from sluice_test import IpRoute, SluiceTestCase
from sluice_test.parsers import parse_neighbors

NO_ROUTE = ("ip6-lookup", "ip6 no route to destination")
ICMP6_SENT = ("ip6-icmp-error", "ICMPv6 errors sent")
HOP_LIMIT = ("ip6-rewrite", "ip6 hop limit <= 1")
TOO_BIG = ("ip6-rewrite", "ip6 packet larger than the MTU")
ECHO = ("ip6-local", "ICMPv6 echo replies sent")
NA_SENT = ("ip6-local", "neighbor advertisements sent")
NA_RX = ("ip6-local", "neighbor advertisements received")
LEARNED = ("ip6-neighbor-process", "neighbours learned")
NS_SENT = ("ip6-glean", "neighbor solicitations sent")


def solicited(addr):
    return inet_ntop(AF_INET6, in6_getnsma(inet_pton(AF_INET6, addr)))


def solicited_mac(addr):
    return in6_getnsmac(in6_getnsma(inet_pton(AF_INET6, addr)))


class TestIp6(SluiceTestCase):

    def setup_test(self):
        self.create_pg_interfaces(range(3), up=True, ip6=True, resolve=True)
        self.pg0, self.pg1, self.pg2 = self.pg_interfaces
        self.snapshot_counters()

    def udp6(self, src_if, dst, hlim=64, sport=1234, dport=5678, payload=b"sluice-v6",
             src=None):
        return Ether(raw(Ether(dst=src_if.local_mac, src=src_if.remote_mac)
                         / IPv6(src=src or src_if.remote_ip6, dst=dst, hlim=hlim)
                         / UDP(sport=sport, dport=dport) / Raw(payload)))

    def test_forward_over_route_decrements_hop_limit(self):
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        IpRoute(self, "fd02:0:0:7::/64", via=self.pg2.remote_ip6).add_config()
        pkts = [self.udp6(self.pg0, f"fd02::{i:x}", hlim=64 - i % 60, sport=1000 + i,
                          payload=bytes([i]) * (10 + i % 40)) for i in range(100)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        for sent, got in zip(pkts, rx):
            assert got.dst == self.pg1.remote_mac and got.src == self.pg1.local_mac
            assert got.type == 0x86dd
            assert got[IPv6].hlim == sent[IPv6].hlim - 1
            assert (got[IPv6].src, got[IPv6].dst, got[IPv6].plen) == \
                (sent[IPv6].src, sent[IPv6].dst, sent[IPv6].plen)
            assert raw(got[UDP]) == raw(sent[UDP]), "L4 untouched (no checksum in IPv6)"
        # The longer prefix wins.
        pkts = [self.udp6(self.pg0, f"fd02:0:0:7::{i + 1:x}") for i in range(10)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg2)
        assert all(p.dst == self.pg2.remote_mac for p in rx)
        # Connected host with a static neighbour: straight to it.
        rx = self.send_and_expect(self.pg0, [self.udp6(self.pg0, self.pg2.remote_ip6)],
                                  self.pg2)
        assert rx[0][IPv6].dst == self.pg2.remote_ip6
        self.assert_counters({})

    def test_neighbor_solicitation_answered_and_sender_learned(self):
        host = self.pg0.remote_host_ip6(7)
        host_mac = self.pg0.remote_host_mac(7)
        ns = (Ether(dst=solicited_mac(self.pg0.local_ip6), src=host_mac)
              / IPv6(src=host, dst=solicited(self.pg0.local_ip6), hlim=255)
              / ICMPv6ND_NS(tgt=self.pg0.local_ip6) / ICMPv6NDOptSrcLLAddr(lladdr=host_mac))
        rx = self.send_and_expect(self.pg0, [ns], self.pg0)
        na = rx[0]
        assert na.dst == host_mac and na.src == self.pg0.local_mac
        assert na[IPv6].src == self.pg0.local_ip6 and na[IPv6].dst == host
        assert na[IPv6].hlim == 255
        adv = na[ICMPv6ND_NA]
        assert adv.tgt == self.pg0.local_ip6
        assert (adv.R, adv.S, adv.O) == (1, 1, 1)
        assert na[ICMPv6NDOptDstLLAddr].lladdr == self.pg0.local_mac
        chk = adv.cksum
        del adv.cksum
        assert IPv6(raw(na[IPv6]))[ICMPv6ND_NA].cksum == chk, "valid ICMPv6 checksum"
        # The solicitation's sender is now a (dynamic) neighbour, and reachable.
        self.wait_for(lambda: any(n.ip == host for n in
                                  parse_neighbors(self.vpp.cli("show ip6 neighbors"))),
                      "NS sender learned")
        rx = self.send_and_expect(self.pg1, [self.udp6(self.pg1, host)], self.pg0)
        assert rx[0].dst == host_mac
        # The link-local address answers too; an NS for someone else does not.
        ns_ll = (Ether(dst="33:33:ff:00:00:00", src=host_mac)
                 / IPv6(src=host, dst=solicited(self.pg0.local_ip6_ll), hlim=255)
                 / ICMPv6ND_NS(tgt=self.pg0.local_ip6_ll)
                 / ICMPv6NDOptSrcLLAddr(lladdr=host_mac))
        rx = self.send_and_expect(self.pg0, [ns_ll], self.pg0)
        assert rx[0][ICMPv6ND_NA].tgt == self.pg0.local_ip6_ll
        other = (Ether(dst="33:33:ff:00:00:99", src=host_mac)
                 / IPv6(src=host, dst=solicited("fd01::99"), hlim=255)
                 / ICMPv6ND_NS(tgt="fd01::99") / ICMPv6NDOptSrcLLAddr(lladdr=host_mac))
        bad_hlim = (Ether(dst="33:33:ff:00:00:01", src=host_mac)
                    / IPv6(src=host, dst=solicited(self.pg0.local_ip6), hlim=64)
                    / ICMPv6ND_NS(tgt=self.pg0.local_ip6))
        self.send_and_assert_no_replies(self.pg0, [other, bad_hlim])
        self.assert_counters({NA_SENT: 2, ("ip6-local", "neighbor solicitation for another "
                                                       "address"): 1,
                              ("ip6-local", "invalid neighbor discovery packet"): 1,
                              LEARNED: 2})

    def test_glean_solicits_unresolved_host_then_forwards(self):
        target = self.pg1.remote_host_ip6(9)
        mac9 = self.pg1.remote_host_mac(9)
        rx = self.send_and_expect(self.pg0, [self.udp6(self.pg0, target)], self.pg1)
        ns = rx[0]
        assert ns.dst == solicited_mac(target)
        assert ns.src == self.pg1.local_mac
        assert ns[IPv6].dst == solicited(target) and ns[IPv6].hlim == 255
        assert ns[IPv6].src == self.pg1.local_ip6_ll, "solicited from the link-local"
        assert ns[ICMPv6ND_NS].tgt == target
        assert ns[ICMPv6NDOptSrcLLAddr].lladdr == self.pg1.local_mac
        # The host answers; the router learns it and forwards from then on.
        na = (Ether(dst=self.pg1.local_mac, src=mac9)
              / IPv6(src=target, dst=self.pg1.local_ip6_ll, hlim=255)
              / ICMPv6ND_NA(tgt=target, R=0, S=1, O=1) / ICMPv6NDOptDstLLAddr(lladdr=mac9))
        self.send_and_assert_no_replies(self.pg1, [na])
        self.wait_for(lambda: any(n.ip == target for n in
                                  parse_neighbors(self.vpp.cli("show ip6 neighbors"))),
                      "NA learned")
        pkts = [self.udp6(self.pg0, target, sport=7000 + i) for i in range(5)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        assert all(p.dst == mac9 and p[UDP].sport >= 7000 for p in rx)
        self.assert_counters({NS_SENT: 1, NA_RX: 1, LEARNED: 1})

    def test_echo_to_global_and_link_local(self):
        reqs = [Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                / IPv6(src=self.pg0.remote_ip6, dst=dst, hlim=64)
                / ICMPv6EchoRequest(id=0x77, seq=s, data=b"v6-ping-%d" % s)
                for s, dst in enumerate([self.pg0.local_ip6, self.pg1.local_ip6,
                                         self.pg0.local_ip6_ll])]
        rx = self.send_and_expect(self.pg0, reqs, self.pg0)
        for req, rep in zip(reqs, rx):
            assert rep[IPv6].src == req[IPv6].dst and rep[IPv6].dst == req[IPv6].src
            assert rep[IPv6].hlim == 64, "locally originated: hop limit not decremented"
            e = rep[ICMPv6EchoReply]
            assert (e.id, e.seq, e.data) == (0x77, req[ICMPv6EchoRequest].seq,
                                             req[ICMPv6EchoRequest].data)
            chk = e.cksum
            del e.cksum
            assert IPv6(raw(rep[IPv6]))[ICMPv6EchoReply].cksum == chk
        self.assert_counters({ECHO: 3})

    def test_cli_ping_own_address(self):
        out = self.vpp.cli(f"ping {self.pg1.local_ip6} repeat 2 interval 0.2")
        assert "2 sent, 2 received" in out, out

    def check_error(self, rx, icmp_cls, sent):
        assert rx.dst == self.pg0.remote_mac and rx.src == self.pg0.local_mac
        assert rx[IPv6].src == self.pg0.local_ip6, "from the rx interface's global address"
        assert rx[IPv6].dst == sent[IPv6].src
        assert rx[IPv6].hlim == 255, "sent with the hop limit it was built with"
        err = rx[icmp_cls]
        chk = err.cksum
        del err.cksum
        assert IPv6(raw(rx[IPv6]))[icmp_cls].cksum == chk, "valid ICMPv6 checksum"
        q = rx[IPerror6]
        assert (q.src, q.dst) == (sent[IPv6].src, sent[IPv6].dst), "quotes the original"
        return rx[icmp_cls]

    def test_hop_limit_1_gets_time_exceeded(self):
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        sent = self.udp6(self.pg0, "fd02::9", hlim=1, sport=33434, dport=33435)
        rx = self.send_and_expect(self.pg0, [sent], self.pg0)
        te = self.check_error(rx[0], ICMPv6TimeExceeded, sent)
        assert te.code == 0
        assert rx[0][UDPerror].dport == 33435
        self.assert_counters({HOP_LIMIT: 1, ICMP6_SENT: 1})

    def test_no_route_gets_destination_unreachable(self):
        sent = self.udp6(self.pg0, "fd99::1")
        rx = self.send_and_expect(self.pg0, [sent], self.pg0)
        du = self.check_error(rx[0], ICMPv6DestUnreach, sent)
        assert du.code == 0, "no route to destination"
        self.assert_counters({NO_ROUTE: 1, ICMP6_SENT: 1})

    def test_udp_to_router_gets_port_unreachable(self):
        sent = self.udp6(self.pg0, self.pg0.local_ip6, dport=9)
        rx = self.send_and_expect(self.pg0, [sent], self.pg0)
        du = self.check_error(rx[0], ICMPv6DestUnreach, sent)
        assert du.code == 4
        self.assert_counters({ICMP6_SENT: 1})

    def test_packet_too_big(self):
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        self.vpp.cli("set interface mtu 1280 pg1")
        try:
            small = self.udp6(self.pg0, "fd02::1", payload=b"x" * (1280 - 48))
            big = self.udp6(self.pg0, "fd02::2", payload=b"x" * (1400 - 48))
            rx = self.send_and_expect(self.pg0, [small], self.pg1)
            assert len(rx[0][IPv6]) == 1280, "exactly the MTU passes"
            rx = self.send_and_expect(self.pg0, [big], self.pg0)
            ptb = self.check_error(rx[0], ICMPv6PacketTooBig, big)
            assert ptb.mtu == 1280
            assert len(rx[0][IPv6]) <= 1280, "the error fits the minimum MTU"
            self.assert_counters({TOO_BIG: 1, ICMP6_SENT: 1})
        finally:
            self.vpp.cli("set interface mtu 1500 pg1")

    def test_malformed_ipv6_dropped_with_reason(self):
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        good = raw(self.udp6(self.pg0, "fd02::1", payload=b"y" * 40))
        # Payload length beyond the frame.
        long_plen = bytearray(good)
        long_plen[14 + 4:14 + 6] = (len(good) - 14 - 40 + 100).to_bytes(2, "big")
        # Wrong version.
        v4 = bytearray(good)
        v4[14] = 0x45
        # Shorter than a header.
        short = good[:14 + 30]
        # Multicast source.
        msrc = raw(self.udp6(self.pg0, "fd02::1", src="ff02::1"))
        # Multicast group the router is not in.
        mdst = raw(Ether(dst="33:33:00:00:00:fb", src=self.pg0.remote_mac)
                   / IPv6(src=self.pg0.remote_ip6, dst="ff02::fb") / UDP())
        frames = [Ether(bytes(x)) for x in (long_plen, v4, short, msrc, mdst)]
        before = self.get_interface_counters()["pg0"].get("drops", 0)
        self.send_and_assert_no_replies(self.pg0, frames)
        after = self.get_interface_counters()["pg0"].get("drops", 0)
        assert after - before == len(frames), "drops counted on the receiving interface"
        self.assert_counters({
            ("ip6-input", "ip6 payload length > l2 length"): 1,
            ("ip6-input", "ip6 version != 6"): 1,
            ("ip6-input", "ip6 length < 40 bytes"): 1,
            ("ip6-input", "ip6 multicast source address"): 1,
            ("ip6-input", "ip6 multicast not forwarded"): 1,
        })
        # Ethernet padding after a short payload is trimmed, not forwarded.
        padded = Ether(good + b"\0" * 20)
        rx = self.send_and_expect(self.pg0, [padded], self.pg1)
        assert len(rx[0]) == len(good), "padding trimmed to the payload length"
