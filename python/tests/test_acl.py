"""ACLs (plugins/acl, VPP's acl-plugin CLI) over pg with scapy: first match wins,
port ranges, ICMP type ranges, TCP flags, IPv6, input and output lists, implicit deny, hit
counts, stateful permit+reflect sessions, CLI errors."""

import re
import time

import pytest

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_papi import ApiError, Retval
from sluice_test import IpRoute

IN4 = "acl-plugin-in-ip4-fa"
OUT4 = "acl-plugin-out-ip4-fa"
IN6 = "acl-plugin-in-ip6-fa"
PERMIT = "ACL permit packets"
DENY = "ACL deny packets"
NO_MATCH = "no ACL rule matched (implicit deny)"
SESSION_HIT = "packets admitted by a session"
SESSION_CREATED = "sessions created (permit+reflect)"
ICMP_ERROR_HIT = "ICMP errors admitted for the session they quote"
OUT_OF_WINDOW = "TCP segment outside the session's window"
BAD_RST = "TCP RST outside the session's window"


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

    def test_one_armed_reply_meets_the_rules(self):
        """permit+reflect on pg0's input only, a flow hairpinned through pg0: the responder's
        packet arrives on the input where the session was created, belongs to no direction
        the session admits, and is admitted by the rule without a second session (the
        session keeps its initiator; its output side admits the reply leaving pg0)."""
        a = self.acl("permit+reflect src 0.0.0.0/0 dst 0.0.0.0/0")
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {a}")
        self.send_and_expect(self.pg0, [self.f(UDP(sport=4000, dport=53) / Raw(b"q"))],
                             self.pg1)
        reply = Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                          / IP(src="10.2.0.1", dst=self.pg0.remote_ip4)
                          / UDP(sport=53, dport=4000) / Raw(b"a")))
        self.send_and_expect(self.pg0, [reply, reply], self.pg0)
        s = self.vpp.cli("show acl-plugin sessions")
        assert "Sessions total: 1" in s, s
        assert ("sw_if_index 1 input proto 17 %s:4000 -> 10.2.0.1:53"
                % self.pg0.remote_ip4) in s, s
        self.assert_counters({(IN4, PERMIT): 3, (IN4, SESSION_CREATED): 1,
                              (OUT4, SESSION_HIT): 2})
        assert self.hits(a) == [3]

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
        self.assert_cli_error("set acl-plugin session timeout udp busy 5", "`busy'")
        self.assert_cli_error("set acl-plugin session timeout sctp idle 5", "`sctp'")
        self.assert_cli_error("set acl-plugin session timeout tcp idle 0", "`0'")
        self.assert_cli_error("set acl-plugin interface pg0 input acl 7", "`7'")
        self.assert_cli_error("set acl-plugin interface pg9 input acl 0", "`pg9'")

    def test_api_acls_and_interface_lists(self):
        """acl_add_replace / acl_dump / acl_interface_* configure what the CLI does: the
        rules are the CLI's rules (show prints them), traffic meets them, hits come back."""
        a = self.vpp.api()
        any_ = 0xffffffff
        udp = {"is_permit": "deny", "src_prefix": "10.0.0.0/24", "dst_prefix": "10.2.0.7/16",
               "proto": 17, "srcport_or_icmptype_first": 0,
               "srcport_or_icmptype_last": 65535, "dstport_or_icmpcode_first": 1000,
               "dstport_or_icmpcode_last": 2000}
        allow = {"is_permit": "permit", "src_prefix": "0.0.0.0/0", "dst_prefix": "0.0.0.0/0",
                 "srcport_or_icmptype_last": 65535, "dstport_or_icmpcode_last": 65535}
        i = a.acl_add_replace(acl_index=any_, tag="api", r=[udp, allow]).acl_index
        j = a.acl_add_replace(acl_index=any_, tag="last", r=[dict(allow, is_permit="deny")]
                              ).acl_index
        assert (i, j) == (0, 1)
        out = self.vpp.cli(f"show acl-plugin acl index {i}")
        # The host bits of 10.2.0.7/16 are cleared, as the CLI does.
        assert ("0: ipv4 deny src 10.0.0.0/24 dst 10.2.0.0/16 proto 17 sport 0-65535 "
                "dport 1000-2000") in out, out
        pg0, pg1 = self.pg0.index + 1, self.pg1.index + 1
        a.acl_interface_set_acl_list(sw_if_index=pg0, n_input=1, acls=[i])
        a.acl_interface_add_del(is_add=True, is_input=False, sw_if_index=pg1, acl_index=j)
        assert [(d.sw_if_index, d.n_input, list(d.acls))
                for d in a.acl_interface_list_dump(sw_if_index=any_)] == [
            (pg0, 1, [i]), (pg1, 0, [j])]
        # pg1's output list denies everything; take it away and pass what pg0 permits.
        self.send_and_assert_no_replies(self.pg0, [self.f(UDP(sport=1, dport=53))])
        a.acl_interface_add_del(is_add=False, is_input=False, sw_if_index=pg1, acl_index=j)
        self.send_and_expect(self.pg0, [self.f(UDP(sport=1, dport=53))] * 2, self.pg1)
        self.send_and_assert_no_replies(self.pg0, [self.f(UDP(sport=1, dport=1500))])
        d = a.acl_dump(acl_index=i)
        assert len(d) == 1 and d[0].tag == "api" and list(d[0].hits) == [1, 3], d
        r0 = d[0].r[0]
        assert (str(r0.src_prefix), str(r0.dst_prefix), r0.proto,
                r0.dstport_or_icmpcode_first, r0.dstport_or_icmpcode_last) == (
            "10.0.0.0/24", "10.2.0.0/16", 17, 1000, 2000), r0
        assert [x.acl_index for x in a.acl_dump(acl_index=any_)] == [i, j]
        # Replacing keeps the index and restarts the hit counts.
        a.acl_add_replace(acl_index=i, tag="api2", r=[allow])
        assert [(x.tag, list(x.hits)) for x in a.acl_dump(acl_index=i)] == [("api2", [0])]
        self.send_and_expect(self.pg0, [self.f(UDP(sport=1, dport=1500))], self.pg1)
        # Errors: the CLI's checks, with their codes.
        expect = self.assert_api_error
        expect(Retval.IN_USE, a.acl_del, acl_index=i)
        expect(Retval.NO_SUCH_ENTRY, a.acl_del, acl_index=7)
        expect(Retval.NO_SUCH_ENTRY, a.acl_dump, acl_index=7)
        expect(Retval.INVALID_VALUE, a.acl_add_replace, acl_index=any_, r=[])
        expect(Retval.INVALID_VALUE, a.acl_add_replace, acl_index=any_,
               r=[dict(allow, dst_prefix="::/0")], match="different families")
        expect(Retval.INVALID_VALUE, a.acl_add_replace, acl_index=any_,
               r=[allow, dict(allow, dstport_or_icmpcode_first=80, dstport_or_icmpcode_last=80)],
               match="rule 1: sport/dport/tcpflags need proto")
        expect(Retval.INVALID_VALUE, a.acl_add_replace, acl_index=any_,
               r=[dict(udp, dstport_or_icmpcode_first=9, dstport_or_icmpcode_last=8)],
               match="end before start")
        expect(Retval.INVALID_VALUE, a.acl_add_replace, acl_index=any_,
               r=[dict(udp, tcp_flags_mask=2, tcp_flags_value=2)], match="proto 6")
        expect(Retval.NO_SUCH_ENTRY, a.acl_interface_add_del, is_add=True, is_input=True,
               sw_if_index=pg0, acl_index=9)
        expect(Retval.ALREADY_EXISTS, a.acl_interface_add_del, is_add=True, is_input=True,
               sw_if_index=pg0, acl_index=i)
        expect(Retval.NO_SUCH_ENTRY, a.acl_interface_add_del, is_add=False, is_input=False,
               sw_if_index=pg0, acl_index=i)
        expect(Retval.NO_SUCH_INTERFACE, a.acl_interface_set_acl_list, sw_if_index=99,
               n_input=0, acls=[])
        expect(Retval.INVALID_VALUE, a.acl_interface_set_acl_list, sw_if_index=pg0,
               n_input=2, acls=[i])
        expect(Retval.ALREADY_EXISTS, a.acl_interface_set_acl_list, sw_if_index=pg0,
               n_input=2, acls=[i, i])
        # Empty lists remove them; then the ACL can go.
        a.acl_interface_set_acl_list(sw_if_index=pg0, n_input=0, acls=[])
        assert a.acl_interface_list_dump(sw_if_index=any_) == []
        a.acl_del(acl_index=i)
        assert [x.acl_index for x in a.acl_dump(acl_index=any_)] == [j]


