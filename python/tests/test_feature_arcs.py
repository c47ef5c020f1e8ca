"""Feature arcs: every arc's counter feature (`<arc>-count`) counts exactly the packets that
crossed the arc on the interface it is enabled on, stops when disabled and is reset by
`clear interfaces`; features chain in order on one arc; `ip6-source-check-via-rx` (uRPF
strict) drops spoofed IPv6 sources with its `show errors` reason."""

from scapy.compat import raw
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from sluice_test import Feature, IpRoute, SluiceTestCase

A, B = "02:00:00:0a:00:01", "02:00:00:0b:00:01"


class TestFeatureArcs(SluiceTestCase):

    def setup_test(self):
        self.create_pg_interfaces(range(4), up=True, ip4=True, ip6=True, resolve=True)
        self.pg0, self.pg1, self.pg2, self.pg3 = self.pg_interfaces
        self.snapshot_counters()

    @staticmethod
    def udp4(src_if, dst, payload=b"x" * 20, src=None):
        return Ether(raw(Ether(dst=src_if.local_mac, src=src_if.remote_mac)
                         / IP(src=src or src_if.remote_ip4, dst=dst, ttl=64)
                         / UDP(sport=1, dport=2) / Raw(payload)))

    @staticmethod
    def udp6(src_if, dst, payload=b"y" * 30, src=None):
        return Ether(raw(Ether(dst=src_if.local_mac, src=src_if.remote_mac)
                         / IPv6(src=src or src_if.remote_ip6, dst=dst, hlim=64)
                         / UDP(sport=1, dport=2) / Raw(payload)))

    def feature(self, intf, name, arc):
        return Feature(self, intf, name, arc).add_config()

    def test_ip4_unicast_and_output_counters(self):
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        IpRoute(self, "10.3.0.0/16", via=self.pg3.remote_ip4).add_config()
        rx_cnt = self.feature(self.pg0, "ip4-unicast-count", "ip4-unicast")
        out1 = self.feature(self.pg1, "ip4-output-count", "ip4-output")
        out3 = self.feature(self.pg3, "ip4-output-count", "ip4-output")
        a = [self.udp4(self.pg0, f"10.2.0.{i + 1}") for i in range(10)]
        b = [self.udp4(self.pg2, "10.2.1.1", payload=b"z" * 50)] * 5
        c = [self.udp4(self.pg0, "10.3.0.1", payload=b"w" * 100)] * 3
        self.send_and_expect(self.pg0, a, self.pg1)
        self.send_and_expect(self.pg2, b, self.pg1)
        self.send_and_expect(self.pg0, c, self.pg3)
        # ip4-unicast runs on the IP packet (rx pg0 only: not pg2's 5);
        # ip4-output on the rewritten frame, per tx interface.
        ip_len = lambda p: len(p) - 14  # noqa: E731
        assert rx_cnt.counts() == (13, sum(map(ip_len, a + c)))
        assert out1.counts() == (15, sum(map(len, a + b)))
        assert out3.counts() == (3, sum(map(len, c)))
        # Enabled elsewhere only: pg2's arcs have nothing.
        feats = Feature(self, self.pg2, "ip4-unicast-count", "ip4-unicast").features()
        assert all(not v for v in feats.values()), feats
        # Disabled: traffic no longer counted (the counts are kept while disabled).
        out1.remove_config()
        self.send_and_expect(self.pg0, a, self.pg1)
        out1.add_config()
        assert out1.counts() == (15, sum(map(len, a + b)))
        assert rx_cnt.counts() == (23, sum(map(ip_len, a + c + a)))
        self.vpp.cli("clear interfaces")
        assert rx_cnt.counts() == (0, 0) and out1.counts() == (0, 0)
        self.assert_counters({})

    def test_ip6_unicast_and_output_counters(self):
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        rx_cnt = self.feature(self.pg0, "ip6-unicast-count", "ip6-unicast")
        out1 = self.feature(self.pg1, "ip6-output-count", "ip6-output")
        a = [self.udp6(self.pg0, f"fd02::{i + 1:x}") for i in range(7)]
        b = [self.udp6(self.pg2, "fd02::99", payload=b"q" * 64)] * 4
        self.send_and_expect(self.pg0, a, self.pg1)
        self.send_and_expect(self.pg2, b, self.pg1)
        assert rx_cnt.counts() == (7, sum(len(p) - 14 for p in a))
        assert out1.counts() == (11, sum(map(len, a + b)))
        # Disabled: not counted; the count is kept and shown again when re-enabled.
        rx_cnt.remove_config()
        self.send_and_expect(self.pg0, a, self.pg1)
        assert out1.counts() == (18, sum(map(len, a + b + a)))
        rx_cnt.add_config()
        assert rx_cnt.counts() == (7, sum(len(p) - 14 for p in a))
        self.assert_counters({})

    def test_toggling_features_under_traffic_loses_nothing(self):
        """Enabling and disabling features rewires the arcs while a stream runs: every
        packet is still forwarded (none dropped, none lost), and the counters stay exact
        per enabled interval (they only count while enabled)."""
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        pkts = [self.udp4(self.pg0, f"10.2.{i}.1") for i in range(32)]
        total = 40_000
        before = self.get_interface_counters()
        stream = self.pg0.add_stream(pkts, limit=total, rate=40_000)
        self.pg_enable()
        out = Feature(self, self.pg1, "ip4-output-count", "ip4-output")
        rpf = Feature(self, self.pg0, "ip4-source-check-via-rx", "ip4-unicast")
        toggles = 0
        while self.stream_sent(stream) < total * 3 // 4 and toggles < 200:
            out.add_config()
            rpf.add_config()
            out.remove_config()
            rpf.remove_config()
            toggles += 1
        assert toggles >= 5, "stream ended before the features were toggled"
        self.wait_for_streams([stream])
        after = self.get_interface_counters()
        sent = after["pg1"]["tx packets"] - before["pg1"].get("tx packets", 0)
        assert sent == total, (sent, total)
        passed = self.get_counters().get(
            ("ip4-source-check-via-rx", "ip4 source check passed"), 0)
        self.assert_counters({("ip4-source-check-via-rx", "ip4 source check passed"): passed})
        assert self.vpp.alive()

    def test_features_chain_in_order_on_one_arc(self):
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.feature(self.pg0, "ip4-source-check-via-rx", "ip4-unicast")
        cnt = self.feature(self.pg0, "ip4-unicast-count", "ip4-unicast")
        names = [f.name for f in cnt.features()["ip4-unicast"]]
        assert names == ["ip4-source-check-via-rx", "ip4-unicast-count"], names
        good = [self.udp4(self.pg0, "10.2.0.1")] * 3
        spoof = [self.udp4(self.pg0, "10.2.0.1", src=self.pg1.remote_ip4)] * 2
        self.send_and_expect(self.pg0, good, self.pg1)
        self.send_and_assert_no_replies(self.pg0, spoof, "spoofed source")
        # The counter runs after the source check: it saw only what passed.
        assert cnt.counts() == (3, 3 * (len(good[0]) - 14))
        self.assert_counters({
            ("ip4-source-check-via-rx", "ip4 source check passed"): 3,
            ("ip4-source-check-via-rx",
             "ip4 source check: route to source via another interface"): 2})

    def test_ip6_source_check_drops_spoofed_sources(self):
        IpRoute(self, "fd02::/48", via=self.pg1.remote_ip6).add_config()
        self.feature(self.pg0, "ip6-source-check-via-rx", "ip6-unicast")
        ok = [self.udp6(self.pg0, "fd02::1")] * 4
        rx = self.send_and_expect(self.pg0, ok, self.pg1)
        assert rx[0][IPv6].hlim == 63
        wrong_if = [self.udp6(self.pg0, "fd02::1", src=self.pg2.remote_ip6)] * 3
        no_route = [self.udp6(self.pg0, "fd02::1", src="2001:db8::1")] * 2
        self.send_and_assert_no_replies(self.pg0, wrong_if + no_route, "spoofed sources")
        # Not enabled on pg2: its traffic is not checked.
        self.send_and_expect(self.pg2, [self.udp6(self.pg2, "fd02::1", src="2001:db8::2")],
                             self.pg1)
        self.assert_counters({
            ("ip6-source-check-via-rx", "ip6 source check passed"): 4,
            ("ip6-source-check-via-rx",
             "ip6 source check: route to source via another interface"): 3,
            ("ip6-source-check-via-rx", "ip6 source check: no route to source"): 2})

    def test_bad_feature_lines_name_the_token(self):
        for line, token in [
                ("set interface feature pg0 no-such arc ip4-output", "`no-such'"),
                ("set interface feature pg0 ip4-output-count arc no-arc", "`no-arc'"),
                ("set interface feature pg0 ip4-output-count arc l2-output",
                 "on arc `ip4-output'"),
                ("set interface feature pg9 ip4-output-count arc ip4-output", "`pg9'")]:
            msg = self.assert_cli_error(line, token)
            assert "\n" not in msg.strip(), msg


