"""The traffic tester checked by an independent parser: scapy decodes what `tester-tx` sends
(captured on a pg interface) and builds the frames `tester-rx` must account; `show tester
json` is read with Python's json module (the harness's contract)."""

import json
import struct

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from sluice_test import SluiceTestCase

MAGIC = b"SLCE"
RECEIVED = ("tester-rx", "tester frames received")
NOT_TESTER = ("tester-rx", "not a tester frame")
UNKNOWN = ("tester-rx", "tester frame of an unknown stream")
STALE = ("tester-rx", "tester frames of an earlier run")


def check_signature(payload: bytes, seq: int) -> None:
    """A sent frame's payload starts with the tester signature: magic, sequence `seq`, a
    transmit timestamp."""
    assert payload[:4] == MAGIC
    assert int.from_bytes(payload[8:14], "big") == seq, "sequence"
    assert struct.unpack(">Q", payload[14:22])[0] > 0, "tx timestamp"


def signature(stream: int, generation: int, seq: int, tx_ns: int, latency=False) -> bytes:
    flags = (generation << 8) | (1 if latency else 0)
    return MAGIC + struct.pack(">HH", stream, flags) + seq.to_bytes(6, "big") + \
        struct.pack(">Q", tx_ns)


class TestTester(SluiceTestCase):

    def setup_test(self):
        self.pg0, self.pg1 = self.create_pg_interfaces(range(2))
        self.streams = []

    def teardown_test(self):
        for s in self.streams:
            self.vpp.cli(f"tester stream del name {s}")
        self.vpp.cli("set interface tester-rx pg0 disable")

    def add(self, name: str, args: str) -> None:
        self.vpp.cli(f"tester stream add name {name} {args}")
        self.streams.append(name)

    def show(self) -> dict:
        return json.loads(self.vpp.cli("show tester json"))["streams"]

    def wait_stopped(self) -> dict:
        self.wait_for(lambda: not any(s["running"] for s in self.show().values()),
                      "tester streams to stop", timeout=10)
        return self.show()

    def test_frames_on_the_wire(self):
        self.pg1.enable_capture()
        self.add("w", "interface pg1 size 100 rate 20000 count 40 dst-mac 02:00:00:00:00:aa "
                      "src-mac 02:00:00:00:00:bb src 10.0.0.1-10.0.0.4 dst 10.9.0.1 "
                      "sport 5000 dport 7 flows 10 latency")
        self.vpp.cli("tester start")
        st = self.wait_stopped()["w"]
        assert st["tx_packets"] == 40 and st["tx_fail"] == 0 and st["tx_bytes"] == 4000
        assert st["latency_stream"] is True and st["rx_packets"] == 0
        assert st["latency_ns"]["min"] is None and st["jitter_ns"] is None
        pkts = self.pg1.get_capture(40)
        flows = []
        for i, p in enumerate(pkts):
            assert len(raw(p)) == 100
            assert p[Ether].dst == "02:00:00:00:00:aa" and p[Ether].src == "02:00:00:00:00:bb"
            ip = p[IP]
            assert ip.len == 86 and ip.proto == 17 and ip.dst == "10.9.0.1"
            rebuilt = IP(raw(ip))
            del rebuilt.chksum
            assert IP(raw(rebuilt)).chksum == ip.chksum, "IPv4 header checksum"
            assert p[UDP].len == 66 and p[UDP].chksum == 0 and p[UDP].dport == 7
            payload = raw(p[UDP].payload)
            check_signature(payload, i)
            stream, flags = struct.unpack(">HH", payload[4:8])
            assert flags & 1 == 1, "latency flag"
            flows.append((ip.src, p[UDP].sport))
        # 10 flows over 4 addresses: address first, then the port.
        assert len(set(flows)) == 10
        assert flows[:5] == [("10.0.0.1", 5000), ("10.0.0.2", 5000), ("10.0.0.3", 5000),
                             ("10.0.0.4", 5000), ("10.0.0.1", 5001)]
        assert flows[10:20] == flows[:10]

    def test_rx_accounting_and_json(self):
        self.vpp.cli("set interface tester-rx pg0")
        self.add("r", "interface pg1 size 64 rate 1000 count 0 dst-mac 02:00:00:00:00:aa "
                      "src 10.0.0.1 dst 10.9.0.1")
        self.vpp.cli("tester start")  # run generation 1, sends nothing
        self.wait_stopped()
        self.snapshot_counters()
        eth = Ether(dst="02:00:00:00:00:aa", src="02:00:00:00:00:cc")
        hdr = eth / IP(src="10.0.0.1", dst="10.9.0.1") / UDP(sport=1, dport=2)
        seqs = [0, 1, 2, 2, 5, 4, 3]
        frames = [raw(hdr / Raw(signature(0, 1, s, 1000 * s))) for s in seqs]
        frames.append(raw(hdr / Raw(signature(0, 7, 9, 0))))  # stale run
        frames.append(raw(hdr / Raw(signature(42, 1, 0, 0))))  # unknown stream
        frames.append(raw(eth / ARP()))
        frames.append(raw(hdr / Raw(b"SLCX" + bytes(30))))
        frames.append(raw(hdr / Raw(signature(0, 1, 8, 0)))[:60])  # signature cut short
        self.pg0.add_stream(frames)
        self.pg_start()
        self.assert_counters({RECEIVED: 7, STALE: 1, UNKNOWN: 1, NOT_TESTER: 3})
        st = self.show()["r"]
        assert st["rx_packets"] == 7 and st["duplicate"] == 1 and st["reordered"] == 2
        assert st["rx_bytes"] == sum(len(f) for f in frames[:7])
        assert st["lost"] == 0  # nothing was sent by this stream
        lat = st["latency_ns"]
        assert lat["min"] is not None and lat["min"] <= lat["p50"] <= lat["max"]
        counts = st["histogram"]["counts"]
        assert sum(c for _, c in counts) == 6, "duplicates are not in the histogram"
        assert st["histogram"]["bucket_scheme"].startswith("log-linear")
        # `tester clear` zeroes; frames of the current run are counted again after it.
        self.vpp.cli("tester clear")
        st = self.show()["r"]
        assert st["rx_packets"] == 0 and st["histogram"]["counts"] == []

    def test_ip6_frames_on_the_wire(self):
        """IPv6 streams: scapy checks the mandatory UDP checksum (pseudo-header included) of
        every frame, addresses over the source range then ports, the signature."""
        self.pg1.enable_capture()
        self.add("w6", "interface pg1 size 120 rate 20000 count 12 dst-mac 02:00:00:00:00:aa "
                       "src-mac 02:00:00:00:00:bb ip6 src 2001:db8::1-2001:db8::3 "
                       "dst 2001:db8:9::1 sport 5000 dport 7 flows 6")
        self.vpp.cli("tester start")
        st = self.wait_stopped()["w6"]
        assert st["tx_packets"] == 12 and st["tx_fail"] == 0 and st["ip_version"] == 6
        pkts = self.pg1.get_capture(12)
        flows = []
        for i, p in enumerate(pkts):
            assert len(raw(p)) == 120
            ip6 = p[IPv6]
            assert ip6.plen == 66 and ip6.nh == 17 and ip6.hlim == 64
            assert ip6.dst == "2001:db8:9::1"
            udp = p[UDP]
            assert udp.len == 66 and udp.dport == 7 and udp.chksum != 0
            rebuilt = UDP(raw(udp))
            del rebuilt.chksum
            rebuilt = IPv6(src=ip6.src, dst=ip6.dst) / rebuilt
            assert IPv6(raw(rebuilt))[UDP].chksum == udp.chksum, f"UDP checksum of frame {i}"
            check_signature(raw(udp.payload), i)
            flows.append((ip6.src, udp.sport))
        assert flows[:4] == [("2001:db8::1", 5000), ("2001:db8::2", 5000),
                             ("2001:db8::3", 5000), ("2001:db8::1", 5001)]
        assert len(set(flows)) == 6

    def test_ip6_rx_accounting(self):
        """tester-rx parses IPv6 (extension headers walked; later fragments and non-UDP are
        `not a tester frame')."""
        self.vpp.cli("set interface tester-rx pg0")
        self.add("r6", "interface pg1 size 84 rate 1000 count 0 dst-mac 02:00:00:00:00:aa "
                       "src 2001:db8::1 dst 2001:db8:9::1")
        self.vpp.cli("tester start")
        self.wait_stopped()
        self.snapshot_counters()
        eth = Ether(dst="02:00:00:00:00:aa", src="02:00:00:00:00:cc")
        ip = IPv6(src="2001:db8::1", dst="2001:db8:9::1")
        frames = [raw(eth / ip / UDP(sport=1, dport=2) / Raw(signature(0, 1, s, 1000)))
                  for s in (0, 1, 2)]
        frames.append(raw(eth / ip / IPv6ExtHdrDestOpt() / UDP() / Raw(signature(0, 1, 3, 0))))
        frames.append(raw(eth / ip / IPv6ExtHdrFragment(offset=0, m=1, id=7) / UDP()
                          / Raw(signature(0, 1, 4, 0))))
        frames.append(raw(eth / ip / IPv6ExtHdrFragment(offset=8, id=7) / Raw(bytes(40))))
        frames.append(raw(eth / ip / Raw(b"x" * 30)))  # next header 59
        self.pg0.add_stream(frames)
        self.pg_start()
        self.assert_counters({RECEIVED: 5, NOT_TESTER: 2})
        st = self.show()["r6"]
        assert st["rx_packets"] == 5 and st["duplicate"] == 0 and st["reordered"] == 0
