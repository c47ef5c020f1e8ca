"""P4 programs (plugins/p4, docs/p4.md) in a running daemon, configured through the control
API (`p4_*` messages, P4Runtime's semantics: entries keyed by match and priority).

Differential: the same scapy traffic (short and malformed frames included) through PVPP's
router program, the ACL/firewall program and the L2 switch on pg2 -> pg3, and through
Sluice's native nodes configured the same way (IPv4 routes, the ACL plugin, a bridge domain
with static L2 FIB entries) on pg0 -> pg1, must come out
byte-identical (the P4 tables write pg1's MACs) with the same number of drops counted on
the receiving interface. Packets the two paths answer differently by design are left out:
TTL <= 1 (native sends ICMP time exceeded, the programs drop), Ethernet padding (native
trims it, the programs keep it: checked as such) and, for the firewall (which
verifies no checksum), bad header checksums."""

import ipaddress
import random
from pathlib import Path

import pytest
from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Padding, Raw

from sluice_papi import Retval
from sluice_test import IpRoute, SluiceTestCase

EXAMPLES = Path(__file__).resolve().parents[2] / "plugins" / "p4" / "examples"
ROUTER = str(EXAMPLES / "router.p4")
FIREWALL = str(EXAMPLES / "firewall.p4")
L2SWITCH = str(EXAMPLES / "l2switch.p4")
TUNNEL = str(EXAMPLES / "tunnel.p4")

ANY = 0xFFFFFFFF


def ip4(a: str) -> int:
    return int.from_bytes(bytes(int(x) for x in a.split(".")), "big")


def mac(m: str) -> int:
    return int(m.replace(":", ""), 16)


def exact(v):
    return {"kind": "exact", "value": v}


def lpm(v, n):
    return {"kind": "lpm", "value": v, "prefix_len": n}


def ternary(v=0, m=0):
    return {"kind": "ternary", "value": v, "mask": m}


def rng(lo=0, hi=0xFFFF):
    return {"kind": "range", "value": lo, "high": hi}


