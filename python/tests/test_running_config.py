"""`show running-config` / `save running-config`: a random configuration, dumped, replayed as
the `exec` script of a fresh daemon, dumps again identically (and the API sees the same
routes, neighbours, bridge domains, interfaces and features in both). The configuration
covers NAT44, ACLs and policers too (plugins' sections of the running configuration)."""

from __future__ import annotations

import random

import pytest

from sluice_test import SluiceInstance, SluiceTestCase


def random_config(rnd: random.Random) -> list[str]:
    cmds: list[str] = []
    pgs = [f"pg{i}" for i in range(rnd.randint(3, 5))]
    for p in pgs:
        cmds.append(f"create packet-generator interface {p}")
    loops = [f"loop{i}" for i in range(rnd.randint(2, 4))]
    for i, _ in enumerate(loops):
        cmds.append(f"create loopback interface mac 02:00:00:aa:00:{i:02x} instance {i}")
    subs = []
    for k in range(rnd.randint(1, 4)):
        parent = rnd.choice(pgs)
        vid = 100 + k
        if rnd.random() < 0.5:
            cmds.append(f"create sub-interfaces {parent} {vid}")
        else:
            cmds.append(f"create sub-interfaces {parent} {vid} dot1ad {vid} inner-dot1q {k + 1}")
        subs.append(f"{parent}.{vid}")
    tables = rnd.sample(range(1, 50), 2)
    for t in tables:
        cmds.append(f"ip table add {t}")
        cmds.append(f"ip6 table add {t}")
    cmds.append(f"set ip neighbor-config ip4 limit {rnd.randint(100, 999)} age 60 recycle")
    # Before IPv6 is enabled: a link-local address is derived from the MAC once, when IPv6
    # is enabled on the interface (a later MAC change does not move it).
    cmds.append(f"set interface mac address {pgs[0]} 02:11:22:33:44:55")
    l3 = pgs[:2] + subs
    for n, intf in enumerate(l3):
        if n == 1:
            cmds.append(f"set interface ip table {intf} {tables[0]}")
            cmds.append(f"set interface ip6 table {intf} {tables[0]}")
        cmds.append(f"set interface ip address {intf} 10.{n}.0.1/24")
        cmds.append(f"set interface ip address {intf} 2001:db8:{n}::1/64")
        if rnd.random() < 0.5:
            cmds.append(f"set interface ip address {intf} 10.{n}.{100 + n}.1/28")
        cmds.append(f"set interface mtu {rnd.choice([1400, 1500, 9000])} {intf}")
        cmds.append(f"set interface state {intf} up")
        cmds.append(f"ip neighbor {intf} 10.{n}.0.2 02:00:00:00:{n:02x}:02 static")
        cmds.append(f"ip neighbor {intf} 2001:db8:{n}::2 02:00:00:00:{n:02x}:03 static")
    cmds.append(f"set interface promiscuous on {pgs[0]}")
    cmds.append(f"enable ip6 interface {loops[0]}")
    # Routes: plain, ECMP with weights, recursive, drop, in a table, IPv6.
    for k in range(rnd.randint(5, 15)):
        p = f"172.{16 + k}.{rnd.randint(0, 255)}.0/24"
        kind = rnd.choice(["plain", "ecmp", "recursive", "drop"])
        if kind == "plain":
            cmds.append(f"ip route add {p} via 10.0.0.2")
        elif kind == "ecmp":
            cmds.append(f"ip route add {p} via 10.0.0.2 {pgs[0]} weight {rnd.randint(1, 5)} "
                        f"via 10.2.0.2 {l3[2]}")
        elif kind == "recursive":
            cmds.append(f"ip route add {p} via 192.0.2.{rnd.randint(1, 200)}")
        else:
            cmds.append(f"ip route add {p} drop")
    cmds.append("ip route add 192.0.2.0/24 via 10.0.0.2")
    cmds.append(f"ip route add table {tables[0]} 0.0.0.0/0 via 10.1.0.2")
    cmds.append("ip route add 2001:db8:ff::/48 via 2001:db8:0::2")
    cmds.append(f"ip route add table {tables[0]} 2001:db8:fe::/48 via 2001:db8:1::2")
    # Attached (`via <interface>`: glean, or the destination itself for a host route) and
    # receive paths.
    cmds.append(f"ip route add 198.51.100.0/24 via {pgs[1]}")
    cmds.append(f"ip route add 198.51.100.99/32 via {pgs[0]}")
    cmds.append(f"ip route add 2001:db8:aa::/64 via {pgs[0]}")
    cmds.append("ip route add 203.0.113.7/32 via local")
    # L2: a bridge with a BVI and a split-horizon member, a cross-connect, a patch.
    bd = rnd.randint(1, 99)
    cmds.append(f"create bridge-domain {bd} learn 1 forward 1 flood 1 uu-flood 0 mac-age 5")
    cmds.append(f"set interface l2 bridge {pgs[2]} {bd} shg 1")
    cmds.append(f"set interface l2 bridge {loops[1]} {bd} bvi")
    cmds.append(f"l2fib add 02:00:00:00:bb:01 {bd} {pgs[2]} static")
    if len(pgs) > 4:
        cmds.append(f"set interface l2 xconnect {pgs[3]} {pgs[4]}")
    cmds.append(f"test l2patch rx {pgs[-1]} tx {pgs[-2]}")
    cmds.append(f"set interface feature {pgs[0]} ip4-unicast-count arc ip4-unicast")
    cmds.append(f"set interface feature {pgs[1]} ip6-source-check-via-rx arc ip6-unicast")
    cmds += services_config(rnd, pgs, l3, tables[0])
    return cmds


