"""Neighbours: gratuitous ARP refreshes existing entries only (as VPP), unsolicited neighbour
advertisements likewise (RFC 4861 §7.2.5), ARP is answered for every address of the
interface (not only the first), `ip neighbor` without `static` adds a dynamic entry, and
`set ip neighbor-config`: aging (probe, then removal of entries still stale; static entries
never age) and the limit (refuse, or recycle the oldest)."""

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr, \
    ICMPv6NDOptSrcLLAddr, IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw
from scapy.utils6 import in6_getnsma, in6_getnsmac
from socket import AF_INET6, inet_ntop, inet_pton

from sluice_test import InterfaceAddress, SluiceTestCase
from sluice_test.parsers import parse_neighbors

GARP = ("arp-input", "gratuitous ARP (updates an existing neighbour only)")
REPLIES = ("arp-input", "ARP replies sent")
NOT_FOR_US = ("arp-input", "ARP for another address")
LEARNED4 = ("ip4-neighbor-process", "neighbours learned")
LEARNED6 = ("ip6-neighbor-process", "neighbours learned")
PROBES4 = ("ip4-neighbor-process", "neighbour aging probes sent")
PROBES6 = ("ip6-neighbor-process", "neighbour aging probes sent")
NA_SENT = ("ip6-local", "neighbor advertisements sent")
NA_RX = ("ip6-local", "neighbor advertisements received")


def arp(op, src_mac, psrc, pdst, dst_mac="ff:ff:ff:ff:ff:ff", hwdst="00:00:00:00:00:00"):
    return Ether(dst=dst_mac, src=src_mac) / ARP(op=op, hwsrc=src_mac, psrc=psrc,
                                                 hwdst=hwdst, pdst=pdst)


class NeighborTest(SluiceTestCase):

    def setup_test(self):
        # No static neighbours: every entry here is learned.
        self.create_pg_interfaces(range(2), up=True, ip4=True, ip6=True)
        self.pg0, self.pg1 = self.pg_interfaces
        self.snapshot_counters()

    def neighbors(self, v6=False):
        return {n.ip: n for n in parse_neighbors(
            self.vpp.cli("show ip6 neighbors" if v6 else "show ip neighbors"))}

    def learn4(self, host):
        """Host `host` on pg0 asks for the router: answered, and learned (dynamic)."""
        ip, mac = self.pg0.remote_host_ip4(host), self.pg0.remote_host_mac(host)
        self.send_and_expect(self.pg0, [arp(1, mac, ip, self.pg0.local_ip4)], self.pg0)
        self.wait_for(lambda: ip in self.neighbors(), f"{ip} learned")
        return ip, mac


