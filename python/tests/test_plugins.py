"""The plugin boundary seen from outside: `show plugins`, `plugins { ... }` in startup.conf,
and the example plugin (plugins/example, docs/writing-a-plugin.md) doing its job as a
feature on the `ip4-unicast` arc with its own startup.conf section and CLI."""

from ip4_base import Ip4RouterTest
from sluice_test import IpRoute

TTL_LOW = ("example-ttl-check", "ip4 TTL below the example plugin's minimum")
PASSED = ("example-ttl-check", "ip4 TTL at or above the minimum")


class TestExamplePlugin(Ip4RouterTest):
    n_pg = 2
    extra_config = "plugins { plugin example_plugin.so { enable } }\nexample { min-ttl 5 }\n"

    def setup_test(self):
        super().setup_test()
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.snapshot_counters()

    def test_show_plugins_lists_every_plugin_and_its_state(self):
        out = self.vpp.cli("show plugins")
        for name in ("af_packet", "af_xdp", "memif", "tap", "dpdk", "tester", "example"):
            assert name in out, out
        assert "disabled" not in out, out

    def test_feature_drops_below_the_configured_ttl(self):
        low = [self.udp_from(self.pg0, "10.2.0.1", ttl=3, sport=1000 + i) for i in range(4)]
        high = [self.udp_from(self.pg0, "10.2.0.1", ttl=9, sport=2000 + i) for i in range(3)]
        # Not enabled on pg0 yet: everything is forwarded.
        self.send_and_expect(self.pg0, low, self.pg1)
        self.assert_counters({})
        self.vpp.cli("set interface feature pg0 example-ttl-check arc ip4-unicast")
        assert "example-ttl-check" in self.vpp.cli("show interface features pg0")
        self.send_and_assert_no_replies(self.pg0, low, "TTL 3 < min-ttl 5 (startup.conf)")
        self.assert_counters({TTL_LOW: 4})
        rx = self.send_and_expect(self.pg0, high, self.pg1)
        assert len(rx) == 3 and all(p["IP"].ttl == 8 for p in rx)
        # The CLI changes the same setting the nodes read.
        self.vpp.cli("example min-ttl 10")
        assert self.vpp.cli("show example").strip() == "example: min-ttl 10"
        self.send_and_assert_no_replies(self.pg0, high, "TTL 9 < min-ttl 10 (CLI)")
        self.assert_counters({PASSED: 3, TTL_LOW: 3})
        self.vpp.cli("set interface feature pg0 example-ttl-check arc ip4-unicast disable")
        self.send_and_expect(self.pg0, high, self.pg1)
        self.assert_counters({})

    def test_bad_input_names_the_token(self):
        self.assert_cli_error("example min-ttl 300", "`300'")
        self.assert_cli_error("example min-ttl many", "`many'")


class TestDisabledPlugin(Ip4RouterTest):
    """A disabled plugin registers nothing: its commands and nodes are absent."""
    n_pg = 2
    extra_config = "plugins { plugin memif { disable } }\n"

    def test_disabled_plugin_is_absent(self):
        out = self.vpp.cli("show plugins")
        line = next(l for l in out.splitlines() if " memif " in l)
        assert "disabled" in line, out
        self.assert_cli_error("create interface memif id 0 master", "memif")
        self.assert_cli_error("show node memif-input", "memif-input")
        # The example plugin is off by default: its feature is unknown.
        self.assert_cli_error(
            "set interface feature pg0 example-ttl-check arc ip4-unicast", "example-ttl-check")
