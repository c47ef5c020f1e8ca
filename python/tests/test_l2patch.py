"""`test l2patch rx pg0 tx pg1`: every frame received on pg0 leaves pg1 unchanged."""

import random

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw

from sluice_test import SluiceTestCase

PATCHED = ("l2-patch", "L2 patch packets")
NO_PATCH = ("l2-patch", "no l2 patch for rx interface")


class TestL2Patch(SluiceTestCase):

    def setup_test(self):
        self.pg0, self.pg1 = self.create_pg_interfaces(range(2))
        # Through the control API (the same action as `test l2patch rx pg0 tx pg1`).
        api = self.vpp.api()
        api.l2_patch_add_del(rx_sw_if_index=self.vpp.sw_if_index("pg0"),
                             tx_sw_if_index=self.vpp.sw_if_index("pg1"), is_add=True)

    def frames(self):
        rnd = random.Random(20240607)
        out = []
        for i in range(100):
            kind = i % 4
            eth = Ether(dst=f"02:33:00:00:00:{i:02x}", src=f"02:44:00:00:00:{i:02x}")
            if kind == 0:
                p = eth / IP(src="192.0.2.1", dst="198.51.100.1", ttl=1) / UDP() / Raw(b"u" * i)
            elif kind == 1:
                # A bad IPv4 checksum and a TTL of 0: l2-patch must not look at L3.
                p = Ether(raw(eth / IP(dst="198.51.100.7", ttl=0) / Raw(b"x" * 20)))
                p[IP].chksum ^= 0xFFFF
            elif kind == 2:
                p = eth / Dot1Q(vlan=100 + i) / ARP(pdst="192.0.2.9")
            else:
                p = eth / Raw(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 1400))))
            out.append(raw(p))
        out[0] = out[0][:14]  # header only
        out[1] = raw(Ether(type=0x88B5) / Raw(bytes(range(256)) * 11))  # 2830 bytes: chained
        return out

    def test_l2patch_forwards_frames_byte_for_byte(self):
        frames = self.frames()
        rx = self.send_and_expect(self.pg0, frames, self.pg1, node="l2-patch")
        for i, (sent, got) in enumerate(zip(frames, rx)):
            assert raw(got) == sent, f"frame {i} changed"
        self.assert_counters({PATCHED: len(frames)})
        ifc = self.get_interface_counters()
        assert ifc["pg1"]["tx packets"] == len(frames)
        assert ifc["pg1"]["tx bytes"] == sum(len(f) for f in frames)

    def test_unpatched_direction_is_dropped(self):
        frames = self.frames()[:10]
        self.send_and_assert_no_replies(self.pg1, frames, "pg1 has no patch", node="l2-patch")
        self.assert_counters({NO_PATCH: 10})
