"""NAT44 endpoint-dependent (plugins/nat44, docs/nat.md) over pg, with scapy.

Topology: pg0 and pg2 inside (10.0.0.0/24, 10.0.2.0/24), pg1 outside (10.0.1.0/24, the
"internet" 8.8.0.0/16 behind 10.0.1.2). Pool address 10.0.1.100. Every test checks the
translated headers, the checksums (recomputed by scapy) and exact counter deltas."""

import re
import time

import pytest
from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror, UDPerror, TCPerror, ICMPerror
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_papi import Retval
from sluice_test import IpRoute, assert_icmp_checksum, assert_ip4_checksum, assert_udp_checksum

POOL = "10.0.1.100"
REMOTE = "8.8.8.8"
I2O = "nat44-ed-in2out"
O2I = "nat44-ed-out2in"


def c(node, desc):
    return (node, desc)


TRANSLATED = "packets translated"
PASSED = "packets passed untranslated (not NAT traffic)"
CREATED = "sessions created"
HANDOFF = "packets handed to the session's owning thread"
NO_TRANSLATION = "no session or static mapping"
MAX_SESSIONS = "maximum sessions exceeded"
NON_FIRST = "non-first fragment (no L4 header)"
TRUNCATED = "truncated L4 header"
BAD_ICMP_ERROR = "ICMP error with a truncated or unsupported quoted packet"


def frame(src_if, pkt, src_mac=None):
    """An Ethernet frame as a host on `src_if` sends it to the router, dissected again so
    that every field is concrete."""
    return Ether(raw(Ether(dst=src_if.local_mac, src=src_mac or src_if.remote_mac) / pkt))


def assert_tcp_checksum(p):
    c2 = p[IP].copy()
    c2[TCP].chksum = None
    want = IP(raw(c2))[TCP].chksum
    assert p[TCP].chksum == want, f"TCP checksum {p[TCP].chksum:#06x}, expected {want:#06x}"