def with_checksum(ip: bytearray) -> bytes:
    ip[10:12] = b"\0\0"
    s = sum(int.from_bytes(ip[i:i + 2], "big") for i in range(0, 20, 2))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    ip[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
    return bytes(ip)


class P4Differential(SluiceTestCase):
    """pg0 -> pg1: the native path; pg2 -> pg3: the P4 program."""

    VIA = ()  # interfaces the native path sends through on its way to pg1 (a tunnel)

    def setup_test(self):
        self.pg0, self.pg1 = self.create_pg_interfaces(range(2), up=True, ip4=True,
                                                        resolve=True)
        self.pg2, self.pg3 = self.create_pg_interfaces(range(2, 4), up=True)
        self.api = self.vpp.api()
        self.pg2_index = self.vpp.sw_if_index("pg2")
        self.pg3_index = self.vpp.sw_if_index("pg3")

    def frame(self, l3, dst_mac):
        return Ether(raw(Ether(dst=dst_mac, src=self.pg0.remote_mac) / l3))

    def frames(self, dst_mac, cases):
        """Every case as bytes with `dst_mac` (the receiving interface's MAC)."""
        out = []
        for c in cases:
            if isinstance(c, bytes):
                out.append(dst_mac_bytes(dst_mac) + c[6:])
            else:
                out.append(raw(self.frame(c, dst_mac)))
        return out

    def run_path(self, src, dst, frames):
        """Sends `frames` on `src`; returns what `dst` sent and the drops counted on `src`
        (and checks that no other interface sent anything)."""
        before = self.get_interface_counters()
        dst.enable_capture()
        src.add_stream(frames)
        self.pg_start()
        out = [raw(p) for p in dst.stop_capture()]
        after = self.get_interface_counters()
        for name in after:
            if name != dst.name and name not in self.VIA:
                moved = after[name].get("tx packets", 0) - before.get(name, {}).get(
                    "tx packets", 0)
                assert moved == 0, f"{name} sent {moved} packet(s)"
        drops = after[src.name].get("drops", 0) - before.get(src.name, {}).get("drops", 0)
        return out, drops

    def compare(self, cases):
        native = self.frames(self.pg0.local_mac, cases)
        p4 = self.frames(self.pg2.local_mac, cases)
        no, nd = self.run_path(self.pg0, self.pg1, native)
        po, pd = self.run_path(self.pg2, self.pg3, p4)
        assert len(no) + nd == len(cases), (len(no), nd, len(cases))
        assert po == no, "outputs differ"
        assert pd == nd, f"drops differ: p4 {pd}, native {nd}"
        return len(no), nd

    def malformed(self, dst):
        """Short and malformed frames (as bytes; their MAC is replaced per path)."""
        good = bytearray(raw(self.frame(IP(src=self.pg0.remote_ip4, dst=dst)
                                        / UDP(sport=1, dport=2) / Raw(b"abcd"), "0:0:0:0:0:0")))
        bad_csum = bytes(good[:24]) + bytes([good[24] ^ 0x5A]) + bytes(good[25:])
        return [
            bytes(good[:10]),                         # runt: not even an Ethernet header
            bytes(good[:14 + 12]),                    # truncated IPv4 header
            bytes(good[:12]) + b"\x88\xb5" + bytes(good[14:]),  # not IPv4
            bad_csum,
        ]


def dst_mac_bytes(m: str) -> bytes:
    return bytes(int(x, 16) for x in m.split(":"))


class TestP4Router(P4Differential):

    def load_router(self, mode):
        a = self.api
        r = a.p4_load(file=ROUTER, name="r", mode=mode, sw_if_indexes=[self.pg2_index])
        assert (r.name, r.n_tables) == ("r", 3)
        nh = ip4(self.pg1.remote_ip4)
        for p, n in (("20.0.0.0", 8), ("20.1.2.0", 24), ("30.0.0.0", 16)):
            a.p4_table_entry_add_del(is_add=True, program="r", table="ipv4_lpm",
                                     matches=[lpm(ip4(p), n)], action="set_nhop",
                                     params=[nh, self.pg3_index])
        a.p4_table_entry_add_del(is_add=True, program="r", table="forward",
                                 matches=[exact(nh)], action="set_dmac",
                                 params=[mac(self.pg1.remote_mac)])
        a.p4_table_entry_add_del(is_add=True, program="r", table="send_frame",
                                 matches=[exact(self.pg3_index)], action="rewrite_mac",
                                 params=[mac(self.pg1.local_mac)])

    @pytest.mark.parametrize("mode", ["single", "multi", "auto"])
    def test_router_matches_native(self, mode):
        for p, n in (("20.0.0.0", 8), ("20.1.2.0", 24), ("30.0.0.0", 16)):
            IpRoute(self, f"{p}/{n}", via=self.pg1.remote_ip4).add_config()
        self.load_router(mode)
        src = self.pg0.remote_ip4
        cases = [
            IP(src=src, dst="20.1.2.3", ttl=64) / UDP(sport=5, dport=53) / Raw(b"x" * 18),
            IP(src=src, dst="20.9.0.1", ttl=2) / TCP(sport=1, dport=80) / Raw(b"y" * 100),
            IP(src=src, dst="30.0.0.1", ttl=255) / ICMP(type=8) / Raw(b"z" * 1200),
            IP(src=src, dst="30.0.1.1", tos=0x10, id=7) / UDP(sport=9, dport=9),
            IP(src=src, dst="40.0.0.1") / UDP(sport=5, dport=53),  # no route
        ] + self.malformed("20.1.2.3")
        assert self.compare(cases) == (4, 5)
        # Ethernet padding after the IPv4 packet (a 60-byte minimum frame): the native path
        # trims it to the IPv4 total length, the program (like BMv2) keeps the bytes after
        # the headers it parsed. The only difference.
        padded = [IP(src=src, dst="20.1.2.4") / UDP(sport=5, dport=7) / Padding(b"\0" * 18)]
        (no,), _ = self.run_path(self.pg0, self.pg1, self.frames(self.pg0.local_mac, padded))
        (po,), _ = self.run_path(self.pg2, self.pg3, self.frames(self.pg2.local_mac, padded))
        assert (len(no), po) == (42, no + b"\0" * 18)
        # The packet without a route missed both tables (`forward` looked up next hop 0).
        d = self.api.p4_table_dump(program="r", table="forward")
        assert [(x.is_default, x.action, x.params, x.packets) for x in d] == [
            (False, "set_dmac", [mac(self.pg1.remote_mac)], 0), (True, "_drop", [], 1)]
        lp = self.api.p4_table_dump(program="r", table="ipv4_lpm")
        assert lp[-1].is_default and lp[-1].packets == 1  # 40.0.0.1 missed
        self.api.p4_unload(name="r")
        self.assert_no_leaks()


    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_router_matches_native_random(self, seed):
        """Random routes to two next hops and random packets (protocols, sizes, TTLs 2..255,
        destinations in and out of the routes, a few malformed), from a fixed seed."""
        rnd = random.Random(seed)
        hops = [(self.pg1.remote_host_ip4(h), self.pg1.remote_host_mac(h)) for h in (2, 3)]
        self.vpp.cli(f"ip neighbor pg1 {hops[1][0]} {hops[1][1]}")
        a = self.api
        a.p4_load(file=ROUTER, name="r", sw_if_indexes=[self.pg2_index])
        for ip, m in hops:
            a.p4_table_entry_add_del(is_add=True, program="r", table="forward",
                                     matches=[exact(ip4(ip))], action="set_dmac",
                                     params=[mac(m)])
        a.p4_table_entry_add_del(is_add=True, program="r", table="send_frame",
                                 matches=[exact(self.pg3_index)], action="rewrite_mac",
                                 params=[mac(self.pg1.local_mac)])
        routes = {}
        while len(routes) < 24:
            n = rnd.randint(4, 32)
            v = rnd.randint(0x14000000, 0xDEFFFFFF) & ((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF)
            if v >> 28 >= 0xE or (v >> 24) in (10, 127) or v >> 24 < 0x14:
                continue
            routes[(v, n)] = rnd.choice(hops)
        for (v, n), (ip, _) in routes.items():
            p = str(ipaddress.IPv4Address(v))
            IpRoute(self, f"{p}/{n}", via=ip).add_config()
            a.p4_table_entry_add_del(is_add=True, program="r", table="ipv4_lpm",
                                     matches=[lpm(v, n)], action="set_nhop",
                                     params=[ip4(ip), self.pg3_index])
        keys = list(routes)
        cases = []
        for _ in range(64):
            if rnd.random() < 0.8:
                v, n = rnd.choice(keys)
                dst = v | (rnd.getrandbits(32) & ((1 << (32 - n)) - 1))
            else:
                dst = rnd.getrandbits(32)
            if dst >> 28 >= 0xE or (dst >> 24) in (0, 10, 127):
                dst = 0x14000001
            d = str(ipaddress.IPv4Address(dst))
            l4 = rnd.choice([UDP(sport=rnd.randint(1, 65535), dport=53), TCP(dport=80),
                             ICMP(type=8)])
            cases.append(IP(src=self.pg0.remote_ip4, dst=d, ttl=rnd.randint(2, 255),
                            tos=rnd.randint(0, 255), id=rnd.randint(0, 65535))
                         / l4 / Raw(bytes(rnd.randint(0, 255) for _ in range(rnd.randint(0, 300)))))
        bad = self.malformed("20.0.0.1")
        cases += [rnd.choice(bad) for _ in range(6)]
        rnd.shuffle(cases)
        fwd, drops = self.compare(cases)
        assert fwd > 0 and drops >= 6, (fwd, drops)


class TestP4Firewall(P4Differential):

    ACL = ("deny src 0.0.0.0/0 dst 20.1.2.0/24 proto 17 dport 80-90, "
           "permit src 0.0.0.0/0 dst 0.0.0.0/0 proto 6 dport 80-80, "
           "deny src 0.0.0.0/0 dst 0.0.0.0/0 proto 6, "
           "permit src 0.0.0.0/0 dst 0.0.0.0/0")

    def test_acl_matches_native(self):
        a = self.api
        IpRoute(self, "20.0.0.0/8", via=self.pg1.remote_ip4).add_config()
        out = self.vpp.cli(f"set acl-plugin acl {self.ACL}")
        index = int(out.split("ACL index:")[1].split()[0])
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {index}")
        a.p4_load(file=FIREWALL, name="fw", sw_if_indexes=[self.pg2_index])
        # The same rules: the ACL's order is the priority (higher wins).
        rules = [
            (40, "deny", 1, [ternary(), ternary(ip4("20.1.2.0"), 0xFFFFFF00),
                             ternary(17, 0xFF), rng(80, 90)]),
            (30, "allow", 2, [ternary(), ternary(), ternary(6, 0xFF), rng(80, 80)]),
            (20, "deny", 3, [ternary(), ternary(), ternary(6, 0xFF), rng()]),
        ]
        for prio, action, rule, m in rules:
            a.p4_table_entry_add_del(is_add=True, program="fw", table="acl", matches=m,
                                     priority=prio, action=action, params=[rule])
        a.p4_table_entry_add_del(is_add=True, program="fw", table="fib",
                                 matches=[lpm(ip4("20.0.0.0"), 8)], action="route",
                                 params=[self.pg3_index, mac(self.pg1.remote_mac),
                                         mac(self.pg1.local_mac)])
        src = self.pg0.remote_ip4
        cases = [
            IP(src=src, dst="20.1.2.3") / UDP(sport=5, dport=85) / Raw(b"d"),    # rule 1
            IP(src=src, dst="20.1.2.3") / UDP(sport=5, dport=53) / Raw(b"a"),    # default
            IP(src=src, dst="20.2.0.1") / UDP(sport=5, dport=85) / Raw(b"a"),    # default
            IP(src=src, dst="20.2.0.1") / TCP(sport=7, dport=80) / Raw(b"w"),    # rule 2
            IP(src=src, dst="20.2.0.1") / TCP(sport=7, dport=22),                # rule 3
            IP(src=src, dst="20.3.0.1", ttl=2) / ICMP(type=8) / Raw(b"p" * 64),  # default
            IP(src=src, dst="40.0.0.1") / UDP(sport=5, dport=53),                # no route
        ] + self.malformed("20.1.2.3")[:3]
        assert self.compare(cases) == (4, 6)
        hits = {c.index: c.packets for c in a.p4_counter_dump(program="fw",
                                                              counter="rule_hits")
                if c.packets}
        assert hits == {0: 4, 1: 1, 2: 1, 3: 1}, hits
        (one,) = a.p4_counter_dump(program="fw", counter="rule_hits", index=3)
        assert (one.index, one.packets) == (3, 1)
        (last,) = a.p4_register_dump(program="fw", register="last_denied")
        assert last.value == ip4(src)
        # Deleting rule 3 (by its matches and priority) lets TCP/22 through.
        a.p4_table_entry_add_del(is_add=False, program="fw", table="acl",
                                 matches=rules[2][3], priority=20)
        po, pd = self.run_path(self.pg2, self.pg3, self.frames(self.pg2.local_mac, cases[4:5]))
        assert (len(po), pd) == (1, 0)
        a.p4_unload(name="fw")

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_acl_matches_native_random(self, seed):
        """Random rules (deny/permit; source and destination prefixes, any/TCP/UDP, port
        ranges) and random TCP/UDP/ICMP packets, most aimed at a rule, from a fixed seed.
        The ACL's first match is the program's highest priority; the ACL's implicit deny is
        replaced by a last permit-all (the program's default is allow)."""
        rnd = random.Random(seed)
        a = self.api
        IpRoute(self, "20.0.0.0/8", via=self.pg1.remote_ip4).add_config()
        a.p4_load(file=FIREWALL, name="fw", sw_if_indexes=[self.pg2_index])
        a.p4_table_entry_add_del(is_add=True, program="fw", table="fib",
                                 matches=[lpm(ip4("20.0.0.0"), 8)], action="route",
                                 params=[self.pg3_index, mac(self.pg1.remote_mac),
                                         mac(self.pg1.local_mac)])

        def prefix(base, lo):
            n = rnd.choice([0, rnd.randint(lo, 32)])
            v = (base | rnd.getrandbits(32 - lo)) & ((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF)
            return v, n

        rules, text = [], []
        for i in range(16):
            (sv, sn), (dv, dn) = prefix(0xAC100000, 16), prefix(0x14000000, 8)
            proto = rnd.choice([None, 6, 17])
            lo, hi = 0, 0xFFFF
            if proto is not None and rnd.random() < 0.7:
                lo = rnd.randint(0, 1100)
                hi = rnd.randint(lo, lo + rnd.choice([0, 10, 1000]))
            act = rnd.choice(["deny", "permit"])
            rules.append((sv, sn, dv, dn, proto, lo, hi))
            r = (f"{act} src {ipaddress.IPv4Address(sv)}/{sn} "
                 f"dst {ipaddress.IPv4Address(dv)}/{dn}")
            if proto is not None:
                r += f" proto {proto} dport {lo}-{hi}"
            text.append(r)
            m = lambda n: (0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF if n else 0  # noqa: E731
            a.p4_table_entry_add_del(
                is_add=True, program="fw", table="acl", priority=1000 - i,
                action="deny" if act == "deny" else "allow", params=[i + 1],
                matches=[ternary(sv, m(sn)), ternary(dv, m(dn)),
                         ternary(proto, 0xFF) if proto is not None else ternary(),
                         rng(lo, hi)])
        text.append("permit src 0.0.0.0/0 dst 0.0.0.0/0")
        out = self.vpp.cli(f"set acl-plugin acl {', '.join(text)}")
        index = int(out.split("ACL index:")[1].split()[0])
        self.vpp.cli(f"set acl-plugin interface pg0 input acl {index}")

        def inside(v, n):
            return v | (rnd.getrandbits(32 - n) if n < 32 else 0) if n else None

        cases = []
        for _ in range(80):
            sv, sn, dv, dn, proto, lo, hi = rnd.choice(rules)
            src = inside(sv, sn) if rnd.random() < 0.8 else None
            dst = inside(dv, dn) if rnd.random() < 0.8 else None
            src = src if src is not None else 0xAC100000 | rnd.getrandbits(16)
            if dst is None:
                dst = (0x14000000 | rnd.getrandbits(24)) if rnd.random() < 0.9 else 0x28000001
            p = proto if proto is not None and rnd.random() < 0.8 else rnd.choice([1, 6, 17])
            port = rnd.randint(lo, hi) if rnd.random() < 0.8 else rnd.randint(0, 65535)
            l4 = {1: ICMP(type=8), 6: TCP(sport=rnd.randint(1, 65535), dport=port),
                  17: UDP(sport=rnd.randint(1, 65535), dport=port)}[p]
            cases.append(IP(src=str(ipaddress.IPv4Address(src)),
                            dst=str(ipaddress.IPv4Address(dst)), ttl=rnd.randint(2, 255))
                         / l4 / Raw(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 64)))))
        fwd, drops = self.compare(cases)
        assert fwd > 0 and drops > 0, (fwd, drops)
        a.p4_unload(name="fw")


class TestP4Tunnel(P4Differential):
    """The tunnel program's encap against Sluice's native IPIP tunnel (`create ipip tunnel`,
    routes via ipip0): the same IPv4 traffic comes out of pg1 / pg3 byte-identical, outer
    header included (TTL 64, identification 0, DF clear, TOS 0; the inner TTL decremented)."""

    VIA = ("ipip0",)

    @pytest.mark.parametrize("seed", [1, 2])
    def test_encap_matches_native_ipip(self, seed):
        rnd = random.Random(seed)
        a = self.api
        peer = self.pg1.remote_ip4
        assert self.vpp.cli(f"create ipip tunnel src 10.0.0.1 dst {peer}").strip() == "ipip0"
        self.vpp.cli("set interface state ipip0 up")
        a.p4_load(file=TUNNEL, name="tun", sw_if_indexes=[self.pg2_index])
        prefixes = {(0x14000000, 8)}
        while len(prefixes) < 5:
            n = rnd.randint(12, 28)
            v = 0x30000000 | rnd.getrandbits(28)  # 48.0.0.0/4
            prefixes.add((v & ((0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF), n))
        for v, n in sorted(prefixes):
            self.vpp.cli(f"ip route add {ipaddress.IPv4Address(v)}/{n} via ipip0")
            a.p4_table_entry_add_del(is_add=True, program="tun", table="tunnel_encap",
                                     matches=[lpm(v, n)], action="encap",
                                     params=[ip4("10.0.0.1"), ip4(peer), self.pg3_index,
                                             mac(self.pg1.remote_mac),
                                             mac(self.pg1.local_mac)])
        keys = sorted(prefixes)
        cases = []
        for _ in range(40):
            v, n = rnd.choice(keys)
            dst = v | (rnd.getrandbits(32 - n) if n < 32 else 0)
            if rnd.random() < 0.15:
                dst = 0x28000000 | rnd.getrandbits(16)  # 40.0/16: no route, both drop
            l4 = rnd.choice([UDP(sport=rnd.randint(1, 65535), dport=53), TCP(dport=80),
                             ICMP(type=8)])
            cases.append(IP(src=self.pg0.remote_ip4, dst=str(ipaddress.IPv4Address(dst)),
                            ttl=rnd.randint(2, 255), tos=rnd.randint(0, 255),
                            id=rnd.randint(0, 65535), flags=rnd.choice([0, 2]))
                         / l4 / Raw(bytes(rnd.getrandbits(8)
                                          for _ in range(rnd.randint(0, 1400)))))
        cases += self.malformed("20.1.2.3")[:3]
        fwd, drops = self.compare(cases)
        assert fwd > 0 and drops >= 3, (fwd, drops)
        # Really encapsulated: outer IPv4 to the peer carrying protocol 4.
        one = [IP(src=self.pg0.remote_ip4, dst="20.1.2.3") / UDP(sport=1, dport=2)]
        (out,), _ = self.run_path(self.pg2, self.pg3, self.frames(self.pg2.local_mac, one))
        assert out[14 + 9] == 4 and out[14 + 16:14 + 20] == ip4(peer).to_bytes(4, "big")
        a.p4_unload(name="tun")
        self.assert_no_leaks()


class TestP4L2Switch(P4Differential):
    """The L2 switch program against a native bridge domain with static L2 FIB entries and
    no learning or flooding: the same frames forwarded, byte-identical, the same dropped."""

    BD = 18

    def setup_test(self):
        self.pg0, self.pg1, self.pg2, self.pg3 = self.create_pg_interfaces(range(4), up=True)
        self.api = self.vpp.api()
        self.vpp.cli(f"create bridge-domain {self.BD} learn 0 flood 0 uu-flood 0")
        for pg in ("pg0", "pg1"):
            self.vpp.cli(f"set interface l2 bridge {pg} {self.BD}")

    def teardown_test(self):
        for pg in ("pg0", "pg1"):
            self.vpp.cli(f"set interface l3 {pg}")
        self.vpp.cli(f"create bridge-domain {self.BD} del")

    @pytest.mark.parametrize("mode", ["single", "multi"])
    def test_l2switch_matches_native_bridge(self, mode):
        a = self.api
        # Stations behind the output port, and one behind the input port (never sent back).
        far = ["02:20:00:00:00:01", "02:20:00:00:00:02", "02:20:00:00:00:03"]
        near = "02:20:00:00:00:10"
        a.p4_load(file=L2SWITCH, name="sw", mode=mode,
                  sw_if_indexes=[self.vpp.sw_if_index("pg2")])
        for m, native, p4 in [(h, "pg1", "pg3") for h in far] + [(near, "pg0", "pg2")]:
            self.vpp.cli(f"l2fib add {m} {self.BD} {native} static")
            a.p4_table_entry_add_del(is_add=True, program="sw", table="dmac",
                                     matches=[exact(mac(m))], action="forward",
                                     params=[self.vpp.sw_if_index(p4)])
        src = "02:20:00:00:00:20"
        cases = [
            Ether(src=src, dst=far[0], type=0x88B5) / Raw(b"a" * 46),
            Ether(src=src, dst=far[1]) / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(dport=9)
            / Raw(b"b" * 300),
            Ether(src=near, dst=far[2], type=0x0806) / Raw(bytes(range(46))),
            Ether(src=src, dst=far[0], type=0x88B5) / Raw(b"c" * 1400),
            Ether(src=src, dst=near, type=0x88B5) / Raw(b"d" * 46),  # back where it came from
            Ether(src=src, dst="02:20:00:00:00:99", type=0x88B5) / Raw(b"e" * 46),  # unknown
        ]
        frames = [raw(c) for c in cases] + [raw(cases[0])[:10]]  # a runt
        no, nd = self.run_path(self.pg0, self.pg1, frames)
        po, pd = self.run_path(self.pg2, self.pg3, frames)
        assert len(no) == 4, len(no)
        assert po == no, "outputs differ"
        assert no == frames[:4]
        assert (pd, nd) == (3, 3), (pd, nd)
        a.p4_unload(name="sw")
        self.assert_no_leaks()

    @pytest.mark.parametrize("mode", ["single", "multi", "auto"])
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_l2switch_matches_native_bridge_random(self, seed, mode):
        """Random stations behind either port and random unicast frames (known, unknown and
        back-to-the-input destinations; EtherTypes; sizes; a few runts), from a fixed seed,
        in each mode."""
        rnd = random.Random(seed)
        a = self.api
        a.p4_load(file=L2SWITCH, name="sw", mode=mode,
                  sw_if_indexes=[self.vpp.sw_if_index("pg2")])
        macs = set()
        while len(macs) < 40:
            macs.add("02:" + ":".join(f"{rnd.getrandbits(8):02x}" for _ in range(5)))
        macs = sorted(macs)
        stations = {m: rnd.choice([("pg1", "pg3")] * 3 + [("pg0", "pg2")]) for m in macs[:30]}
        for m, (native, p4) in stations.items():
            self.vpp.cli(f"l2fib add {m} {self.BD} {native} static")
            a.p4_table_entry_add_del(is_add=True, program="sw", table="dmac",
                                     matches=[exact(mac(m))], action="forward",
                                     params=[self.vpp.sw_if_index(p4)])
        frames = []
        for _ in range(80):
            dst = rnd.choice(macs)  # a quarter of them unknown
            src = rnd.choice(macs)
            et = rnd.choice([0x0800, 0x0806, 0x86DD, 0x88B5, 0x8100])
            frames.append(raw(Ether(src=src, dst=dst, type=et)
                              / Raw(bytes(rnd.getrandbits(8)
                                          for _ in range(rnd.randint(46, 1400))))))
        frames += [frames[rnd.randrange(len(frames))][:rnd.randint(1, 13)] for _ in range(4)]
        rnd.shuffle(frames)
        no, nd = self.run_path(self.pg0, self.pg1, frames)
        po, pd = self.run_path(self.pg2, self.pg3, frames)
        assert len(no) + nd == len(frames), (len(no), nd, len(frames))
        assert po == no, "outputs differ"
        assert pd == nd, f"drops differ: p4 {pd}, native {nd}"
        assert len(no) > 0 and nd >= 4, (len(no), nd)
        a.p4_unload(name="sw")
        self.assert_no_leaks()


class TestP4Api(SluiceTestCase):
    """Every p4 message and its error codes (the traffic is in the classes above)."""

    def setup_test(self):
        self.pg0, self.pg1 = self.create_pg_interfaces(range(2), up=True)
        self.api = self.vpp.api()

    def test_messages_and_errors(self):
        a = self.api
        pg0 = self.vpp.sw_if_index("pg0")
        pg1 = self.vpp.sw_if_index("pg1")
        r = a.p4_load(file=L2SWITCH, mode="multi", sw_if_indexes=[pg0])
        assert r.name == "l2switch" and r.n_nodes >= 1
        self.assert_api_error(Retval.ALREADY_EXISTS, a.p4_load, file=L2SWITCH)
        self.assert_api_error(Retval.NO_SUCH_INTERFACE, a.p4_load, file=L2SWITCH, name="x",
                              sw_if_indexes=[99])
        self.assert_api_error(Retval.SYSTEM_ERROR, a.p4_load, file="/nonexistent.p4",
                              match="cannot read")
        (p,) = a.p4_program_dump()
        assert (p.name, p.mode.name, p.sw_if_indexes) == ("l2switch", "multi", [pg0]), p
        assert [t.n_entries for t in p.tables] == [0, 0]
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_program_dump, name="nope")
        hosts = ["02:10:00:00:00:01", "02:10:00:00:00:02"]
        for h in hosts:
            a.p4_table_entry_add_del(is_add=True, program="l2switch", table="dmac",
                                     matches=[exact(mac(h))], action="forward",
                                     params=[pg1])
            a.p4_table_entry_add_del(is_add=True, program="l2switch", table="smac",
                                     matches=[exact(mac(h))], action="NoAction")
        self.assert_api_error(Retval.ALREADY_EXISTS, a.p4_table_entry_add_del, is_add=True,
                              program="l2switch", table="dmac",
                              matches=[exact(mac(hosts[0]))], action="forward",
                              params=[pg1])
        self.assert_api_error(Retval.INVALID_VALUE, a.p4_table_entry_add_del, is_add=True,
                              program="l2switch", table="dmac", matches=[lpm(1, 8)],
                              action="forward", params=[pg1], match="matches[0]")
        self.assert_api_error(Retval.INVALID_VALUE, a.p4_table_entry_add_del, is_add=True,
                              program="l2switch", table="dmac", matches=[exact(5)],
                              action="forward", params=[1 << 9], match="bit<9>")
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_table_entry_add_del, is_add=False,
                              program="l2switch", table="dmac", matches=[exact(5)])
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_table_dump, program="l2switch",
                              table="nope", match="no table `nope'")
        # Traffic: host 1 -> host 2 twice, host 2 -> host 1 once, an unknown station once.
        f = lambda s, d: Ether(src=s, dst=d, type=0x88B5) / Raw(b"\0" * 46)  # noqa: E731
        pkts = [f(hosts[0], hosts[1]), f(hosts[0], hosts[1]), f(hosts[1], hosts[0]),
                f("02:10:00:00:00:09", hosts[0])]
        self.send_and_expect(self.pg0, pkts, self.pg1)
        sm = a.p4_table_dump(program="l2switch", table="smac")
        got = [(x.is_default, x.matches[0].value if x.matches else None, x.action, x.packets)
               for x in sm]
        assert got == [(False, mac(hosts[0]), "NoAction", 2),
                       (False, mac(hosts[1]), "NoAction", 1),
                       (True, None, "NoAction", 1)], got
        assert sm[0].bytes == 2 * 60
        cli = self.vpp.cli("p4 table show l2switch smac")
        assert "-> NoAction() packets 2 bytes 120" in cli, cli
        a.p4_table_clear(program="l2switch", table="smac")
        assert [x.is_default for x in a.p4_table_dump(program="l2switch", table="smac")] == [
            True]
        # Counters, registers and meters of a program that has them.
        a.p4_load(file=str(EXAMPLES / "firewall.p4"), name="fw")
        assert len(a.p4_counter_dump(program="fw", counter="rule_hits")) == 1024
        self.assert_api_error(Retval.INVALID_VALUE, a.p4_counter_dump, program="fw",
                              counter="rule_hits", index=1024, match="out of range")
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_counter_dump, program="fw",
                              counter="nope")
        assert [(x.index, x.value) for x in a.p4_register_dump(program="fw",
                                                                register="last_denied")] == [
            (0, 0)]
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_register_dump, program="fw",
                              register="nope")
        a.p4_meter_set(program="fw", meter="policer", index=2, cir=100.0, cburst=10,
                       pir=200.0, pburst=20)
        self.assert_api_error(Retval.INVALID_VALUE, a.p4_meter_set, program="fw",
                              meter="policer", index=2, cir=300.0, pir=200.0,
                              match="pir must be at least cir")
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_meter_set, program="nope",
                              meter="policer", index=0)
        assert sorted(p.name for p in a.p4_program_dump()) == ["fw", "l2switch"]
        a.p4_unload(name="fw")
        a.p4_unload(name="l2switch")
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_unload, name="l2switch")
        assert a.p4_program_dump() == []


