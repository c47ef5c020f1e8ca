"""Bridge domains: flooding of unknown and broadcast frames, MAC learning (then unicast
forwarding only to the learned port), MAC move, static entries, and a BVI routing between
the bridge and a routed interface (ARP, echo and forwarding through it)."""

from scapy.compat import raw
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from sluice_test import SluiceTestCase
from sluice_test.parsers import parse_neighbors

A, B, C = "02:00:00:0a:00:01", "02:00:00:0b:00:01", "02:00:00:0c:00:01"
LOOP_MAC = "02:00:00:ff:00:01"


class TestBridge(SluiceTestCase):

    def setup_test(self):
        self.create_pg_interfaces(range(4), up=True)
        self.vpp.cli("create bridge-domain 10")
        for i in range(3):
            self.vpp.cli(f"set interface l2 bridge pg{i} 10")
        self.pg = self.pg_interfaces
        self.snapshot_counters()

    def teardown_test(self):
        for i in range(3):
            self.vpp.cli(f"set interface l3 pg{i}")
        self.vpp.cli_try("set interface l3 loop0")
        self.vpp.cli_try("delete loopback interface intfc loop0")
        self.vpp.cli("create bridge-domain 10 del")

    @staticmethod
    def frame(dst, src, tag):
        return Ether(raw(Ether(dst=dst, src=src) / IP(src="192.0.2.1", dst="192.0.2.2")
                         / UDP(sport=7, dport=9) / Raw(tag)))

    def capture_all(self):
        for p in self.pg[:3]:
            p.enable_capture()

    def test_flood_learn_then_forward_and_mac_move(self):
        # Unknown destination: flooded to every other member, not back to the sender.
        self.capture_all()
        self.pg[0].add_stream([self.frame(B, A, b"to-unknown")])
        self.pg_start()
        for p in (self.pg[1], self.pg[2]):
            rx = p.get_capture(1, remark="flooded")
            assert raw(rx[0]) == raw(self.frame(B, A, b"to-unknown"))
        self.pg[0].assert_nothing_captured(remark="not back to the sender")
        # B answers from pg1: A was learned on pg0, so only pg0 gets it.
        self.wait_for(lambda: A.replace(":", "") in self.vpp.cli("show l2fib").replace(":", ""),
                      "A learned")
        rx = self.send_and_expect(self.pg[1], [self.frame(A, B, b"reply")], self.pg[0])
        assert raw(rx[0]) == raw(self.frame(A, B, b"reply"))
        # Now B is known too: unicast to B goes to pg1 only.
        self.wait_for(lambda: B.replace(":", "") in self.vpp.cli("show l2fib").replace(":", ""),
                      "B learned")
        before = self.get_interface_counters()
        rx = self.send_and_expect(self.pg[0], [self.frame(B, A, b"known")], self.pg[1])
        after = self.get_interface_counters()
        assert after["pg2"].get("tx packets", 0) == before["pg2"].get("tx packets", 0), \
            "a known unicast is not flooded"
        # A moves to pg2: traffic to A follows it.
        self.pg[2].add_stream([self.frame("ff:ff:ff:ff:ff:ff", A, b"A-on-pg2")])
        self.capture_all()
        self.pg_start()
        self.pg[0].get_capture(1, remark="broadcast flooded")
        self.pg[1].get_capture(1, remark="broadcast flooded")
        self.wait_for(lambda: "pg2" in [ln.split()[2] for ln in
                                        self.vpp.cli("show l2fib").splitlines()
                                        if A.replace(":", "") in ln.replace(":", "")],
                      "A moved to pg2")
        rx = self.send_and_expect(self.pg[1], [self.frame(A, B, b"after-move")], self.pg[2])
        assert raw(rx[0][Raw]) == b"after-move"

    def test_static_entry_and_no_flood_of_known_static(self):
        self.vpp.cli(f"l2fib add {C} 10 pg2 static")
        rx = self.send_and_expect(self.pg[0], [self.frame(C, A, b"static")], self.pg[2])
        assert raw(rx[0][Raw]) == b"static"
        # A frame from C on another port does not move a static entry.
        self.pg[1].add_stream([self.frame(A, C, b"spoof")])
        self.capture_all()
        self.pg_start()
        self.pg[0].get_capture(1)
        rx = self.send_and_expect(self.pg[0], [self.frame(C, A, b"still-pg2")], self.pg[2])
        assert raw(rx[0][Raw]) == b"still-pg2"
        self.vpp.cli(f"l2fib del {C} 10")

    def test_bvi_routes_between_bridge_and_routed_interface(self):
        assert self.vpp.cli(f"create loopback interface mac {LOOP_MAC}").strip() == "loop0"
        for c in ["set interface l2 bridge loop0 10 bvi", "set interface state loop0 up",
                  "set interface ip address loop0 10.9.0.1/24",
                  "set interface ip address pg3 10.0.3.1/24",
                  f"ip neighbor pg3 10.0.3.2 {self.pg[3].remote_mac}"]:
            self.vpp.cli(c)
        # A host on pg0 resolves the BVI's address: the broadcast request reaches the BVI,
        # the reply comes back through the bridge to pg0 (A learned first: learning is applied
        # by the main thread every 10 ms, and an unknown unicast reply would be flooded).
        self.capture_all()
        self.pg[0].add_stream([self.frame("ff:ff:ff:ff:ff:ff", A, b"hello")])
        self.pg_start()
        self.pg[1].get_capture(1)
        self.pg[2].get_capture(1)
        self.wait_for(lambda: A.replace(":", "") in self.vpp.cli("show l2fib").replace(":", ""),
                      "A learned")
        arp = Ether(dst="ff:ff:ff:ff:ff:ff", src=A) / ARP(
            op=1, hwsrc=A, psrc="10.9.0.2", pdst="10.9.0.1")
        self.capture_all()
        self.pg[0].add_stream([arp])
        self.pg_start()
        rx = self.pg[0].get_capture(1, remark="ARP reply from the BVI")
        assert rx[0][ARP].op == 2 and rx[0][ARP].hwsrc == LOOP_MAC
        assert rx[0][ARP].psrc == "10.9.0.1" and rx[0].dst == A
        for p in (self.pg[1], self.pg[2]):
            assert len(p.get_capture(1, remark="the request is flooded to the bridge")) == 1
        self.wait_for(lambda: any(n.ip == "10.9.0.2" for n in
                                  parse_neighbors(self.vpp.cli("show ip neighbors"))),
                      "host learned on the BVI")
        # Routed from the bridge out of pg3 ...
        up = Ether(raw(Ether(dst=LOOP_MAC, src=A) / IP(src="10.9.0.2", dst="10.0.3.2", ttl=5)
                       / UDP(sport=1, dport=2) / Raw(b"up")))
        rx = self.send_and_expect(self.pg[0], [up], self.pg[3])
        assert rx[0].src == self.pg[3].local_mac and rx[0][IP].ttl == 4
        # ... and from pg3 into the bridge, to the port where A was learned.
        down = Ether(raw(Ether(dst=self.pg[3].local_mac, src=self.pg[3].remote_mac)
                         / IP(src="10.0.3.2", dst="10.9.0.2", ttl=5)
                         / UDP(sport=3, dport=4) / Raw(b"down")))
        rx = self.send_and_expect(self.pg[3], [down], self.pg[0])
        assert rx[0].src == LOOP_MAC and rx[0].dst == A and rx[0][IP].ttl == 4
        # The BVI answers pings from the bridge.
        echo = Ether(dst=LOOP_MAC, src=A) / IP(src="10.9.0.2", dst="10.9.0.1") / ICMP(id=3)
        rx = self.send_and_expect(self.pg[0], [echo], self.pg[0])
        assert rx[0][ICMP].type == 0 and rx[0][IP].src == "10.9.0.1"
        self.vpp.cli("set interface ip address del pg3 10.0.3.1/24")
        self.vpp.cli("set interface ip address del loop0 10.9.0.1/24")

    def test_bvi_must_be_a_loopback(self):
        self.assert_cli_error("set interface l2 bridge pg3 10 bvi", "loopback",
                              "a pg interface was accepted as BVI")

    def test_mac_aging(self):
        """mac-age is in minutes (as VPP); `test l2fib age <bd> advance <m>` runs the real
        aging pass as if the clock were m minutes ahead."""
        def l2fib():
            return {ln.split()[0].lower(): ln.split() for ln in
                    self.vpp.cli("show l2fib").splitlines()[1:-1]}

        self.vpp.cli("create bridge-domain 10 mac-age 2")
        self.vpp.cli(f"l2fib add {C} 10 pg2 static")
        self.capture_all()
        self.pg[0].add_stream([self.frame("ff:ff:ff:ff:ff:ff", A, b"from-A")])
        self.pg[1].add_stream([self.frame("ff:ff:ff:ff:ff:ff", B, b"from-B")])
        self.pg_start()
        self.wait_for(lambda: {A, B} <= set(l2fib()), "A and B learned")
        assert self.vpp.cli("test l2fib age 10").strip() == "aged 0 entries"
        assert self.vpp.cli("test l2fib age 10 advance 1").strip() == "aged 0 entries"
        assert self.vpp.cli("test l2fib age 10 advance 3").strip() == "aged 2 entries"
        entries = l2fib()
        assert A not in entries and B not in entries, entries
        assert entries[C][3] == "yes", "static entries never age"
        # A is unknown again: a frame to it is flooded, not sent to pg0 only.
        self.capture_all()
        self.pg[1].add_stream([self.frame(A, B, b"to-aged-A")])
        self.pg_start()
        self.pg[0].get_capture(1)
        self.pg[2].get_capture(1, remark="unknown unicast flooded after aging")
        # mac-age 0: never.
        self.vpp.cli("create bridge-domain 10 mac-age 0")
        d = "02:00:00:0d:00:01"
        self.capture_all()
        self.pg[1].add_stream([self.frame("ff:ff:ff:ff:ff:ff", d, b"from-D")])
        self.pg_start()
        self.wait_for(lambda: d in l2fib(), "D learned")
        assert self.vpp.cli("test l2fib age 10 advance 100000").strip() == "aged 0 entries"
        self.assert_cli_error("test l2fib age 11", "`11'",
                              "aging a missing bridge domain was accepted")
        self.vpp.cli(f"l2fib del {C} 10")


