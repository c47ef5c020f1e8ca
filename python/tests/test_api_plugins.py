"""The plugins' API messages (memif, af_packet, af_xdp, tap, vxlan, gre, ipip, gtpu, sr): create, dump, delete, their
error codes, and their lines in `show running-config`. The Linux-facing drivers run the
daemon inside a network namespace the test creates (root only; skipped otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import pytest

from sluice_papi import ApiError, Retval
from sluice_test import SluiceInstance, SluiceTestCase


def expect(code: Retval, fn, match: str | None = None, **kw):
    with pytest.raises(ApiError) as ei:
        fn(**kw)
    assert ei.value.retval == code, str(ei.value)
    if match is not None:
        assert match in ei.value.message, ei.value.message
    return ei.value


class TestMemifMessages(SluiceTestCase):

    def test_sockets_interfaces_and_running_config(self):
        a = self.vpp.api()
        path = str(self.vpp.dir / "m.sock")
        a.memif_socket_filename_add(socket_id=1, socket_filename=path)
        assert (1, path) in [(s.socket_id, s.socket_filename)
                             for s in a.memif_socket_filename_dump()]
        m = a.memif_create(id=3, socket_id=1, ring_size=512).sw_if_index
        d = a.memif_dump()
        assert [(x.sw_if_index, x.if_name, x.id, x.is_slave, x.link_up) for x in d] == [
            (m, "memif1/3", 3, False, False)]
        text = self.vpp.cli("show running-config")
        assert f"create memif socket id 1 filename {path}\n" \
               "create interface memif id 3 socket-id 1 master ring-size 512" in text
        expect(Retval.ALREADY_EXISTS, a.memif_create, id=3, socket_id=1)
        expect(Retval.NO_SUCH_ENTRY, a.memif_create, id=1, socket_id=9,
               match="socket-id `9' does not exist")
        expect(Retval.INVALID_VALUE, a.memif_create, id=4, socket_id=1, ring_size=1000)
        expect(Retval.IN_USE, a.memif_create, id=5, socket_id=1, is_slave=True)
        expect(Retval.INVALID_VALUE, a.memif_create, id=6, socket_id=1, zero_copy=True,
               match="slave-only")
        expect(Retval.IN_USE, a.memif_socket_filename_del, socket_id=1, match="in use")
        expect(Retval.NO_SUCH_ENTRY, a.memif_socket_filename_del, socket_id=7)
        expect(Retval.INVALID_VALUE, a.memif_socket_filename_add, socket_id=2,
               socket_filename="")
        expect(Retval.NO_SUCH_INTERFACE, a.memif_delete, sw_if_index=0)
        a.memif_delete(sw_if_index=m)
        assert a.memif_dump() == []
        a.memif_socket_filename_del(socket_id=1)
        assert 1 not in [s.socket_id for s in a.memif_socket_filename_dump()]


class TestTunnelMessages(SluiceTestCase):

    def test_vxlan_gre_ipip_create_dump_delete(self):
        a = self.vpp.api()
        any_ = 0xffffffff
        v = a.vxlan_add_del_tunnel(is_add=True, instance=any_, src_address="10.0.0.1",
                                   dst_address="10.0.0.2", encap_vrf_id=0,
                                   decap_next_node="", vni=5).sw_if_index
        assert [(d.sw_if_index, d.vni) for d in a.vxlan_tunnel_dump(sw_if_index=any_)] == [
            (v, 5)]
        expect(Retval.ALREADY_EXISTS, a.vxlan_add_del_tunnel, is_add=True, instance=any_,
               src_address="10.0.0.1", dst_address="10.0.0.2", encap_vrf_id=0,
               decap_next_node="", vni=5)
        expect(Retval.NO_SUCH_TABLE, a.vxlan_add_del_tunnel, is_add=True, instance=any_,
               src_address="10.0.0.1", dst_address="10.0.0.2", encap_vrf_id=9,
               decap_next_node="", vni=6)
        expect(Retval.INVALID_VALUE, a.vxlan_add_del_tunnel, is_add=True, instance=any_,
               src_address="10.0.0.1", dst_address="2001:db8::2", encap_vrf_id=0,
               decap_next_node="", vni=6, match="different families")
        # A tunnel to a multicast group names its interface.
        lo = a.create_loopback().sw_if_index
        m = a.vxlan_add_del_tunnel(is_add=True, instance=any_, src_address="10.0.0.1",
                                   dst_address="239.1.1.1", mcast_sw_if_index=lo,
                                   encap_vrf_id=0, decap_next_node="", vni=5).sw_if_index
        assert [(d.mcast_sw_if_index, str(d.dst_address))
                for d in a.vxlan_tunnel_dump(sw_if_index=m)] == [(lo, "239.1.1.1")]
        assert [d.mcast_sw_if_index for d in a.vxlan_tunnel_dump(sw_if_index=v)] == [any_]
        expect(Retval.NO_SUCH_INTERFACE, a.vxlan_add_del_tunnel, is_add=True, instance=any_,
               src_address="10.0.0.1", dst_address="239.1.1.2", mcast_sw_if_index=77,
               encap_vrf_id=0, decap_next_node="", vni=5)
        m6 = a.vxlan_add_del_tunnel(is_add=True, instance=any_, src_address="2001:db8::1",
                                    dst_address="ff0e::1", mcast_sw_if_index=lo,
                                    encap_vrf_id=0, decap_next_node="", vni=5).sw_if_index
        assert [(d.mcast_sw_if_index, str(d.dst_address))
                for d in a.vxlan_tunnel_dump(sw_if_index=m6)] == [(lo, "ff0e::1")]
        expect(Retval.INVALID_VALUE, a.vxlan_add_del_tunnel, is_add=True, instance=any_,
               src_address="10.0.0.1", dst_address="ff0e::2", mcast_sw_if_index=lo,
               encap_vrf_id=0, decap_next_node="", vni=5)
        a.vxlan_add_del_tunnel(is_add=False, instance=any_, src_address="2001:db8::1",
                               dst_address="ff0e::1", mcast_sw_if_index=lo, encap_vrf_id=0,
                               decap_next_node="", vni=5)
        a.vxlan_add_del_tunnel(is_add=False, instance=any_, src_address="10.0.0.1",
                               dst_address="239.1.1.1", mcast_sw_if_index=lo, encap_vrf_id=0,
                               decap_next_node="", vni=5)
        g = a.gre_tunnel_add_del(is_add=True, teb=True, instance=4, src_address="2001:db8::1",
                                 dst_address="2001:db8::2", outer_table_id=0,
                                 key=42).sw_if_index
        d = a.gre_tunnel_dump(sw_if_index=g)
        assert [(x.teb, x.instance, x.key, str(x.dst_address)) for x in d] == [
            (True, 4, 42, "2001:db8::2")]
        i = a.ipip_add_tunnel(instance=any_, src_address="10.0.0.1", dst_address="10.0.0.3",
                              table_id=0).sw_if_index
        assert [x.sw_if_index for x in a.ipip_tunnel_dump(sw_if_index=any_)] == [i]
        text = self.vpp.cli("show running-config")
        assert "create gre tunnel src 2001:db8::1 dst 2001:db8::2 teb instance 4 key 42" in text
        assert "create ipip tunnel src 10.0.0.1 dst 10.0.0.3 instance 0" in text
        a.ipip_del_tunnel(sw_if_index=i)
        expect(Retval.NO_SUCH_ENTRY, a.ipip_del_tunnel, sw_if_index=i)
        a.gre_tunnel_add_del(is_add=False, teb=True, instance=any_, src_address="2001:db8::1",
                             dst_address="2001:db8::2", outer_table_id=0, key=42)
        a.vxlan_add_del_tunnel(is_add=False, instance=any_, src_address="10.0.0.1",
                               dst_address="10.0.0.2", encap_vrf_id=0, decap_next_node="",
                               vni=5)
        assert a.gre_tunnel_dump(sw_if_index=any_) == []
        assert a.ipip_tunnel_dump(sw_if_index=any_) == []
        assert a.vxlan_tunnel_dump(sw_if_index=any_) == []

    def test_gtpu_create_dump_delete(self):
        a = self.vpp.api()
        any_ = 0xffffffff
        args = dict(src_address="10.0.0.1", dst_address="10.0.0.2", encap_vrf_id=0)
        g = a.gtpu_add_del_tunnel(is_add=True, instance=any_, decap_next="", teid=7,
                                  tteid=9, **args).sw_if_index
        d = a.gtpu_tunnel_dump(sw_if_index=any_)
        assert [(x.sw_if_index, x.teid, x.tteid, x.decap_next, str(x.dst_address))
                for x in d] == [(g, 7, 9, "ip4", "10.0.0.2")]
        assert "create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid 7 tteid 9 instance 0" \
            in self.vpp.cli("show running-config")
        # tteid 0: the same as teid.
        h = a.gtpu_add_del_tunnel(is_add=True, instance=5, decap_next="ip6", teid=8,
                                  tteid=0, **args).sw_if_index
        assert [(x.instance, x.tteid) for x in a.gtpu_tunnel_dump(sw_if_index=h)] == [(5, 8)]
        l2 = a.gtpu_add_del_tunnel(is_add=True, instance=any_, decap_next="l2", teid=3,
                                   tteid=0, **args).sw_if_index
        assert [x.decap_next for x in a.gtpu_tunnel_dump(sw_if_index=l2)] == ["l2"]
        assert "teid 3 tteid 3 instance 1 decap-next l2" in self.vpp.cli("show running-config")
        expect(Retval.ALREADY_EXISTS, a.gtpu_add_del_tunnel, is_add=True, instance=any_,
               decap_next="", teid=7, tteid=7, **args)
        expect(Retval.INVALID_VALUE, a.gtpu_add_del_tunnel, is_add=True, instance=any_,
               decap_next="mpls", teid=1, tteid=1, **args, match="`mpls'")
        expect(Retval.NO_SUCH_TABLE, a.gtpu_add_del_tunnel, is_add=True, instance=any_,
               decap_next="", teid=1, tteid=1, src_address="10.0.0.1",
               dst_address="10.0.0.2", encap_vrf_id=9)
        expect(Retval.INVALID_VALUE, a.gtpu_add_del_tunnel, is_add=True, instance=any_,
               decap_next="", teid=1, tteid=1, src_address="10.0.0.1",
               dst_address="2001:db8::2", encap_vrf_id=0, match="different families")
        expect(Retval.NO_SUCH_ENTRY, a.gtpu_add_del_tunnel, is_add=False, instance=any_,
               decap_next="", teid=99, tteid=0, **args)
        for teid in (7, 8, 3):
            a.gtpu_add_del_tunnel(is_add=False, instance=any_, decap_next="", teid=teid,
                                  tteid=0, **args)
        assert a.gtpu_tunnel_dump(sw_if_index=any_) == []

    def test_srv6_policies_steering_localsids(self):
        a = self.vpp.api()
        lo = a.create_loopback().sw_if_index
        segs = ["2001:db8:ff::1", "2001:db8:ff::2"]
        expect(Retval.INVALID_VALUE, a.sr_policy_add, bsid_addr="fc00::99", is_encap=True,
               fib_table=0, sids=segs, match="no encaps source")
        expect(Retval.INVALID_VALUE, a.sr_set_encap_source, encaps_source="10.0.0.1",
               match="not an IPv6 address")
        a.sr_set_encap_source(encaps_source="2001:db8::1")
        p = a.sr_policy_add(bsid_addr="fc00::99", is_encap=True, fib_table=0,
                            sids=segs).sw_if_index
        d = a.sr_policies_dump()
        assert [(str(x.bsid_addr), x.sw_if_index, str(x.encaps_source),
                 [str(s) for s in x.sids]) for x in d] == [
            ("fc00::99", p, "2001:db8::1", segs)]
        expect(Retval.ALREADY_EXISTS, a.sr_policy_add, bsid_addr="fc00::99", is_encap=True,
               fib_table=0, sids=segs)
        a.sr_policy_add(bsid_addr="fc00::98", is_encap=False, fib_table=0, sids=segs,
                        instance=7)
        assert [(str(x.bsid_addr), x.is_encap) for x in a.sr_policies_dump()] == [
            ("fc00::99", True), ("fc00::98", False)]
        assert "sr-policy7" in self.vpp.cli("show interface")
        expect(Retval.ALREADY_EXISTS, a.sr_policy_add, bsid_addr="fc00::97", is_encap=True,
               fib_table=0, sids=segs, instance=7, match="sr-policy7")
        expect(Retval.INVALID_VALUE, a.sr_steering_add_del, is_del=False, bsid_addr="fc00::98",
               table_id=0, prefix="198.51.100.0/24", match="IPv6 only")
        a.sr_policy_del(bsid_addr="fc00::98")
        expect(Retval.INVALID_VALUE, a.sr_policy_add, bsid_addr="fc00::98", is_encap=True,
               fib_table=0, sids=["fc00::%d" % i for i in range(1, 7)], match="6 segments")
        expect(Retval.NO_SUCH_TABLE, a.sr_policy_add, bsid_addr="fc00::98", is_encap=True,
               fib_table=9, sids=segs)
        a.sr_steering_add_del(is_del=False, bsid_addr="fc00::99", table_id=0,
                              prefix="198.51.100.0/24")
        a.sr_steering_add_del(is_del=False, bsid_addr="fc00::99", table_id=0,
                              prefix="2001:db8:51::/48")
        assert sorted(str(x.prefix) for x in a.sr_steering_pol_dump()) == [
            "198.51.100.0/24", "2001:db8:51::/48"]
        assert "198.51.100.0/24" in self.vpp.cli("show ip fib 198.51.100.0/24")
        expect(Retval.ALREADY_EXISTS, a.sr_steering_add_del, is_del=False,
               bsid_addr="fc00::99", table_id=0, prefix="198.51.100.0/24")
        expect(Retval.NO_SUCH_ENTRY, a.sr_steering_add_del, is_del=False,
               bsid_addr="fc00::77", table_id=0, prefix="10.9.0.0/16", match="no policy")
        expect(Retval.NO_SUCH_ENTRY, a.sr_steering_add_del, is_del=True,
               bsid_addr="fc00::99", table_id=0, prefix="10.9.0.0/16", match="not steered")
        a.sr_steering_add_del(is_del=True, bsid_addr="fc00::99", table_id=0,
                              prefix="2001:db8:51::/48")
        assert [str(x.prefix) for x in a.sr_steering_pol_dump()] == ["198.51.100.0/24"]

        sid = dict(sw_if_index=0xffffffff, nh_addr="::", vrf_table=0, fib_table=0)
        e = a.sr_localsid_add_del(is_del=False, localsid="fc00::1", behavior="end",
                                  **sid).sw_if_index
        x4 = a.sr_localsid_add_del(is_del=False, localsid="fc00::4", behavior="end_dx4",
                                   **dict(sid, sw_if_index=lo, nh_addr="10.0.0.2"))
        a.sr_localsid_add_del(is_del=False, localsid="fc00::6", behavior="end_dx6",
                              **dict(sid, sw_if_index=lo, nh_addr="2001:db8:1::2"))
        a.sr_localsid_add_del(is_del=False, localsid="fc00::44", behavior="end_dt4", **sid)
        a.sr_localsid_add_del(is_del=False, localsid="fc00::7", behavior="end_x",
                              **dict(sid, sw_if_index=lo, nh_addr="2001:db8:1::3"))
        a.sr_localsid_add_del(is_del=False, localsid="fc00::22", behavior="end_dx2",
                              instance=9, **dict(sid, sw_if_index=lo))
        assert "sr-localsid9" in self.vpp.cli("show interface")
        expect(Retval.ALREADY_EXISTS, a.sr_localsid_add_del, is_del=False,
               localsid="fc00::23", behavior="end", instance=9, **sid, match="sr-localsid9")
        d = {str(x.addr): x for x in a.sr_localsids_dump()}
        assert sorted(d) == ["fc00::1", "fc00::22", "fc00::4", "fc00::44", "fc00::6",
                             "fc00::7"]
        assert (d["fc00::22"].behavior.name, d["fc00::22"].xconnect_iface_or_vrf_table) == (
            "end_dx2", lo)
        assert (d["fc00::7"].behavior.name, str(d["fc00::7"].xconnect_nh_addr)) == (
            "end_x", "2001:db8:1::3")
        assert d["fc00::1"].behavior.name == "end" and d["fc00::1"].sw_if_index == e
        assert (d["fc00::4"].behavior.name, str(d["fc00::4"].xconnect_nh_addr),
                d["fc00::4"].xconnect_iface_or_vrf_table, d["fc00::4"].sw_if_index) == (
            "end_dx4", "10.0.0.2", lo, x4.sw_if_index)
        assert d["fc00::6"].behavior.name == "end_dx6"
        assert (d["fc00::44"].behavior.name, d["fc00::44"].xconnect_iface_or_vrf_table) == (
            "end_dt4", 0)
        text = self.vpp.cli("show running-config")
        assert "sr localsid address fc00::4 behavior end.dx4 loop0 10.0.0.2" in text, text
        expect(Retval.ALREADY_EXISTS, a.sr_localsid_add_del, is_del=False, localsid="fc00::1",
               behavior="end", **sid)
        expect(Retval.ALREADY_EXISTS, a.sr_localsid_add_del, is_del=False,
               localsid="fc00::99", behavior="end", **sid, match="bsid")
        expect(Retval.INVALID_VALUE, a.sr_localsid_add_del, is_del=False, localsid="fc00::5",
               behavior="end_dx4", **dict(sid, sw_if_index=lo, nh_addr="2001:db8::2"),
               match="not an IPv4 address")
        expect(Retval.NO_SUCH_INTERFACE, a.sr_localsid_add_del, is_del=False,
               localsid="fc00::5", behavior="end_dx4",
               **dict(sid, sw_if_index=77, nh_addr="10.0.0.2"))
        expect(Retval.NO_SUCH_TABLE, a.sr_localsid_add_del, is_del=False, localsid="fc00::5",
               behavior="end_dt6", **dict(sid, vrf_table=7))
        expect(Retval.INVALID_VALUE, a.sr_localsid_add_del, is_del=False, localsid="10.0.0.5",
               behavior="end", **sid)
        for s in ("fc00::1", "fc00::4", "fc00::6", "fc00::44", "fc00::7", "fc00::22"):
            a.sr_localsid_add_del(is_del=True, localsid=s, behavior="end", **sid)
        expect(Retval.NO_SUCH_ENTRY, a.sr_localsid_add_del, is_del=True, localsid="fc00::1",
               behavior="end", **sid)
        assert a.sr_localsids_dump() == []
        a.sr_policy_del(bsid_addr="fc00::99")
        expect(Retval.NO_SUCH_ENTRY, a.sr_policy_del, bsid_addr="fc00::99")
        assert a.sr_policies_dump() == [] and a.sr_steering_pol_dump() == []


def _root_netns_skip() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "needs iproute2 (`ip`)"
    return None


@pytest.fixture
def netns_daemon():
    """A daemon inside a fresh network namespace holding a veth pair `vA`/`vB`."""
    why = _root_netns_skip()
    if why:
        pytest.skip(why)
    ns = f"sluice-apit-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    vpp = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "vA", "type", "veth", "peer", "name",
                        "vB"], check=True)
        for i in ("vA", "vB"):
            subprocess.run(["ip", "-n", ns, "link", "set", i, "up"], check=True)
        vpp = SluiceInstance(tag="api-netns", wrapper=["ip", "netns", "exec", ns]).start()
        yield vpp, ns
    finally:
        if vpp is not None:
            try:
                vpp.stop()
            finally:
                vpp.remove_dir()
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_af_packet_messages(netns_daemon):
    vpp, _ = netns_daemon
    a = vpp.api()
    sw = a.af_packet_create(host_if_name="vA", rx_queues=2).sw_if_index
    d = a.af_packet_dump()
    assert [(x.sw_if_index, x.host_if_name, x.rx_queues) for x in d] == [(sw, "vA", 2)]
    assert "create host-interface name vA num-rx-queues 2" in vpp.cli("show running-config")
    assert a.sw_interface_dump(name_filter="host-vA")[0].sw_if_index == sw
    expect(Retval.ALREADY_EXISTS, a.af_packet_create, host_if_name="vA")
    expect(Retval.NO_SUCH_ENTRY, a.af_packet_create, host_if_name="nosuch0",
           match="unknown Linux interface")
    expect(Retval.INVALID_VALUE, a.af_packet_create, host_if_name="a/b")
    expect(Retval.INVALID_VALUE, a.af_packet_create, host_if_name="vB", rx_queues=99)
    a.af_packet_delete(host_if_name="vA")
    assert a.af_packet_dump() == []
    expect(Retval.NO_SUCH_ENTRY, a.af_packet_delete, host_if_name="vA")


def test_tap_messages(netns_daemon):
    vpp, _ = netns_daemon
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("needs /dev/net/tun")
    a = vpp.api()
    sw = a.tap_create(id_valid=True, id=4, host_if_name="sluicetap4",
                      host_ip4_prefix="192.0.2.1/24").sw_if_index
    d = a.tap_dump()
    assert [(x.sw_if_index, x.id, x.host_if_name) for x in d] == [(sw, 4, "sluicetap4")]
    assert "create tap id 4 host-if-name sluicetap4 host-ip4-addr 192.0.2.1/24" in vpp.cli(
        "show running-config")
    expect(Retval.INVALID_VALUE, a.tap_create, host_ip4_prefix="192.0.2.1")
    expect(Retval.INVALID_VALUE, a.tap_create, host_ip6_gw="nope")
    expect(Retval.NO_SUCH_INTERFACE, a.tap_delete, sw_if_index=999)
    a.tap_delete(sw_if_index=sw)
    assert a.tap_dump() == []


def test_lcp_messages(netns_daemon):
    """linux-cp: default namespace set/get, pair add (the twin appears in Linux), dump
    (with the twin's Linux ifindex once the netlink listener saw it), running-config, the
    error codes, and delete (the twin goes)."""
    vpp, ns = netns_daemon
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("needs /dev/net/tun")
    a = vpp.api()
    assert a.lcp_default_ns_get().netns == ""
    a.lcp_default_ns_set(netns="elsewhere")
    assert a.lcp_default_ns_get().netns == "elsewhere"
    assert "lcp default netns elsewhere" in vpp.cli("show lcp")
    a.lcp_default_ns_set(netns="")
    assert a.lcp_default_ns_get().netns == ""
    expect(Retval.INVALID_VALUE, a.lcp_default_ns_set, netns="a/b", match="bad netns")

    sw = a.af_packet_create(host_if_name="vA").sw_if_index
    tap = a.lcp_itf_pair_add_del(is_add=True, sw_if_index=sw,
                                 host_if_name="lcpA").host_sw_if_index
    assert tap != sw
    link = subprocess.run(["ip", "-n", ns, "-br", "link", "show", "lcpA"], check=True,
                          capture_output=True, text=True).stdout
    assert "lcpA" in link
    deadline = time.monotonic() + 10
    while True:
        d = a.lcp_itf_pair_dump(sw_if_index=0xffffffff)
        if (d and d[0].vif_index != 0) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [(x.phy_sw_if_index, x.host_sw_if_index, x.host_if_name, x.netns) for x in d] == [
        (sw, tap, "lcpA", "")]
    linux_ifindex = int(subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/sys/class/net/lcpA/ifindex"], check=True,
        capture_output=True, text=True).stdout)
    assert d[0].vif_index == linux_ifindex
    assert a.lcp_itf_pair_dump(sw_if_index=sw)[0].host_sw_if_index == tap
    assert a.lcp_itf_pair_dump(sw_if_index=tap) == []
    assert "lcp create host-vA host-if lcpA" in vpp.cli("show running-config")
    assert "itf-pair: host-vA tap" in vpp.cli("show lcp")

    expect(Retval.ALREADY_EXISTS, a.lcp_itf_pair_add_del, is_add=True, sw_if_index=sw,
           host_if_name="lcpB")
    expect(Retval.NO_SUCH_INTERFACE, a.lcp_itf_pair_add_del, is_add=True, sw_if_index=999,
           host_if_name="lcpB")
    sw_b = a.af_packet_create(host_if_name="vB").sw_if_index
    expect(Retval.INVALID_VALUE, a.lcp_itf_pair_add_del, is_add=True, sw_if_index=sw_b,
           host_if_name="a/b", match="bad host-if")
    expect(Retval.INVALID_VALUE, a.lcp_itf_pair_add_del, is_add=True, sw_if_index=sw_b,
           host_if_name="")
    expect(Retval.NO_SUCH_ENTRY, a.lcp_itf_pair_add_del, is_add=False, sw_if_index=sw_b)

    a.lcp_itf_pair_add_del(is_add=False, sw_if_index=sw)
    assert a.lcp_itf_pair_dump(sw_if_index=0xffffffff) == []
    gone = subprocess.run(["ip", "-n", ns, "link", "show", "lcpA"], capture_output=True)
    assert gone.returncode != 0, "twin left behind"


def test_af_xdp_messages(netns_daemon):
    vpp, _ = netns_daemon
    a = vpp.api()
    expect(Retval.INVALID_VALUE, a.af_xdp_create, host_if="vA", rxq_size=1000,
           match="power of two")
    expect(Retval.NO_SUCH_INTERFACE, a.af_xdp_delete, sw_if_index=999)
    try:
        r = a.af_xdp_create(host_if="vA", generic_xdp=True, mode="copy")
    except ApiError as e:
        pytest.skip(f"this kernel refuses AF_XDP here: {e.message}")
    d = a.af_xdp_dump()
    assert [(x.sw_if_index, x.host_if) for x in d] == [(r.sw_if_index, "vA")]
    assert "create interface af_xdp host-if vA" in vpp.cli("show running-config")
    a.af_xdp_delete(sw_if_index=r.sw_if_index)
    assert a.af_xdp_dump() == []


def test_session_enable_disable(tmp_path):
    """`session_enable_disable` (the hoststack plugin) binds and closes the application
    socket, as `session enable|disable` does."""
    sock = tmp_path / "app.sock"
    vpp = SluiceInstance(tag="session-api",
                         extra_config=f"session {{ app-socket {sock} }}").start()
    try:
        a = vpp.api()
        assert "session layer is disabled" in vpp.cli("show session")
        a.session_enable_disable(is_enable=True)
        assert sock.is_socket()
        assert "0 active sessions" in vpp.cli("show session")
        a.session_enable_disable(is_enable=True)  # idempotent
        a.session_enable_disable(is_enable=False)
        assert not sock.exists()
        assert "session layer is disabled" in vpp.cli("show session")
    finally:
        vpp.stop()
    vpp.remove_dir()  # after a clean stop only: a failure keeps the log


class TestAclAndPolicerMessages(SluiceTestCase):
    """acl.api and policer.api without traffic (test_acl.py and test_policer.py send packets
    through them)."""

    def test_acl_session_messages(self):
        a = self.vpp.api()
        assert a.acl_session_dump() == []
        a.acl_session_timeout_set(which="tcp_transient", seconds=5)
        assert "tcp transient 5" in self.vpp.cli("show acl-plugin sessions")
        expect(Retval.INVALID_VALUE, a.acl_session_timeout_set, which="udp_idle", seconds=0,
               match="`0'")
        assert a.acl_sessions_clear().cleared == 0

    def test_policer_messages(self):
        a = self.vpp.api()
        lo = a.create_loopback().sw_if_index
        act = {"type": "transmit", "dscp": 0}
        mark = {"type": "mark_and_transmit", "dscp": 46}
        drop = {"type": "drop", "dscp": 0}
        a.policer_add_del(is_add=True, name="p", type="type_2r3c_2698", rate_type="kbps",
                          cir=1000, eir=2000, cb=1500, eb=3000, conform_action=act,
                          exceed_action=mark, violate_action=drop)
        a.policer_input(name="p", sw_if_index=lo, apply=True)
        a.policer_output(name="p", sw_if_index=lo, apply=True)
        d = a.policer_dump(name="")
        assert [(x.name, x.cir, x.eir, x.cb, x.eb, x.exceed_action.dscp,
                 x.committed_tokens, x.excess_tokens) for x in d] == [
            ("p", 1000, 2000, 1500, 3000, 46, 1500, 3000)], d
        assert "applied input on sw_if_index" in self.vpp.cli("show policer name p")
        expect(Retval.IN_USE, a.policer_add_del, is_add=False, name="p")
        expect(Retval.INVALID_VALUE, a.policer_add_del, is_add=True, name="q",
               type="type_2r3c_2698", rate_type="kbps", cir=1000, eir=10, cb=1, eb=1,
               conform_action=act, exceed_action=act, violate_action=act, match="`10'")
        expect(Retval.INVALID_VALUE, a.policer_add_del, is_add=True, name="q",
               type="type_1r2c", rate_type="pps", cir=1, eir=0, cb=1, eb=0,
               conform_action={"type": "mark_and_transmit", "dscp": 64},
               exceed_action=act, violate_action=act, match="`64'")
        expect(Retval.NO_SUCH_ENTRY, a.policer_input, name="nope", sw_if_index=lo, apply=True)
        expect(Retval.NO_SUCH_INTERFACE, a.policer_output, name="p", sw_if_index=99,
               apply=True)
        a.policer_input(name="p", sw_if_index=lo, apply=False)
        a.policer_output(name="p", sw_if_index=lo, apply=False)
        a.policer_add_del(is_add=False, name="p")
        assert a.policer_dump(name="") == []
