"""VRF tables (`ip[6] table add`, `set interface ip[6] table`) and recursive routes: the
same subnets in two tables forward independently; a route via a next hop that is not
attached follows whatever route covers that next hop, as it changes."""

import re

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

import pytest

from sluice_test import (CliError, InterfaceAddress, InterfaceTable, IpNeighbor, IpRoute,
                         IpTable, SluiceTestCase, assert_ip4_checksum)
from sluice_test.parsers import parse_fib

NO_ROUTE = ("ip4-lookup", "no route to destination")
DROP_ROUTE = ("ip4-lookup", "ip4 drop route")
NO_ROUTE6 = ("ip6-lookup", "ip6 no route to destination")
ICMP6_SENT = ("ip6-icmp-error", "ICMPv6 errors sent")


def udp4(intf, src, dst, sport=1234, ttl=64):
    return Ether(raw(Ether(dst=intf.local_mac, src=intf.remote_mac)
                     / IP(src=src, dst=dst, ttl=ttl) / UDP(sport=sport, dport=53)
                     / Raw(b"vrf-test")))


def udp6(intf, src, dst, sport=1234):
    return Ether(raw(Ether(dst=intf.local_mac, src=intf.remote_mac)
                     / IPv6(src=src, dst=dst, hlim=64) / UDP(sport=sport, dport=53)
                     / Raw(b"vrf-test6")))


class TestVrf(SluiceTestCase):
    """pg0, pg1 in table 10 and pg2, pg3 in table 20, both with the same addresses:
    192.168.1.1/24 on the ingress side, 192.168.2.1/24 on the egress side, the egress
    neighbour 192.168.2.2 with a different MAC in each table. Configured through the
    control API (read back with `show` commands)."""

    config_via = "api"

    def setup_test(self):
        self.create_pg_interfaces(range(4))
        self.pg0, self.pg1, self.pg2, self.pg3 = self.pg_interfaces
        for t in (10, 20):
            IpTable(self, t).add_config()
            IpTable(self, t, v6=True).add_config()
        self.tables = {10: (self.pg0, self.pg1), 20: (self.pg2, self.pg3)}
        for t, (ingress, egress) in self.tables.items():
            for intf in (ingress, egress):
                InterfaceTable(self, intf, t).add_config()
                InterfaceTable(self, intf, t, v6=True).add_config()
            InterfaceAddress(self, ingress, "192.168.1.1/24").add_config()
            InterfaceAddress(self, egress, "192.168.2.1/24").add_config()
            IpNeighbor(self, egress, "192.168.2.2", egress.remote_mac).add_config()
            InterfaceAddress(self, ingress, "fd00:1::1/64").add_config()
            InterfaceAddress(self, egress, "fd00:2::1/64").add_config()
            IpNeighbor(self, egress, "fd00:2::2", egress.remote_mac).add_config()
        self.snapshot_counters()

    def test_same_prefixes_in_two_tables_forward_independently(self):
        for t, (_, egress) in self.tables.items():
            IpRoute(self, "10.9.0.0/16", via="192.168.2.2", table=t).add_config()
        for t, (ingress, egress) in self.tables.items():
            pkts = [udp4(ingress, "192.168.1.7", f"10.9.{t}.{i}", sport=1000 + i)
                    for i in range(1, 60)]
            pkts += [udp4(ingress, "192.168.1.7", "192.168.2.2", sport=7)]
            for other in self.pg_interfaces:
                if other is not egress:
                    other.enable_capture()
            rx = self.send_and_expect(ingress, pkts, egress)
            for sent, got in zip(pkts, rx):
                assert got.dst == egress.remote_mac and got.src == egress.local_mac
                assert got[IP].dst == sent[IP].dst and got[IP].ttl == 63
                assert_ip4_checksum(got)
            for other in self.pg_interfaces:
                if other is not egress:
                    other.assert_nothing_captured(f"table {t} leaked to {other.name}")
        self.assert_counters({})

    def test_route_in_one_table_only(self):
        IpRoute(self, "10.77.0.0/16", via="192.168.2.2", table=10).add_config()
        rx = self.send_and_expect(self.pg0, [udp4(self.pg0, "192.168.1.7", "10.77.0.1")],
                                  self.pg1)
        assert rx[0][IP].dst == "10.77.0.1"
        self.send_and_assert_no_replies(
            self.pg2, [udp4(self.pg2, "192.168.1.7", "10.77.0.1") for _ in range(5)],
            remark="table 20 has no route to 10.77/16")
        self.assert_counters({NO_ROUTE: 5})
        # `show ip fib table` shows each table's own routes.
        assert "10.77.0.0/16" in parse_fib(self.vpp.cli("show ip fib table 10"))
        assert "10.77.0.0/16" not in parse_fib(self.vpp.cli("show ip fib table 20"))
        out = self.vpp.cli("show ip fib")
        assert "ipv4-VRF:10, fib_index:" in out and "ipv4-VRF:20, fib_index:" in out

    def test_ipv6_tables(self):
        for t in self.tables:
            IpRoute(self, "fd99::/64", via="fd00:2::2", table=t).add_config()
        IpRoute(self, "fd98::/64", via="fd00:2::2", table=20).add_config()
        for t, (ingress, egress) in self.tables.items():
            pkts = [udp6(ingress, "fd00:1::7", f"fd99::{i:x}", sport=2000 + i)
                    for i in range(1, 40)]
            rx = self.send_and_expect(ingress, pkts, egress)
            for got in rx:
                assert got.dst == egress.remote_mac and got[IPv6].hlim == 63
        # fd98::/64 only in table 20: from table 10, no route (an ICMPv6 error goes back).
        IpNeighbor(self, self.pg0, "fd00:1::7", self.pg0.remote_mac).add_config()
        rx = self.send_and_expect(self.pg0, [udp6(self.pg0, "fd00:1::7", "fd98::1")],
                                  self.pg0)
        assert rx[0][IPv6].dst == "fd00:1::7"
        self.assert_counters({NO_ROUTE6: 1, ICMP6_SENT: 1})

    def test_cli_ping_in_a_table(self):
        out = self.vpp.cli("ping 192.168.2.1 table 10 repeat 2 interval 0.05")
        assert "2 received" in out, out
        with pytest.raises(CliError, match="no table 99"):
            self.vpp.cli("ping 192.168.2.1 table 99 repeat 1")

    def test_bad_table_commands_name_the_problem(self):
        with pytest.raises(CliError, match="no table 99"):
            self.vpp.cli("ip route add 10.0.0.0/8 table 99 via 192.168.2.2")
        with pytest.raises(CliError, match="has IPv4 addresses"):
            self.vpp.cli("set interface ip table pg0 20")
        with pytest.raises(CliError, match="in use by pg0"):
            self.vpp.cli("ip table del 10")
        with pytest.raises(CliError, match="table 0 cannot be deleted"):
            self.vpp.cli("ip table del 0")
        with pytest.raises(CliError, match="no table 42"):
            self.vpp.cli("set interface ip6 table pg0 42")
        with pytest.raises(CliError, match="no table 42"):
            self.vpp.cli("show ip fib table 42")


