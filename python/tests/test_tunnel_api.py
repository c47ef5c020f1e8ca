"""GRE and IP-in-IP tunnels through the binary API (plugins/tunnels/api/{gre,ipip}.api):
create, dump, the interface appears in `show interface`, delete, gone from the dump; a
bad request answers an error, not a tunnel."""

import pytest

from ip4_base import Ip4RouterTest
from sluice_papi import ApiError

ALL = 0xFFFFFFFF


class TestTunnelApi(Ip4RouterTest):
    n_pg = 2

    def test_gre_add_dump_delete(self):
        api = self.vpp.api()
        r = api.gre_tunnel_add_del(is_add=True, teb=True, instance=5, src_address="10.0.0.1",
                                   dst_address="10.0.0.9", outer_table_id=0, key=42)
        mine = [d for d in api.gre_tunnel_dump(sw_if_index=ALL) if d.key == 42]
        assert len(mine) == 1, mine
        assert mine[0].sw_if_index == r.sw_if_index and mine[0].teb and mine[0].instance == 5
        assert str(mine[0].dst_address) == "10.0.0.9"
        assert "gre5" in self.vpp.cli("show interface")
        assert api.gre_tunnel_dump(sw_if_index=r.sw_if_index)[0].key == 42
        api.gre_tunnel_add_del(is_add=False, teb=True, instance=ALL, src_address="10.0.0.1",
                               dst_address="10.0.0.9", outer_table_id=0, key=42)
        assert not [d for d in api.gre_tunnel_dump(sw_if_index=ALL) if d.key == 42]
        with pytest.raises(ApiError):
            api.gre_tunnel_add_del(is_add=False, teb=True, instance=ALL,
                                   src_address="10.0.0.1", dst_address="10.0.0.9",
                                   outer_table_id=0, key=42)

    def test_ipip_add_dump_delete(self):
        api = self.vpp.api()
        r = api.ipip_add_tunnel(instance=3, src_address="2001:db8::1",
                                dst_address="2001:db8::9", table_id=0)
        mine = api.ipip_tunnel_dump(sw_if_index=r.sw_if_index)
        assert len(mine) == 1 and mine[0].instance == 3, mine
        assert str(mine[0].dst_address) == "2001:db8::9"
        assert "ipip3" in self.vpp.cli("show interface")
        assert r.sw_if_index in [d.sw_if_index for d in api.ipip_tunnel_dump(sw_if_index=ALL)]
        api.ipip_del_tunnel(sw_if_index=r.sw_if_index)
        assert r.sw_if_index not in [d.sw_if_index
                                     for d in api.ipip_tunnel_dump(sw_if_index=ALL)]
        with pytest.raises(ApiError):
            api.ipip_del_tunnel(sw_if_index=r.sw_if_index)