class TestL2FeatureArcs(SluiceTestCase):
    """`l2-input` (keyed by the rx interface, before bridging/cross-connecting) and
    `l2-output` (keyed by the tx interface, flooded copies included)."""

    def setup_test(self):
        self.create_pg_interfaces(range(4), up=True)
        self.pg0, self.pg1, self.pg2, self.pg3 = self.pg_interfaces
        self.snapshot_counters()

    def feature(self, intf, name, arc):
        return Feature(self, intf, name, arc).add_config()

    def test_l2_input_and_output_counters_on_a_bridge(self):
        self.vpp.cli("create bridge-domain 10")
        for i in range(3):
            self.vpp.cli(f"set interface l2 bridge pg{i} 10")
        try:
            self._bridge_counts()
        finally:
            for i in range(3):
                self.vpp.cli(f"set interface l3 pg{i}")
            self.vpp.cli("create bridge-domain 10 del")

    def _bridge_counts(self):
        in0 = self.feature(self.pg0, "l2-input-count", "l2-input")
        out1 = self.feature(self.pg1, "l2-output-count", "l2-output")
        out2 = self.feature(self.pg2, "l2-output-count", "l2-output")
        bcast = Ether(raw(Ether(dst="ff:ff:ff:ff:ff:ff", src=A) / Raw(b"b" * 50)))
        # Broadcast from pg0: one input, a flooded copy out of pg1 and one out of pg2.
        for p in (self.pg1, self.pg2):
            p.enable_capture()
        self.pg0.add_stream([bcast] * 4)
        self.pg_start()
        self.pg1.get_capture(4)
        self.pg2.get_capture(4)
        assert in0.counts() == (4, 4 * len(bcast))
        assert out1.counts() == (4, 4 * len(bcast))
        assert out2.counts() == (4, 4 * len(bcast))
        # B on pg1 answers A (learned on pg0): not counted on pg0's input nor pg1/pg2 output.
        self.wait_for(lambda: A.replace(":", "") in self.vpp.cli("show l2fib").replace(":", ""),
                      "A learned")
        uni = Ether(raw(Ether(dst=A, src=B) / Raw(b"u" * 80)))
        self.send_and_expect(self.pg1, [uni] * 6, self.pg0)
        assert in0.counts() == (4, 4 * len(bcast))
        assert out1.counts() == (4, 4 * len(bcast)) and out2.counts() == (4, 4 * len(bcast))
        # Known unicast pg0 -> pg1 (B learned): input on pg0, output on pg1 only.
        self.wait_for(lambda: B.replace(":", "") in self.vpp.cli("show l2fib").replace(":", ""),
                      "B learned")
        to_b = Ether(raw(Ether(dst=B, src=A) / Raw(b"k" * 30)))
        self.send_and_expect(self.pg0, [to_b] * 5, self.pg1)
        assert in0.counts() == (9, 4 * len(bcast) + 5 * len(to_b))
        assert out1.counts() == (9, 4 * len(bcast) + 5 * len(to_b))
        assert out2.counts() == (4, 4 * len(bcast))
        in0.remove_config()
        out1.remove_config()
        self.send_and_expect(self.pg0, [to_b] * 5, self.pg1)
        in0.add_config()
        out1.add_config()
        assert in0.counts() == (9, 4 * len(bcast) + 5 * len(to_b))
        assert out1.counts() == (9, 4 * len(bcast) + 5 * len(to_b))

    def test_l2_counters_on_a_cross_connect(self):
        self.vpp.cli("set interface l2 xconnect pg2 pg3")
        try:
            in2 = self.feature(self.pg2, "l2-input-count", "l2-input")
            out3 = self.feature(self.pg3, "l2-output-count", "l2-output")
            f = Ether(raw(Ether(dst=B, src=A) / Raw(b"x" * 60)))
            rx = self.send_and_expect(self.pg2, [f] * 8, self.pg3)
            assert raw(rx[0]) == raw(f)
            assert in2.counts() == (8, 8 * len(f)) and out3.counts() == (8, 8 * len(f))
        finally:
            self.vpp.cli("set interface l3 pg2")