class TestP4DirectMeter(SluiceTestCase):
    """A `direct_meter` (python/tests/data/p4_direct_meter.p4): each entry's own meter,
    configured through `p4_table_entry_meter_set`, colours the frames it forwards (the
    colour is added to the EtherType); red ones are dropped."""

    def setup_test(self):
        self.pg0, self.pg1 = self.create_pg_interfaces(range(2), up=True)
        self.api = self.vpp.api()

    def test_each_entry_has_its_own_meter(self):
        a = self.api
        pg0 = self.vpp.sw_if_index("pg0")
        pg1 = self.vpp.sw_if_index("pg1")
        a.p4_load(file=str(Path(__file__).parent / "data" / "p4_direct_meter.p4"), name="m",
                  sw_if_indexes=[pg0])
        st = ["02:10:00:00:00:01", "02:10:00:00:00:02", "02:10:00:00:00:03"]
        for h, action in zip(st, ("forward", "forward", "unmetered")):
            a.p4_table_entry_add_del(is_add=True, program="m", table="stations",
                                     matches=[exact(mac(h))], action=action, params=[pg1])
        # 0.01 packets/s: no refill during the test. Committed burst 2, peak burst 3.
        a.p4_table_entry_meter_set(program="m", table="stations", matches=[exact(mac(st[0]))],
                                   cir=0.01, cburst=2, pir=0.01, pburst=3)
        self.assert_api_error(Retval.INVALID_VALUE, a.p4_table_entry_meter_set, program="m",
                              table="stations", matches=[exact(mac(st[2]))], cir=1.0,
                              pir=1.0, match="reads no direct_meter")
        self.assert_api_error(Retval.NO_SUCH_ENTRY, a.p4_table_entry_meter_set, program="m",
                              table="stations", matches=[exact(5)], cir=1.0, pir=1.0)
        f = lambda d, i: raw(Ether(src="02:10:00:00:00:09", dst=d, type=0x88B0)  # noqa: E731
                             / Raw(bytes([i]) * 46))
        pkts = [f(st[0], i) for i in range(5)] + [f(st[1], 5), f(st[1], 6), f(st[2], 7)]
        out = self.send_and_expect(self.pg0, pkts, self.pg1, n_rx=6)
        got = [(raw(p)[14], int.from_bytes(raw(p)[12:14], "big") - 0x88B0) for p in out]
        # Entry 1: green, green, yellow, then red (dropped); entry 2 (unconfigured) and the
        # unmetered entry: green.
        assert got == [(0, 0), (1, 0), (2, 1), (5, 0), (6, 0), (7, 0)], got
        # The dump shows the declared parameters only (not the meter cell).
        d = a.p4_table_dump(program="m", table="stations")
        assert [x.params for x in d] == [[pg1], [pg1], [pg1], []]
        a.p4_unload(name="m")