class TestArp(NeighborTest):

    def test_gratuitous_arp_updates_an_existing_entry_only(self):
        ip, mac = self.learn4(5)
        new_mac = "02:00:00:00:55:55"
        # GARP request (broadcast, sender == target) with a new MAC: the entry moves.
        self.send_and_assert_no_replies(self.pg0, [arp(1, new_mac, ip, ip)], "GARP request")
        self.wait_for(lambda: self.neighbors()[ip].mac == new_mac, "GARP request applied")
        # GARP reply form too.
        newer = "02:00:00:00:66:66"
        self.send_and_assert_no_replies(
            self.pg0, [arp(2, newer, ip, ip, hwdst=newer)], "GARP reply")
        self.wait_for(lambda: self.neighbors()[ip].mac == newer, "GARP reply applied")
        assert self.neighbors()[ip].flags == "D"
        # Traffic to the host follows the new MAC.
        p = Ether(raw(Ether(dst=self.pg1.local_mac, src=self.pg1.remote_mac)
                      / IP(src=self.pg1.remote_ip4, dst=ip) / UDP() / Raw(b"garp")))
        rx = self.send_and_expect(self.pg1, [p], self.pg0)
        assert rx[0].dst == newer
        # A GARP for an unknown address creates nothing (VPP's rule: no cache spamming).
        unknown = self.pg0.remote_host_ip4(6)
        self.send_and_assert_no_replies(self.pg0, [arp(1, "02:00:00:00:77:77", unknown,
                                                       unknown)], "GARP for a new host")
        self.send_and_assert_no_replies(self.pg0, [arp(2, "02:00:00:00:77:77", unknown,
                                                       unknown)], "GARP reply, new host")
        self.wait_for(lambda: self.get_counters().get(LEARNED4, 0) >= 5, "GARPs applied")
        assert unknown not in self.neighbors()
        self.assert_counters({REPLIES: 1, LEARNED4: 5, GARP: 4})

    def test_gratuitous_arp_does_not_override_a_static_entry(self):
        ip, mac = self.pg0.remote_host_ip4(9), self.pg0.remote_host_mac(9)
        self.vpp.cli(f"ip neighbor pg0 {ip} {mac} static")
        try:
            self.send_and_assert_no_replies(self.pg0, [arp(1, "02:00:00:00:99:99", ip, ip)])
            self.wait_for(lambda: self.get_counters().get(LEARNED4, 0) >= 1, "GARP applied")
            n = self.neighbors()[ip]
            assert (n.mac, n.flags) == (mac, "S")
        finally:
            self.vpp.cli(f"ip neighbor del pg0 {ip}")

    def test_arp_answered_for_every_address_of_the_interface(self):
        InterfaceAddress(self, self.pg0, "10.50.0.1/24").add_config()
        InterfaceAddress(self, self.pg0, "10.60.0.1/16").add_config()
        host_mac = self.pg0.remote_host_mac(3)
        for mine, src in [(self.pg0.local_ip4, self.pg0.remote_host_ip4(3)),
                          ("10.50.0.1", "10.50.0.3"), ("10.60.0.1", "10.60.7.3")]:
            rep = self.send_and_expect(self.pg0, [arp(1, host_mac, src, mine)], self.pg0)[0]
            a = rep[ARP]
            assert rep.dst == host_mac and rep.src == self.pg0.local_mac
            assert (a.op, a.hwsrc, a.psrc, a.hwdst, a.pdst) == \
                (2, self.pg0.local_mac, mine, host_mac, src), rep.show(dump=True)
        # pg1's address asked on pg0, and a host address: not answered.
        self.send_and_assert_no_replies(
            self.pg0, [arp(1, host_mac, "10.50.0.3", self.pg1.local_ip4),
                       arp(1, host_mac, "10.50.0.3", "10.50.0.4")])
        self.wait_for(lambda: "10.60.7.3" in self.neighbors(), "senders learned")
        self.assert_counters({REPLIES: 3, NOT_FOR_US: 2, LEARNED4: 3})


def na(src_if, host, host_mac, lladdr, S, O):
    """A neighbour advertisement from `host` (`host_mac`) for itself, to the router."""
    return (Ether(dst=src_if.local_mac, src=host_mac)
            / IPv6(src=host, dst=src_if.local_ip6_ll, hlim=255)
            / ICMPv6ND_NA(tgt=host, R=0, S=S, O=O) / ICMPv6NDOptDstLLAddr(lladdr=lladdr))


class TestUnsolicitedNa(NeighborTest):

    def test_unsolicited_na_updates_existing_entries_only(self):
        host, hmac = self.pg0.remote_host_ip6(7), self.pg0.remote_host_mac(7)
        m2, m3 = "02:00:00:00:77:02", "02:00:00:00:77:03"
        # No entry: an unsolicited NA (S clear), even with O set, creates none.
        self.send_and_assert_no_replies(self.pg0, [na(self.pg0, host, hmac, hmac, S=0, O=1)])
        self.wait_for(lambda: self.get_counters().get(LEARNED6, 0) >= 1, "NA applied")
        assert host not in self.neighbors(v6=True)
        # A solicited one creates it (dynamic).
        self.send_and_assert_no_replies(self.pg0, [na(self.pg0, host, hmac, hmac, S=1, O=1)])
        self.wait_for(lambda: host in self.neighbors(v6=True), "solicited NA learned")
        assert self.neighbors(v6=True)[host].flags == "D"
        # Override clear and another MAC: ignored, solicited or not.
        self.send_and_assert_no_replies(self.pg0, [na(self.pg0, host, m2, m2, S=0, O=0),
                                                   na(self.pg0, host, m2, m2, S=1, O=0)])
        self.wait_for(lambda: self.get_counters().get(LEARNED6, 0) >= 4, "NAs applied")
        assert self.neighbors(v6=True)[host].mac == hmac
        # Unsolicited with Override: the existing entry moves to the new MAC.
        self.send_and_assert_no_replies(self.pg0, [na(self.pg0, host, m3, m3, S=0, O=1)])
        self.wait_for(lambda: self.neighbors(v6=True)[host].mac == m3, "override applied")
        self.assert_counters({NA_RX: 5, LEARNED6: 5})
        self.vpp.cli(f"ip neighbor del pg0 {host}")


