"""Host stack TCP (issue 19) against scapy over pg: a `sluice-tcp sink` application attached
to the session layer listens on pg0's address; the test plays the remote host segment by
segment — three-way handshake with the MSS option, data and its ACK, an out-of-order segment
held until the hole fills, FIN both ways, a RST for a closed port, a RST that kills a
connection, and a bad checksum dropped and counted with no reply."""

import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ip4_base import Ip4RouterTest
from sluice_test.instance import sluice_binary
from sluice_test.pcap import read_pcap

APP_DIR = Path(tempfile.gettempdir()) / f"sluice-tcp-pg-{os.getpid()}"
BAD_CSUM = ("tcp4-input", "bad TCP checksum")
NO_LISTENER = ("tcp4-input", "no connection or listener (RST sent)")
HANDOFF = ("tcp4-input", "handed to the thread that owns the flow")
TAKEN = ("tcp4-input", "segments taken by a connection or listener")
PORT = 5001
SPORT = 40000


def teardown_module():
    """The daemons made APP_DIR for their application socket; nothing else removes it."""
    shutil.rmtree(APP_DIR, ignore_errors=True)


def session_conf(extra: str = "") -> str:
    """startup.conf's session section for these tests (`extra`: more of its keys)."""
    return f"session {{ enable app-socket {APP_DIR}/app.sock {extra} }}"


def flow_owner(local, lport, remote, rport, n):
    """The thread of `n` that owns a flow: Sluice's `session::flow_owner`."""
    m = (1 << 64) - 1

    def ip(a):
        x = int(ipaddress.ip_address(a))
        return x if x <= 0xffffffff else (x ^ (x >> 64)) & m

    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & m

    if n <= 1:
        return 0
    h = rotl(ip(local), 32) ^ ip(remote) ^ rotl((lport << 16) | rport, 17)
    h = (h * 0x9E3779B97F4A7C15) & m
    h ^= h >> 31
    h = (h * 0xBF58476D1CE4E5B9) & m
    return (h >> 32) % n


def tcp_tool() -> Path:
    return sluice_binary().parent / "sluice-tcp"


