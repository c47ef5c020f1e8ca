"""Configuration objects (VPP test framework style): each knows how to add itself, remove
itself and check whether the daemon has it. `add_config()` registers the object with the test
so the teardown removes whatever is still configured, newest first."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Union

from .parsers import (parse_features, parse_fib, parse_interface_addresses,
                      parse_interface_tables, parse_neighbors)

if TYPE_CHECKING:
    from .pg import PgInterface
    from .testcase import SluiceTestCase

Intf = Union["PgInterface", str]


def _ifname(intf: Intf) -> str:
    return intf if isinstance(intf, str) else intf.name


def _norm_mac(mac: str) -> str:
    hexd = mac.lower().replace(":", "").replace("-", "").replace(".", "")
    if len(hexd) != 12:
        raise ValueError(f"bad MAC address {mac!r}")
    return ":".join(hexd[i:i + 2] for i in range(0, 12, 2))


class SluiceObject:
    """Base class. Subclasses define `_add_cmd()`, `_del_cmd()` and `query()`, and
    `_api_add()`/`_api_del()`: with `config_via = "api"` on the test class the object is
    configured through the control API (`sluice_papi`) instead of the CLI, and still read
    back with `show` commands, so both paths are checked against each other."""

    def __init__(self, test: "SluiceTestCase"):
        self.test = test
        self.configured = False

    @property
    def vpp(self):
        return self.test.vpp

    def object_id(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.object_id()}>"

    def _add_cmd(self) -> str:
        raise NotImplementedError

    def _del_cmd(self) -> str:
        raise NotImplementedError

    def query(self) -> bool:
        """Whether the daemon has this object (read back from a `show` command)."""
        raise NotImplementedError

    def _via_api(self) -> bool:
        return getattr(self.test, "config_via", "cli") == "api"

    def _api_add(self) -> None:
        raise NotImplementedError

    def _api_del(self) -> None:
        raise NotImplementedError

    def sw_if_index(self, intf: Intf) -> int:
        return self.vpp.sw_if_index(_ifname(intf))

    def add_config(self):
        if self._via_api():
            self._api_add()
        else:
            self.vpp.cli(self._add_cmd())
        if not self.query():
            raise AssertionError(f"{self.object_id()}: not visible after `{self._add_cmd()}'")
        self.configured = True
        self.test.register_config(self)
        return self

    def remove_config(self) -> None:
        if self._via_api():
            self._api_del()
        else:
            self.vpp.cli(self._del_cmd())
        self.configured = False
        self.test.unregister_config(self)
        if self.query():
            raise AssertionError(f"{self.object_id()}: still present after `{self._del_cmd()}'")


class InterfaceAddress(SluiceObject):
    """`set interface ip address <intf> <addr>/<len>`; also checks the connected and local
    routes the address creates in the FIB."""

    def __init__(self, test: "SluiceTestCase", intf: Intf, prefix: str):
        super().__init__(test)
        self.intf = intf
        self.prefix = prefix
        self.iface = ipaddress.ip_interface(prefix)
        self.prefix = str(self.iface)  # canonical form, as `show interface address' prints
        self.v6 = self.iface.version == 6

    def object_id(self) -> str:
        return f"interface-address-{_ifname(self.intf)}-{self.prefix}"

    def _add_cmd(self) -> str:
        return f"set interface ip address {_ifname(self.intf)} {self.prefix}"

    def _del_cmd(self) -> str:
        return f"set interface ip address del {_ifname(self.intf)} {self.prefix}"

    def _api_add(self, is_add: bool = True) -> None:
        self.vpp.api().sw_interface_add_del_address(
            sw_if_index=self.sw_if_index(self.intf), is_add=is_add, prefix=self.prefix)

    def _api_del(self) -> None:
        self._api_add(False)

    def query(self) -> bool:
        text = self.vpp.cli("show interface address")
        addrs = parse_interface_addresses(text)
        present = self.prefix in addrs.get(_ifname(self.intf), [])
        table = parse_interface_tables(text).get(_ifname(self.intf), {}).get(
            "ip6" if self.v6 else "ip4", 0)
        show = "show ip6 fib" if self.v6 else "show ip fib"
        fib = parse_fib(self.vpp.cli(f"{show} table {table} detail"))
        local = fib.get(f"{self.iface.ip}/{128 if self.v6 else 32}")
        has_local = local is not None and "local" in local.sources
        if present != has_local:
            raise AssertionError(
                f"{self.object_id()}: `show interface address' says {present} but the local "
                f"/32 route says {has_local}")
        return present


class IpNeighbor(SluiceObject):
    """`ip neighbor <intf> <ip> <mac> static` (a static neighbour, IPv4 or IPv6)."""

    def __init__(self, test: "SluiceTestCase", intf: Intf, ip: str, mac: str):
        super().__init__(test)
        self.intf = intf
        addr = ipaddress.ip_address(ip)
        self.ip = str(addr)
        self.v6 = addr.version == 6
        self.mac = _norm_mac(mac)

    def object_id(self) -> str:
        return f"ip-neighbor-{_ifname(self.intf)}-{self.ip}"

    def _add_cmd(self) -> str:
        return f"ip neighbor {_ifname(self.intf)} {self.ip} {self.mac} static"

    def _del_cmd(self) -> str:
        return f"ip neighbor del {_ifname(self.intf)} {self.ip}"

    def _api_add(self, is_add: bool = True) -> None:
        self.vpp.api().ip_neighbor_add_del(
            is_add=is_add, sw_if_index=self.sw_if_index(self.intf), ip_address=self.ip,
            mac_address=self.mac, is_static=True)

    def _api_del(self) -> None:
        self._api_add(False)

    def query(self) -> bool:
        for n in parse_neighbors(self.vpp.cli("show ip6 neighbors" if self.v6
                                              else "show ip neighbors")):
            if n.ip == self.ip and n.interface == _ifname(self.intf):
                return _norm_mac(n.mac) == self.mac
        return False


class IpRoute(SluiceObject):
    """`ip route add <prefix> via <nh> [<intf>]`: one path of a (possibly ECMP) route.

    `remove_config()` deletes this path only (`ip route del <prefix> via <nh>`); the route
    itself disappears with its last path."""

    def __init__(self, test: "SluiceTestCase", prefix: str, via: str,
                 interface: Intf | None = None, table: int = 0):
        super().__init__(test)
        net = ipaddress.ip_network(prefix, strict=True)
        self.prefix = str(net)
        self.via = str(ipaddress.ip_address(via))
        self.v6 = net.version == 6
        self.interface = interface
        self.table = table

    def object_id(self) -> str:
        return f"ip-route-{self.table}-{self.prefix}-via-{self.via}"

    def _path(self) -> str:
        s = f"via {self.via}"
        if self.interface is not None:
            s += f" {_ifname(self.interface)}"
        return s

    def _add_cmd(self) -> str:
        return f"ip route add {self.prefix} table {self.table} {self._path()}"

    def _del_cmd(self) -> str:
        return f"ip route del {self.prefix} table {self.table} {self._path()}"

    def _api_add(self, is_add: bool = True) -> None:
        sw = 0 if self.interface is None else self.sw_if_index(self.interface)
        self.vpp.api().ip_route_add_del(
            is_add=is_add, table_id=self.table, prefix=self.prefix,
            paths=[{"next_hop": self.via, "sw_if_index": sw}])

    def _api_del(self) -> None:
        self._api_add(False)

    def query(self) -> bool:
        show = "show ip6 fib" if self.v6 else "show ip fib"
        entry = parse_fib(self.vpp.cli(f"{show} table {self.table} detail")).get(self.prefix)
        if entry is None:
            return False
        if "static" not in entry.sources:
            return False
        for path in entry.paths:
            # `[0] [@5]: ipv4 via 10.0.1.2 pg1: mtu:1500 ...` or `[0] [@3]: arp-ipv4: via ...`
            tok = [t.rstrip(":") for t in path.split()]
            if "via" in tok:
                i = tok.index("via")
                if tok[i + 1:i + 2] == [self.via] and (
                        self.interface is None or tok[i + 2:i + 3] == [_ifname(self.interface)]):
                    return True
        return False


class IpTable(SluiceObject):
    """`ip[6] table add <id>`: a VRF table (deleted at teardown, after its interfaces and
    routes: config objects are removed in reverse order)."""

    def __init__(self, test: "SluiceTestCase", table_id: int, v6: bool = False):
        super().__init__(test)
        self.table_id = table_id
        self.v6 = v6

    def object_id(self) -> str:
        return f"ip{'6' if self.v6 else ''}-table-{self.table_id}"

    def _add_cmd(self) -> str:
        return f"ip{'6' if self.v6 else ''} table add {self.table_id}"

    def _del_cmd(self) -> str:
        return f"ip{'6' if self.v6 else ''} table del {self.table_id}"

    def _api_add(self, is_add: bool = True) -> None:
        self.vpp.api().ip_table_add_del(is_add=is_add, is_ipv6=self.v6, table_id=self.table_id)

    def _api_del(self) -> None:
        self._api_add(False)

    def query(self) -> bool:
        show = "show ip6 fib" if self.v6 else "show ip fib"
        return self.vpp.cli_try(f"{show} table {self.table_id} summary") is not None


class InterfaceTable(SluiceObject):
    """`set interface ip[6] table <intf> <id>`; removal puts the interface back in table 0."""

    def __init__(self, test: "SluiceTestCase", intf: Intf, table_id: int, v6: bool = False):
        super().__init__(test)
        self.intf = intf
        self.table_id = table_id
        self.v6 = v6

    def object_id(self) -> str:
        return f"{_ifname(self.intf)}-ip{'6' if self.v6 else ''}-table-{self.table_id}"

    def _add_cmd(self) -> str:
        return f"set interface ip{'6' if self.v6 else ''} table {_ifname(self.intf)} " \
            f"{self.table_id}"

    def _del_cmd(self) -> str:
        return f"set interface ip{'6' if self.v6 else ''} table {_ifname(self.intf)} 0"

    def _api_add(self, table: int | None = None) -> None:
        self.vpp.api().sw_interface_set_table(
            sw_if_index=self.sw_if_index(self.intf), is_ipv6=self.v6,
            table_id=self.table_id if table is None else table)

    def _api_del(self) -> None:
        self._api_add(0)

    def query(self) -> bool:
        # `show interface address` suffixes the interface's lines with its table.
        text = self.vpp.cli("show interface address")
        name = _ifname(self.intf)
        tag = f"ip{'6' if self.v6 else '4'} table-id {self.table_id} "
        section = False
        for line in text.splitlines():
            if not line.startswith(" "):
                section = line.split()[0] == name if line.strip() else False
            elif section and tag in line + " ":
                return True
        return False


class Feature(SluiceObject):
    """`set interface feature <intf> <feature> arc <arc> [disable]`; `query()` reads
    `show interface features <intf>`."""

    def __init__(self, test: "SluiceTestCase", intf: Intf, feature: str, arc: str):
        super().__init__(test)
        self.intf = intf
        self.feature = feature
        self.arc = arc

    def object_id(self) -> str:
        return f"feature-{self.feature}-{self.arc}-{_ifname(self.intf)}"

    def _add_cmd(self) -> str:
        return f"set interface feature {_ifname(self.intf)} {self.feature} arc {self.arc}"

    def _del_cmd(self) -> str:
        return self._add_cmd() + " disable"

    def _api_add(self, enable: bool = True) -> None:
        self.vpp.api().feature_enable_disable(
            sw_if_index=self.sw_if_index(self.intf), enable=enable, arc_name=self.arc,
            feature_name=self.feature)

    def _api_del(self) -> None:
        self._api_add(False)

    def features(self):
        return parse_features(self.vpp.cli(f"show interface features {_ifname(self.intf)}"))

    def query(self) -> bool:
        return any(f.name == self.feature for f in self.features().get(self.arc, []))

    def counts(self) -> tuple[int, int]:
        """(packets, bytes) of a counter feature."""
        for f in self.features().get(self.arc, []):
            if f.name == self.feature:
                if f.packets is None:
                    raise AssertionError(f"{self.feature} shows no counts")
                return f.packets, f.bytes
        raise AssertionError(f"{self.object_id()}: not enabled")