class TestSplitHorizon(SluiceTestCase):
    """pg0 and pg1 in split-horizon group 1, pg2 in none: what enters through a group member
    never leaves through another member of that group (VPP's shg)."""

    def setup_test(self):
        self.create_pg_interfaces(range(3), up=True)
        self.pg = self.pg_interfaces
        self.vpp.cli("create bridge-domain 20 learn 0")
        self.vpp.cli("set interface l2 bridge pg0 20 shg 1")
        self.vpp.cli("set interface l2 bridge pg1 20 shg 1")
        self.vpp.cli("set interface l2 bridge pg2 20")
        self.vpp.cli(f"l2fib add {B} 20 pg1 static")
        self.vpp.cli(f"l2fib add {C} 20 pg2 static")
        self.snapshot_counters()

    def teardown_test(self):
        for i in range(3):
            self.vpp.cli(f"set interface l3 pg{i}")
        self.vpp.cli("create bridge-domain 20 del")

    def test_flood_and_unicast_respect_the_group(self):
        frame = TestBridge.frame
        # VPP's member table: Interface If-idx ISN SHG BVI TxFlood VLAN-Tag-Rewrite.
        rows = [ln.split() for ln in self.vpp.cli("show bridge-domain 20 detail").splitlines()]
        assert [r[3] for r in rows if r[:1] == ["pg0"]] == ["1"], rows
        for p in self.pg:
            p.enable_capture()
        # Broadcast from pg0: only pg2 (pg1 shares the group).
        self.pg[0].add_stream([frame("ff:ff:ff:ff:ff:ff", A, b"bcast")])
        self.pg_start()
        self.pg[2].get_capture(1, remark="flooded outside the group")
        self.pg[1].assert_nothing_captured(remark="same split-horizon group")
        # Known unicast from pg0 to B (on pg1, same group): dropped with the reason.
        self.send_and_assert_no_replies(self.pg[0], [frame(B, A, b"u") for _ in range(3)],
                                        remark="split horizon")
        # From pg2 (no group) to B and back the other way: forwarded.
        self.send_and_expect(self.pg[2], [frame(B, C, b"ok")], self.pg[1])
        self.send_and_expect(self.pg[1], [frame(C, B, b"ok")], self.pg[2])
        self.assert_counters({
            ("l2-input", "L2 frames flooded"): 1,
            ("l2-input", "L2 destination in the source's split-horizon group"): 3,
            ("l2-input", "L2 frames forwarded to a learned MAC"): 2,
        })

    def test_bad_group_names_the_token(self):
        import pytest
        from sluice_test import CliError
        with pytest.raises(CliError, match="split-horizon group `300' out of range"):
            self.vpp.cli("set interface l2 bridge pg2 20 shg 300")
