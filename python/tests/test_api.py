"""The control API (`sluice_papi` against a real daemon): every request and dump of the
schema files, their error codes, events, the per-message CRC check, and bad input (unknown
message, wrong field types, oversize and truncated frames, clients leaving mid-dump) after
which the daemon keeps serving and holds no more descriptors than before."""

from __future__ import annotations

import ipaddress
import os
import random
import socket
import struct
import time
from pathlib import Path

import pytest

from sluice_papi import ApiError, Client, Retval, load_schemas
from sluice_papi import schema as papi_schema
from sluice_test import SluiceTestCase, write_pcap

HERE = Path(__file__)


def expect(code: Retval, fn, *args, match: str | None = None, **kw):
    with pytest.raises(ApiError) as ei:
        fn(*args, **kw)
    assert ei.value.retval == code, f"{ei.value} is not {code.name}"
    if match is not None:
        assert match in ei.value.message, ei.value.message
    return ei.value


class ApiTest(SluiceTestCase):

    def setup_test(self):
        self.api = self.vpp.api()

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.vpp.proc.pid}/fd"))

    def loop(self, **kw) -> int:
        return self.api.create_loopback(**kw).sw_if_index


class TestHandshake(ApiTest):

    def test_modules_versions_and_crcs_match(self):
        for m in ("control", "interface", "ip", "l2", "pg"):
            assert m in self.api.modules, self.api.modules
        assert self.api.mismatched() == []
        local = {s.module: s for s in load_schemas()}
        for name, (version, crc) in self.api.modules.items():
            assert local[name].version == version
            assert local[name].module_crc() == crc, name
        text = self.vpp.cli("show api")
        assert "api.sock" in text and "interface" in text

    def test_changed_definition_is_refused_per_message(self):
        schemas = []
        for s in load_schemas():
            if s.module == "interface":
                src = next(d / "interface.api" for d in papi_schema.default_api_dirs()
                           if (d / "interface.api").exists()).read_text()
                # The client thinks admin_up is a u8: a different encoding contract.
                changed = src.replace("    u32 sw_if_index;\n    bool admin_up;\n};",
                                      "    u32 sw_if_index;\n    u8 admin_up;\n};", 1)
                assert changed != src
                s = papi_schema.parse("interface", changed, "interface.api")
            schemas.append(s)
        with Client(self.vpp.api_path, schemas=schemas) as c:
            assert c.mismatched() == ["sw_interface_set_flags"]
            e = expect(Retval.SCHEMA_MISMATCH, c.sw_interface_set_flags, sw_if_index=0,
                       admin_up=1)
            assert "sw_interface_set_flags" in e.message and "interface.api" in e.message
            # Other messages of the same module still work on that session.
            assert c.sw_interface_dump(name_filter="local0")[0].sw_if_index == 0

    def test_messages_before_the_handshake_are_refused(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(self.vpp.api_path))
            sid = self.api.msgs["sw_interface_dump"].id
            body = self.api.encode("sw_interface_dump", {})
            s.sendall(struct.pack("<IHI", 6 + len(body), sid, 7) + body)
            n, mid, ctx = struct.unpack("<IHI", s.recv(10))
            rest = s.recv(n - 6)
            name, rec = self.api._decode(mid, rest)
            assert (name, ctx, rec.retval) == ("api_error", 7, Retval.NO_HELLO)


