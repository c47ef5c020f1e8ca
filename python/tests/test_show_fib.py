"""`show ip fib` / `show ip6 fib` print what VPP prints, so tools that parse VPP's output
work: the table header, VPP's special entries (0.0.0.0/0, 0.0.0.0/32, 224.0.0.0/4,
240.0.0.0/4, 255.255.255.255/32, each connected subnet's network and broadcast /32s;
::/0 and fe80::/10), and per entry the `unicast-ip4-chain`, `dpo-load-balance` and one DPO
line per bucket (drop, receive, glean, adjacency, incomplete). Exact text."""

import re

from sluice_test import SluiceTestCase
from sluice_test.parsers import parse_fib

HDR = ("fib_index:0, flow hash:[src dst sport dport proto flowlabel ] epoch:0 flags:none "
       "locks:[default-route:1, ]")


def eq(a, b, what=""):
    assert a == b, f"{what}\n got: {a!r}\nwant: {b!r}"


def match(s: str, pattern: str):
    assert re.search(pattern, s), f"{s!r} !~ {pattern!r}"


def less(a, b):
    assert a < b, (a, b)


def hexmac(mac: str) -> str:
    return mac.replace(":", "")


def lb(index: int, buckets: int = 1, proto: str = "ip4") -> list[str]:
    return [f"  unicast-{proto}-chain",
            f"  [@0]: dpo-load-balance: [proto:{proto} index:{index} buckets:{buckets} "
            f"uRPF:{index} to:[0:0]]"]


def drop(prefix: str, proto: str = "ip4") -> list[str]:
    return [prefix, *lb(0, proto=proto), f"    [0] [@0]: dpo-drop {proto}"]