class TcpPgBase(Ip4RouterTest):
    """A `sluice-tcp` application on pg0's address and helpers to play the remote host
    (shared with test_hoststack_tcp.py)."""
    n_pg = 2

    def setup_test(self):
        if not tcp_tool().exists():
            pytest.skip(f"{tcp_tool()} not built (cargo build -p sluice-session)")
        super().setup_test()
        self.sink = None

    def teardown_test(self):
        if self.sink is not None and self.sink.poll() is None:
            self.sink.kill()
            self.sink.wait()

    def start_sink(self, mode="sink"):
        self.sink = subprocess.Popen(
            [str(tcp_tool()), "--socket", str(APP_DIR / "app.sock"), mode, "--listen",
             f"{self.pg0.local_ip4}:{PORT}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.sink.stderr.readline()
        assert b"ready" in line, line
        self.wait_for(lambda: "LISTEN" in self.vpp.cli("show session"), "listener")

    def seg(self, flags, seq, ack=0, payload=b"", options=None, chksum=None, dport=PORT,
            sport=SPORT):
        t = TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=65535,
                options=options or [])
        if chksum is not None:
            t.chksum = chksum
        p = (Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
             / IP(src=self.pg0.remote_ip4, dst=self.pg0.local_ip4) / t)
        if payload:
            p = p / Raw(payload)
        return Ether(raw(p))

    def exchange(self, pkt, n=1):
        return [p[TCP] for p in self.send_and_expect(self.pg0, [pkt], self.pg0, n_rx=n)]

    def handshake(self, isn=1000, options=(("MSS", 1200),), sport=SPORT, pause=0.0):
        """The three-way handshake; returns Sluice's first sequence number (`pause`: seconds
        between the SYN-ACK and the ACK, which sets the connection's first RTT sample)."""
        synack = self.exchange(self.seg("S", isn, options=list(options), sport=sport))[0]
        assert synack.flags == "SA", synack.flags
        assert synack.ack == isn + 1
        assert ("MSS", 1460) in synack.options, synack.options
        self.synack = synack
        time.sleep(pause)
        self.pg0.add_stream([self.seg("A", isn + 1, synack.seq + 1, sport=sport)])
        self.pg_start()
        self.wait_for(lambda: "ESTABLISHED" in self.vpp.cli("show session"), "established")
        return synack.seq + 1

    def capture_until(self, cond, what, timeout=5.0, settle=0.0):
        """Polls the running pg0 capture until `cond(packets)` holds; stops it and returns
        the packets. `settle`: seconds to keep capturing after that, so that a check that
        nothing more is sent sees what would follow (the packets then are all returned)."""
        path = self.pg0.capture_path
        deadline = time.monotonic() + timeout
        while True:
            pkts = [p for p in read_pcap(path) if TCP in p]
            if cond(pkts):
                break
            if time.monotonic() > deadline:
                seen = [(p[TCP].flags, p[TCP].seq, len(p[TCP].payload)) for p in pkts]
                raise AssertionError(f"timed out waiting for {what}: {seen}")
            time.sleep(0.02)
        if settle:
            time.sleep(settle)
            pkts = [p for p in read_pcap(path) if TCP in p]
        self.pg0.stop_capture()
        return [p[TCP] for p in pkts]

    def tcp_verbose(self, what):
        """A number from `show session verbose`: the word before or after `what`."""
        text = self.vpp.cli("show session verbose")
        m = (re.search(rf"{re.escape(what)} (\d+)", text)
             or re.search(rf"(\d+) {re.escape(what)}", text))
        assert m, f"{what!r} not in:\n{text}"
        return int(m.group(1))

    def delta(self, key):
        return self.get_counters().get(key, 0) - self._counter_baseline.get(key, 0)


class TestTcpOnAWorker(TcpPgBase):
    """`cpu { workers 1 }` with pg0's segments received on the worker: `tcp4-input` there
    takes the segments of the flows the worker owns and hands the others to thread 0, each
    connection served as without workers."""
    extra_config = session_conf() + "\ncpu { workers 1 }\n"

    def on_worker(self, pkt, n_rx=None):
        """Receives `pkt` on worker 0; returns the `n_rx` segments pg0 sent (None: sends
        without capturing)."""
        if n_rx is not None:
            self.pg0.enable_capture()
        self.pg0.add_stream([pkt], worker=0)
        self.pg_start()
        if n_rx is None:
            return []
        return [p[TCP] for p in self.pg0.get_capture(n_rx, remark="on worker 0")]

    def sport_owned_by(self, thread):
        return next(p for p in range(SPORT, SPORT + 1000)
                    if flow_owner(self.pg0.local_ip4, PORT, self.pg0.remote_ip4, p, 2) == thread)

    def connection(self, sport):
        """One connection from `sport`, its 4 segments received on the worker."""
        self.start_sink()
        self.snapshot_counters()
        synack = self.on_worker(self.seg("S", 1000, options=[("MSS", 1200)], sport=sport), 1)[0]
        assert synack.flags == "SA" and synack.ack == 1001, synack.flags
        our = synack.seq + 1
        self.on_worker(self.seg("A", 1001, our, sport=sport))
        self.wait_for(lambda: "ESTABLISHED" in self.vpp.cli("show session"), "established")
        ack = self.on_worker(self.seg("PA", 1001, our, b"hello sluice", sport=sport), 1)[0]
        assert ack.flags.A and ack.ack == 1013, (ack.flags, ack.ack)
        self.on_worker(self.seg("FA", 1013, our, sport=sport))
        out, _ = self.sink.communicate(timeout=10)
        assert out == b"hello sluice"
        assert self.delta(("tcp4-input", "handoff queue to the flow's thread full")) == 0

    def test_segments_of_thread_0s_flows_are_handed_to_thread_0(self):
        self.connection(self.sport_owned_by(0))
        # Each of the 4 segments was received on the worker, handed over whole and taken
        # on thread 0; none refused by the queue.
        assert (self.delta(HANDOFF), self.delta(TAKEN)) == (4, 4), self.vpp.cli("show errors")

    def test_segments_of_the_workers_flows_stay_on_the_worker(self):
        sport = self.sport_owned_by(1)
        self.connection(sport)
        # Taken where they were received; the connection lived on thread 1.
        assert (self.delta(HANDOFF), self.delta(TAKEN)) == (0, 4), self.vpp.cli("show errors")


class TestTcp(TcpPgBase):
    extra_config = session_conf()


    def test_handshake_data_and_close(self):
        self.start_sink()
        our = self.handshake()
        ack = self.exchange(self.seg("PA", 1001, our, b"hello sluice"))[0]
        assert ack.flags.A and ack.ack == 1001 + 12
        # FIN: acknowledged; the sink reads the end of stream and closes, and Sluice's FIN
        # follows (possibly in the same segment as the ACK).
        self.pg0.enable_capture()
        self.pg0.add_stream([self.seg("FA", 1013, our)])
        self.pg_start()
        out, _ = self.sink.communicate(timeout=10)
        assert out == b"hello sluice"
        # The sink has exited. Its session is in LAST_ACK until our final ACK, unless the
        # session layer saw the application go first: an application that exits does not
        # linger (docs/hoststack.md), so a session it left before the last ACK is reset.
        self.wait_for(lambda: "LAST_ACK" in self.vpp.cli("show session")
                      or "[T]" not in self.vpp.cli("show session"), "our FIN sent")
        lingering = "LAST_ACK" in self.vpp.cli("show session")
        if not lingering:
            self.wait_for(lambda: "TCP RSTs sent" in self.vpp.cli("show errors"), "the reset")
        caps = [p[TCP] for p in self.pg0.stop_capture()]
        assert caps and caps[0].ack == 1014, [(p.flags, p.ack) for p in caps]
        fin = next(p for p in caps if p.flags.F)
        assert fin.seq == our and fin.ack == 1014
        if lingering:
            self.pg0.add_stream([self.seg("A", 1014, fin.seq + 1)])
            self.pg_start()
        else:
            rst = [p for p in caps if p.flags.R]
            assert rst and rst[-1].seq == fin.seq + 1, [(p.flags, p.seq) for p in caps]
        self.wait_for(lambda: "[T]" not in self.vpp.cli("show session"), "closed")

    def test_out_of_order_segment_is_held(self):
        self.start_sink()
        our = self.handshake()
        # The second half first: a duplicate ACK for the hole.
        dup = self.exchange(self.seg("PA", 1006, our, b"world"))[0]
        assert dup.ack == 1001
        full = self.exchange(self.seg("PA", 1001, our, b"hello"))[0]
        assert full.ack == 1011
        self.pg0.add_stream([self.seg("FA", 1011, our)])
        self.pg_start()
        out, _ = self.sink.communicate(timeout=10)
        assert out == b"helloworld"

    def test_closed_port_gets_rst(self):
        self.start_sink()
        rst = self.exchange(self.seg("S", 777, dport=PORT + 1))[0]
        assert rst.flags == "RA" and rst.ack == 778 and rst.seq == 0
        # An ACK to a listener with no connection: RST with its ack as sequence.
        rst = self.exchange(self.seg("A", 5, 4242))[0]
        assert rst.flags == "R" and rst.seq == 4242
        assert self.delta(NO_LISTENER) == 1

    def test_rst_in_window_closes_the_connection(self):
        self.start_sink()
        our = self.handshake()
        # A RST off the expected sequence only draws a challenge ACK (RFC 5961).
        ch = self.exchange(self.seg("R", 1001 + 100, 0))[0]
        assert ch.flags == "A" and ch.ack == 1001
        self.pg0.add_stream([self.seg("R", 1001, 0)])
        self.pg_start()
        self.wait_for(lambda: "ESTABLISHED" not in self.vpp.cli("show session"), "reset")
        self.sink.wait(timeout=10)
        assert self.sink.returncode != 0  # the sink reports the reset
        del our

    def test_bad_checksum_is_dropped_and_counted(self):
        self.start_sink()
        self.send_and_assert_no_replies(self.pg0, [self.seg("S", 1, chksum=0x1234)] * 2,
                                        "bad checksum")
        assert self.delta(BAD_CSUM) == 2
        assert self.delta(("tcp4-input", "segments taken by a connection or listener")) == 0
