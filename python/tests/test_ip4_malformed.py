"""Malformed and unroutable frames are dropped by the right node with the right `show errors`
reason, and nothing at all is transmitted."""

import pytest
from scapy.compat import raw
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute


def _with_header_checksum(hdr: bytearray) -> bytes:
    """Recomputes the IPv4 header checksum over the header as its IHL says (at least the
    20 bytes given), so only the intended defect is present."""
    ihl = max(hdr[0] & 0x0F, 5) * 4
    hdr[10:12] = b"\0\0"
    s = sum(int.from_bytes(hdr[i:i + 2], "big") for i in range(0, ihl, 2))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    hdr[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
    return bytes(hdr)


def bad_checksum(good: bytes) -> bytes:
    ip = bytearray(good[14:])
    ip[10] ^= 0x5A
    return good[:14] + bytes(ip)


def ihl_below_5(good: bytes) -> bytes:
    ip = bytearray(good[14:])
    ip[0] = 0x44
    # Checksum valid over the 20 bytes, so only the IHL is wrong.
    return good[:14] + _with_header_checksum(ip[:20]) + bytes(ip[20:])


def length_beyond_frame(good: bytes) -> bytes:
    ip = bytearray(good[14:])
    ip[2:4] = (len(ip) + 100).to_bytes(2, "big")
    return good[:14] + _with_header_checksum(ip[:20]) + bytes(ip[20:])


def truncated_header(good: bytes) -> bytes:
    return good[:14 + 12]


def wrong_destination_mac(good: bytes) -> bytes:
    return bytes.fromhex("02aabbccddee") + good[6:]


def unknown_ethertype(good: bytes) -> bytes:
    return good[:12] + b"\x88\xb5" + good[14:]


CASES = {
    "bad-ip4-checksum": (bad_checksum, ("ip4-input", "bad ip4 checksum")),
    "ihl-below-5": (ihl_below_5, ("ip4-input", "ip4 header length < 20 bytes")),
    "total-length-beyond-frame": (length_beyond_frame, ("ip4-input", "ip4 length > l2 length")),
    "truncated-header": (truncated_header, ("ip4-input", "ip4 length < 20 bytes")),
    "l3-mac-mismatch": (wrong_destination_mac, ("ethernet-input", "l3 mac mismatch")),
    "unknown-ethertype": (unknown_ethertype, ("ethernet-input", "unknown ethernet type")),
}


class TestIp4Malformed(Ip4RouterTest):

    def good_packet(self) -> bytes:
        return raw(self.udp_from(self.pg0, "10.2.0.1", payload=b"0123456789abcdef"))

    def setup_test(self):
        super().setup_test()
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.snapshot_counters()

    @pytest.mark.parametrize("case", sorted(CASES))
    def test_malformed_frame_is_dropped_with_reason(self, case):
        mangle, counter = CASES[case]
        good = self.good_packet()
        # The unmangled packet is forwarded: the route and the neighbour work.
        self.send_and_expect(self.pg0, [good], self.pg1)
        self.assert_counters({})
        bad = mangle(good)
        assert bad != good
        self.send_and_assert_no_replies(self.pg0, [bad] * 3, f"{case} frames")
        self.assert_counters({counter: 3})

    def test_no_route_and_mixed_burst(self):
        """One frame of each kind in one vector plus a good one: each counted once under
        its own reason, only the good one forwarded."""
        good = self.good_packet()
        no_route = raw(Ether(raw(self.udp_from(self.pg0, "192.0.2.1"))))
        frames = [mangle(good) for mangle, _ in CASES.values()] + [no_route, good]
        rx = self.send_and_expect(self.pg0, frames, self.pg1, n_rx=1)
        assert rx[0][IP].dst == "10.2.0.1"
        delta = {counter: 1 for _, counter in CASES.values()}
        delta[("ip4-lookup", "no route to destination")] = 1
        self.assert_counters(delta)
        ifc = self.get_interface_counters()
        assert ifc["pg0"]["rx packets"] == len(frames)
        assert ifc["pg1"]["tx packets"] == 1
        assert "tx packets" not in ifc["pg0"]