class TestInterfaceMessages(ApiTest):

    def test_loopback_create_delete_and_errors(self):
        lo = self.loop()
        lo2 = self.loop(mac_address="02:00:00:00:00:01", is_specified=True, user_instance=7)
        d = {i.interface_name: i for i in self.api.sw_interface_dump()}
        assert d["loop0"].sw_if_index == lo and d["loop7"].sw_if_index == lo2
        assert d["loop7"].l2_address == "02:00:00:00:00:01"
        assert d["loop7"].driver == "loopback"
        expect(Retval.ALREADY_EXISTS, self.loop, is_specified=True, user_instance=7)
        expect(Retval.INVALID_VALUE, self.api.delete_loopback, sw_if_index=0,
               match="not a loopback")
        expect(Retval.NO_SUCH_INTERFACE, self.api.delete_loopback, sw_if_index=999)
        self.api.delete_loopback(sw_if_index=lo2)
        assert self.api.sw_interface_dump(name_filter="loop7") == []
        assert "loop7" not in self.vpp.cli("show interface")

    def test_flags_mtu_mac_promisc_and_counters(self):
        lo = self.loop()
        self.api.sw_interface_set_flags(sw_if_index=lo, admin_up=True)
        self.api.sw_interface_set_mtu(sw_if_index=lo, mtu=9000)
        self.api.sw_interface_set_mac_address(sw_if_index=lo, mac_address="02:aa:bb:cc:dd:ee")
        self.api.sw_interface_set_promisc(sw_if_index=lo, enable=True)
        i = self.api.sw_interface_dump(name_filter="loop0")[0]
        assert (i.admin_up, i.mtu, i.l2_address, i.promisc) == (
            True, 9000, "02:aa:bb:cc:dd:ee", True)
        assert "9000/0/0/0" in self.vpp.cli("show interface loop0")
        expect(Retval.INVALID_VALUE, self.api.sw_interface_set_mtu, sw_if_index=lo, mtu=10,
               match="MTU 10 out of range")
        for m in ("sw_interface_set_flags", "sw_interface_set_promisc"):
            expect(Retval.NO_SUCH_INTERFACE, self.api.call, m, sw_if_index=4242)
        expect(Retval.NO_SUCH_INTERFACE, self.api.sw_interface_set_mac_address,
               sw_if_index=4242, mac_address="02:00:00:00:00:01")
        self.api.sw_interface_clear_counters()

    def test_sub_interfaces(self):
        lo = self.loop()
        sub = self.api.create_subif(sw_if_index=lo, sub_id=100).sw_if_index
        qinq = self.api.create_subif(sw_if_index=lo, sub_id=7, outer_vlan_id=200,
                                     inner_vlan_id=300, dot1ad=True).sw_if_index
        d = {i.sw_if_index: i for i in self.api.sw_interface_dump()}
        assert (d[sub].interface_name, d[sub].sup_sw_if_index, d[sub].outer_vlan_id) == (
            "loop0.100", lo, 100)
        assert (d[qinq].outer_vlan_id, d[qinq].inner_vlan_id, d[qinq].dot1ad) == (
            200, 300, True)
        expect(Retval.ALREADY_EXISTS, self.api.create_subif, sw_if_index=lo, sub_id=8,
               outer_vlan_id=100)
        expect(Retval.INVALID_VALUE, self.api.create_subif, sw_if_index=lo, sub_id=5000)
        expect(Retval.INVALID_VALUE, self.api.create_subif, sw_if_index=sub, sub_id=5)
        expect(Retval.INVALID_VALUE, self.api.delete_subif, sw_if_index=lo,
               match="not a sub-interface")
        self.api.delete_subif(sw_if_index=sub)
        expect(Retval.NO_SUCH_INTERFACE, self.api.delete_subif, sw_if_index=sub)

    def test_features(self):
        lo = self.loop()
        self.api.feature_enable_disable(sw_if_index=lo, enable=True, arc_name="ip4-unicast",
                                        feature_name="ip4-unicast-count")
        f = self.api.feature_dump(sw_if_index=lo)
        assert [(x.arc_name, x.feature_name) for x in f] == [("ip4-unicast",
                                                              "ip4-unicast-count")]
        assert "ip4-unicast-count" in self.vpp.cli("show interface features loop0")
        expect(Retval.INVALID_VALUE, self.api.feature_enable_disable, sw_if_index=lo,
               enable=True, arc_name="no-such-arc", feature_name="x",
               match="unknown feature arc `no-such-arc'")
        expect(Retval.NO_SUCH_INTERFACE, self.api.feature_dump, sw_if_index=777)
        self.api.feature_enable_disable(sw_if_index=lo, enable=False, arc_name="ip4-unicast",
                                        feature_name="ip4-unicast-count")
        assert self.api.feature_dump(sw_if_index=lo) == []

    def test_rx_queues_of_an_interface_without_them(self):
        lo = self.loop()
        assert self.api.sw_interface_rx_placement_dump() == []
        expect(Retval.NOT_SUPPORTED, self.api.sw_interface_set_rx_mode, sw_if_index=lo,
               mode="interrupt", match="has no rx queues")
        expect(Retval.NOT_SUPPORTED, self.api.sw_interface_set_rx_placement,
               sw_if_index=lo, is_main=True)
        expect(Retval.INVALID_VALUE, self.api.sw_interface_set_rx_placement,
               sw_if_index=lo, worker_id=3, match="worker `3' does not exist")
        expect(Retval.INVALID_VALUE, self.api.sw_interface_set_rx_mode, sw_if_index=lo,
               queue_id_valid=True, queue_id=70000, mode="polling")

    def test_interface_events(self):
        self.api.want_interface_events(enable=True)
        lo = self.loop()
        self.api.sw_interface_set_flags(sw_if_index=lo, admin_up=True)
        ev = self.api.wait_event("sw_interface_event",
                                 lambda r: r.sw_if_index == lo and r.admin_up)
        assert ev is not None and ev.link_up and not ev.deleted
        self.api.delete_loopback(sw_if_index=lo)
        ev = self.api.wait_event("sw_interface_event", lambda r: r.sw_if_index == lo)
        assert ev is not None and ev.deleted
        self.api.want_interface_events(enable=False)
        self.loop()
        assert self.api.wait_event("sw_interface_event", timeout=0.3) is None