class TestShowFib(SluiceTestCase):
    def setup_test(self):
        self.create_pg_interfaces(range(2))
        self.pg0, self.pg1 = self.pg_interfaces
        for c in ("set interface ip address pg0 10.0.0.1/24",
                  "set interface ip address pg1 10.0.1.1/24",
                  "ip neighbor pg1 10.0.1.2 02:00:00:00:01:02",
                  "ip route add 10.2.0.0/16 via 10.0.1.2",
                  "ip route add 10.3.0.0/16 via 10.0.1.2 pg1",
                  "ip route add 10.3.0.0/16 via 10.0.1.3 pg1",
                  "ip route add 10.4.0.0/16 via 10.2.0.1",
                  "ip route add 10.5.0.0/16 drop"):
            self.vpp.cli(c)

    def sw_if_index(self, name: str) -> int:
        m = re.search(rf"^{name}\s+(\d+)\s", self.vpp.cli("show interface"), re.M)
        assert m, name
        return int(m.group(1))

    def entries(self, text: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        cur = None
        for line in text.splitlines()[1:]:
            if not line[0].isspace():
                cur = line
                out[cur] = [line]
            else:
                out[cur].append(line)
        return out

    def test_ip4_default_and_special_entries_exact(self):
        text = self.vpp.cli("show ip fib")
        lines = text.splitlines()
        eq(lines[0], "ipv4-VRF:0, " + HDR)
        e = self.entries(text)
        # Order: by address, then by length.
        eq(list(e), [
            "0.0.0.0/0", "0.0.0.0/32", "10.0.0.0/24", "10.0.0.0/32", "10.0.0.1/32",
            "10.0.0.255/32", "10.0.1.0/24", "10.0.1.0/32", "10.0.1.1/32", "10.0.1.2/32",
            "10.0.1.255/32", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16", "10.5.0.0/16",
            "224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32"])
        for p in ("0.0.0.0/0", "0.0.0.0/32", "10.0.0.0/32", "10.0.0.255/32", "224.0.0.0/4",
                  "240.0.0.0/4", "255.255.255.255/32"):
            eq(e[p], drop(p), p)
        pg0_mac, pg1_mac = hexmac(self.pg0.local_mac), hexmac(self.pg1.local_mac)
        sw0, sw1 = self.sw_if_index("pg0"), self.sw_if_index("pg1")
        glean = e["10.0.0.0/24"]
        eq(glean[:2], ["10.0.0.0/24", "  unicast-ip4-chain"])
        match(glean[2], r"^  \[@0\]: dpo-load-balance: \[proto:ip4 index:(\d+) "
                                   r"buckets:1 uRPF:\1 to:\[0:0\]\]$")
        eq(glean[3], f"    [0] [@4]: ipv4-glean: [src:10.0.0.0/24] pg0: "
                                   f"mtu:1500 next:{sw0} flags:[] ffffffffffff{pg0_mac}0806")
        eq(e["10.0.0.1/32"][3], "    [0] [@2]: dpo-receive: 10.0.0.1 on pg0")
        nbr = (f"[@5]: ipv4 via 10.0.1.2 pg1: mtu:1500 next:{sw1} flags:[] "
               f"020000000102{pg1_mac}0800")
        eq(e["10.0.1.2/32"][3], "    [0] " + nbr)
        eq(e["10.2.0.0/16"][3], "    [0] " + nbr)
        # Recursive through 10.2.0.0/16: the resolved adjacency.
        eq(e["10.4.0.0/16"][3], "    [0] " + nbr)
        ecmp = e["10.3.0.0/16"]
        match(ecmp[2], r"buckets:2 ")
        eq(ecmp[3], "    [0] " + nbr)
        eq(ecmp[4], "    [1] [@3]: arp-ipv4: via 10.0.1.3 pg1")
        eq(e["10.5.0.0/16"][3], "    [0] [@0]: dpo-drop ip4")
        # The parser of the Python layer reads buckets.
        f = parse_fib(text)
        eq(f["10.3.0.0/16"].buckets,
                         [nbr, "[@3]: arp-ipv4: via 10.0.1.3 pg1"])

    def test_ip4_prefix_lookup_and_detail(self):
        text = self.vpp.cli("show ip fib 10.4.1.1")
        lines = text.splitlines()
        eq(lines[1:4], ["10.4.0.0/16", "  source: static",
                                      "    via 10.2.0.1 recursive"])
        eq(lines[4], "  unicast-ip4-chain")
        # A special entry is the longest match of its addresses.
        eq(self.vpp.cli("show ip fib 239.1.1.1").splitlines()[1:],
                         ["224.0.0.0/4", "  source: special", *drop("224.0.0.0/4")[1:]])
        eq(self.vpp.cli("show ip fib 10.0.0.255/32").splitlines()[1],
                         "10.0.0.255/32")
        f = parse_fib(self.vpp.cli("show ip fib detail"))
        eq(f["10.0.0.1/32"].sources, ["local"])
        eq(f["0.0.0.0/0"].sources, ["special"])

    def test_ip6_default_entries_exact(self):
        self.vpp.cli("set interface ip address pg0 fd00::1/64")
        text = self.vpp.cli("show ip6 fib")
        eq(text.splitlines()[0], "ipv6-VRF:0, " + HDR)
        e = self.entries(text)
        eq(e["::/0"], drop("::/0", "ip6"))
        eq(e["fe80::/10"], ["fe80::/10", *lb(0, proto="ip6"),
                                          "    [0] [@14]: ip6-link-local"])
        eq(e["fd00::1/128"][3], "    [0] [@2]: dpo-receive: fd00::1 on pg0")
        pg0_mac = hexmac(self.pg0.local_mac)
        eq(e["fd00::/64"][3],
                         f"    [0] [@4]: ipv6-glean: [src:fd00::/64] pg0: mtu:1500 "
                         f"next:{self.sw_if_index('pg0')} flags:[] ffffffffffff{pg0_mac}86dd")
        less(list(e).index("::/0"), list(e).index("fd00::/64"))
        less(list(e).index("fd00::1/128"), list(e).index("fe80::/10"))