def services_config(rnd: random.Random, pgs: list[str], l3: list[str], vrf: int) -> list[str]:
    """NAT44, ACLs and policers over the interfaces of `random_config`."""
    cmds = [f"set nat timeout udp {rnd.randint(30, 299)} icmp {rnd.randint(5, 59)}",
            f"nat44 plugin enable sessions {rnd.randint(1000, 9999)}",
            f"nat44 add address 198.51.100.{rnd.randint(1, 9)} - 198.51.100.{rnd.randint(10, 20)}",
            f"nat44 add address 203.0.113.7 tenant-vrf {vrf}",
            f"nat44 add interface address {l3[2]}",
            f"set interface nat44 in {l3[0]} out {l3[2]}",
            f"set interface nat44 in {l3[1]}",
            f"nat44 add static mapping tcp local 10.0.0.3 {rnd.randint(1, 999)} "
            f"external 198.51.100.99 {rnd.randint(1000, 9999)}",
            f"nat44 add static mapping udp local 10.1.0.5 53 external {l3[2]} 5353 vrf {vrf}",
            "nat44 add static mapping local 10.0.0.9 external 198.51.100.98",
            "nat44 add identity mapping 10.0.0.1 tcp 22",
            f"nat44 add identity mapping external {l3[0]}"]
    n_acls = rnd.randint(2, 4)
    for i in range(n_acls):
        rules = []
        for _ in range(rnd.randint(1, 4)):
            kind = rnd.choice(["plain", "ports", "flags", "v6", "icmp"])
            act = rnd.choice(["permit", "deny", "permit+reflect"])
            if kind == "plain":
                rules.append(f"{act} src 10.{rnd.randint(0, 9)}.0.0/16 dst 0.0.0.0/0")
            elif kind == "ports":
                lo = rnd.randint(1, 1000)
                rules.append(f"{act} src 0.0.0.0/0 dst 192.0.2.0/24 proto 17 "
                             f"sport {lo}-{lo + 100} dport 53")
            elif kind == "flags":
                rules.append(f"{act} src 10.0.0.0/8 dst 0.0.0.0/0 proto 6 dport 80 "
                             "tcpflags 2 mask 18")
            elif kind == "v6":
                rules.append(f"{act} src 2001:db8::/32 dst ::/0 proto 6")
            else:
                rules.append(f"{act} src 0.0.0.0/0 dst 0.0.0.0/0 proto 1 sport 8 dport 0")
        tag = f" tag t{i}" if rnd.random() < 0.5 else ""
        cmds.append(f"set acl-plugin acl index {i * 2} {', '.join(rules)}{tag}")
    cmds.append("set acl-plugin session timeout tcp idle 3600")
    for i in range(n_acls):
        cmds.append(f"set acl-plugin interface {rnd.choice(pgs[:2])} "
                    f"{rnd.choice(['input', 'output'])} acl {i * 2}")
    cmds.append(f"configure policer name p1 cir {rnd.randint(100, 9999)} cb 15000 "
                "conform-action mark-and-transmit AF21")
    cmds.append(f"configure policer name p2 type 2r3c-2698 cir 100 cb 50 eir 200 eb 60 rate pps "
                "exceed-action transmit violate-action drop")
    cmds.append(f"policer input name p1 {l3[0]}")
    cmds.append(f"policer output name p2 {l3[0]}")
    cmds.append(f"policer input name p2 {l3[1]}")
    return cmds