class TestAclStateful(Ip4RouterTest):
    """permit+reflect on the outside interface (pg1): its output list creates sessions, its
    input list denies everything a session does not admit."""
    n_pg = 2

    def setup_test(self):
        self.create_pg_interfaces(range(2), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1 = self.pg_interfaces
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        out = self.vpp.cli("set acl-plugin acl permit+reflect src 0.0.0.0/0 dst 0.0.0.0/0")
        assert "ACL index:0" in out, out
        self.vpp.cli("set acl-plugin acl deny src 0.0.0.0/0 dst 0.0.0.0/0")
        self.vpp.cli("set acl-plugin interface pg1 output acl 0")
        self.vpp.cli("set acl-plugin interface pg1 input acl 1")
        self.snapshot_counters()

    def out(self, l4, dst="10.2.0.1"):
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=self.pg0.remote_ip4, dst=dst) / l4))

    def back(self, l4, src="10.2.0.1"):
        return Ether(raw(Ether(dst=self.pg1.local_mac, src=self.pg1.remote_mac)
                         / IP(src=src, dst=self.pg0.remote_ip4) / l4))

    def sessions(self):
        return self.vpp.cli("show acl-plugin sessions")

    def test_udp_reply_admitted_unsolicited_denied(self):
        self.send_and_expect(self.pg0, [self.out(UDP(sport=4000, dport=53) / Raw(b"q"))],
                             self.pg1)
        s = self.sessions()
        assert ("sw_if_index 2 output proto 17 %s:4000 -> 10.2.0.1:53 state active"
                % self.pg0.remote_ip4) in s, s
        # The reply (reversed tuple) comes in; anything else does not.
        self.send_and_expect(self.pg1, [self.back(UDP(sport=53, dport=4000) / Raw(b"a"))],
                             self.pg0)
        bad = [self.back(UDP(sport=53, dport=4001)),        # other port
               self.back(UDP(sport=53, dport=4000), src="10.2.0.2"),  # other host
               self.back(TCP(sport=53, dport=4000))]        # other protocol
        self.send_and_assert_no_replies(self.pg1, bad)
        self.assert_counters({(OUT4, SESSION_CREATED): 1, (IN4, SESSION_HIT): 1,
                              (IN4, DENY): 3, (OUT4, PERMIT): 1})
        assert "pkts 1/1" in self.sessions()

    def test_icmp_errors_admitted_for_their_session_only(self):
        """An ICMP error quoting a packet of a session comes back in; one quoting an unknown
        flow, or addressed to another host than the quoted packet's sender, is denied."""
        udp = IP(src=self.pg0.remote_ip4, dst="10.2.0.1") / UDP(sport=4000, dport=53) / Raw(b"q")
        self.send_and_expect(self.pg0, [self.out(udp[UDP])], self.pg1)
        quote = raw(udp)[:28]

        def err(quoted, dst=None, src="10.2.9.9", **icmp):
            return Ether(raw(Ether(dst=self.pg1.local_mac, src=self.pg1.remote_mac)
                             / IP(src=src, dst=dst or self.pg0.remote_ip4)
                             / ICMP(**(icmp or {"type": 3, "code": 3})) / Raw(quoted)))
        rx = self.send_and_expect(self.pg1, [err(quote), err(quote, type=11, code=0)],
                                  self.pg0)
        assert raw(rx[0][ICMP].payload)[:28] == quote
        other = raw(IP(src=self.pg0.remote_ip4, dst="10.2.0.1") / UDP(sport=4001, dport=53))
        self.send_and_assert_no_replies(self.pg1, [
            err(other[:28]),                                  # no such session
            err(quote, dst=self.pg0.remote_host_ip4(3)),     # not to the sender
            err(quote[:24]),                                  # quote cut inside the ports
            err(quote, type=13, code=0)])                     # not an error
        self.assert_counters({(OUT4, SESSION_CREATED): 1, (OUT4, PERMIT): 1,
                              (IN4, ICMP_ERROR_HIT): 2, (IN4, DENY): 4})
        assert "pkts 1/0" in self.sessions(), "an error does not refresh the session"

    def test_icmp_echo_by_identifier(self):
        self.send_and_expect(self.pg0, [self.out(ICMP(type=8, id=77) / Raw(b"p"))], self.pg1)
        self.send_and_expect(self.pg1, [self.back(ICMP(type=0, id=77) / Raw(b"p"))], self.pg0)
        self.send_and_assert_no_replies(self.pg1, [self.back(ICMP(type=0, id=78)),
                                                   self.back(ICMP(type=8, id=77))])

    def test_tcp_states_and_timeouts(self):
        self.vpp.cli("set acl-plugin session timeout tcp transient 1")
        syn = self.out(TCP(sport=5555, dport=80, flags="S"))
        self.send_and_expect(self.pg0, [syn], self.pg1)
        assert re.search(r"state opening age \S+ idle \S+ timeout 1s", self.sessions())
        self.send_and_expect(self.pg1, [self.back(TCP(sport=80, dport=5555, flags="SA"))],
                             self.pg0)
        assert re.search(r"state established .* timeout 86400s", self.sessions())
        self.send_and_expect(self.pg0, [self.out(TCP(sport=5555, dport=80, flags="FA"))],
                             self.pg1)
        assert re.search(r"state closing .* timeout 1s", self.sessions())
        # Closing: gone after the transient timeout; the late reply is denied.
        time.sleep(2.2)
        self.send_and_assert_no_replies(self.pg1,
                                        [self.back(TCP(sport=80, dport=5555, flags="A"))])
        assert "Sessions total: 0" in self.sessions(), self.sessions()
        self.assert_counters({(IN4, DENY): 1, (IN4, SESSION_HIT): 1, (OUT4, PERMIT): 1,
                              (OUT4, SESSION_CREATED): 1, (OUT4, SESSION_HIT): 1})

    def test_tcp_window_and_rst_validation(self):
        """A tracked connection admits segments inside its window only: data beyond what the
        receiver allowed, an ACK of data never sent and a RST with a sequence number outside
        the window are dropped and counted; an in-window RST is admitted."""
        def o(load=b"", **kw):
            return self.out(TCP(sport=6000, dport=80, **kw) / Raw(load))

        def b(load=b"", **kw):
            return self.back(TCP(sport=80, dport=6000, **kw) / Raw(load))
        self.send_and_expect(self.pg0, [o(flags="S", seq=1000, window=1000)], self.pg1)
        self.send_and_expect(self.pg1, [b(flags="SA", seq=5000, ack=1001, window=2000)],
                             self.pg0)
        self.send_and_expect(self.pg0, [o(flags="A", seq=1001, ack=5001, window=1000)],
                             self.pg1)
        # In the window the initiator advertised (1000 bytes from 5001).
        self.send_and_expect(self.pg1, [b(b"x" * 100, flags="A", seq=5001, ack=1001)],
                             self.pg0)
        self.send_and_assert_no_replies(
            self.pg1, [b(b"x" * 100, flags="A", seq=5001 + 50_000, ack=1001)])
        self.send_and_assert_no_replies(
            self.pg0, [o(flags="A", seq=1001, ack=5101 + 10_000, window=1000)])
        self.send_and_assert_no_replies(self.pg1, [b(flags="R", seq=900_000)])
        assert re.search(r"state established", self.sessions()), self.sessions()
        self.send_and_expect(self.pg1, [b(flags="R", seq=5101)], self.pg0)
        assert re.search(r"state reset", self.sessions()), self.sessions()
        self.assert_counters({(OUT4, SESSION_CREATED): 1, (OUT4, PERMIT): 1,
                              (OUT4, SESSION_HIT): 1, (OUT4, OUT_OF_WINDOW): 1,
                              (IN4, SESSION_HIT): 3, (IN4, OUT_OF_WINDOW): 1,
                              (IN4, BAD_RST): 1})

    def test_clear_and_list_removal(self):
        self.send_and_expect(self.pg0, [self.out(UDP(sport=1, dport=2))], self.pg1)
        assert "Sessions total: 1" in self.sessions()
        self.vpp.cli("clear acl-plugin sessions")
        assert "Sessions total: 0" in self.sessions()
        self.send_and_assert_no_replies(self.pg1, [self.back(UDP(sport=2, dport=1))])
        self.send_and_expect(self.pg0, [self.out(UDP(sport=1, dport=2))], self.pg1)
        # Removing the reflect list frees the interface's sessions.
        self.vpp.cli("set acl-plugin interface pg1 output acl 0 del")
        assert "Sessions total: 0" in self.sessions()
        self.send_and_assert_no_replies(self.pg1, [self.back(UDP(sport=2, dport=1))])

    def test_api_sessions_dump_timeout_and_clear(self):
        a = self.vpp.api()
        self.send_and_expect(self.pg0, [self.out(UDP(sport=7, dport=8))], self.pg1)
        d = [(x.sw_if_index, x.is_output, x.proto, str(x.initiator), x.initiator_port,
              str(x.responder), x.responder_port, x.state, x.packets_initiator)
             for x in a.acl_session_dump()]
        assert d == [(2, True, 17, self.pg0.remote_ip4, 7, "10.2.0.1", 8, "active", 1)], d
        a.acl_session_timeout_set(which="udp_idle", seconds=33)
        assert "udp idle 33 " in self.sessions()
        with pytest.raises(ApiError) as ei:
            a.acl_session_timeout_set(which="tcp_idle", seconds=0)
        assert ei.value.retval == Retval.INVALID_VALUE, str(ei.value)
        assert a.acl_sessions_clear().cleared == 1
        assert a.acl_session_dump() == []
