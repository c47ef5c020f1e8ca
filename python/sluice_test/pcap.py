"""pcap files in and out of the packet generator (Ethernet link type), through scapy."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable, Union

from scapy.packet import Packet
from scapy.utils import PcapWriter, rdpcap

DLT_EN10MB = 1

Frame = Union[Packet, bytes]


def write_pcap(path: Path, frames: Iterable[Frame]) -> int:
    """Writes frames (scapy packets or raw bytes, written exactly as given) to `path`."""
    n = 0
    w = PcapWriter(str(path), linktype=DLT_EN10MB, sync=True)
    try:
        for f in frames:
            w.write(bytes(f))
            n += 1
    finally:
        w.close()
    return n


def count_pcap_records(path: Path) -> int:
    """Complete records in a pcap file that may still be being written (0 if absent)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return 0
    if len(data) < 24:
        return 0
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a pcap file (magic {magic.hex()})")
    off, n = 24, 0
    while off + 16 <= len(data):
        (incl,) = struct.unpack_from(endian + "I", data, off + 8)
        if off + 16 + incl > len(data):
            break
        off += 16 + incl
        n += 1
    return n


def read_pcap(path: Path) -> list[Packet]:
    """All packets of a complete pcap file, dissected by scapy (Ether first)."""
    if count_pcap_records(path) == 0:
        return []
    return list(rdpcap(str(path)))
