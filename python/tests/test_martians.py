"""Data-plane hygiene (RFC 1812 §5.3.7, RFC 4861, RFC 826 practice, issue 22): martian
sources, group source MACs, unicast IP in link-layer broadcast frames, ARP/ND with a group
sender address, no ARP for a directed broadcast — each dropped under its own `show errors`
reason, nothing transmitted — and the CLI refusing such neighbours and addresses."""

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, UDP, IPOption
from scapy.layers.inet6 import ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils import checksum
from scapy.utils6 import in6_getnsma, in6_getnsmac
from socket import AF_INET6, inet_ntop, inet_pton

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute, SluiceTestCase

MARTIAN = ("ip4-input", "ip4 martian source address")
OWN_SOURCE = ("ip4-input", "ip4 source is one of our addresses")
OWN_SOURCE6 = ("ip6-input", "ip6 source is one of our addresses")
BAD_OPTIONS = ("ip4-input", "ip4 options malformed")
GROUP_SRC_MAC = ("ethernet-input", "multicast/broadcast source MAC")
UNICAST_IN_GROUP = ("ethernet-input", "unicast IP in l2 broadcast/multicast frame")
ARP_GROUP_SENDER = ("arp-input", "ARP sender MAC is broadcast/multicast")
DIRECTED_BCAST = ("ip4-glean", "no ARP for a directed broadcast")
DROP_ROUTE = ("ip4-lookup", "ip4 drop route")
V6_LOOPBACK = ("ip6-input", "ip6 loopback source address")
V6_UNSPEC = ("ip6-input", "ip6 unspecified source address")
ND_GROUP = ("ip6-local", "ND link-layer address is broadcast/multicast")


