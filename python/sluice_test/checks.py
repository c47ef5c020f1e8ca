"""Assertions on received packets, recomputing checksums with scapy."""

from __future__ import annotations

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, UDP
from scapy.packet import Packet


def _recomputed(layer: Packet, cls) -> int:
    c = layer.copy()
    c.chksum = None
    return cls(raw(c)).chksum


def assert_ip4_checksum(pkt: Packet) -> None:
    """The IPv4 header checksum as received equals the one scapy computes from the header."""
    ip = pkt[IP]
    want = _recomputed(ip, IP)
    assert ip.chksum == want, f"IPv4 checksum {ip.chksum:#06x}, expected {want:#06x}: {pkt!r}"


def assert_icmp_checksum(pkt: Packet) -> None:
    icmp = pkt[ICMP]
    want = _recomputed(icmp, ICMP)
    assert icmp.chksum == want, f"ICMP checksum {icmp.chksum:#06x}, expected {want:#06x}"


def assert_udp_checksum(pkt: Packet) -> None:
    """UDP checksum valid, or 0 (none, allowed over IPv4 by RFC 768)."""
    ip = pkt[IP]
    udp = pkt[UDP]
    if udp.chksum == 0:
        return
    c = ip.copy()
    c[UDP].chksum = None
    want = IP(raw(c))[UDP].chksum
    assert udp.chksum == want, f"UDP checksum {udp.chksum:#06x}, expected {want:#06x}"