class TestCliNeighbors(NeighborTest):

    def teardown_test(self):
        self.vpp.cli("set ip neighbor-config ip4 age 0")

    def test_cli_entry_is_dynamic_without_static(self):
        dyn, smac = self.pg0.remote_host_ip4(2), self.pg0.remote_host_mac(2)
        st = self.pg0.remote_host_ip4(3)
        d6 = self.pg0.remote_host_ip6(2)
        self.vpp.cli(f"ip neighbor pg0 {dyn} {smac}")
        self.vpp.cli(f"ip neighbor pg0 {st} {smac} static")
        self.vpp.cli(f"ip neighbor pg0 {d6} {smac}")
        n = self.neighbors()
        assert (n[dyn].flags, n[st].flags) == ("D", "S"), n
        assert self.neighbors(v6=True)[d6].flags == "D"
        # A dynamic entry does not replace a static one; the error names the address.
        self.assert_cli_error(f"ip neighbor pg0 {st} 02:00:00:00:99:99", f"`{st}'",
                              "dynamic entry replaced a static one")
        # The dynamic entry ages like a learned one (probed, unanswered, removed); the
        # static one stays.
        self.vpp.cli("set ip neighbor-config ip4 age 1")
        self.wait_for(lambda: dyn not in self.neighbors(), "dynamic CLI entry aged out",
                      timeout=6)
        assert self.neighbors()[st].flags == "S"
        self.vpp.cli(f"ip neighbor del pg0 {st}")
        self.vpp.cli(f"ip neighbor del pg0 {d6}")