class TestMartians(Ip4RouterTest):

    def setup_test(self):
        super().setup_test()
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.snapshot_counters()

    def udp(self, src_ip, dst_ip="10.2.0.1", dst_mac=None, src_mac=None):
        return Ether(raw(Ether(dst=dst_mac or self.pg0.local_mac,
                               src=src_mac or self.pg0.remote_mac)
                         / IP(src=src_ip, dst=dst_ip) / UDP(sport=1, dport=2) / Raw(b"x" * 8)))

    @pytest.mark.parametrize("src", ["0.1.2.3", "0.0.0.0", "127.0.0.1", "224.0.0.5",
                                     "239.1.1.1", "240.0.0.1", "255.255.255.255"])
    def test_martian_source_is_dropped(self, src):
        self.send_and_expect(self.pg0, [self.udp(self.pg0.remote_ip4)], self.pg1)
        self.assert_counters({})
        self.send_and_assert_no_replies(self.pg0, [self.udp(src)] * 3, f"source {src}")
        self.assert_counters({MARTIAN: 3})

    def test_dhcp_discover_source_passes_input(self):
        """0.0.0.0 -> 255.255.255.255 is a DHCP client's discover: ip4-input lets it by."""
        pkt = self.udp("0.0.0.0", "255.255.255.255", dst_mac="ff:ff:ff:ff:ff:ff")
        before = self.get_counters()
        self.pg0.add_stream([pkt] * 2)
        self.pg_start()
        after = self.get_counters()
        assert after.get(MARTIAN, 0) == before.get(MARTIAN, 0), after

    def test_own_address_as_source_is_dropped(self):
        pkt = self.udp(self.pg0.local_ip4, self.pg1.local_ip4)
        self.send_and_assert_no_replies(self.pg0, [pkt] * 2, "own source")
        self.assert_counters({OWN_SOURCE: 2})

    def test_own_address_as_source_in_transit_is_dropped(self):
        """RFC 1812 §5.3.7: a packet to forward whose source is one of the router's own
        addresses (the rx interface's, another interface's) is dropped, never forwarded."""
        pkts = [self.udp(self.pg0.local_ip4), self.udp(self.pg1.local_ip4)]
        self.send_and_assert_no_replies(self.pg0, pkts * 2, "own source in transit")
        on_pg1 = [self.udp(a, dst_mac=self.pg1.local_mac, src_mac=self.pg1.remote_mac)
                  for a in (self.pg0.local_ip4, self.pg1.local_ip4)]
        self.send_and_assert_no_replies(self.pg1, on_pg1, "own source in transit")
        self.assert_counters({OWN_SOURCE: 6})
        # A source sharing the low 16 bits of one of ours is forwarded.
        self.vpp.cli("set interface ip address pg0 10.1.0.7/16")
        self.snapshot_counters()
        self.send_and_expect(self.pg0, [self.udp("10.3.0.7")], self.pg1)
        self.send_and_assert_no_replies(self.pg0, [self.udp("10.1.0.7")], "own source")
        self.assert_counters({OWN_SOURCE: 1})

    def test_malformed_ip4_options_are_dropped(self):
        def with_opt(o, reparse=False):
            ip = bytearray(raw(IP(src=self.pg0.remote_ip4, dst="10.2.0.1",
                                  options=[IPOption(b"\x01\x01\x01\x00")])
                               / UDP(sport=1, dport=2) / Raw(b"x" * 8)))
            ip[20:24] = o
            ip[10:12] = b"\x00\x00"
            ip[10:12] = checksum(bytes(ip[:24])).to_bytes(2, "big")
            eth = Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac, type=0x0800)
            # scapy cannot parse the malformed ones back: they go as raw bytes.
            return Ether(raw(eth / Raw(bytes(ip)))) if reparse else eth / Raw(bytes(ip))
        bad = [with_opt(b"\x07\x00\x04\x00"), with_opt(b"\x01\x07\x01\x00"),
               with_opt(b"\x07\x09\x04\x00")]
        self.send_and_assert_no_replies(self.pg0, bad, "options of length 0, 1, too long")
        self.assert_counters({BAD_OPTIONS: 3})
        self.send_and_expect(self.pg0, [with_opt(b"\x01\x01\x01\x00", True)], self.pg1)

    def test_group_source_mac_is_dropped(self):
        for mac in ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01"]:
            self.send_and_assert_no_replies(
                self.pg0, [self.udp(self.pg0.remote_ip4, src_mac=mac)], mac)
        self.assert_counters({GROUP_SRC_MAC: 2})

    def test_unicast_ip_in_l2_broadcast_is_dropped(self):
        bc = self.udp(self.pg0.remote_ip4, "10.2.0.1", dst_mac="ff:ff:ff:ff:ff:ff")
        mc = self.udp(self.pg0.remote_ip4, "10.2.0.1", dst_mac="01:00:5e:00:00:05")
        self.send_and_assert_no_replies(self.pg0, [bc, mc, bc], "unicast in broadcast")
        self.assert_counters({UNICAST_IN_GROUP: 3})

    def test_directed_broadcast_of_every_subnet_is_not_unicast_in_l2_broadcast(self):
        """Every subnet of the interface, not only its first: the broadcast and network
        addresses in a broadcast frame are the FIB's drop entries; a unicast one is dropped
        as unicast in a broadcast frame."""
        self.vpp.cli("set interface ip address pg0 10.0.5.1/24")
        self.vpp.cli("set interface ip address pg0 10.0.6.1/23")
        self.snapshot_counters()
        bcast = [self.udp(self.pg0.remote_ip4, d, dst_mac="ff:ff:ff:ff:ff:ff")
                 for d in ["10.0.5.255", "10.0.7.255", "10.0.6.0", "10.0.0.255"]]
        self.send_and_assert_no_replies(self.pg0, bcast, "directed broadcasts")
        self.assert_counters({DROP_ROUTE: 4, UNICAST_IN_GROUP: 0})
        uni = [self.udp(self.pg0.remote_ip4, d, dst_mac="ff:ff:ff:ff:ff:ff")
               for d in ["10.0.5.7", "10.0.6.255"]]
        self.send_and_assert_no_replies(self.pg0, uni, "unicast in broadcast")
        self.assert_counters({UNICAST_IN_GROUP: 2})

    def test_arp_with_group_sender_mac_is_not_learned(self):
        for mac in ["ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:01"]:
            req = Ether(dst="ff:ff:ff:ff:ff:ff", src=self.pg0.remote_mac) / ARP(
                op=1, hwsrc=mac, psrc="10.0.0.7", pdst=self.pg0.local_ip4)
            self.send_and_assert_no_replies(self.pg0, [req], f"ARP from {mac}")
        self.assert_counters({ARP_GROUP_SENDER: 2})
        assert "10.0.0.7" not in self.vpp.cli("show ip neighbors")

    def test_no_arp_for_directed_broadcast(self):
        # The subnet's broadcast /32 is a drop entry in the FIB (as VPP's), so the lookup
        # drops it before ip4-glean, whose own check (`DIRECTED_BCAST`) stays as a backstop.
        pkt = self.udp(self.pg0.remote_ip4, "10.0.1.255")
        self.send_and_assert_no_replies(self.pg0, [pkt] * 2, "directed broadcast")
        self.assert_counters({DROP_ROUTE: 2, DIRECTED_BCAST: 0})

    def test_cli_refuses_group_neighbours_and_martian_addresses(self):
        for line, token in [
            ("set ip neighbor pg0 10.0.0.9 ff:ff:ff:ff:ff:ff", "ff:ff:ff:ff:ff:ff"),
            ("ip neighbor pg0 10.0.0.9 01:00:5e:00:00:01", "01:00:5e:00:00:01"),
            ("ip neighbor pg0 224.0.0.1 02:00:00:00:00:09", "224.0.0.1"),
            ("ip neighbor pg0 255.255.255.255 02:00:00:00:00:09", "255.255.255.255"),
            ("ip neighbor pg0 0.0.0.0 02:00:00:00:00:09", "0.0.0.0"),
            ("ip neighbor pg1 10.0.0.1 02:00:00:00:00:09", "10.0.0.1"),
            ("set interface ip address pg3 224.1.1.1/24", "224.1.1.1/24"),
            ("set interface ip address pg3 127.0.0.2/8", "127.0.0.2/8"),
            ("set interface ip address pg3 0.0.0.1/8", "0.0.0.1/8"),
            ("set interface ip address pg3 240.0.0.1/8", "240.0.0.1/8"),
            ("set interface ip address pg3 255.255.255.255/32", "255.255.255.255/32"),
        ]:
            msg = self.assert_cli_error(line, f"`{token}'")
            assert "\n" not in msg, msg


