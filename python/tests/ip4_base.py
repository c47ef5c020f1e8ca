"""Shared set-up for the IPv4 tests: a router with pg0..pg3, each up with 10.0.N.1/24 and a
static neighbour 10.0.N.2 (MAC 02:00:00:00:0N:02)."""

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from sluice_test import SluiceTestCase


class Ip4RouterTest(SluiceTestCase):
    n_pg = 4

    def setup_test(self):
        self.create_pg_interfaces(range(self.n_pg), up=True, ip4=True, resolve=True)
        self.pg0, self.pg1 = self.pg_interfaces[0], self.pg_interfaces[1]
        # Configuration done: counters move only because of what the test sends.
        self.snapshot_counters()

    @staticmethod
    def udp_from(src_if, dst_ip, ttl=64, sport=1234, dport=5678, payload=b"sluice-test",
                 src_ip=None, src_mac=None):
        """A UDP packet as a host on `src_if`'s subnet would send it to the router (built
        and dissected again, so every field, checksum and length included, is concrete)."""
        return Ether(raw(Ether(dst=src_if.local_mac, src=src_mac or src_if.remote_mac)
                / IP(src=src_ip or src_if.remote_ip4, dst=dst_ip, ttl=ttl)
                / UDP(sport=sport, dport=dport)
                / Raw(payload)))
