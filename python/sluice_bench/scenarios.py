"""Benchmark scenarios: what the DUT is configured to do and which streams cross it.

A scenario is data; each DUT class turns it into its own configuration (`duts.py`) and says
whether it can run it. Adding a scenario: add a `Scenario` here with a new `kind` (or reuse one),
teach the DUT classes that support it to configure it (`Dut.configure`), and list it in a suite
(`suites.py`). Every DUT that cannot run it must return a reason from `Dut.unsupported`, and the
report prints "not supported" with that reason, never a number.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from .tester import Stream
from .topology import Port, Topology

#: Ethernet FCS: RFC 2544 frame sizes include it, the tester's `size` does not.
FCS = 4
#: Smallest frame the tester builds (headers + its 22-byte signature, FCS excluded).
TESTER_MIN_SIZE = 64
#: The same for IPv6 (14 + 40 + 8 + 22).
TESTER_MIN_SIZE_IP6 = 84


def tester_size(frame_size: int, ip6: bool = False) -> int:
    """The tester's `size` (bytes handed to the driver) for an RFC 2544 frame size (with FCS):
    frame_size - 4, but at least 64: the 64-byte row is sent as 64 bytes + FCS (68 on the
    wire) because 14 + 20 + 8 header bytes leave only 18 of a 60-byte frame for the
    22-byte signature. 1518 -> 1514 (a 1500-byte IP packet: the standard MTU). IPv6 frames
    are at least 84 bytes (88 on the wire): the 64-byte IPv6 row is sent as 84 + FCS."""
    return max(frame_size - FCS, TESTER_MIN_SIZE_IP6 if ip6 else TESTER_MIN_SIZE)


#: First filler prefix for the FIB-scale scenarios: consecutive /24s from 20.0.0.0 (as
#: `sluice-bench ip4` and VPP's `ip route add count` do), all via port B's tester address.
FILLER_BASE = 20 << 24


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    kind: str               # "ip4" | "nat44" | "l2xc" | "bridge" | "ip6" | "vxlan"
    bidir: bool = False
    routes: int = 1         # routes in the FIB (1 = just the route to the far network)
    flows: int = 256        # source addresses per direction

    @property
    def l3(self) -> bool:
        return self.kind in ("ip4", "nat44", "ip6")

    @property
    def ip6(self) -> bool:
        return self.kind == "ip6"

    @property
    def directions(self) -> list[str]:
        return ["a2b", "b2a"] if self.bidir else ["a2b"]


SCENARIOS = {s.name: s for s in [
    Scenario("ip4-oneway", "IPv4 forwarding, one-way", "ip4"),
    Scenario("ip4-bidir", "IPv4 forwarding, bidirectional", "ip4", bidir=True),
    Scenario("nat44-oneway", "NAT44 (masquerade) + IPv4 forwarding, one-way", "nat44"),
    Scenario("l2-xconnect", "L2 cross-connect, one-way", "l2xc"),
    Scenario("l2-bridge", "L2 bridge (static MACs), one-way", "bridge"),
    Scenario("ip4-fib-255k", "IPv4 forwarding, 255k routes, one-way", "ip4", routes=255_000),
    Scenario("ip4-fib-1m", "IPv4 forwarding, 1M routes, one-way", "ip4", routes=1_000_000),
    Scenario("ip6-oneway", "IPv6 forwarding, one-way", "ip6"),
    Scenario("ip6-fib-255k", "IPv6 forwarding, 255k routes, one-way", "ip6", routes=255_000),
    Scenario("vxlan-encap", "L2 over VXLAN: frames from A cross-connected into a VXLAN tunnel "
             "to B, one-way", "vxlan"),
]}

#: Bytes VXLAN over IPv4 adds to a frame (outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8): the
#: vxlan-encap scenario runs at the frame sizes whose encapsulation fits B's 1500-byte MTU.
VXLAN_OVERHEAD = 50
#: The tunnel's VNI (the tester finds its signature in the inner frame at any VNI).
VXLAN_VNI = 1

#: First IPv6 filler prefix: consecutive /120s from 2001:2:0:f000:: (all via port B). /120,
#: not /64: the tester's destination range spans at most 2^32 addresses, and 255k /120s
#: (65M addresses) fit in it as the IPv4 /24 fillers do; every route has the same length, so
#: each lookup still chooses among 255k distinct prefixes.
FILLER6_BASE = 0x2001_0002_0000_f000 << 64
FILLER6_LEN = 120

#: Why a scenario cannot run at all, whatever the DUT (the tester's own limits).
TESTER_LIMITS: dict[str, str] = {}


def filler_prefixes(n: int) -> list[str]:
    """n consecutive /24 prefixes from 20.0.0.0 (the FIB-scale filler routes)."""
    out = []
    for i in range(n):
        a = FILLER_BASE + (i << 8)
        out.append(f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.0/24")
    return out


def _ip(a: int) -> str:
    return f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"


def filler_range(n: int) -> str:
    """Every address of the first n filler /24s, as the tester's `dst a-b` range: the tester
    spreads destinations over it (golden-ratio walk), so the FIB scenarios look up routes all
    over the table instead of one."""
    return f"{_ip(FILLER_BASE)}-{_ip(FILLER_BASE + (n << 8) - 1)}"


def filler6_prefixes(n: int) -> list[str]:
    """n consecutive IPv6 /120 prefixes from 2001:2:0:f000:: (the FIB-scale filler routes)."""
    return [f"{ipaddress.IPv6Address(FILLER6_BASE + (i << 8))}/{FILLER6_LEN}" for i in range(n)]


def filler6_range(n: int) -> str:
    """Every address of the first n IPv6 filler /120s, as the tester's `dst a-b` range."""
    last = FILLER6_BASE + (n << 8) - 1
    return f"{ipaddress.IPv6Address(FILLER6_BASE)}-{ipaddress.IPv6Address(last)}"


def far_host(port: Port, i: int = 1, ip6: bool = False) -> str:
    """Address i of the network behind a tester port (x.y.128.0/17; IPv6: its /64)."""
    if ip6:
        return f"{port.behind6}::{i:x}"
    base = port.behind.split("/")[0].rsplit(".", 2)[0]  # "198.18"
    return f"{base}.{128 + (i >> 8)}.{i & 255}"


def streams(sc: Scenario, topo: Topology, dut_macs: dict[str, str], size: int,
            latency: bool = False) -> list[Stream]:
    """The streams of a scenario. `dut_macs[port.dut_if]` is the MAC the DUT answers on that
    port (L3 scenarios address it; L2 scenarios address the far tester port)."""
    out = []
    for d in sc.directions:
        src, dst = (topo.a, topo.b) if d == "a2b" else (topo.b, topo.a)
        mac = dut_macs[src.dut_if] if sc.l3 else dst.tester_mac
        flows = 1 if latency else sc.flows
        # FIB scenarios: a2b destinations spread over the filler routes (all via port B);
        # the latency stream keeps one destination (its frames must not wait behind lookups
        # the main stream does not make).
        v6 = sc.ip6
        spread = sc.routes > 1 and d == "a2b" and not latency
        if spread:
            far = filler6_range(sc.routes - 1) if v6 else filler_range(sc.routes - 1)
        else:
            far = far_host(dst, 1, v6)
        first = far_host(src, 1, v6)
        out.append(Stream(
            name=f"{d}-lat" if latency else d, port=src, dst_mac=mac,
            src=f"{first}-{far_host(src, flows, v6)}" if flows > 1 else first,
            dst=far, size=tester_size(64, v6) if latency else size, flows=flows,
            latency=latency, ip6=v6))
    return out