class TestIpMessages(ApiTest):

    def setup_test(self):
        super().setup_test()
        self.lo = self.loop()
        self.lo1 = self.loop()
        for i in (self.lo, self.lo1):
            self.api.sw_interface_set_flags(sw_if_index=i, admin_up=True)
        self.api.sw_interface_add_del_address(sw_if_index=self.lo, is_add=True,
                                              prefix="10.0.0.1/24")

    def test_addresses(self):
        a = self.api
        a.sw_interface_add_del_address(sw_if_index=self.lo, is_add=True, prefix="2001:db8::1/64")
        v4 = [str(x.prefix) for x in a.ip_address_dump(sw_if_index=self.lo)]
        v6 = [str(x.prefix) for x in a.ip_address_dump(sw_if_index=self.lo, is_ipv6=True)]
        assert v4 == ["10.0.0.1/24"] and "2001:db8::1/64" in v6
        assert any(ipaddress.ip_interface(p).ip.is_link_local for p in v6)
        assert "10.0.0.1/24" in self.vpp.cli("show interface address")
        every = a.ip_address_dump(sw_if_index=0xFFFFFFFF)
        assert [x.sw_if_index for x in every] == [self.lo]
        expect(Retval.ALREADY_EXISTS, a.sw_interface_add_del_address, sw_if_index=self.lo1,
               is_add=True, prefix="10.0.0.2/24", match="overlaps")
        expect(Retval.NO_SUCH_ENTRY, a.sw_interface_add_del_address, sw_if_index=self.lo,
               is_add=False, prefix="10.9.9.9/24")
        expect(Retval.INVALID_VALUE, a.sw_interface_add_del_address, sw_if_index=self.lo,
               is_add=True, prefix="ff02::1/64", match="not a unicast")
        expect(Retval.NO_SUCH_INTERFACE, a.ip_address_dump, sw_if_index=555)
        a.sw_interface_add_del_address(sw_if_index=self.lo, is_add=False, prefix="10.0.0.1/24")
        assert a.ip_address_dump(sw_if_index=self.lo) == []

    def test_ip6_enable(self):
        self.api.sw_interface_ip6_enable(sw_if_index=self.lo1)
        v6 = self.api.ip_address_dump(sw_if_index=self.lo1, is_ipv6=True)
        assert len(v6) == 1 and v6[0].prefix.ip.is_link_local
        expect(Retval.NO_SUCH_INTERFACE, self.api.sw_interface_ip6_enable, sw_if_index=900)

    def test_tables(self):
        a = self.api
        a.ip_table_add_del(is_add=True, table_id=10)
        a.ip_table_add_del(is_add=True, table_id=10, is_ipv6=True)
        t = {(x.table_id, x.is_ipv6) for x in a.ip_table_dump()}
        assert {(0, False), (10, False), (0, True), (10, True)} <= t
        a.sw_interface_set_table(sw_if_index=self.lo1, table_id=10)
        a.sw_interface_set_table(sw_if_index=self.lo1, table_id=10, is_ipv6=True)
        d = a.sw_interface_dump(name_filter="loop1")[0]
        assert (d.ip4_table_id, d.ip6_table_id) == (10, 10)
        expect(Retval.IN_USE, a.ip_table_add_del, is_add=False, table_id=10,
               match="in use by loop1")
        expect(Retval.IN_USE, a.sw_interface_set_table, sw_if_index=self.lo, table_id=10,
               match="has IPv4 addresses")
        expect(Retval.NO_SUCH_TABLE, a.sw_interface_set_table, sw_if_index=self.lo1,
               table_id=11, match="no table 11")
        expect(Retval.NO_SUCH_TABLE, a.ip_table_add_del, is_add=False, table_id=12)
        expect(Retval.INVALID_VALUE, a.ip_table_add_del, is_add=False, table_id=0)
        a.sw_interface_set_table(sw_if_index=self.lo1, table_id=0)
        a.ip_table_add_del(is_add=False, table_id=10)

    def test_attached_and_local_paths_round_trip(self):
        # What ip_route_dump gives for `via <interface>` and `via local` adds the same
        # route back through ip_route_add_del.
        a = self.api
        lo = {i.sw_if_index: i.interface_name for i in a.sw_interface_dump()}[self.lo]
        self.vpp.cli(f"ip route add 198.51.100.0/24 via {lo}")
        self.vpp.cli(f"ip route add 2001:db8:aa::/64 via {lo}")
        self.vpp.cli("ip route add 203.0.113.7/32 via local")
        want = {}
        for v6, p in ((False, "198.51.100.0/24"), (True, "2001:db8:aa::/64"),
                      (False, "203.0.113.7/32")):
            r = {str(x.prefix): x for x in a.ip_route_dump(table_id=0, is_ipv6=v6)}[p]
            paths = [{"next_hop": str(x.next_hop), "sw_if_index": x.sw_if_index,
                      "weight": x.weight} for x in r.paths]
            want[p] = (v6, paths)
        assert want["198.51.100.0/24"][1] == [
            {"next_hop": "0.0.0.0", "sw_if_index": self.lo, "weight": 1}]
        assert want["203.0.113.7/32"][1] == [
            {"next_hop": "0.0.0.0", "sw_if_index": 0xffffffff, "weight": 1}]
        text = self.vpp.cli("show running-config")
        for p, (v6, paths) in want.items():
            a.ip_route_add_del(is_add=False, prefix=p, paths=paths)
            assert p not in {str(x.prefix) for x in a.ip_route_dump(table_id=0, is_ipv6=v6)}
            a.ip_route_add_del(is_add=True, prefix=p, paths=paths)
        assert self.vpp.cli("show running-config") == text

    def test_routes_ecmp_recursive_drop_and_tables(self):
        a = self.api
        a.sw_interface_add_del_address(sw_if_index=self.lo1, is_add=True, prefix="10.0.1.1/24")
        a.ip_route_add_del(is_add=True, prefix="10.50.0.0/16",
                           paths=[{"next_hop": "10.0.0.2", "weight": 1},
                                  {"next_hop": "10.0.1.2", "sw_if_index": self.lo1,
                                   "weight": 3}])
        a.ip_route_add_del(is_add=True, prefix="10.60.0.0/16", paths=[{"next_hop": "10.50.0.9"}])
        a.ip_route_add_del(is_add=True, prefix="10.70.0.0/16", is_drop=True)
        a.ip_route_add_del(is_add=True, prefix="2001:db8:1::/48",
                           paths=[{"next_hop": "fe80::1", "sw_if_index": self.lo}])
        r = {str(x.prefix): x for x in a.ip_route_dump(table_id=0)}
        ecmp = r["10.50.0.0/16"]
        assert [(str(p.next_hop), p.sw_if_index, p.weight) for p in ecmp.paths] == [
            ("10.0.0.2", self.lo, 1), ("10.0.1.2", self.lo1, 3)]
        assert ecmp.installed_paths == 2
        rec = r["10.60.0.0/16"]
        assert [(str(p.next_hop), p.sw_if_index) for p in rec.paths] == [("10.50.0.9", 0)]
        assert rec.installed_paths == 2, "resolved through the ECMP cover"
        assert r["10.70.0.0/16"].is_drop
        assert [s.name for s in r["10.0.0.0/24"].sources] == ["connected"]
        r6 = {str(x.prefix): x for x in a.ip_route_dump(table_id=0, is_ipv6=True)}
        assert "2001:db8:1::/48" in r6
        assert "10.50.0.0/16" in self.vpp.cli("show ip fib 10.50.0.0/16")
        # Errors: families mixed, nothing to delete, no table, bad interface, no path.
        expect(Retval.INVALID_VALUE, a.ip_route_add_del, is_add=True, prefix="10.80.0.0/16",
               paths=[{"next_hop": "2001:db8::1"}], match="is not IPv4")
        expect(Retval.NO_SUCH_ENTRY, a.ip_route_add_del, is_add=False, prefix="10.99.0.0/16",
               match="no route `10.99.0.0/16'")
        expect(Retval.NO_SUCH_TABLE, a.ip_route_add_del, is_add=True, table_id=77,
               prefix="10.80.0.0/16", is_drop=True)
        expect(Retval.NO_SUCH_TABLE, a.ip_route_dump, table_id=77)
        expect(Retval.NO_SUCH_INTERFACE, a.ip_route_add_del, is_add=True,
               prefix="10.80.0.0/16", paths=[{"next_hop": "10.0.0.2", "sw_if_index": 999}])
        expect(Retval.INVALID_VALUE, a.ip_route_add_del, is_add=True, prefix="10.80.0.0/16",
               match="missing `via")
        expect(Retval.INVALID_VALUE, a.ip_route_add_del, is_add=True, prefix="2001:db8:2::/48",
               paths=[{"next_hop": "fe80::2"}], match="needs an interface")
        # Deleting one path of the ECMP route, then the route.
        a.ip_route_add_del(is_add=False, prefix="10.50.0.0/16",
                           paths=[{"next_hop": "10.0.0.2"}])
        r = {str(x.prefix): x for x in a.ip_route_dump(table_id=0)}
        assert len(r["10.50.0.0/16"].paths) == 1
        a.ip_route_add_del(is_add=False, prefix="10.50.0.0/16")
        assert "10.50.0.0/16" not in {str(x.prefix) for x in a.ip_route_dump(table_id=0)}

    def test_neighbors_and_config(self):
        a = self.api
        a.ip_neighbor_add_del(is_add=True, sw_if_index=self.lo, ip_address="10.0.0.2",
                              mac_address="02:00:00:00:00:02", is_static=True)
        a.ip_neighbor_add_del(is_add=True, sw_if_index=self.lo, ip_address="fe80::2",
                              mac_address="02:00:00:00:00:03")
        n4 = a.ip_neighbor_dump()
        assert [(str(x.ip_address), x.mac_address, x.is_static) for x in n4] == [
            ("10.0.0.2", "02:00:00:00:00:02", True)]
        assert [str(x.ip_address) for x in a.ip_neighbor_dump(is_ipv6=True)] == ["fe80::2"]
        assert "10.0.0.2" in self.vpp.cli("show ip neighbors")
        expect(Retval.ALREADY_EXISTS, a.ip_neighbor_add_del, is_add=True,
               sw_if_index=self.lo, ip_address="10.0.0.2", mac_address="02:00:00:00:00:09",
               match="is static")
        expect(Retval.NO_SUCH_ENTRY, a.ip_neighbor_add_del, is_add=False,
               sw_if_index=self.lo, ip_address="10.0.0.99")
        expect(Retval.NO_SUCH_INTERFACE, a.ip_neighbor_add_del, is_add=True,
               sw_if_index=321, ip_address="10.0.0.3", mac_address="02:00:00:00:00:09")
        a.ip_neighbor_add_del(is_add=False, sw_if_index=self.lo, ip_address="10.0.0.2")
        assert a.ip_neighbor_dump() == []
        a.ip_neighbor_config(max_number=100, max_age=30, recycle=True)
        a.ip_neighbor_config(is_ipv6=True, max_number=50, max_age=0, recycle=False)
        text = self.vpp.cli("show ip neighbor-config")
        assert "limit:100, age:30, recycle:1" in text and "limit:50, age:0, recycle:0" in text

    def test_neighbor_and_route_events(self):
        a = self.api
        a.want_ip_neighbor_events(enable=True)
        a.want_ip_route_events(enable=True)
        a.ip_neighbor_add_del(is_add=True, sw_if_index=self.lo, ip_address="10.0.0.5",
                              mac_address="02:00:00:00:00:05", is_static=True)
        a.ip_route_add_del(is_add=True, prefix="10.40.0.0/16", paths=[{"next_hop": "10.0.0.5"}])
        a.ip_route_add_del(is_add=False, prefix="10.40.0.0/16")
        got = []
        a.on_event(lambda n, r: got.append((n, r)))
        a.sw_interface_dump()  # reads what arrived meanwhile, dispatching the callback
        deadline = time.monotonic() + 5
        while len(got) < 4 and time.monotonic() < deadline:
            a.sw_interface_dump()
            time.sleep(0.02)
        nbr = [r for n, r in got if n == "ip_neighbor_event"]
        routes = [(r.is_add, str(r.prefix)) for n, r in got if n == "ip_route_event"]
        assert nbr and nbr[0].is_add and str(nbr[0].ip_address) == "10.0.0.5"
        assert (True, "10.0.0.5/32") in routes, routes  # the neighbour's host route
        assert routes[-2:] == [(True, "10.40.0.0/16"), (False, "10.40.0.0/16")], routes


