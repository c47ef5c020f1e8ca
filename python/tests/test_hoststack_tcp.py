"""Host stack TCP options against scapy over pg (issue 19), the remote host played segment
by segment as in test_tcp.py: SACK both ways (blocks for held segments; a loss recovery
that resends only the hole the peer's SACK shows), delayed ACKs (one ACK for two full
segments, the timer for a lone one), keepalive (probes, then a reset when they go
unanswered) and a SYN flood past the listener's backlog answered with SYN cookies while an
established connection keeps being served."""

import re

from scapy.compat import raw
from scapy.layers.inet import IP, TCP

from test_tcp import TcpPgBase, session_conf

SACK_OK = ("SAckOK", b"")


def opts(p):
    return dict(p.options)


def data_segs(pkts):
    return [(p.seq, bytes(p.payload)) for p in pkts if len(p.payload)]


def sack_recovery(self, check_echo=lambda pkts: None):
    """An echo of 5 segments of 1000 bytes whose first segment is lost and SACKed around:
    only it is resent, by SACK recovery, no RTO (`check_echo(packets)`: more checks of the
    echo as captured)."""
    self.start_sink("echo")
    # No timestamps or window scaling offered: segments of exactly the MSS. The pause
    # before the handshake's ACK makes the first RTT sample long, and so the RTO (three
    # times the sample: 9 s), so no timeout interferes with the recovery even when the
    # test takes seconds to send the SACK (0.8 s, an RTO of 2.4 s, ran out at load 30).
    our = self.handshake(options=(("MSS", 1000), SACK_OK), pause=3.0)
    data = bytes(range(256)) * 20
    self.pg0.enable_capture()
    self.pg0.add_stream([self.seg("PA", 1001 + k * 1000, our, data[k * 1000:(k + 1) * 1000])
                         for k in range(5)])
    self.pg_start()
    pkts = self.capture_until(lambda ps: sum(len(p[TCP].payload) for p in ps) >= 5000,
                              "the echo")
    check_echo(pkts)
    segs = sorted(data_segs(pkts))
    assert b"".join(d for _, d in segs) == data[:5000]
    assert all(len(d) <= 1000 for _, d in segs)
    # The first segment is lost: the peer SACKs everything after it.
    first = segs[0]
    assert first[0] == our
    end = our + 5000
    self.pg0.enable_capture()
    self.pg0.add_stream([self.seg("A", 6001, our,
                                  options=[("SAck", (our + len(first[1]), end))])])
    self.pg_start()
    again = data_segs(self.capture_until(lambda ps: data_segs(p[TCP] for p in ps),
                                         "the retransmission", settle=0.3))
    assert again == [first], [(s, len(d)) for s, d in again]
    assert self.tcp_verbose("sack-retrans") == 1
    assert self.tcp_verbose("sack-recoveries") == 1
    assert self.tcp_verbose("rto-retrans") == 0
    # Everything acknowledged: nothing more is sent.
    self.send_and_assert_no_replies(self.pg0, [self.seg("A", 6001, end)], "all acked")


