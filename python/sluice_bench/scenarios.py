"""Benchmark scenarios: what the DUT is configured to do and which streams cross it.

A scenario is data; each DUT class turns it into its own configuration (`duts.py`) and says
whether it can run it. Adding a scenario: add a `Scenario` here with a new `kind` (or reuse one),
teach the DUT classes that support it to configure it (`Dut.configure`), and list it in a suite
(`suites.py`). Every DUT that cannot run it must return a reason from `Dut.unsupported`, and the
report prints "not supported" with that reason, never a number.
"""

from __future__ import annotations

import ipaddress
import random
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
    kind: str               # "ip4" | "nat44" | "acl" | "l2xc" | "bridge" | "ip6" | "vxlan"
    bidir: bool = False
    routes: int = 1         # routes in the FIB (1 = just the route to the far network)
    flows: int = 256        # source addresses per direction
    acl_rules: int = 0      # "acl": rules in port A's input list (the last one permits all)
    stateful: bool = False  # "acl": the permit tracks connections (permit+reflect / conntrack)

    @property
    def l3(self) -> bool:
        return self.kind in ("ip4", "nat44", "ip6", "acl")

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
    Scenario("acl-1", "IPv4 forwarding + input ACL, 1 rule, one-way", "acl", acl_rules=1),
    Scenario("acl-100", "IPv4 forwarding + input ACL, 100 rules, one-way", "acl",
             acl_rules=100),
    Scenario("acl-10k", "IPv4 forwarding + input ACL, 10k rules, one-way", "acl",
             acl_rules=10_000),
    Scenario("acl-stateful", "IPv4 forwarding + stateful firewall (reflexive ACL), one-way",
             "acl", acl_rules=1, stateful=True),
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


#: Rules per ACL in the "acl" scenarios' CLI (one ACL per command line; the interface's
#: input list holds them in order, and the first match across the list wins).
ACL_RULES_PER_LINE = 250


def acl_rules(sc: Scenario) -> list[tuple[str, int, str]]:
    """The "acl" scenarios' rules in order, as (source prefix, protocol (0: any), destination
    port or range ("": any)): `acl_rules - 1` deny rules that the traffic (sources in
    198.18.128.0/17) never matches — sources spread over 172.16.0.0/12 with mixed prefix
    lengths, a third of them UDP to one port, a third TCP to a port range, as
    `sluice-bench acl` — then one permit-all, which decides every packet (nftables walks every
    rule before it; Sluice's classifier probes none of the deny rules' tables, docs/acl.md).
    Deterministic (seeded by the rule count): every DUT gets the same list."""
    r = random.Random(sc.acl_rules)
    out = []
    for _ in range(sc.acl_rules - 1):
        plen = r.choice([12, 16, 20, 24, 28, 32])
        a = (0xAC10_0000 | r.getrandbits(20)) & ((0xFFFF_FFFF << (32 - plen)) & 0xFFFF_FFFF)
        kind = r.randrange(3)
        if kind == 0:
            out.append((f"{_ip(a)}/{plen}", 0, ""))
        elif kind == 1:
            out.append((f"{_ip(a)}/{plen}", 17, str(r.randrange(65536))))
        else:
            lo = r.randrange(60000)
            out.append((f"{_ip(a)}/{plen}", 6, f"{lo}-{lo + r.randrange(5000)}"))
    out.append(("0.0.0.0/0", 0, ""))
    return out


def acl_commands(sc: Scenario, a_if: str, b_if: str) -> list[str]:
    """Sluice/VPP acl-plugin CLI for an "acl" scenario on the DUT interfaces `a_if` (where
    the traffic enters) and `b_if` (where it leaves): the rules as ACLs of
    `ACL_RULES_PER_LINE` applied in order as `a_if`'s input list. Stateful: a firewall on
    `b_if` as Linux's conntrack one — the rules (ending in `permit+reflect`) as its output
    list, so each flow leaving creates a session that admits its replies, and a deny-all
    input list (nothing else may enter)."""
    rules = acl_rules(sc)
    action_last = "permit+reflect" if sc.stateful else "permit"
    texts = []
    for i, (src, proto, dport) in enumerate(rules):
        last = i == len(rules) - 1
        t = f"{action_last if last else 'deny'} src {src} dst 0.0.0.0/0"
        if proto:
            t += f" proto {proto}"
        if dport:
            t += f" dport {dport}"
        texts.append(t)
    out = []
    n = 0
    for n, k in enumerate(range(0, len(texts), ACL_RULES_PER_LINE)):
        out.append(f"set acl-plugin acl index {n} " + ", ".join(texts[k:k + ACL_RULES_PER_LINE]))
    where = f"{b_if} output" if sc.stateful else f"{a_if} input"
    out += [f"set acl-plugin interface {where} acl {i}" for i in range(n + 1)]
    if sc.stateful:
        out += [f"set acl-plugin acl index {n + 1} deny src 0.0.0.0/0 dst 0.0.0.0/0",
                f"set acl-plugin interface {b_if} input acl {n + 1}"]
    return out


def acl_nft_ruleset(sc: Scenario, a_if: str, b_if: str) -> str:
    """The Linux equivalent of `acl_commands` (an `nft -f` input): a forward-hook chain that
    sends what enters `a_if` to a chain of the same rules in the same order (drop for deny,
    accept for the final permit, drop after it as the ACL's implicit deny). Stateful:
    conntrack — established and related packets accepted first, new connections leaving
    through `b_if` meet the rules, everything else entering `b_if` is dropped."""
    lines = []
    for src, proto, dport in acl_rules(sc)[:-1]:
        m = f"ip saddr {src}"
        if proto == 17:
            m += f" udp dport {dport}"
        elif proto == 6:
            m += f" tcp dport {dport}"
        elif proto:
            m += f" ip protocol {proto}"
        lines.append(f"    {m} drop")
    lines.append("    ct state new accept" if sc.stateful else "    accept")
    lines.append("    drop")
    pre = ["    ct state established,related accept"] if sc.stateful else []
    tail = [f'    iifname "{b_if}" drop'] if sc.stateful else []
    return ("table ip sbacl {\n"
            "  chain acl_in {\n" + "\n".join(lines) + "\n  }\n"
            "  chain forward { type filter hook forward priority filter; policy accept;\n"
            + "".join(x + "\n" for x in pre)
            + (f'    oifname "{b_if}" jump acl_in\n' if sc.stateful
               else f'    iifname "{a_if}" jump acl_in\n')
            + "".join(x + "\n" for x in tail)
            + "  }\n}\n")