class TestL2Messages(ApiTest):

    def test_bridge_domains_members_fib_xconnect_patch(self):
        a = self.api
        lo0, lo1, lo2 = self.loop(), self.loop(), self.loop()
        a.bridge_domain_add_del(bd_id=10, is_add=True, learn=True, forward=True, flood=True,
                                uu_flood=False, mac_age=5)
        a.sw_interface_set_l2_bridge(rx_sw_if_index=lo0, bd_id=10, enable=True, bvi=True)
        a.sw_interface_set_l2_bridge(rx_sw_if_index=lo1, bd_id=10, enable=True, shg=2)
        bd = a.bridge_domain_dump(bd_id=10)[0]
        assert (bd.uu_flood, bd.mac_age, bd.bvi_sw_if_index) == (False, 5, lo0)
        assert [(m.sw_if_index, m.shg) for m in bd.members] == [(lo0, 0), (lo1, 2)]
        # VPP's member columns: Interface If-idx ISN SHG BVI TxFlood VLAN-Tag-Rewrite.
        rows = [l.split() for l in self.vpp.cli("show bridge-domain 10 detail").splitlines()]
        assert ["loop1", str(lo1), "0", "2"] in [r[:4] for r in rows]
        expect(Retval.IN_USE, a.bridge_domain_add_del, bd_id=10, is_add=False)
        expect(Retval.NO_SUCH_ENTRY, a.bridge_domain_add_del, bd_id=11, is_add=False)
        expect(Retval.INVALID_VALUE, a.bridge_domain_add_del, bd_id=70000, is_add=True)
        expect(Retval.NO_SUCH_ENTRY, a.bridge_domain_dump, bd_id=12)
        # As VPP: joining a missing bridge domain creates it with the defaults.
        a.sw_interface_set_l2_bridge(rx_sw_if_index=lo2, bd_id=12, enable=True)
        assert [m.sw_if_index for m in a.bridge_domain_dump(bd_id=12)[0].members] == [lo2]
        a.sw_interface_set_l2_bridge(rx_sw_if_index=lo2, bd_id=12, enable=False)
        a.bridge_domain_add_del(bd_id=12, is_add=False)
        expect(Retval.INVALID_VALUE, a.bridge_domain_add_del, bd_id=0, is_add=True,
               match="default bridge domain")
        expect(Retval.ALREADY_EXISTS, a.sw_interface_set_l2_bridge, rx_sw_if_index=lo2,
               bd_id=10, enable=True, bvi=True, match="already has a BVI")
        a.l2fib_add_del(mac="02:00:00:00:11:11", bd_id=10, sw_if_index=lo1, is_add=True,
                        static_mac=True)
        fib = a.l2_fib_table_dump(bd_id=10)
        assert ("02:00:00:00:11:11", lo1, True) in [(e.mac, e.sw_if_index, e.static_mac)
                                                     for e in fib]
        expect(Retval.NO_SUCH_ENTRY, a.l2fib_add_del, mac="02:00:00:00:11:12", bd_id=10,
               is_add=False)
        a.l2fib_add_del(mac="02:00:00:00:11:11", bd_id=10, is_add=False)
        a.sw_interface_set_l2_bridge(rx_sw_if_index=lo1, bd_id=10, enable=False)
        assert [m.sw_if_index for m in a.bridge_domain_dump(bd_id=10)[0].members] == [lo0]
        a.sw_interface_set_l2_xconnect(rx_sw_if_index=lo1, tx_sw_if_index=lo2, enable=True)
        d = a.sw_interface_dump(name_filter="loop1")[0]
        assert (d.l2_mode.name, d.xconnect_sw_if_index) == ("xconnect", lo2)
        expect(Retval.INVALID_VALUE, a.sw_interface_set_l2_xconnect, rx_sw_if_index=lo1,
               tx_sw_if_index=lo1, enable=True)
        a.sw_interface_set_l2_xconnect(rx_sw_if_index=lo1, enable=False)
        assert a.sw_interface_dump(name_filter="loop1")[0].l2_mode.name == "l3"
        a.l2_patch_add_del(rx_sw_if_index=lo2, tx_sw_if_index=lo1, is_add=True)
        assert "test l2patch rx loop2 tx loop1" in self.vpp.cli("show running-config")
        a.l2_patch_add_del(rx_sw_if_index=lo2, is_add=False)
        expect(Retval.NO_SUCH_ENTRY, a.l2_patch_add_del, rx_sw_if_index=lo2, is_add=False)