class TestTcpSack(TcpPgBase):
    extra_config = session_conf()

    def test_sack_blocks_for_held_segments(self):
        self.start_sink()
        our = self.handshake(options=(("MSS", 1200), SACK_OK))
        assert SACK_OK in self.synack.options, self.synack.options
        # Held segments: each draws a duplicate ACK whose first block holds the latest.
        dup = self.exchange(self.seg("PA", 1501, our, b"b" * 100))[0]
        assert dup.ack == 1001 and opts(dup)["SAck"] == (1501, 1601), dup.options
        dup = self.exchange(self.seg("PA", 1801, our, b"d" * 100))[0]
        assert opts(dup)["SAck"] == (1801, 1901, 1501, 1601), dup.options
        # Filling the first hole: acknowledged at once, the remaining block reported.
        ack = self.exchange(self.seg("PA", 1001, our, b"a" * 500))[0]
        assert ack.ack == 1601 and opts(ack)["SAck"] == (1801, 1901), ack.options
        ack = self.exchange(self.seg("PA", 1601, our, b"c" * 200))[0]
        assert ack.ack == 1901 and "SAck" not in opts(ack), ack.options
        self.pg0.add_stream([self.seg("FA", 1901, our)])
        self.pg_start()
        out, _ = self.sink.communicate(timeout=10)
        assert out == b"a" * 500 + b"b" * 100 + b"c" * 200 + b"d" * 100

    def test_sack_recovery_resends_only_the_hole(self):
        sack_recovery(self)

    def test_delayed_ack(self):
        self.start_sink()
        our = self.handshake(options=(("MSS", 1000),))
        # A lone small segment first: acknowledged by the delayed-ACK timer. (First, because
        # once the sink has read two full segments the window has opened by 2 MSS, and the
        # next segment is answered at once with that window update, whenever the sink read.)
        self.pg0.enable_capture()
        self.pg0.add_stream([self.seg("PA", 1001, our, b"c" * 10)])
        self.pg_start()
        acks = self.capture_until(lambda ps: len(ps) >= 1, "the delayed ACK")
        assert [a.ack for a in acks] == [1011]
        assert self.tcp_verbose("delack-timeouts") == 1
        assert self.tcp_verbose("acks-delayed") >= 1
        # Two full segments: one ACK for both, at once.
        self.pg0.enable_capture()
        self.pg0.add_stream([self.seg("PA", 1011, our, b"a" * 1000),
                             self.seg("PA", 2011, our, b"b" * 1000)])
        self.pg_start()
        acks = [p.ack for p in self.capture_until(lambda ps: len(ps) >= 1, "the ACK",
                                                  settle=0.3)]
        assert acks == [3011], acks
        assert self.tcp_verbose("delack-timeouts") == 1


class TestTcpKeepalive(TcpPgBase):
    extra_config = session_conf("tcp-keepalive 1 1 2")

    def test_keepalive_probes_then_reset(self):
        self.start_sink()
        our = self.handshake()
        self.pg0.enable_capture()
        probe = self.capture_until(lambda ps: len(ps) >= 1, "a keepalive probe")[0]
        assert (probe.seq, probe.ack, probe.flags, len(probe.payload)) == (our - 1, 1001, "A", 0)
        # Answered: the connection lives on; then unanswered probes end it with a RST.
        self.pg0.enable_capture()
        self.pg0.add_stream([self.seg("A", 1001, our)])
        self.pg_start()
        pkts = self.capture_until(lambda ps: any(p[TCP].flags.R for p in ps), "the reset",
                                  timeout=15)
        probes = [p for p in pkts if not p.flags.R]
        assert len(probes) >= 2 and all(p.seq == our - 1 for p in probes), probes
        assert pkts[-1].flags.R and pkts[-1].seq == our
        self.sink.wait(timeout=10)
        assert self.sink.returncode != 0  # the sink sees the reset
        text = self.vpp.cli("show session verbose")
        assert "(1 keepalive timeouts)" in text, text


