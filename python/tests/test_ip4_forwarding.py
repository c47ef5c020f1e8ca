"""IPv4 forwarding through routes: rewrite, TTL, checksums, many flows, route changes."""

import time

from scapy.compat import raw
from scapy.layers.inet import IP, UDP

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute, assert_ip4_checksum, assert_udp_checksum

NO_ROUTE = ("ip4-lookup", "no route to destination")
DROP_ROUTE = ("ip4-lookup", "ip4 drop route")


class TestIp4Forwarding(Ip4RouterTest):

    def test_forward_over_route_decrements_ttl_and_fixes_checksum(self):
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        pkts = [self.udp_from(self.pg0, f"10.2.{i // 256}.{i % 256}", ttl=64 - (i % 60),
                              sport=1000 + i, payload=bytes([i % 256]) * (10 + i % 50))
                for i in range(200)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        for sent, got in zip(pkts, rx):
            assert got.dst == self.pg1.remote_mac, "rewritten to the next hop's MAC"
            assert got.src == self.pg1.local_mac, "from the egress interface's MAC"
            assert got.type == 0x0800
            ip, sip = got[IP], sent[IP]
            assert ip.ttl == sip.ttl - 1
            assert (ip.src, ip.dst, ip.id, ip.len, ip.flags, ip.tos) == \
                (sip.src, sip.dst, sip.id, sip.len, sip.flags, sip.tos)
            # The router updated the checksum incrementally; scapy recomputes it in full.
            assert_ip4_checksum(got)
            assert ip.chksum != sip.chksum, "TTL changed, so must the checksum"
            assert raw(got[UDP]) == raw(sent[UDP]), "L4 header and payload untouched"
            assert_udp_checksum(got)
        # Plain forwarding counts nothing in `show errors`.
        self.assert_counters({})
        ifc = self.get_interface_counters()
        assert ifc["pg0"]["rx packets"] == 200
        assert ifc["pg1"]["tx packets"] == 200
        assert "tx packets" not in ifc["pg2"] and "tx packets" not in ifc["pg3"]

    def test_many_flows_over_several_routes_and_interfaces(self):
        # Three routes, one per egress interface, plus a more specific one that wins over
        # the /16 it lies in.
        routes = {
            "10.10.0.0/16": self.pg_interfaces[1],
            "10.20.0.0/16": self.pg_interfaces[2],
            "10.30.0.0/16": self.pg_interfaces[3],
            "10.20.5.0/24": self.pg_interfaces[1],
        }
        for prefix, intf in routes.items():
            IpRoute(self, prefix, via=intf.remote_ip4).add_config()
        expect = {i.name: [] for i in self.pg_interfaces[1:]}
        pkts = []
        for i in range(600):
            second = (10, 20, 30)[i % 3]
            third = 5 if (second == 20 and i % 2) else (i // 3) % 256
            dst = f"10.{second}.{third}.{i % 250 + 1}"
            egress = routes["10.20.5.0/24"] if dst.startswith("10.20.5.") else \
                routes[f"10.{second}.0.0/16"]
            p = self.udp_from(self.pg0, dst, sport=2000 + i, dport=53 + i % 7,
                              src_ip=f"10.0.0.{2 + i % 200}")
            pkts.append(p)
            expect[egress.name].append(p)
        assert all(len(v) > 50 for v in expect.values())
        for intf in self.pg_interfaces[1:]:
            intf.enable_capture()
        self.pg0.add_stream(pkts)
        self.pg_start()
        for intf in self.pg_interfaces[1:]:
            want = expect[intf.name]
            rx = intf.get_capture(len(want), remark=f"flows routed to {intf.name}")
            # One thread, one vector path: order is kept per egress interface.
            for sent, got in zip(want, rx):
                assert got.dst == intf.remote_mac and got.src == intf.local_mac
                assert got[IP].dst == sent[IP].dst and got[IP].src == sent[IP].src
                assert got[UDP].sport == sent[UDP].sport
                assert got[IP].ttl == sent[IP].ttl - 1
                assert_ip4_checksum(got)
        self.assert_counters({})

    def test_ecmp_keeps_each_flow_on_one_path(self):
        a = IpRoute(self, "10.50.0.0/16", via=self.pg_interfaces[2].remote_ip4).add_config()
        IpRoute(self, "10.50.0.0/16", via=self.pg_interfaces[3].remote_ip4).add_config()
        flows = [self.udp_from(self.pg0, "10.50.1.1", sport=3000 + i) for i in range(200)]
        pg2, pg3 = self.pg_interfaces[2], self.pg_interfaces[3]
        pg2.enable_capture()
        pg3.enable_capture()
        self.pg0.add_stream(flows + flows)
        self.pg_start()
        r2, r3 = pg2.stop_capture(), pg3.stop_capture()
        assert len(r2) + len(r3) == 400, "every packet forwarded exactly once"
        ports2 = {p[UDP].sport for p in r2}
        ports3 = {p[UDP].sport for p in r3}
        assert not ports2 & ports3, "a flow took both paths"
        assert len(ports2) + len(ports3) == 200
        assert len(r2) >= 100 and len(r3) >= 100, f"unbalanced: {len(r2)} / {len(r3)}"
        assert all(p.dst == pg2.remote_mac for p in r2)
        assert all(p.dst == pg3.remote_mac for p in r3)
        # Removing one path moves every flow to the other one.
        a.remove_config()
        self.send_and_expect(self.pg0, flows[:50], pg3)
        self.assert_counters({})

    def test_deleted_route_drops_with_no_route(self):
        r = IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        pkt = self.udp_from(self.pg0, "10.2.3.4")
        self.send_and_expect(self.pg0, [pkt], self.pg1)
        r.remove_config()
        self.send_and_assert_no_replies(self.pg0, [pkt] * 3, "route deleted")
        self.assert_counters({NO_ROUTE: 3})
        r.add_config()
        self.send_and_expect(self.pg0, [pkt], self.pg1)
        self.assert_counters({})

    def test_default_route_does_not_forward_multicast_or_class_e(self):
        """VPP's special entries are real: 224.0.0.0/4, 240.0.0.0/4, 255.255.255.255/32 and
        0.0.0.0/32 drop in every table even under a default route; a more specific route
        still wins over them."""
        IpRoute(self, "0.0.0.0/0", via=self.pg1.remote_ip4).add_config()
        self.send_and_expect(self.pg0, [self.udp_from(self.pg0, "8.8.8.8")], self.pg1)
        # With each connected subnet's network and broadcast address (10.0.N.1/24).
        dsts = ["224.1.2.3", "240.0.0.1", "255.255.255.255", "239.255.0.1", "10.0.1.255",
                "10.0.1.0", "10.0.2.255"]
        self.send_and_assert_no_replies(
            self.pg0, [self.udp_from(self.pg0, d) for d in dsts], "special entries drop")
        self.assert_counters({DROP_ROUTE: 7})
        self.send_and_expect(self.pg0, [self.udp_from(self.pg0, "10.0.1.2")], self.pg1)
        r = IpRoute(self, "224.1.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.send_and_expect(self.pg0, [self.udp_from(self.pg0, "224.1.2.3")], self.pg1)
        r.remove_config()
        self.send_and_assert_no_replies(
            self.pg0, [self.udp_from(self.pg0, "224.1.2.3")], "drop again")
        self.assert_counters({DROP_ROUTE: 1})
        # Without the address, its subnet's broadcast /32 is gone with the connected route.
        self.vpp.cli(f"set interface ip address del pg2 {self.pg_interfaces[2].local_ip4}/24")
        self.send_and_expect(self.pg0, [self.udp_from(self.pg0, "10.0.2.255")], self.pg1)
        self.vpp.cli(f"set interface ip address pg2 {self.pg_interfaces[2].local_ip4}/24")
        self.send_and_assert_no_replies(
            self.pg0, [self.udp_from(self.pg0, "10.0.2.255")], "back with the address")
        self.assert_counters({DROP_ROUTE: 1})

    def test_route_deleted_while_stream_runs(self):
        """A long rate-limited stream runs while its route is deleted: the daemon keeps
        going, every packet is either forwarded or dropped as `no route', none is lost."""
        route = IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        pkts = [self.udp_from(self.pg0, f"10.2.{i}.{i + 1}", sport=4000 + i)
                for i in range(64)]
        total = 60_000
        before_if = self.get_interface_counters()
        stream = self.pg0.add_stream(pkts, limit=total, rate=40_000)
        self.pg_enable()
        deadline = time.monotonic() + 10
        while self.stream_sent(stream) < total // 4:
            assert time.monotonic() < deadline, "stream did not start"
            time.sleep(0.01)
        route.remove_config()
        at_delete = self.stream_sent(stream)
        assert at_delete < total, "stream finished before the route was deleted"
        self.wait_for_streams([stream])
        after_if = self.get_interface_counters()

        def moved(intf, counter):
            return after_if[intf].get(counter, 0) - before_if[intf].get(counter, 0)

        forwarded = moved("pg1", "tx packets")
        dropped = self.get_counters()[NO_ROUTE] - self._counter_baseline[NO_ROUTE]
        assert moved("pg0", "rx packets") == total
        assert forwarded + dropped == total, (forwarded, dropped)
        assert forwarded >= total // 4, "packets before the delete were forwarded"
        assert dropped >= total - at_delete - 64, "packets after the delete were dropped"
        self.assert_counters({NO_ROUTE: dropped})
        assert self.vpp.alive()
        # The FIB still works: a new route forwards again.
        IpRoute(self, "10.2.0.0/16", via=self.pg_interfaces[2].remote_ip4).add_config()
        rx = self.send_and_expect(self.pg0, pkts[:10], self.pg_interfaces[2])
        assert all(p.dst == self.pg_interfaces[2].remote_mac for p in rx)

    def test_chained_jumbo_frame_is_forwarded_whole(self):
        # 6000-byte packets span several 2 KiB buffers: the length check and the MTU check
        # look at the whole chain, the payload comes out intact.
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.vpp.cli("set interface mtu 9000 pg1")
        pkts = [self.udp_from(self.pg0, "10.2.0.9", sport=4000 + i,
                              payload=bytes((i + k) % 251 for k in range(6000 + i)))
                for i in range(5)]
        rx = self.send_and_expect(self.pg0, pkts, self.pg1)
        for sent, got in zip(pkts, rx):
            assert got[IP].len == sent[IP].len and got[IP].ttl == sent[IP].ttl - 1
            assert raw(got[UDP]) == raw(sent[UDP])
            assert_ip4_checksum(got)
        # Over the default 1500 MTU (pg2), a DF-less jumbo is dropped with the counted reason.
        IpRoute(self, "10.3.0.0/16", via=self.pg_interfaces[2].remote_ip4).add_config()
        big = self.udp_from(self.pg0, "10.3.0.9", payload=bytes(3000))
        self.send_and_assert_no_replies(self.pg0, [big], remark="over the MTU")
        self.assert_counters({("ip4-rewrite", "ip4 MTU exceeded and DF not set (no fragmentation)"): 1})