def api_view(vpp: SluiceInstance):
    a = vpp.api()
    names = {i.sw_if_index: i.interface_name for i in a.sw_interface_dump()}
    ifs = sorted((i.interface_name, i.l2_address, i.admin_up, i.mtu, i.ip4_table_id,
                  i.l2_mode.name) for i in a.sw_interface_dump())
    routes = []
    for t in a.ip_table_dump():
        for r in a.ip_route_dump(table_id=t.table_id, is_ipv6=t.is_ipv6):
            routes.append((t.table_id, str(r.prefix), tuple(s.name for s in r.sources),
                           r.is_drop, tuple((str(p.next_hop), names.get(p.sw_if_index),
                                             p.weight) for p in r.paths)))
    nbrs = sorted((names[n.sw_if_index], str(n.ip_address), n.mac_address)
                  for v6 in (False, True) for n in a.ip_neighbor_dump(is_ipv6=v6))
    bds = [(b.bd_id, b.uu_flood, b.mac_age, [(names[m.sw_if_index], m.shg) for m in b.members])
           for b in a.bridge_domain_dump()]
    feats = sorted((n, f) for n in names.values() if n != "local0"
                   for f in vpp.cli(f"show interface features {n}").split())
    return ifs, sorted(routes), nbrs, bds, feats


class TestRunningConfig(SluiceTestCase):

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_random_configuration_round_trips(self, seed):
        rnd = random.Random(seed)
        cmds = random_config(rnd)
        for c in cmds:
            self.vpp.cli(c)
        first = self.vpp.cli("show running-config")
        # Attached and receive paths come back as they were given.
        attached = ("ip route add 198.51.100.0/24 ", "ip route add 2001:db8:aa::/64 ",
                    "ip route add 203.0.113.7/32 ")
        for c in cmds:
            if c.startswith(attached):
                assert c in first.splitlines(), (c, first)
        saved = self.vpp.dir / "saved.conf"
        assert self.vpp.cli(f"save running-config {saved}").strip() == str(saved)
        assert saved.read_text() == first
        assert "#" not in first, first  # every interface could be recreated
        fresh = SluiceInstance(tag=f"replay-{seed}",
                               extra_config=f"unix {{ exec {saved} }}")
        fresh.start()
        try:
            second = fresh.cli("show running-config")
            assert second == first
            assert api_view(fresh) == api_view(self.vpp)
        finally:
            fresh.stop()
            fresh.remove_dir()

    def test_what_the_daemon_made_itself_is_left_out(self):
        self.vpp.cli("create packet-generator interface pg0")
        self.vpp.cli("set interface ip address pg0 10.0.0.1/24")
        text = self.vpp.cli("show running-config")
        assert "local0" not in text
        assert "fe80" not in text
        assert "10.0.0.1/32" not in text and "ip route" not in text
        assert text.splitlines()[0] == "create packet-generator interface pg0"

    def test_save_outside_the_capture_directory_is_refused(self):
        self.assert_cli_error("save running-config /nonexistent-dir/x.conf",
                              "/nonexistent-dir/x.conf")
        self.assert_cli_error("save running-config ../x.conf", "../x.conf")
