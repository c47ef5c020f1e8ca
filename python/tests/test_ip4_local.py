"""Packets for the router itself and packets it answers with an error: ICMP echo, ICMP time
exceeded and port unreachable, ARP replies and learning, glean (ARP for unresolved hosts)."""

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, IPerror, UDPerror
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute, assert_icmp_checksum, assert_ip4_checksum
from sluice_test.parsers import parse_neighbors

ICMP_ERRORS_SENT = ("ip4-icmp-error", "ICMP errors sent")
ECHO_REPLIES = ("ip4-local", "ICMP echo replies sent")
ARP_REPLIES = ("arp-input", "ARP replies sent")
ARP_LEARNED = ("ip4-neighbor-process", "neighbours learned")
ARP_OTHER = ("arp-input", "ARP for another address")
GLEAN_SENT = ("ip4-glean", "ARP requests sent")
TTL_EXPIRED = ("ip4-rewrite", "ip4 ttl <= 1")


class TestIp4Local(Ip4RouterTest):

    def echo_request(self, dst, ident, seq, payload):
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=self.pg0.remote_ip4, dst=dst, ttl=64)
                         / ICMP(type="echo-request", id=ident, seq=seq)
                         / Raw(payload)))

    def check_icmp_error_header(self, rx):
        """An ICMP error from the router's pg0 address back to the sender on pg0."""
        assert rx.dst == self.pg0.remote_mac and rx.src == self.pg0.local_mac
        ip = rx[IP]
        assert ip.src == self.pg0.local_ip4, "sourced from the rx interface's address"
        assert ip.dst == self.pg0.remote_ip4
        assert ip.proto == 1
        assert_ip4_checksum(rx)
        assert_icmp_checksum(rx)

    def test_icmp_echo_to_router_addresses(self):
        # The address of the interface the request arrives on, and another of the router's.
        reqs = [self.echo_request(self.pg0.local_ip4, 0x1234, seq, b"ping-%d" % seq * 3)
                for seq in range(5)]
        reqs += [self.echo_request(self.pg1.local_ip4, 0x4321, 9, b"other-interface")]
        rx = self.send_and_expect(self.pg0, reqs, self.pg0)
        for req, rep in zip(reqs, rx):
            assert rep.dst == self.pg0.remote_mac and rep.src == self.pg0.local_mac
            assert rep[IP].src == req[IP].dst, "answered from the address pinged"
            assert rep[IP].ttl == 64, "locally originated: TTL not decremented"
            assert rep[IP].dst == req[IP].src
            icmp = rep[ICMP]
            assert icmp.type == 0 and icmp.code == 0, "echo reply"
            assert (icmp.id, icmp.seq) == (req[ICMP].id, req[ICMP].seq)
            assert raw(icmp.payload) == raw(req[ICMP].payload), "data echoed back"
            assert_ip4_checksum(rep)
            assert_icmp_checksum(rep)
        self.assert_counters({ECHO_REPLIES: len(reqs)})

    def test_ttl_1_gets_time_exceeded_quoting_the_original(self):
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        sent = self.udp_from(self.pg0, "10.2.0.9", ttl=1, sport=33434, dport=33435,
                             payload=b"traceroute-probe")
        rx = self.send_and_expect(self.pg0, [sent], self.pg0)[0]
        self.check_icmp_error_header(rx)
        icmp = rx[ICMP]
        assert (icmp.type, icmp.code) == (11, 0), "time exceeded in transit"
        quoted = icmp[IPerror]
        # The quote is the original header as received (TTL 1) and the first 8 bytes after
        # it (RFC 792), at least.
        assert raw(quoted)[:28] == raw(sent[IP])[:28]
        assert (quoted.src, quoted.dst, quoted.ttl, quoted.id) == \
            (sent[IP].src, sent[IP].dst, 1, sent[IP].id)
        assert (quoted[UDPerror].sport, quoted[UDPerror].dport) == (33434, 33435)
        self.assert_counters({TTL_EXPIRED: 1, ICMP_ERRORS_SENT: 1})
        # TTL 2 is still forwarded (with TTL 1).
        fwd = self.send_and_expect(self.pg0, [self.udp_from(self.pg0, "10.2.0.9", ttl=2)],
                                   self.pg1)[0]
        assert fwd[IP].ttl == 1

    def test_udp_to_router_gets_port_unreachable(self):
        sent = self.udp_from(self.pg0, self.pg0.local_ip4, sport=5555, dport=9999,
                             payload=b"anyone listening?")
        rx = self.send_and_expect(self.pg0, [sent], self.pg0)[0]
        self.check_icmp_error_header(rx)
        icmp = rx[ICMP]
        assert (icmp.type, icmp.code) == (3, 3), "port unreachable"
        quoted = icmp[IPerror]
        assert raw(quoted)[:28] == raw(sent[IP])[:28]
        assert (quoted[UDPerror].sport, quoted[UDPerror].dport) == (5555, 9999)
        self.assert_counters({ICMP_ERRORS_SENT: 1})

    def test_arp_request_for_router_gets_reply_and_sender_is_learned(self):
        host_mac, host_ip = self.pg0.remote_host_mac(7), self.pg0.remote_host_ip4(7)
        req = Ether(dst="ff:ff:ff:ff:ff:ff", src=host_mac) / ARP(
            op="who-has", hwsrc=host_mac, psrc=host_ip, hwdst="00:00:00:00:00:00",
            pdst=self.pg0.local_ip4)
        rep = self.send_and_expect(self.pg0, [req], self.pg0)[0]
        assert rep.dst == host_mac and rep.src == self.pg0.local_mac
        assert rep.type == 0x0806
        arp = rep[ARP]
        assert arp.op == 2, "is-at"
        assert (arp.hwsrc, arp.psrc) == (self.pg0.local_mac, self.pg0.local_ip4)
        assert (arp.hwdst, arp.pdst) == (host_mac, host_ip)
        self.assert_counters({ARP_REPLIES: 1, ARP_LEARNED: 1})
        learned = [n for n in parse_neighbors(self.vpp.cli("show ip neighbors"))
                   if n.ip == host_ip]
        assert learned and learned[0].mac == host_mac and learned[0].interface == "pg0", \
            learned
        # The learned neighbour is used: traffic to it goes straight out, no glean.
        rx = self.send_and_expect(self.pg1, [self.udp_from(self.pg1, host_ip)], self.pg0)[0]
        assert rx.dst == host_mac
        self.assert_counters({})

    def test_arp_request_for_another_address_is_ignored(self):
        host_mac = self.pg0.remote_host_mac(8)
        req = Ether(dst="ff:ff:ff:ff:ff:ff", src=host_mac) / ARP(
            op="who-has", hwsrc=host_mac, psrc=self.pg0.remote_host_ip4(8),
            pdst=self.pg0.remote_host_ip4(99))
        self.send_and_assert_no_replies(self.pg0, [req], "ARP for a host, not the router")
        self.assert_counters({ARP_OTHER: 1})

    def test_glean_sends_arp_request_for_unresolved_host(self):
        target = self.pg1.remote_host_ip4(77)  # on pg1's subnet, never resolved
        pkt = self.udp_from(self.pg0, target)
        rx = self.send_and_expect(self.pg0, [pkt], self.pg1)[0]
        assert rx.dst == "ff:ff:ff:ff:ff:ff" and rx.src == self.pg1.local_mac
        assert rx.type == 0x0806
        arp = rx[ARP]
        assert arp.op == 1, "who-has"
        assert (arp.hwsrc, arp.psrc) == (self.pg1.local_mac, self.pg1.local_ip4)
        assert arp.pdst == target
        self.assert_counters({GLEAN_SENT: 1})
        # A route through an unresolved next hop gleans for the next hop.
        IpRoute(self, "10.9.0.0/16", via=self.pg_interfaces[2].remote_host_ip4(50)).add_config()
        rx = self.send_and_expect(self.pg0, [self.udp_from(self.pg0, "10.9.1.1")],
                                  self.pg_interfaces[2])[0]
        assert rx[ARP].op == 1 and rx[ARP].pdst == self.pg_interfaces[2].remote_host_ip4(50)
        assert rx[ARP].psrc == self.pg_interfaces[2].local_ip4
        self.assert_counters({GLEAN_SENT: 1})