class TestPgMessages(ApiTest):

    def test_pg_interface_stream_capture(self):
        a = self.api
        pg = a.pg_create_interface(interface_id=0).sw_if_index
        assert a.pg_create_interface(interface_id=0).sw_if_index == pg
        pg1 = a.pg_create_interface(interface_id=1).sw_if_index
        for i in (pg, pg1):
            a.sw_interface_set_flags(sw_if_index=i, admin_up=True)
        a.sw_interface_set_l2_xconnect(rx_sw_if_index=pg, tx_sw_if_index=pg1, enable=True)
        pcap = self.new_file("in", "pcap")
        frame = bytes.fromhex("02fe00000001" "020000000002" "88b5") + b"x" * 50
        write_pcap(pcap, [frame] * 5)
        out = self.new_file("out", "pcap")
        a.pg_capture(sw_if_index=pg1, is_enabled=True, pcap_file_name=str(out))
        a.pg_stream_add(name="s1", pcap_file=str(pcap), sw_if_index=pg)
        assert [(s.name, s.interface_name, s.enabled, s.limit) for s in a.pg_stream_dump()] == [
            ("s1", "pg0", False, 5)]
        expect(Retval.ALREADY_EXISTS, a.pg_stream_add, name="s1", pcap_file=str(pcap),
               sw_if_index=pg)
        expect(Retval.INVALID_VALUE, a.pg_stream_add, name="s2", pcap_file="/nonexistent.pcap",
               sw_if_index=pg, match="cannot open")
        expect(Retval.NO_SUCH_INTERFACE, a.pg_stream_add, name="s3", pcap_file=str(pcap),
               sw_if_index=999)
        expect(Retval.INVALID_VALUE, a.pg_stream_add, name="s4", pcap_file=str(pcap),
               sw_if_index=pg, node="no-such-node")
        a.pg_enable_disable(is_enabled=True, stream_name="s1")
        deadline = time.monotonic() + 10
        while a.pg_stream_dump()[0].sent < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a.pg_stream_dump()[0].sent == 5
        a.pg_capture(sw_if_index=pg1, is_enabled=False)
        from sluice_test import count_pcap_records
        assert count_pcap_records(out) == 5
        expect(Retval.NO_SUCH_ENTRY, a.pg_enable_disable, is_enabled=True, stream_name="zz")
        expect(Retval.INVALID_VALUE, a.pg_capture, sw_if_index=pg1, is_enabled=True)
        a.pg_enable_disable(is_enabled=False)
        a.pg_stream_delete(name="s1")
        expect(Retval.NO_SUCH_ENTRY, a.pg_stream_delete, name="s1")
        assert a.pg_stream_dump() == []
        # The packets in the message instead of a file.
        out2 = self.new_file("out2", "pcap")
        a.pg_capture(sw_if_index=pg1, is_enabled=True, pcap_file_name=str(out2))
        a.pg_stream_add_packets(name="p1", sw_if_index=pg, limit=4,
                                packets=[{"data": list(frame)}, {"data": list(frame[:40])}])
        assert [(s.name, s.limit) for s in a.pg_stream_dump()] == [("p1", 4)]
        a.pg_enable_disable(is_enabled=True, stream_name="p1")
        deadline = time.monotonic() + 10
        while a.pg_stream_dump()[0].sent < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        a.pg_capture(sw_if_index=pg1, is_enabled=False)
        assert count_pcap_records(out2) == 4
        expect(Retval.INVALID_VALUE, a.pg_stream_add_packets, name="p2", sw_if_index=pg,
               match="at least one packet")
        expect(Retval.INVALID_VALUE, a.pg_stream_add_packets, name="p2", sw_if_index=pg,
               packets=[{"data": list(frame)}, {"data": [1, 2, 3]}], match="packets[1]: 3 bytes")
        expect(Retval.ALREADY_EXISTS, a.pg_stream_add_packets, name="p1", sw_if_index=pg,
               packets=[{"data": list(frame)}])
        a.pg_enable_disable(is_enabled=False)
        a.pg_stream_delete(name="p1")