class TestTcpSynFlood(TcpPgBase):
    extra_config = session_conf("tcp-syn-backlog 4")

    def test_syn_cookies_past_the_backlog(self):
        self.start_sink("echo")
        our = self.handshake()
        n = 100
        flood = [self.seg("S", 5000 + i, sport=41000 + i,
                          options=[("MSS", 1460), SACK_OK, ("WScale", 7)]) for i in range(n)]
        # The established connection's data in the middle of the flood.
        mid = self.seg("PA", 1001, our, b"still served")
        self.pg0.enable_capture()
        self.pg0.add_stream(flood[:n // 2] + [mid] + flood[n // 2:])
        self.pg_start()

        def done(ps):
            sa = {p[TCP].dport for p in ps if p[TCP].flags == "SA"}
            echo = any(bytes(p[TCP].payload) == b"still served" for p in ps)
            return len(sa) == n and echo

        pkts = self.capture_until(done, "SYN-ACKs for the flood and the echo")
        synacks = {p.dport: p for p in pkts if p.flags == "SA"}
        stateful = [p for p in synacks.values() if "WScale" in opts(p)]
        cookies = [p for p in synacks.values() if "WScale" not in opts(p)]
        assert len(stateful) == 4 and len(cookies) == n - 4
        # A cookie SYN-ACK keeps nothing it could not encode: the MSS only.
        assert all(list(opts(p)) == ["MSS"] for p in cookies), cookies[0].options
        assert self.delta(("tcp4-input", "SYN dropped: listener backlog full")) == 0
        # Acknowledge the echo, or its retransmission (RTO under load) lands in a capture below.
        self.pg0.add_stream([self.seg("A", 1001 + 12, our + 12)])
        self.pg_start()
        # The handshake's ACK with the cookie opens the connection; data flows over it.
        c = cookies[0]
        self.pg0.add_stream([self.seg("A", c.ack, c.seq + 1, sport=c.dport)])
        self.pg_start()
        self.pg0.enable_capture()
        self.pg0.add_stream([self.seg("PA", c.ack, c.seq + 1, b"cookie", sport=c.dport)])
        self.pg_start()
        self.capture_until(lambda ps: any(bytes(p[TCP].payload) == b"cookie"
                                          and p[TCP].dport == c.dport for p in ps),
                           "the echo over the cookie connection")
        self.pg0.add_stream([self.seg("A", c.ack + 6, c.seq + 1 + 6, sport=c.dport)])
        self.pg_start()
        # A forged cookie: RST, counted.
        rst = self.exchange(self.seg("A", 777, 12345, sport=42000))[0]
        assert rst.flags == "R" and rst.seq == 12345
        text = self.vpp.cli("show session verbose")
        m = re.search(r"syn cookies (\d+) sent (\d+) accepted (\d+) bad", text)
        assert m and m.groups() == (str(n - 4), "1", "1"), text


class TestTcpSynFloodNoCookies(TcpPgBase):
    extra_config = session_conf("tcp-syn-backlog 4 tcp-syn-cookies off")

    def test_syns_past_the_backlog_are_dropped_and_counted(self):
        self.start_sink("echo")
        our = self.handshake()
        flood = [self.seg("S", 5000 + i, sport=41000 + i) for i in range(20)]
        self.pg0.enable_capture()
        self.pg0.add_stream(flood + [self.seg("PA", 1001, our, b"still served")])
        self.pg_start()
        pkts = self.capture_until(
            lambda ps: any(bytes(p[TCP].payload) == b"still served" for p in ps), "the echo")
        assert len({p.dport for p in pkts if p.flags == "SA"}) == 4
        assert self.delta(("tcp4-input", "SYN dropped: listener backlog full")) == 16


TSO_SENT = ("session-queue", "TCP TSO aggregates sent (each one of tcp_sent)")
GSO_CUT = ("gso-segment", "GSO aggregates cut into segments")


class TestTcpTso(TcpPgBase):
    """`tcp-tso on`: Sluice sends aggregates; pg takes none, so `gso-segment` cuts them
    into MSS segments with complete checksums. A segment lost inside an aggregate is
    resent alone."""
    extra_config = session_conf("tcp-tso on")

    def test_aggregate_is_cut_and_a_lost_segment_resent_alone(self):
        def check_echo(pkts):
            assert self.delta(TSO_SENT) >= 1 and self.delta(GSO_CUT) >= 1, \
                self.get_counters()
            for p in pkts:  # each segment's checksum as scapy computes it
                ip = p.underlayer.copy()
                del ip[TCP].chksum
                assert IP(raw(ip))[TCP].chksum == p.chksum, p.underlayer.show(dump=True)
        sack_recovery(self, check_echo)