class TestNeighborConfig(NeighborTest):

    def teardown_test(self):
        self.vpp.cli("set ip neighbor-config ip4 limit 50000 age 0 norecycle")
        self.vpp.cli("set ip neighbor-config ip6 limit 50000 age 0 norecycle")

    def test_show_and_bad_lines(self):
        out = self.vpp.cli("show ip neighbor-config")
        assert out.split() == ["ip4:", "limit:50000,", "age:0,", "recycle:0",
                               "ip6:", "limit:50000,", "age:0,", "recycle:0"], out
        self.vpp.cli("set ip neighbor-config ip6 limit 10 age 30 recycle")
        assert "limit:10, age:30, recycle:1" in self.vpp.cli("show ip neighbor-config")
        for line, token in [("set ip neighbor-config ip5 age 1", "`ip5'"),
                            ("set ip neighbor-config ip4 age soon", "`soon'"),
                            ("set ip neighbor-config ip4 maxage 3", "`maxage'")]:
            self.assert_cli_error(line, token)

    def test_ip4_stale_entry_is_probed_then_removed(self):
        self.vpp.cli("set ip neighbor-config ip4 age 1")
        self.vpp.cli(f"ip neighbor pg0 {self.pg0.remote_host_ip4(2)} "
                     f"{self.pg0.remote_host_mac(2)} static")
        ip, mac = self.learn4(4)
        ip5, mac5 = self.learn4(5)
        self.pg0.enable_capture()
        # Both go stale after 1 s: one unicast ARP request each, to the known MAC.
        self.wait_for(lambda: self.pg0.captured_count() >= 2, "two probes", timeout=5)
        probes = {p[ARP].pdst: p for p in self.pg0.stop_capture()}
        assert set(probes) == {ip, ip5}, probes
        for target, m in ((ip, mac), (ip5, mac5)):
            p = probes[target]
            assert p.dst == m and p.src == self.pg0.local_mac, "unicast probe"
            assert (p[ARP].op, p[ARP].psrc, p[ARP].hwsrc) == \
                (1, self.pg0.local_ip4, self.pg0.local_mac)
        # Host 5 answers its probe and stays; host 4 does not and goes; the static stays.
        reply = arp(2, mac5, ip5, self.pg0.local_ip4, dst_mac=self.pg0.local_mac,
                    hwdst=self.pg0.local_mac)
        self.send_and_assert_no_replies(self.pg0, [reply])
        self.wait_for(lambda: ip not in self.neighbors(), "unanswered entry removed",
                      timeout=5)
        n = self.neighbors()
        assert ip5 in n and n[self.pg0.remote_host_ip4(2)].flags == "S", n
        # Traffic to the removed host gleans again (aging off: no probe in the capture).
        self.vpp.cli("set ip neighbor-config ip4 age 0")
        p = Ether(raw(Ether(dst=self.pg1.local_mac, src=self.pg1.remote_mac)
                      / IP(src=self.pg1.remote_ip4, dst=ip) / UDP()))
        rx = self.send_and_expect(self.pg1, [p], self.pg0)
        assert rx[0].dst == "ff:ff:ff:ff:ff:ff" and rx[0][ARP].pdst == ip
        self.vpp.cli(f"ip neighbor del pg0 {self.pg0.remote_host_ip4(2)}")

    def test_ip6_stale_entry_is_probed_then_removed(self):
        self.vpp.cli("set ip neighbor-config ip6 age 1")
        sol = inet_ntop(AF_INET6, in6_getnsma(inet_pton(AF_INET6, self.pg0.local_ip6)))
        hosts = {}
        for h in (4, 5):
            host, hmac = self.pg0.remote_host_ip6(h), self.pg0.remote_host_mac(h)
            ns = (Ether(dst=in6_getnsmac(inet_pton(AF_INET6, sol)), src=hmac)
                  / IPv6(src=host, dst=sol, hlim=255) / ICMPv6ND_NS(tgt=self.pg0.local_ip6)
                  / ICMPv6NDOptSrcLLAddr(lladdr=hmac))
            self.send_and_expect(self.pg0, [ns], self.pg0)
            self.wait_for(lambda: host in self.neighbors(v6=True), "NS sender learned")
            hosts[host] = hmac
        self.pg0.enable_capture()
        self.wait_for(lambda: self.pg0.captured_count() >= 2, "two probes", timeout=5)
        probes = {p[ICMPv6ND_NS].tgt: p for p in self.pg0.stop_capture()}
        assert set(probes) == set(hosts), probes
        for host, hmac in hosts.items():
            p = probes[host]
            assert p.dst == hmac and p[IPv6].dst == host and p[IPv6].hlim == 255
            assert p[IPv6].src == self.pg0.local_ip6_ll
            assert p[ICMPv6NDOptSrcLLAddr].lladdr == self.pg0.local_mac
        # Host 5 answers with an NA and stays; host 4 does not and goes.
        h5 = self.pg0.remote_host_ip6(5)
        na = (Ether(dst=self.pg0.local_mac, src=hosts[h5])
              / IPv6(src=h5, dst=self.pg0.local_ip6_ll, hlim=255)
              / ICMPv6ND_NA(tgt=h5, R=0, S=1, O=1) / ICMPv6NDOptDstLLAddr(lladdr=hosts[h5]))
        self.send_and_assert_no_replies(self.pg0, [na])
        h4 = self.pg0.remote_host_ip6(4)
        self.wait_for(lambda: h4 not in self.neighbors(v6=True), "stale entry removed",
                      timeout=5)
        assert h5 in self.neighbors(v6=True)
        self.vpp.cli("set ip neighbor-config ip6 age 0")
        # Host 5's refreshed entry may have been probed once more meanwhile.
        probes = self.get_counters().get(PROBES6, 0)
        assert probes in (2, 3), probes
        self.assert_counters({NA_SENT: 2, NA_RX: 1, LEARNED6: 3, PROBES6: probes})

    def test_limit_refuses_then_recycles_the_oldest(self):
        self.vpp.cli("set ip neighbor-config ip4 limit 2")
        a, _ = self.learn4(3)
        b, _ = self.learn4(4)
        # Full: a third host is answered but not learned.
        c_ip, c_mac = self.pg0.remote_host_ip4(5), self.pg0.remote_host_mac(5)
        self.send_and_expect(self.pg0, [arp(1, c_mac, c_ip, self.pg0.local_ip4)], self.pg0)
        self.wait_for(lambda: self.get_counters().get(LEARNED4, 0) >= 3, "third applied")
        assert set(self.neighbors()) == {a, b}
        # With recycle, the least recently refreshed (a) makes room.
        self.vpp.cli("set ip neighbor-config ip4 recycle")
        self.send_and_expect(self.pg0, [arp(1, c_mac, c_ip, self.pg0.local_ip4)], self.pg0)
        self.wait_for(lambda: c_ip in self.neighbors(), "recycled")
        assert set(self.neighbors()) == {b, c_ip}