class TestTracePcapSave(ApiTest):
    """trace_add / trace_dump / trace_clear, pcap_trace_on / off, save_running_config and
    ip_route_add_del_multi: the same actions as `trace add`, `show trace`, `pcap trace`,
    `save running-config` and `ip route add`."""

    def pg_pair(self):
        a = self.api
        pg, pg1 = (a.pg_create_interface(interface_id=i).sw_if_index for i in (0, 1))
        for i in (pg, pg1):
            a.sw_interface_set_flags(sw_if_index=i, admin_up=True)
        a.sw_interface_set_l2_xconnect(rx_sw_if_index=pg, tx_sw_if_index=pg1, enable=True)
        return pg, pg1

    def run_stream(self, pg, n=3):
        a = self.api
        pcap = self.new_file("in", "pcap")
        frame = bytes.fromhex("02fe00000001" "020000000002" "0800") + bytes(
            [0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 1, 2]) + bytes(8)
        write_pcap(pcap, [frame] * n)
        a.pg_stream_add(name="t", pcap_file=str(pcap), sw_if_index=pg)
        a.pg_enable_disable(is_enabled=True, stream_name="t")
        deadline = time.monotonic() + 10
        while a.pg_stream_dump()[0].sent < n and time.monotonic() < deadline:
            time.sleep(0.02)
        a.pg_stream_delete(name="t")

    def test_trace_add_dump_clear(self):
        a = self.api
        pg, _ = self.pg_pair()
        a.trace_add(node_name="pg-input", count=2)
        self.run_stream(pg)
        # `sent` counts what pg-input emitted: a traced packet may still be on its way to
        # pg-tx (its trace still growing), so wait until both traces reached the end.
        deadline = time.monotonic() + 5
        while True:
            pkts = a.trace_dump(max=0)
            done = len(pkts) == 2 and all(": pg-tx" in p.trace_data for p in pkts)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert [(p.thread_index, p.packet_number) for p in pkts] == [(0, 1), (0, 2)], pkts
        assert ": pg-input" in pkts[0].trace_data and ": pg-tx" in pkts[0].trace_data
        # The same text as `show trace`.
        assert pkts[1].trace_data in self.vpp.cli("show trace")
        assert len(a.trace_dump(max=1)) == 1
        a.trace_clear()
        assert a.trace_dump(max=0) == []
        expect(Retval.NO_SUCH_ENTRY, a.trace_add, node_name="no-such-node", count=1,
               match="unknown node `no-such-node'")
        expect(Retval.NOT_SUPPORTED, a.trace_add, node_name="ip4-lookup", count=1,
               match="not an input node")

    def test_pcap_trace_on_off(self):
        a = self.api
        pg, pg1 = self.pg_pair()
        a.pcap_trace_on(capture_rx=True, capture_tx=False, capture_drop=False,
                        max_packets=10, max_bytes_per_packet=0, sw_if_index=0xFFFFFFFF,
                        filename="api-rx.pcap")
        assert "api-rx.pcap" in self.vpp.cli("pcap trace status")
        self.run_stream(pg)
        msg = a.pcap_trace_off().message
        assert msg == f"Write 3 packets to {self.vpp.dir / 'api-rx.pcap'}, and stop capture...", msg
        from sluice_test import count_pcap_records
        assert count_pcap_records(self.vpp.dir / "api-rx.pcap") == 3
        assert a.pcap_trace_off().message == "capture already complete"
        expect(Retval.INVALID_VALUE, a.pcap_trace_on, sw_if_index=0xFFFFFFFF,
               match="choose at least one of rx, tx, drop")
        expect(Retval.NO_SUCH_INTERFACE, a.pcap_trace_on, capture_tx=True, sw_if_index=999)
        expect(Retval.INVALID_VALUE, a.pcap_trace_on, capture_tx=True,
               sw_if_index=0xFFFFFFFF, filename="../escape.pcap")

    def test_save_running_config(self):
        a = self.api
        self.loop()
        path = a.save_running_config(filename="saved.cli").path
        assert path == str(self.vpp.dir / "saved.cli")
        text = Path(path).read_text()
        assert text == self.vpp.cli("show running-config")
        assert "create loopback interface" in text
        expect(Retval.INVALID_VALUE, a.save_running_config, filename="/etc/x.cli")

    def test_route_add_del_multi(self):
        a = self.api
        sw = self.loop()
        a.sw_interface_set_flags(sw_if_index=sw, admin_up=True)
        a.sw_interface_add_del_address(sw_if_index=sw, is_add=True, prefix="10.0.0.1/24")
        nh = [{"next_hop": "10.0.0.2", "sw_if_index": 0, "weight": 1}]
        pfx = [f"20.0.{i // 256}.{i % 256}/32" for i in range(1000)] + ["30.0.0.0/8"]
        assert a.ip_route_add_del_multi(is_add=True, table_id=0, paths=nh,
                                        prefixes=pfx).count == 1001
        routes = {str(r.prefix): r for r in a.ip_route_dump(table_id=0)}
        assert all(p in routes for p in pfx)
        assert [str(x.next_hop) for x in routes["30.0.0.0/8"].paths] == ["10.0.0.2"]
        assert a.ip_route_add_del_multi(is_add=True, prefixes=[]).count == 0
        # A bad prefix in the middle (here of the other family) is named, and the batch is
        # refused before anything changes: neither the prefixes before nor after it are added.
        expect(Retval.INVALID_VALUE, a.ip_route_add_del_multi, is_add=True, paths=nh,
               prefixes=["40.0.0.0/8", "2001:db8::/32", "41.0.0.0/8"],
               match="prefixes[1] 2001:db8::/32")
        left = {str(r.prefix) for r in a.ip_route_dump(table_id=0)}
        assert "40.0.0.0/8" not in left and "41.0.0.0/8" not in left
        # Deleting stops at the first prefix without a route (those before it are gone).
        expect(Retval.NO_SUCH_ENTRY, a.ip_route_add_del_multi, is_add=False, paths=nh,
               prefixes=["30.0.0.0/8", "50.0.0.0/8", "20.0.0.0/32"],
               match="prefixes[1] 50.0.0.0/8")
        left = {str(r.prefix) for r in a.ip_route_dump(table_id=0)}
        assert "30.0.0.0/8" not in left and "20.0.0.0/32" in left
        a.ip_route_add_del_multi(is_add=False, paths=nh, prefixes=pfx[:1000])
        assert not any(p.startswith("20.0.") for p in
                       (str(r.prefix) for r in a.ip_route_dump(table_id=0)))
        a.ip_route_add_del_multi(is_add=True, is_drop=True,
                                 prefixes=["2001:db8::/32", "2001:db9::/32"])
        r6 = {str(r.prefix): r for r in a.ip_route_dump(table_id=0, is_ipv6=True)}
        assert r6["2001:db8::/32"].is_drop and r6["2001:db9::/32"].is_drop
        expect(Retval.NO_SUCH_TABLE, a.ip_route_add_del_multi, is_add=True, table_id=77,
               paths=nh, prefixes=["60.0.0.0/8"])