class TestRecursiveRoutes(SluiceTestCase):
    """Table 0, pg0..pg2 with 10.0.N.1/24 and neighbours 10.0.N.2. 10.50.0.0/16 is routed
    via 172.16.0.1, which is not attached: it resolves through the route covering it."""

    config_via = "api"

    def setup_test(self):
        self.create_pg_interfaces(range(3), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1, self.pg2 = self.pg_interfaces
        self.snapshot_counters()

    def send(self, n=40, dst=lambda i: f"10.50.{i // 200}.{i % 200 + 1}"):
        return [udp4(self.pg0, self.pg0.remote_ip4, dst(i), sport=3000 + i) for i in range(n)]

    def test_follows_its_cover_as_it_changes(self):
        cover = IpRoute(self, "172.16.0.0/24", via=self.pg1.remote_ip4).add_config()
        IpRoute(self, "10.50.0.0/16", via="172.16.0.1").add_config()
        fib = parse_fib(self.vpp.cli("show ip fib 10.50.0.0/16"))["10.50.0.0/16"]
        assert any("via 172.16.0.1 recursive" in p for p in fib.paths), fib.paths
        rx = self.send_and_expect(self.pg0, self.send(), self.pg1)
        assert all(p.dst == self.pg1.remote_mac for p in rx)
        # The cover moves to pg2: so does the recursive route.
        IpRoute(self, "172.16.0.0/24", via=self.pg2.remote_ip4).add_config()
        cover.remove_config()
        self.send_and_expect(self.pg0, self.send(), self.pg2)
        # A more specific cover (a host route) wins.
        host = IpRoute(self, "172.16.0.1/32", via=self.pg1.remote_ip4).add_config()
        self.send_and_expect(self.pg0, self.send(), self.pg1)
        host.remove_config()
        self.send_and_expect(self.pg0, self.send(), self.pg2)
        self.assert_counters({})

    def test_unresolved_next_hop_drops_until_a_cover_appears(self):
        IpRoute(self, "10.50.0.0/16", via="172.16.0.1").add_config()
        self.send_and_assert_no_replies(self.pg0, self.send(10), remark="no cover: dropped")
        self.assert_counters({DROP_ROUTE: 10})
        IpRoute(self, "172.16.0.0/16", via=self.pg2.remote_ip4).add_config()
        self.send_and_expect(self.pg0, self.send(10), self.pg2)

    def test_ecmp_cover_is_shared_and_spreads_flows(self):
        IpRoute(self, "172.16.0.0/24", via=self.pg1.remote_ip4).add_config()
        IpRoute(self, "172.16.0.0/24", via=self.pg2.remote_ip4).add_config()
        IpRoute(self, "10.50.0.0/16", via="172.16.0.1").add_config()
        # The recursive route forwards through its cover's load-balance object (same index).
        lb = [re.search(r"dpo-load-balance: \[proto:ip4 index:(\d+) buckets:2 ",
                        self.vpp.cli(f"show ip fib {p}")) for p in ("10.50.0.0/16",
                                                                   "172.16.0.0/24")]
        assert all(lb) and lb[0].group(1) == lb[1].group(1), lb
        pkts = self.send(200)
        for intf in (self.pg1, self.pg2):
            intf.enable_capture()
        self.pg0.add_stream(pkts)
        self.pg_start()
        n1, n2 = self.pg1.captured_count(), self.pg2.captured_count()
        assert n1 + n2 == 200 and n1 > 40 and n2 > 40, (n1, n2)

    def test_recursion_through_itself_is_a_drop_not_a_loop(self):
        # 10.0.0.0/8's next hop lies inside 10.0.0.0/8 but the attached /24s are more
        # specific; 172.16/12 via 172.16.0.1 can only resolve through itself: unresolved.
        IpRoute(self, "172.16.0.0/12", via="172.16.0.1").add_config()
        IpRoute(self, "10.50.0.0/16", via="172.16.0.1").add_config()
        self.send_and_assert_no_replies(self.pg0, self.send(5), remark="loop: dropped")
        self.assert_counters({DROP_ROUTE: 5})