class TestMartians6(SluiceTestCase):
    n_pg = 2

    def setup_test(self):
        self.create_pg_interfaces(range(self.n_pg), up=True, ip6=True, resolve=True)
        self.pg0, self.pg1 = self.pg_interfaces
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        self.snapshot_counters()

    def udp6(self, src, dst="fd02::1"):
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IPv6(src=src, dst=dst) / UDP(sport=1, dport=2) / Raw(b"x")))

    def test_loopback_and_unspecified_sources_are_dropped(self):
        self.send_and_expect(self.pg0, [self.udp6(self.pg0.remote_ip6)], self.pg1)
        self.assert_counters({})
        self.send_and_assert_no_replies(
            self.pg0, [self.udp6("::1"), self.udp6("::"), self.udp6("::1")], "v6 martians")
        self.assert_counters({V6_LOOPBACK: 2, V6_UNSPEC: 1})

    def test_own_address_as_source_is_dropped(self):
        own = [self.udp6(self.pg0.local_ip6), self.udp6(self.pg1.local_ip6),
               self.udp6(self.pg0.local_ip6_ll), self.udp6(self.pg1.local_ip6, self.pg0.local_ip6)]
        self.send_and_assert_no_replies(self.pg0, own, "own source")
        self.assert_counters({OWN_SOURCE6: 4})
        self.send_and_expect(self.pg0, [self.udp6(self.pg0.remote_ip6)], self.pg1)

    def test_ns_with_group_lladdr_is_not_learned(self):
        sn = inet_ntop(AF_INET6, in6_getnsma(inet_pton(AF_INET6, self.pg0.local_ip6)))
        ns = Ether(raw(Ether(dst=in6_getnsmac(inet_pton(AF_INET6, sn)), src=self.pg0.remote_mac)
                       / IPv6(src=self.pg0.remote_ip6, dst=sn, hlim=255)
                       / ICMPv6ND_NS(tgt=self.pg0.local_ip6)
                       / ICMPv6NDOptSrcLLAddr(lladdr="ff:ff:ff:ff:ff:ff")))
        self.send_and_assert_no_replies(self.pg0, [ns], "NS from a broadcast lladdr")
        self.assert_counters({ND_GROUP: 1})