class TestBadInput(ApiTest):
    """Each bad input gets an error reply or a clean close; the daemon keeps serving."""

    def raw(self) -> Client:
        return Client(self.vpp.api_path, schemas=self.api.schemas).connect()

    def err(self, c: Client):
        mid, ctx, body = c._recv_frame()
        name, rec = c._decode(mid, body)
        assert name == "api_error", name
        return ctx, rec

    def test_unknown_message_and_not_a_request(self):
        c = self.raw()
        ctx = c.send_raw(4000, b"")
        assert self.err(c) == (ctx, self.err_rec(Retval.UNKNOWN_MESSAGE, 4000, c))
        ctx = c.send_raw(c.msgs["sw_interface_details"].id, b"")
        got = self.err(c)
        assert got[0] == ctx and got[1].retval == Retval.NOT_A_REQUEST
        assert c.sw_interface_dump()[0].interface_name == "local0"
        c.close()

    def err_rec(self, code, mid, c):
        return c.msgs["api_error"].codec.record(
            "api_error", c.msgs["api_error"].m.fields)(mid, int(code),
                                                       f"unknown message id {mid}")

    def test_wrong_field_types(self):
        c = self.raw()
        # Client side: refused before anything is sent.
        for kw in ({"sw_if_index": "x"}, {"sw_if_index": 1, "admin_up": 3},
                   {"sw_if_index": -1}, {"nope": 1}):
            with pytest.raises(TypeError):
                c.sw_interface_set_flags(**kw)
        with pytest.raises(TypeError):
            c.ip_route_add_del(prefix="not-a-prefix")
        # Daemon side: bodies a correct client could not produce.
        sid = c.msgs["sw_interface_set_flags"].id
        rid = c.msgs["ip_route_add_del"].id
        mode = c.msgs["sw_interface_set_rx_mode"].id
        good_route = c.encode("ip_route_add_del", {"prefix": "10.0.0.0/8", "is_drop": True})
        cases = [
            (sid, struct.pack("<IB", 0, 2), "field `admin_up': bool must be 0 or 1, got 2"),
            (sid, struct.pack("<I", 0), "field `admin_up': truncated"),
            (sid, struct.pack("<IBB", 0, 1, 0), "1 bytes after the last field"),
            (rid, b"\x00" * 5 + b"\x07" + b"\x00" * 16 + b"\x08",
             "field `prefix': address family must be 0 (ip4) or 1 (ip6), got 7"),
            (rid, good_route[:5] + b"\x00" + b"\x00" * 16 + b"\x21" + good_route[23:],
             "field `prefix': prefix length 33 too long"),
            (rid, good_route[:-4] + struct.pack("<I", 0xFFFFFFFF), "field `paths': truncated"),
            (mode, struct.pack("<IBIB", 1, 0, 0, 9), "9 is not a value of enum rx_mode"),
        ]
        for mid, body, text in cases:
            ctx = c.send_raw(mid, body)
            got_ctx, rec = self.err(c)
            assert got_ctx == ctx and rec.retval == Retval.MALFORMED, rec
            assert text in rec.message, (rec.message, text)
        # A string that is not UTF-8, and one over its limit.
        fid = c.msgs["sw_interface_dump"].id
        for body, text in ((struct.pack("<I", 2) + b"\xff\xfe", "not UTF-8"),
                           (struct.pack("<I", 65) + b"a" * 65, "exceeds its limit of 64")):
            c.send_raw(fid, body)
            assert text in self.err(c)[1].message
        assert c.sw_interface_dump()[0].interface_name == "local0"
        c.close()

    def test_oversize_and_short_frames_close_the_session(self):
        base = self.fds()
        c = self.raw()
        c.sock.sendall(struct.pack("<IHI", 300 * 1024, 5, 1))
        ctx, rec = self.err(c)
        assert rec.retval == Retval.TOO_BIG and "limit of 262144 bytes" in rec.message
        with pytest.raises(ConnectionError):
            c._recv_frame()
        c.close()
        c = self.raw()
        c.sock.sendall(struct.pack("<I", 3) + b"abc")
        assert self.err(c)[1].retval == Retval.MALFORMED
        with pytest.raises(ConnectionError):
            c._recv_frame()
        c.close()
        assert self.api.sw_interface_dump()[0].sw_if_index == 0
        self.wait_for(lambda: self.fds() <= base, "sessions closed")

    def test_truncated_frames_and_garbage_then_disconnect(self):
        base = self.fds()
        rnd = random.Random(13)
        for k in range(60):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(self.vpp.api_path))
            if k % 3 == 0:
                s.sendall(struct.pack("<IHI", 1000, 0, 1) + b"\x01" * 100)  # truncated
            elif k % 3 == 1:
                s.sendall(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 300))))
            else:
                # A valid hello, then random frames of random ids.
                hello = self.api.encode("api_hello", {"client_name": "g", "messages": [
                    {"name": n, "crc": m.m.crc} for n, m in self.api.msgs.items()]})
                s.sendall(struct.pack("<IHI", 6 + len(hello), 0, 1) + hello)
                for _ in range(20):
                    body = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 60)))
                    s.sendall(struct.pack("<IHI", 6 + len(body), rnd.randint(1, 120), 2)
                              + body)
            s.close()
        assert self.api.sw_interface_dump()[0].sw_if_index == 0
        assert self.vpp.alive()
        self.wait_for(lambda: self.fds() <= base, "every session closed")

    def test_client_leaving_mid_dump(self):
        a = self.api
        lo = self.loop()
        a.sw_interface_add_del_address(sw_if_index=lo, is_add=True, prefix="10.0.0.1/24")
        a.pipeline("ip_route_add_del", ({"is_add": True, "prefix": f"20.{i >> 8}.{i & 255}.0/24",
                                         "paths": [{"next_hop": "10.0.0.2"}]}
                                        for i in range(20000)))
        base = self.fds()
        for _ in range(5):
            c = self.raw()
            c.send_raw(c.msgs["ip_route_dump"].id, c.encode("ip_route_dump", {}))
            c.sock.recv(1000)  # the dump started
            c.close()
        n = len(a.ip_route_dump(table_id=0))
        assert n == 20000 + 2
        self.wait_for(lambda: self.fds() <= base, "sessions closed")


def test_every_request_and_dump_is_exercised():
    """Every request and dump of the schema files is called by a Python test (this file,
    test_api_plugins.py, or the feature's own test file)."""
    text = "".join(f.read_text() for f in sorted(HERE.parent.glob("test_*.py")))
    missing = [m.name for s in load_schemas() for m in s.messages
               if m.kind in ("request", "dump") and s.module != "control"
               and m.name not in text]
    assert missing == []


def test_python_and_rust_crcs_agree_on_the_control_module():
    # The handshake itself proves it for every module against a daemon; this pins the
    # algorithm: CRC-32 of the canonical form.
    s = papi_schema.parse("t", 'option version = "1";\nautoreply define x { u32 a; };', "t")
    assert s.canonical(s.messages[0]) == "x{u32 a;}"
    import zlib
    assert s.messages[0].crc == zlib.crc32(b"x{u32 a;}")
