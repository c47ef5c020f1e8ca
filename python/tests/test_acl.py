"""Stateless ACLs (plugins/acl, VPP's acl-plugin CLI) over pg with scapy: first match wins,
port ranges, ICMP type ranges, TCP flags, IPv6, input and output lists, implicit deny, hit
counts, CLI errors."""

import re

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute

IN4 = "acl-plugin-in-ip4-fa"
OUT4 = "acl-plugin-out-ip4-fa"
IN6 = "acl-plugin-in-ip6-fa"
PERMIT = "ACL permit packets"
DENY = "ACL deny packets"
NO_MATCH = "no ACL rule matched (implicit deny)"


class TestAcl(Ip4RouterTest):
    n_pg = 2

    def setup_test(self):
        self.create_pg_interfaces(range(2), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1 = self.pg_interfaces
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.snapshot_counters()

    def f(self, l4, dst="10.2.0.1", src=None):
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=src or self.pg0.remote_ip4, dst=dst) / l4))

    def acl(self, rules):
        out = self.vpp.cli(f"set acl-plugin acl {rules}")
        m = re.search(r"ACL index:(\d+)", out)
        assert m, out
        return int(m.group(1))

    def hits(self, index):
        out = self.vpp.cli(f"show acl-plugin acl index {index}")
        return [int(x) for x in re.findall(r"hits (\d+)", out)]

    def test_first_match_wins_ranges_and_implicit_deny(self):
        a = self.acl("deny src 10.0.0.0/24 dst 10.2.0.0/16 proto 17 dport 1000-2000, "
                     "permit src 10.0.0.0/24 dst 10.2.0.0/16 proto 17, "
                     "permit src 10.0.0.0/24 dst 10.2.0.0/16 proto 1 sport 8 tag ping")
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {a}")
        ok = [self.f(UDP(sport=5, dport=p) / Raw(b"x")) for p in (999, 2001, 53)]
        ok.append(self.f(ICMP(type=8) / Raw(b"x")))
        self.send_and_expect(self.pg0, ok, self.pg1)
        bad = [self.f(UDP(sport=5, dport=p)) for p in (1000, 1500, 2000)]
        bad.append(self.f(ICMP(type=13)))  # timestamp: type 13 outside the rule's 8-8
        bad.append(self.f(TCP(sport=1, dport=80)))  # no rule for TCP: implicit deny
        bad.append(self.f(UDP(sport=5, dport=53), dst="10.3.0.1"))  # other destination
        self.send_and_assert_no_replies(self.pg0, bad)
        self.assert_counters({(IN4, PERMIT): 4, (IN4, DENY): 3, (IN4, NO_MATCH): 3})
        assert self.hits(a) == [3, 3, 1], self.vpp.cli("show acl-plugin acl")
        out = self.vpp.cli("show acl-plugin acl")
        assert "tag {ping}" in out and "applied inbound on sw_if_index: 1" in out, out
        # Removing the list lets everything through again.
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {a} del")
        self.send_and_expect(self.pg0, bad[:3], self.pg1)

    def test_lists_apply_in_order_and_output(self):
        a = self.acl("permit src 0.0.0.0/0 dst 10.2.0.9/32")
        b = self.acl("deny src 0.0.0.0/0 dst 0.0.0.0/0")
        self.vpp.cli(f"set acl-plugin interface pg1 output acl {a}")
        self.vpp.cli(f"set acl-plugin interface pg1 output acl {b}")
        self.send_and_expect(self.pg0, [self.f(UDP(dport=1), dst="10.2.0.9")], self.pg1)
        self.send_and_assert_no_replies(self.pg0, [self.f(UDP(dport=1), dst="10.2.0.8")])
        self.assert_counters({(OUT4, PERMIT): 1, (OUT4, DENY): 1})
        assert "output acl(s): [0, 1] (2 mask types)" in self.vpp.cli("show acl-plugin interface")

    def test_tcp_flags(self):
        # Only SYN without ACK is refused (new connections inward).
        a = self.acl("deny src 0.0.0.0/0 dst 0.0.0.0/0 proto 6 tcpflags 2 mask 18, "
                     "permit src 0.0.0.0/0 dst 0.0.0.0/0")
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {a}")
        self.send_and_assert_no_replies(self.pg0, [self.f(TCP(flags="S"))])
        self.send_and_expect(self.pg0, [self.f(TCP(flags="SA")), self.f(TCP(flags="A"))],
                             self.pg1)
        assert self.hits(a) == [1, 2]

    def test_ipv6(self):
        self.pg0.config_ip6()
        self.pg1.config_ip6()
        self.pg1.resolve_ndp()
        a = self.acl(f"permit src {self.pg0.remote_ip6}/128 dst ::/0 proto 17 dport 53")
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {a}")
        self.snapshot_counters()

        def p6(dport):
            return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                             / IPv6(src=self.pg0.remote_ip6, dst=self.pg1.remote_ip6)
                             / UDP(sport=9, dport=dport)))
        self.send_and_expect(self.pg0, [p6(53)], self.pg1)
        self.send_and_assert_no_replies(self.pg0, [p6(54)])
        # IPv4 on the same interface meets the same list: no IPv4 rule, implicit deny.
        self.send_and_assert_no_replies(self.pg0, [self.f(UDP(dport=53))])
        self.assert_counters({(IN6, PERMIT): 1, (IN6, NO_MATCH): 1, (IN4, NO_MATCH): 1})

    def test_non_first_fragment_matches_l3_rules_only(self):
        a = self.acl("permit src 0.0.0.0/0 dst 0.0.0.0/0 proto 17 dport 53")
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {a}")
        frag = Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=self.pg0.remote_ip4, dst="10.2.0.1", proto=17, frag=3)
                         / Raw(b"y" * 16)))
        self.send_and_assert_no_replies(self.pg0, [frag])
        self.assert_counters({(IN4, NO_MATCH): 1})

    def test_cli_errors(self):
        self.assert_cli_error("set acl-plugin acl permit src 10.0.0.0/33", "`10.0.0.0/33'")
        self.assert_cli_error("set acl-plugin acl permit src 1.1.1.1 dst ::/0",
                              "different families")
        self.assert_cli_error("set acl-plugin acl permit dport 5", "need proto")
        self.assert_cli_error("set acl-plugin acl bogus src 1.1.1.1", "`bogus'")
        self.assert_cli_error("set acl-plugin acl permit+reflect src 1.1.1.1",
                              "not implemented")
        self.assert_cli_error("set acl-plugin interface pg0 input acl 7", "`7'")
        self.assert_cli_error("set acl-plugin interface pg9 input acl 0", "`pg9'")
