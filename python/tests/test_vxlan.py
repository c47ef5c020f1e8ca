"""VXLAN (plugins/tunnels, docs/tunnels.md) checked against scapy's VXLAN layer: pg0 is the
underlay (10.0.0.1, peer VTEP 10.0.0.2), pg1 and vxlan_tunnel0 are bridged. Decap of
scapy-built VXLAN packets gives the inner frame byte for byte; encap gives what scapy builds
from the same fields (the UDP source port is the flow hash's: checked in 49152-65535 and
stable per flow); malformed packets are counted by name."""

import struct

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from ip4_base import Ip4RouterTest

H1, H2 = "02:00:00:aa:00:01", "02:00:00:bb:00:01"
DECAP = ("vxlan4-input", "packets decapsulated")
ENCAP = ("vxlan4-encap", "packets encapsulated")
NO_TUNNEL = ("vxlan4-input", "no tunnel for (src, dst, key)")
BAD_FLAGS = ("vxlan4-input", "VXLAN I flag clear")
TRUNCATED = ("vxlan4-input", "shorter than outer headers + Ethernet")
FLOODED = ("l2-input", "L2 frames flooded")
LEARN_EVENTS = ("l2-input", "L2 MAC learning events")
LEARNED = ("l2-learn-process", "MACs learned or refreshed")


class TestVxlan(Ip4RouterTest):
    n_pg = 2

    def setup_test(self):
        super().setup_test()
        out = self.vpp.cli("create vxlan tunnel src 10.0.0.1 dst %s vni 13"
                           % self.pg0.remote_ip4)
        assert out.strip() == "vxlan_tunnel0", out
        self.vpp.cli("set interface state vxlan_tunnel0 up")
        self.vpp.cli("create bridge-domain 1")
        self.vpp.cli("set interface l2 bridge pg1 1")
        self.vpp.cli("set interface l2 bridge vxlan_tunnel0 1")
        self.snapshot_counters()

    def teardown_test(self):
        self.vpp.cli("set interface l3 pg1")
        self.vpp.cli("create vxlan tunnel src 10.0.0.1 dst %s vni 13 del" % self.pg0.remote_ip4)
        self.vpp.cli("create bridge-domain 1 del")

    @staticmethod
    def inner(dst, src, sport, tag=b"overlay"):
        return Ether(raw(Ether(dst=dst, src=src) / IP(src="192.168.1.1", dst="192.168.1.2")
                         / UDP(sport=sport, dport=9) / Raw(tag)))

    def outer(self, inner, vni=13, flags=0x08):
        return Ether(raw(Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                         / IP(src=self.pg0.remote_ip4, dst="10.0.0.1")
                         / UDP(sport=51000, dport=4789) / VXLAN(vni=vni, flags=flags)
                         / inner))

    def test_decap_gives_the_inner_frame(self):
        frames = [self.inner(H1, H2, 1000 + i) for i in range(5)]
        rx = self.send_and_expect(self.pg0, [self.outer(f) for f in frames], self.pg1)
        assert [raw(p) for p in rx] == [raw(f) for f in frames]
        self.assert_counters({DECAP: 5, FLOODED: 5, LEARN_EVENTS: 1, LEARNED: 1}, timeout=2.0)

    def test_encap_matches_scapy(self):
        frames = [self.inner(H2, H1, 2000 + i % 3) for i in range(6)]
        rx = self.send_and_expect(self.pg1, frames, self.pg0)
        ports = []
        for p, f in zip(rx, frames):
            sport = p[UDP].sport
            assert 49152 <= sport <= 65535, sport
            ports.append(sport)
            want = (Ether(dst=self.pg0.remote_mac, src=self.pg0.local_mac)
                    / IP(src="10.0.0.1", dst=self.pg0.remote_ip4, ttl=64, id=0, flags=0)
                    / UDP(sport=sport, dport=4789, chksum=0) / VXLAN(vni=13, flags=0x08)
                    / f)
            assert raw(p) == raw(want)
        assert ports[0] == ports[3] and ports[1] == ports[4], "one flow, one source port"
        self.assert_counters({ENCAP: 6, FLOODED: 6, LEARN_EVENTS: 1, LEARNED: 1}, timeout=2.0)

    def test_malformed_and_unknown_vni_are_counted(self):
        f = self.inner(H1, H2, 3000)
        bad = [self.outer(f, vni=99), self.outer(f, flags=0),
               self.outer(Raw(raw(f)[:10]))]
        self.send_and_assert_no_replies(self.pg0, bad, "dropped by vxlan4-input")
        self.assert_counters({NO_TUNNEL: 1, BAD_FLAGS: 1, TRUNCATED: 1}, timeout=2.0)

    def test_api_add_dump_delete(self):
        api = self.vpp.api()
        r = api.vxlan_add_del_tunnel(is_add=True, instance=7, src_address="10.0.0.1",
                                     dst_address="10.0.0.9", encap_vrf_id=0,
                                     decap_next_node="", vni=77)
        dump = api.vxlan_tunnel_dump(sw_if_index=0xffffffff)
        mine = [d for d in dump if d.vni == 77]
        assert len(mine) == 1 and mine[0].sw_if_index == r.sw_if_index
        assert mine[0].instance == 7 and str(mine[0].dst_address) == "10.0.0.9"
        assert "vxlan_tunnel7" in self.vpp.cli("show interface")
        api.vxlan_add_del_tunnel(is_add=False, instance=0xffffffff, src_address="10.0.0.1",
                                 dst_address="10.0.0.9", encap_vrf_id=0,
                                 decap_next_node="", vni=77)
        assert not [d for d in api.vxlan_tunnel_dump(sw_if_index=0xffffffff) if d.vni == 77]

    def test_api_omitted_fields_take_the_schema_defaults(self):
        """`instance`, `mcast_sw_if_index` and a dump's `sw_if_index` are
        `[default=0xffffffff]` in vxlan.api: omitted, they mean "first free" / "none" /
        "every tunnel" — not instance 0 / interface 0 (local0)."""
        api = self.vpp.api()
        assert api.encode("vxlan_tunnel_dump", {}) == struct.pack("<I", 0xffffffff)
        made = [api.vxlan_add_del_tunnel(is_add=True, src_address="10.0.0.1",
                                         dst_address="10.0.0.9", vni=v).sw_if_index
                for v in (81, 82)]
        dump = {d.vni: d for d in api.vxlan_tunnel_dump()}
        assert [dump[v].sw_if_index for v in (81, 82)] == made
        assert dump[81].instance != dump[82].instance
        for v in (81, 82):
            api.vxlan_add_del_tunnel(is_add=False, src_address="10.0.0.1",
                                     dst_address="10.0.0.9", vni=v)
        assert not [d for d in api.vxlan_tunnel_dump() if d.vni in (81, 82)]

    def test_bad_input_names_the_token(self):
        self.assert_cli_error("create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 16777216",
                              "16777216")
        self.assert_cli_error("create vxlan tunnel src nope dst 10.0.0.2 vni 1", "`nope'")