class NatTest(Ip4RouterTest):
    n_pg = 3
    sessions = None

    def setup_test(self):
        self.create_pg_interfaces(range(self.n_pg), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1, self.pg2 = self.pg_interfaces
        self.pg0.resolve_arp(3)
        IpRoute(self, "8.8.0.0/16", via=self.pg1.remote_ip4).add_config()
        enable = "nat44 plugin enable" + (f" sessions {self.sessions}" if self.sessions else "")
        self.vpp.cli(enable)
        self.vpp.cli(f"nat44 add address {POOL}")
        self.vpp.cli("set interface nat44 in pg0 in pg2 out pg1")
        self.snapshot_counters()

    def in_udp(self, sport=1234, dport=53, src=None, dst=REMOTE, payload=b"query"):
        return frame(self.pg0, IP(src=src or self.pg0.remote_ip4, dst=dst)
                     / UDP(sport=sport, dport=dport) / Raw(payload))

    def out_udp(self, dport, sport=53, src=REMOTE, dst=POOL, payload=b"answer"):
        return frame(self.pg1, IP(src=src, dst=dst) / UDP(sport=sport, dport=dport)
                     / Raw(payload))

    def sessions_text(self, detail=True):
        return self.vpp.cli("show nat44 sessions" + (" detail" if detail else ""))

    def total_sessions(self):
        m = re.search(r"total sessions: (\d+)", self.vpp.cli("show nat44 summary"))
        assert m, self.vpp.cli("show nat44 summary")
        return int(m.group(1))


class TestNat44(NatTest):

    def test_udp_in2out_and_reply(self):
        rx = self.send_and_expect(self.pg0, [self.in_udp()], self.pg1)[0]
        assert rx[IP].src == POOL and rx[IP].dst == REMOTE
        # The inside port is kept when it is free.
        assert rx[UDP].sport == 1234 and rx[UDP].dport == 53
        assert_ip4_checksum(rx)
        assert_udp_checksum(rx)
        assert rx[Raw].load == b"query"
        self.assert_counters({c(I2O, TRANSLATED): 1, c(I2O, CREATED): 1})
        out = self.sessions_text()
        assert f"i2o {self.pg0.remote_ip4} proto UDP port 1234" in out, out
        assert f"o2i {POOL} proto UDP port 1234" in out, out
        assert f"external host {REMOTE}:53" in out, out
        assert "dynamic translation" in out, out
        back = self.send_and_expect(self.pg1, [self.out_udp(1234)], self.pg0)[0]
        assert back[IP].src == REMOTE and back[IP].dst == self.pg0.remote_ip4
        assert back[UDP].dport == 1234 and back[UDP].sport == 53
        assert_ip4_checksum(back)
        assert_udp_checksum(back)
        self.assert_counters({c(O2I, TRANSLATED): 1})
        assert "total pkts 2" in self.sessions_text()

    def test_trace_records_the_translation(self):
        """The trace of an established flow's packets (the lookup pass's hits, from the
        flow's record) names the session and the tuple it was translated to, as the trace
        of the packet that created it does."""
        self.send_and_expect(self.pg0, [self.in_udp(sport=4000)], self.pg1)
        self.vpp.cli("clear trace")
        self.send_and_expect(self.pg0, [self.in_udp(sport=4000)] * 3, self.pg1)
        out = self.vpp.cli("show trace max 100")
        want = (rf"NAT44_IN2OUT_ED: session \d+: UDP {re.escape(self.pg0.remote_ip4)}:4000 "
                rf"-> {re.escape(REMOTE)}:53 translated to UDP {re.escape(POOL)}:4000 "
                rf"-> {re.escape(REMOTE)}:53")
        assert len(re.findall(want, out)) == 3, out
        self.assert_counters({c(I2O, TRANSLATED): 4, c(I2O, CREATED): 1})

    def test_new_flows_within_one_frame(self):
        """Packets of new flows interleaved with an established one in one frame: each new
        flow gets one session whatever its position (a packet the frame's batched lookup
        missed is looked up again once a session was created), and the established flow
        keeps its session."""
        self.send_and_expect(self.pg0, [self.in_udp(sport=3000)], self.pg1)
        self.assert_counters({c(I2O, TRANSLATED): 1, c(I2O, CREATED): 1})
        pkts = [self.in_udp(sport=p) for p in (3000, 2000, 2000, 3000, 2001, 2000, 2001)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        assert [r[UDP].sport for r in rx] == [3000, 2000, 2000, 3000, 2001, 2000, 2001]
        assert all(r[IP].src == POOL for r in rx)
        self.assert_counters({c(I2O, TRANSLATED): 7, c(I2O, CREATED): 2})
        back = [self.out_udp(p) for p in (2000, 3000, 2001)]
        rx = self.send_and_expect(self.pg1, back, self.pg0)
        assert [r[UDP].dport for r in rx] == [2000, 3000, 2001]
        self.assert_counters({c(O2I, TRANSLATED): 3})
        assert self.total_sessions() == 3

    def test_many_new_flows_within_one_frame(self):
        """40 new flows in one frame, three of them repeated later in the frame (a batched
        miss must be looked up again once the frame created a session): one session per
        flow, and a repeat gets its flow's translation."""
        sports = list(range(5000, 5040))
        order = sports[:10] + [5003] + sports[10:] + [5038, 5001]
        rx = self.send_and_expect(self.pg0, [self.in_udp(sport=p) for p in order], self.pg1)
        assert all(r[IP].src == POOL for r in rx)
        got = {}
        for p, r in zip(order, rx):
            assert got.setdefault(p, r[UDP].sport) == r[UDP].sport, p
        assert len(set(got.values())) == len(sports)
        self.assert_counters({c(I2O, TRANSLATED): len(order), c(I2O, CREATED): len(sports)})
        assert self.total_sessions() == len(sports)

    def test_full_frame_of_new_flows_then_established(self):
        """A full 256-packet frame in which every packet creates its session, then the same
        256 packets again, every one a hit of the frame's batched lookup: one session and
        one outside port per flow, kept by the established packets."""
        sports = list(range(20000, 20256))
        pkts = [self.in_udp(sport=p) for p in sports]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        assert all(r[IP].src == POOL and r[IP].dst == REMOTE for r in rx)
        # Frame order is kept, and every inside port is free, so each is kept.
        ports = [r[UDP].sport for r in rx]
        assert ports == sports, ports
        self.assert_counters({c(I2O, TRANSLATED): 256, c(I2O, CREATED): 256})
        assert self.total_sessions() == 256
        self.snapshot_counters()
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        assert [r[UDP].sport for r in rx] == ports
        assert all(r[IP].src == POOL for r in rx)
        for r in rx:
            assert_udp_checksum(r)
        self.assert_counters({c(I2O, TRANSLATED): 256, c(I2O, CREATED): 0})
        assert self.total_sessions() == 256
        assert re.findall(r"total pkts (\d+)", self.sessions_text()) == ["2"] * 256

    def test_udp_without_checksum(self):
        p = self.in_udp()
        p[UDP].chksum = 0
        rx = self.send_and_expect(self.pg0, [Ether(raw(p))], self.pg1)[0]
        assert rx[UDP].chksum == 0 and rx[IP].src == POOL

    def test_tcp_states_and_checksums(self):
        h = self.pg0.remote_ip4

        def i2o(flags, seq=1):
            return frame(self.pg0, IP(src=h, dst=REMOTE)
                         / TCP(sport=40000, dport=80, flags=flags, seq=seq) / Raw(b"x" * 10))

        def o2i(flags, dport):
            return frame(self.pg1, IP(src=REMOTE, dst=POOL)
                         / TCP(sport=80, dport=dport, flags=flags) / Raw(b"y" * 20))

        syn = self.send_and_expect(self.pg0, [i2o("S")], self.pg1)[0]
        assert syn[IP].src == POOL
        assert_tcp_checksum(syn)
        port = syn[TCP].sport
        assert "tcp state opening" in self.sessions_text()
        assert "(tcp-transitory)" in self.sessions_text()
        sa = self.send_and_expect(self.pg1, [o2i("SA", port)], self.pg0)[0]
        assert sa[IP].dst == h and sa[TCP].dport == 40000
        assert_tcp_checksum(sa)
        assert "tcp state established" in self.sessions_text()
        assert "(tcp-established)" in self.sessions_text()
        self.send_and_expect(self.pg0, [i2o("A"), i2o("PA")], self.pg1)
        self.send_and_expect(self.pg0, [i2o("FA")], self.pg1)
        assert "tcp state closing" in self.sessions_text()
        self.send_and_expect(self.pg1, [o2i("FA", port)], self.pg0)
        out = self.sessions_text()
        assert "tcp state closed" in out and "(tcp-transitory)" in out, out
        self.assert_counters({c(I2O, TRANSLATED): 4, c(I2O, CREATED): 1,
                              c(O2I, TRANSLATED): 2})

    def test_icmp_echo_identifiers(self):
        # Two inside hosts use the same identifier towards the same remote: the second
        # gets another outside identifier (a live tuple is never reused).
        pk = [frame(self.pg0, IP(src=self.pg0.remote_host_ip4(h), dst=REMOTE)
                    / ICMP(type="echo-request", id=4000, seq=1) / Raw(b"ping"))
              for h in (2, 3)]
        rx = self.send_and_expect(self.pg0, pk, self.pg1)
        ids = sorted(p[ICMP].id for p in rx)
        assert len(set(ids)) == 2 and 4000 in ids, ids
        for p in rx:
            assert p[IP].src == POOL
            assert_icmp_checksum(p)
            assert_ip4_checksum(p)
        replies = [frame(self.pg1, IP(src=REMOTE, dst=POOL)
                         / ICMP(type="echo-reply", id=i, seq=1) / Raw(b"ping")) for i in ids]
        back = self.send_and_expect(self.pg1, replies, self.pg0)
        assert sorted(p[IP].dst for p in back) == [self.pg0.remote_host_ip4(2),
                                                   self.pg0.remote_host_ip4(3)]
        for p in back:
            assert p[ICMP].id == 4000
            assert_icmp_checksum(p)
        self.assert_counters({c(I2O, TRANSLATED): 2, c(I2O, CREATED): 2,
                              c(O2I, TRANSLATED): 2})

    def test_ports_never_reuse_a_live_tuple(self):
        # Host 2 and host 3 both use source port 5000 to the same remote endpoint.
        pk = [self.in_udp(sport=5000, src=self.pg0.remote_host_ip4(h)) for h in (2, 3)]
        # And one host to 64 remote ports: each flow its own session.
        pk += [self.in_udp(sport=6000, dport=1000 + i) for i in range(64)]
        rx = self.send_and_expect(self.pg0, pk, self.pg1)
        tuples = {(p[IP].src, p[UDP].sport, p[IP].dst, p[UDP].dport) for p in rx}
        assert len(tuples) == len(pk)
        by_src = {}
        for p in rx[:2]:
            by_src[p[UDP].sport] = p
        assert len(by_src) == 2, "two inside hosts, one outside tuple each"
        # Endpoint-dependent: the 64 flows of one host may share its outside port.
        assert self.total_sessions() == 66
        self.assert_counters({c(I2O, TRANSLATED): 66, c(I2O, CREATED): 66})

    def test_icmp_error_from_outside_translates_quoted_packet(self):
        rx = self.send_and_expect(self.pg0, [self.in_udp(sport=7777)], self.pg1)[0]
        # A router on the way answers with "port unreachable", quoting what it got.
        quoted = IP(raw(rx[IP]))
        err = frame(self.pg1, IP(src="8.8.4.4", dst=POOL) / ICMP(type=3, code=3) / quoted)
        back = self.send_and_expect(self.pg1, [err], self.pg0)[0]
        assert back[IP].dst == self.pg0.remote_ip4 and back[IP].src == "8.8.4.4"
        assert back[IPerror].src == self.pg0.remote_ip4 and back[UDPerror].sport == 7777
        assert_ip4_checksum(back)
        assert_icmp_checksum(back)
        inner = IP(raw(back[IPerror]))
        assert_ip4_checksum(inner)
        assert_udp_checksum(inner)
        self.assert_counters({c(I2O, TRANSLATED): 1, c(I2O, CREATED): 1,
                              c(O2I, TRANSLATED): 1})

    def test_icmp_error_from_inside_translates_quoted_packet(self):
        self.vpp.cli(f"nat44 add static mapping udp local {self.pg0.remote_ip4} 5353 "
                     f"external {POOL} 5353")
        q = self.out_udp(5353, sport=999)
        got = self.send_and_expect(self.pg1, [q], self.pg0)[0]
        assert got[IP].dst == self.pg0.remote_ip4 and got[UDP].dport == 5353
        # The inside host says "port unreachable" about it.
        err = frame(self.pg0, IP(src=self.pg0.remote_ip4, dst=REMOTE)
                    / ICMP(type=3, code=3) / IP(raw(got[IP])))
        out = self.send_and_expect(self.pg0, [err], self.pg1)[0]
        assert out[IP].src == POOL and out[IP].dst == REMOTE
        assert out[IPerror].dst == POOL and out[UDPerror].dport == 5353
        assert_icmp_checksum(out)
        inner = IP(raw(out[IPerror]))
        assert_ip4_checksum(inner)
        assert_udp_checksum(inner)

    def test_icmp_error_with_truncated_quote_is_dropped(self):
        rx = self.send_and_expect(self.pg0, [self.in_udp(sport=7000)], self.pg1)[0]
        quoted = raw(rx[IP])[:24]  # the IP header and 4 bytes: RFC 792 wants 8
        err = frame(self.pg1, IP(src=REMOTE, dst=POOL) / ICMP(type=3, code=1) / Raw(quoted))
        self.send_and_assert_no_replies(self.pg1, [err])
        self.assert_counters({c(I2O, TRANSLATED): 1, c(I2O, CREATED): 1,
                              c(O2I, BAD_ICMP_ERROR): 1})

    def test_unknown_out2in_is_dropped_and_counted(self):
        pk = [self.out_udp(2000 + i) for i in range(5)]
        pk.append(frame(self.pg1, IP(src=REMOTE, dst=POOL) / TCP(sport=80, dport=3333,
                                                                  flags="S")))
        self.send_and_assert_no_replies(self.pg1, pk)
        self.assert_counters({c(O2I, NO_TRANSLATION): 6})
        # Traffic to other addresses is not NAT's business.
        rx = self.send_and_expect(self.pg1, [self.out_udp(9, dst=self.pg0.remote_ip4)],
                                  self.pg0)[0]
        assert rx[IP].dst == self.pg0.remote_ip4
        self.assert_counters({c(O2I, PASSED): 1})

    def test_inside_to_inside_and_router_are_not_translated(self):
        rx = self.send_and_expect(self.pg0, [self.in_udp(dst=self.pg2.remote_ip4)],
                                  self.pg2)[0]
        assert rx[IP].src == self.pg0.remote_ip4
        self.assert_counters({c(I2O, PASSED): 1})
        assert self.total_sessions() == 0

    def test_static_mapping_out2in_and_hairpinning(self):
        server = self.pg0.remote_host_ip4(3)
        self.vpp.cli(f"nat44 add static mapping tcp local {server} 80 external {POOL} 8080")
        assert "static TCP local 10.0.0.3:80 external 10.0.1.100:8080" in \
            self.vpp.cli("show nat44 static mappings")
        # From outside.
        syn = frame(self.pg1, IP(src=REMOTE, dst=POOL) / TCP(sport=5555, dport=8080, flags="S"))
        rx = self.send_and_expect(self.pg1, [syn], self.pg0)[0]
        assert rx[IP].dst == server and rx[TCP].dport == 80
        assert rx[Ether].dst == self.pg0.remote_host_mac(3)
        assert_tcp_checksum(rx)
        sa = frame(self.pg0, IP(src=server, dst=REMOTE) / TCP(sport=80, dport=5555, flags="SA"),
                   src_mac=self.pg0.remote_host_mac(3))
        out = self.send_and_expect(self.pg0, [sa], self.pg1)[0]
        assert out[IP].src == POOL and out[TCP].sport == 8080
        assert "static translation" in self.sessions_text()
        # Hairpinning: host 2 reaches the server through its outside address.
        client = self.pg0.remote_ip4
        h = frame(self.pg0, IP(src=client, dst=POOL) / TCP(sport=6000, dport=8080, flags="S"))
        rx = self.send_and_expect(self.pg0, [h], self.pg0)[0]
        assert rx[IP].dst == server and rx[TCP].dport == 80
        assert rx[IP].src == POOL, "the server sees the client's outside address"
        assert_tcp_checksum(rx)
        cport = rx[TCP].sport
        r = frame(self.pg0, IP(src=server, dst=POOL) / TCP(sport=80, dport=cport, flags="SA"),
                  src_mac=self.pg0.remote_host_mac(3))
        back = self.send_and_expect(self.pg0, [r], self.pg0)[0]
        assert back[IP].src == POOL and back[TCP].sport == 8080
        assert back[IP].dst == client and back[TCP].dport == 6000
        assert_tcp_checksum(back)
        assert "hairpinning" in self.sessions_text()

    def test_identity_mapping(self):
        host = self.pg0.remote_ip4
        self.vpp.cli(f"nat44 add identity mapping {host} udp 6666")
        rx = self.send_and_expect(self.pg0, [self.in_udp(sport=6666)], self.pg1)[0]
        assert rx[IP].src == host and rx[UDP].sport == 6666
        back = self.send_and_expect(self.pg1, [self.out_udp(6666, dst=host)], self.pg0)[0]
        assert back[IP].dst == host
        assert "identity translation" in self.sessions_text()

    def test_bad_input_counted_never_forwarded(self):
        # Truncated UDP: 4 bytes of L4 header.
        short = frame(self.pg0, IP(src=self.pg0.remote_ip4, dst=REMOTE, proto=17)
                      / Raw(b"\x04\xd2\x00"))
        # A non-first fragment.
        frag = frame(self.pg0, IP(src=self.pg0.remote_ip4, dst=REMOTE, proto=17, frag=10)
                     / Raw(b"x" * 16))
        self.send_and_assert_no_replies(self.pg0, [short, frag])
        self.assert_counters({c(I2O, TRUNCATED): 1, c(I2O, NON_FIRST): 1})
        # A first fragment is translated (its L4 checksum updated incrementally).
        first = frame(self.pg0, IP(src=self.pg0.remote_ip4, dst=REMOTE, flags="MF")
                      / UDP(sport=1111, dport=53) / Raw(b"y" * 24))
        rx = self.send_and_expect(self.pg0, [first], self.pg1)[0]
        assert rx[IP].src == POOL and rx[IP].flags.MF

    def test_sessions_expire_and_are_freed(self):
        self.vpp.cli("set nat timeout udp 1 icmp 1")
        assert "udp timeout: 1sec" in self.vpp.cli("show nat timeouts")
        pk = [self.in_udp(sport=3000 + i) for i in range(10)]
        self.send_and_expect(self.pg0, pk, self.pg1)
        assert self.total_sessions() == 10
        # The walk process frees them once they time out (no traffic needed).
        self.wait_for(lambda: self.total_sessions() == 0, "sessions to expire", timeout=10)
        assert "total timed out sessions: 10" in self.vpp.cli("show nat44 summary")
        # A late reply finds no session.
        self.send_and_assert_no_replies(self.pg1, [self.out_udp(3000)])
        self.assert_counters({c(I2O, TRANSLATED): 10, c(I2O, CREATED): 10,
                              c(O2I, NO_TRANSLATION): 1})

    def test_address_delete_frees_its_sessions(self):
        self.send_and_expect(self.pg0, [self.in_udp()], self.pg1)
        assert self.total_sessions() == 1
        self.vpp.cli(f"nat44 add address {POOL} del")
        assert self.total_sessions() == 0
        self.send_and_assert_no_replies(self.pg0, [self.in_udp()])
        self.assert_counters({c(I2O, TRANSLATED): 1, c(I2O, CREATED): 1,
                              c(I2O, "no NAT pool address"): 1})

    def test_del_session_by_inside_outside_and_external_host(self):
        host = self.pg0.remote_ip4
        pk = [self.in_udp(sport=1234), self.in_udp(sport=1234, dst="8.8.4.4"),
              self.in_udp(sport=1235),
              frame(self.pg0, IP(src=host, dst=REMOTE) / ICMP(id=77) / Raw(b"ping"))]
        self.send_and_expect(self.pg0, pk, self.pg1)
        assert self.total_sessions() == 4
        # One session of the endpoint: the one with that remote host.
        self.vpp.cli(f"nat44 del session in {host}:1234 udp external-host 8.8.4.4:53")
        assert self.total_sessions() == 3
        self.send_and_assert_no_replies(self.pg1, [self.out_udp(1234, src="8.8.4.4")])
        self.send_and_expect(self.pg1, [self.out_udp(1234)], self.pg0)
        # By the outside endpoint (the inside port was kept), then the rest of 1234.
        self.vpp.cli(f"nat44 del session out {POOL}:1235 udp")
        assert self.total_sessions() == 2
        self.vpp.cli(f"nat44 del session in {host}:1234 udp vrf 0")
        self.vpp.cli(f"nat44 del session in {host}:77 icmp")
        assert self.total_sessions() == 0
        assert "total deleted sessions: 4" in self.vpp.cli("show nat44 summary")
        self.assert_counters({c(I2O, TRANSLATED): 4, c(I2O, CREATED): 4,
                              c(O2I, TRANSLATED): 1, c(O2I, NO_TRANSLATION): 1})
        self.assert_cli_error(f"nat44 del session in {host}:1234 udp", "no inside session")
        self.assert_cli_error(f"nat44 del session in {host} udp", f"`{host}'")
        self.assert_cli_error(f"nat44 del session in {host}:1234 gre", "`gre'")
        self.assert_cli_error(f"nat44 del session sideways {host}:1 udp", "`sideways'")
        self.assert_cli_error(f"nat44 del session in {host}:1 udp vrf 7", "`7'")
        self.assert_cli_error(f"nat44 del session in {host}:1 udp external-host x", "`x'")

    def test_cli_errors_name_the_token(self):
        self.assert_cli_error("nat44 add address 1.2.3", "`1.2.3'")
        self.assert_cli_error(f"nat44 add address {POOL}", "already exists")
        self.assert_cli_error("nat44 add address 10.9.9.9 del", "not found")
        self.assert_cli_error("set interface nat44 in pg9", "`pg9'")
        self.assert_cli_error("set nat timeout udp 0", "`0'")
        self.assert_cli_error("set nat timeout bogus 5", "`bogus'")
        self.assert_cli_error("nat44 add static mapping tcp local 10.0.0.2 80 external 1.1.1.1",
                              "both")
        self.assert_cli_error("nat44 plugin enable", "already enabled")
        self.assert_cli_error("nat44 add static mapping local 10.0.0.2 external 1.1.1.1 vrf 7",
                              "`7'")


    def test_del_session_api(self):
        a = self.vpp.api()
        expect = self.assert_api_error
        host = self.pg0.remote_ip4
        self.send_and_expect(self.pg0, [self.in_udp(sport=4000), self.in_udp(sport=4001),
                                        self.in_udp(sport=4001, dst="8.8.4.4")], self.pg1)
        r = a.nat44_del_session(address=host, protocol=17, port=4001, vrf_id=0,
                                is_inside=True, ext_host_valid=False)
        assert r.deleted == 2 and self.total_sessions() == 1
        r = a.nat44_del_session(address=POOL, protocol=17, port=4000, vrf_id=0,
                                is_inside=False, ext_host_valid=True,
                                ext_host_address=REMOTE, ext_host_port=53)
        assert r.deleted == 1 and a.nat44_session_dump() == []
        expect(Retval.NO_SUCH_ENTRY, a.nat44_del_session, address=host, protocol=17,
               port=4000, vrf_id=0, is_inside=True, match="no inside session")
        expect(Retval.INVALID_VALUE, a.nat44_del_session, address=host, protocol=47,
               port=1, vrf_id=0, is_inside=True, match="`47'")
        expect(Retval.INVALID_VALUE, a.nat44_del_session, address="2001:db8::1", protocol=17,
               port=1, vrf_id=0, is_inside=True)
        expect(Retval.NO_SUCH_TABLE, a.nat44_del_session, address=host, protocol=17, port=1,
               vrf_id=7, is_inside=True)
        a.nat44_ed_plugin_enable_disable(enable=False)
        expect(Retval.NOT_SUPPORTED, a.nat44_del_session, address=host, protocol=17,
               port=1, vrf_id=0, is_inside=True)


class TestNat44Limit(NatTest):
    sessions = 4

    def test_session_limit_is_counted(self):
        pk = [self.in_udp(sport=2000 + i) for i in range(6)]
        self.send_and_expect(self.pg0, pk, self.pg1, n_rx=4)
        self.assert_counters({c(I2O, TRANSLATED): 4, c(I2O, CREATED): 4,
                              c(I2O, MAX_SESSIONS): 2})
        # Existing sessions keep working.
        self.send_and_expect(self.pg0, pk[:4], self.pg1)
        assert "max translations per thread: 4" in self.vpp.cli("show nat44 summary")


class TestNat44Workers(NatTest):
    """`cpu { workers 2 }`: sessions live on the workers; pg packets arrive on the main
    thread and are handed to the owner, in both directions."""
    extra_config = "cpu { workers 2 }\n"

    def test_handoff_to_owning_workers(self):
        n = 40
        pk = [self.in_udp(sport=10000 + i, src=self.pg0.remote_host_ip4(2 + i % 2))
              for i in range(n)]
        rx = self.send_and_expect(self.pg0, pk, self.pg1)
        assert all(p[IP].src == POOL for p in rx)
        out = self.sessions_text(detail=False)
        counts = [int(x) for x in re.findall(r"thread \d+ \S+: (\d+) sessions", out)]
        assert sum(counts) == n and len([x for x in counts if x]) == 2, out
        assert re.search(r"thread 0 \S+: 0 sessions", out), out
        replies = [self.out_udp(p[UDP].sport, dst=POOL) for p in rx]
        back = self.send_and_expect(self.pg1, replies, self.pg0)
        assert sorted(p[UDP].dport for p in back) == sorted(10000 + i for i in range(n))
        self.assert_counters({c(I2O, TRANSLATED): n, c(I2O, CREATED): n, c(I2O, HANDOFF): n,
                              c(O2I, TRANSLATED): n, c(O2I, HANDOFF): n})

    def test_frame_mixing_kept_and_handed_off_packets(self):
        """One frame on the main thread interleaving untranslated packets (inside to
        inside: kept and forwarded by this thread) with NAT packets (handed to the
        workers owning their sessions): all arrive, the untranslated ones in order."""
        n = 40
        nat = [self.in_udp(sport=11000 + i, src=self.pg0.remote_host_ip4(2 + i % 2))
               for i in range(n)]
        plain = [self.in_udp(sport=12000 + i, dst=self.pg2.remote_ip4) for i in range(n)]
        pkts = [p for pair in zip(nat, plain) for p in pair]
        self.pg1.enable_capture()
        self.pg2.enable_capture()
        self.pg0.add_stream(pkts)
        self.pg_start()
        rx_plain = self.pg2.get_capture(n, remark="untranslated")
        rx_nat = self.pg1.get_capture(n, remark="translated")
        assert [p[UDP].sport for p in rx_plain] == [12000 + i for i in range(n)]
        assert all(p[IP].src == self.pg0.remote_ip4 for p in rx_plain)
        assert all(p[IP].src == POOL for p in rx_nat)
        # A worker takes ports of its own range: one per flow.
        assert len({p[UDP].sport for p in rx_nat}) == n
        self.assert_counters({c(I2O, TRANSLATED): n, c(I2O, CREATED): n, c(I2O, HANDOFF): n,
                              c(I2O, PASSED): n})
        out = self.sessions_text(detail=False)
        counts = [int(x) for x in re.findall(r"thread \d+ \S+: (\d+) sessions", out)]
        assert sum(counts) == n and len([x for x in counts if x]) == 2, out


class TestNat44Disabled(Ip4RouterTest):
    n_pg = 2

    def test_commands_need_enable(self):
        self.assert_cli_error("nat44 add address 1.1.1.1", "disabled")
        self.assert_cli_error("set interface nat44 in pg0 out pg1", "disabled")
        assert "nat" in self.vpp.cli("show plugins")


class TestNat44Api(Ip4RouterTest):
    """NAT44 configured only through the control API (VPP's nat44 messages): traffic is
    translated as with the CLI, the dumps show what the CLI's `show` commands show, and
    every error has its code."""
    n_pg = 3

    def setup_test(self):
        self.create_pg_interfaces(range(self.n_pg), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1, self.pg2 = self.pg_interfaces
        self.pg0.resolve_arp(3)
        IpRoute(self, "8.8.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.snapshot_counters()

    def test_configure_translate_dump_and_errors(self):
        a = self.vpp.api()
        none = 0xffffffff
        sw = {p: p.index + 1 for p in self.pg_interfaces}
        expect = self.assert_api_error
        expect(Retval.NOT_SUPPORTED, a.nat44_add_del_address_range, is_add=True,
               first_ip_address=POOL, last_ip_address=POOL, vrf_id=none, match="disabled")
        expect(Retval.NOT_SUPPORTED, a.nat44_session_dump)
        a.nat44_ed_plugin_enable_disable(enable=True, sessions=1000)
        expect(Retval.ALREADY_EXISTS, a.nat44_ed_plugin_enable_disable, enable=True)
        a.nat44_add_del_address_range(is_add=True, first_ip_address=POOL,
                                      last_ip_address="10.0.1.101", vrf_id=none)
        a.nat44_interface_add_del_feature(is_add=True, is_inside=True, sw_if_index=sw[self.pg0])
        a.nat44_interface_add_del_feature(is_add=True, is_inside=False,
                                          sw_if_index=sw[self.pg1])
        assert [(d.sw_if_index, d.is_inside, d.is_outside)
                for d in a.nat44_interface_dump()] == [(sw[self.pg0], True, False),
                                                      (sw[self.pg1], False, True)]
        assert [(str(d.ip_address), d.sw_if_index, d.vrf_id)
                for d in a.nat44_address_dump()] == [(POOL, none, none),
                                                    ("10.0.1.101", none, none)]
        # A dynamic session, as the CLI-configured tests do.
        host = self.pg0.remote_ip4
        p = frame(self.pg0, IP(src=host, dst=REMOTE) / UDP(sport=1234, dport=53) / Raw(b"q"))
        rx = self.send_and_expect(self.pg0, [p], self.pg1)[0]
        assert rx[IP].src in (POOL, "10.0.1.101") and rx[UDP].sport == 1234
        assert_udp_checksum(rx)
        d = a.nat44_session_dump()
        assert [(str(x.inside_ip_address), x.inside_port, str(x.outside_ip_address),
                 x.outside_port, str(x.ext_host_address), x.ext_host_port, x.protocol,
                 x.is_static, x.total_pkts) for x in d] == [
            (host, 1234, rx[IP].src, 1234, REMOTE, 53, 17, False, 1)], d
        assert 0 < d[0].expires_in <= 300
        # A static port mapping, then traffic from outside to it.
        server = self.pg0.remote_host_ip4(3)
        a.nat44_add_del_static_mapping(is_add=True, local_ip_address=server,
                                       external_ip_address=POOL, protocol=6, local_port=80,
                                       external_port=8080, external_sw_if_index=none)
        assert "static TCP local 10.0.0.3:80 external 10.0.1.100:8080" in \
            self.vpp.cli("show nat44 static mappings")
        syn = frame(self.pg1, IP(src=REMOTE, dst=POOL) / TCP(sport=5555, dport=8080, flags="S"))
        rx = self.send_and_expect(self.pg1, [syn], self.pg0)[0]
        assert rx[IP].dst == server and rx[TCP].dport == 80
        # `sw_if_index` omitted: its default 0xffffffff (the address given), not local0.
        a.nat44_add_del_identity_mapping(is_add=True, ip_address=host, protocol=17, port=6666)
        assert [(x.is_identity, x.addr_only, str(x.local_ip_address), x.protocol,
                 x.local_port, x.external_port) for x in a.nat44_static_mapping_dump()] == [
            (False, False, server, 6, 80, 8080), (True, False, host, 17, 6666, 6666)]
        tcp = [x for x in a.nat44_session_dump() if x.protocol == 6]
        assert [(x.is_static, x.tcp_state) for x in tcp] == [(True, "opening")], tcp
        # Timeouts.
        a.nat_set_timeouts(udp=30, tcp_established=600, tcp_transitory=20, icmp=10)
        t = a.nat_get_timeouts()
        assert (t.udp, t.tcp_established, t.tcp_transitory, t.icmp) == (30, 600, 20, 10)
        assert "udp timeout: 30sec" in self.vpp.cli("show nat timeouts")
        expect(Retval.INVALID_VALUE, a.nat_set_timeouts, udp=0, tcp_established=1,
               tcp_transitory=1, icmp=1, match="udp timeout `0'")
        # Errors: the CLI's checks, with their codes.
        expect(Retval.ALREADY_EXISTS, a.nat44_add_del_address_range, is_add=True,
               first_ip_address=POOL, last_ip_address=POOL, vrf_id=none)
        expect(Retval.NO_SUCH_ENTRY, a.nat44_add_del_address_range, is_add=False,
               first_ip_address="10.9.9.9", last_ip_address="10.9.9.9", vrf_id=none)
        expect(Retval.INVALID_VALUE, a.nat44_add_del_address_range, is_add=True,
               first_ip_address="10.9.9.9", last_ip_address="10.9.9.1", vrf_id=none,
               match="end before start")
        expect(Retval.INVALID_VALUE, a.nat44_add_del_address_range, is_add=True,
               first_ip_address="2001:db8::1", last_ip_address="2001:db8::1", vrf_id=none)
        expect(Retval.NO_SUCH_TABLE, a.nat44_add_del_address_range, is_add=True,
               first_ip_address="10.9.9.9", last_ip_address="10.9.9.9", vrf_id=7)
        expect(Retval.NO_SUCH_INTERFACE, a.nat44_interface_add_del_feature, is_add=True,
               is_inside=True, sw_if_index=99)
        expect(Retval.NO_SUCH_INTERFACE, a.nat44_add_del_interface_addr, is_add=True,
               sw_if_index=99)
        expect(Retval.ALREADY_EXISTS, a.nat44_add_del_static_mapping, is_add=True,
               local_ip_address=server, external_ip_address=POOL, protocol=6, local_port=80,
               external_port=8080, external_sw_if_index=none)
        expect(Retval.INVALID_VALUE, a.nat44_add_del_static_mapping, is_add=True,
               local_ip_address=server, external_ip_address=POOL, protocol=6, local_port=81,
               external_port=0, external_sw_if_index=none, match="external_port")
        expect(Retval.INVALID_VALUE, a.nat44_add_del_static_mapping, is_add=True,
               local_ip_address=server, external_ip_address=POOL, protocol=47, local_port=81,
               external_port=81, external_sw_if_index=none, match="protocol")
        expect(Retval.NO_SUCH_ENTRY, a.nat44_add_del_identity_mapping, is_add=False,
               ip_address=host, protocol=17, port=7777, sw_if_index=none)
        # An interface's address as a pool address, followed: pg2's is 10.0.2.1.
        a.nat44_add_del_interface_addr(is_add=True, sw_if_index=sw[self.pg2])
        assert (self.pg2.local_ip4, sw[self.pg2], True) in [
            (str(d.ip_address), d.sw_if_index, d.resolved) for d in a.nat44_address_dump()]
        expect(Retval.ALREADY_EXISTS, a.nat44_add_del_interface_addr, is_add=True,
               sw_if_index=sw[self.pg2])
        a.nat44_add_del_interface_addr(is_add=False, sw_if_index=sw[self.pg2])
        # Deleting, then clearing.
        a.nat44_add_del_identity_mapping(is_add=False, ip_address=host, protocol=17, port=6666,
                                         sw_if_index=none)
        a.nat44_add_del_static_mapping(is_add=False, local_ip_address=server,
                                       external_ip_address=POOL, protocol=6, local_port=80,
                                       external_port=8080, external_sw_if_index=none)
        assert a.nat44_static_mapping_dump() == []
        assert a.nat44_sessions_clear().cleared == 1
        assert a.nat44_session_dump() == []
        a.nat44_interface_add_del_feature(is_add=False, is_inside=True, sw_if_index=sw[self.pg0])
        assert [d.sw_if_index for d in a.nat44_interface_dump()] == [sw[self.pg1]]
        a.nat44_ed_plugin_enable_disable(enable=False)
        assert a.nat44_interface_dump() == [] and a.nat44_address_dump() == []
        expect(Retval.NOT_SUPPORTED, a.nat44_ed_plugin_enable_disable, enable=False)
        # Disabled again: the inside packet passes untranslated.
        rx = self.send_and_expect(self.pg0, [p], self.pg1)[0]
        assert rx[IP].src == host
