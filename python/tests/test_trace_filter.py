"""`trace add <node> <n> filter` with `classify filter trace mask .. match ..`: only the
packets matching the IPv4 src/dst/proto/port filter are traced, up to n of them."""

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from ip4_base import Ip4RouterTest
from sluice_test import CliError, IpRoute


class TestTraceFilter(Ip4RouterTest):
    trace_count = 0
    trace_cmd = "trace add pg-input 50 filter"

    def pg_enable(self):
        # As the framework's, with `trace_cmd` instead of a plain `trace add`.
        streams, self._pending = self._pending, []
        self.vpp.cli("clear trace")
        self.vpp.cli(self.trace_cmd)
        for s in streams:
            self.vpp.cli(f"packet-generator enable {s.name}")
            s.enabled = True
        return streams

    def traced(self):
        return self.vpp.cli("show trace max 1000").count("Packet ")

    def flows(self):
        """20 packets from each of 10.0.0.2..5 (UDP port 5678 + i), 5 TCP from 10.0.0.9."""
        pkts = [self.udp_from(self.pg0, "10.2.0.1", src_ip=f"10.0.0.{2 + i % 4}",
                              dport=5678 + i % 2) for i in range(80)]
        pkts += [Ether(dst=self.pg0.local_mac, src=self.pg0.remote_mac)
                 / IP(src="10.0.0.9", dst="10.2.0.1") / TCP(sport=999, dport=80)] * 5
        return pkts

    def run_flows(self):
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        self.send_and_expect(self.pg0, self.flows(), self.pg1)

    def test_src_filter_traces_only_matching_packets(self):
        self.vpp.cli("classify filter trace mask l3 ip4 src match l3 ip4 src 10.0.0.3")
        self.run_flows()
        assert self.traced() == 20
        out = self.vpp.cli("show trace")
        assert "10.0.0.3 -> 10.2.0.1" in out and "10.0.0.2 -> " not in out, out

    def test_ports_and_proto(self):
        self.vpp.cli("classify filter trace mask l3 ip4 src proto l4 dst_port "
                     "match l3 ip4 src 10.0.0.4 proto 17 l4 dst_port 5679")
        self.run_flows()
        assert self.traced() == 0, "10.0.0.4 only sends to 5678"
        self.vpp.cli("classify filter trace mask l3 ip4 proto l4 dst_port "
                     "match l3 ip4 proto 17 l4 dst_port 5679")
        self.send_and_expect(self.pg0, self.flows(), self.pg1)
        assert self.traced() == 40
        self.vpp.cli("classify filter trace mask l3 ip4 proto match l3 ip4 proto 6")
        self.send_and_expect(self.pg0, self.flows(), self.pg1)
        assert self.traced() == 5

    def test_budget_counts_matching_packets_only(self):
        self.trace_cmd = "trace add pg-input 7 filter"
        self.vpp.cli("classify filter trace mask l3 ip4 src dst "
                     "match l3 ip4 src 10.0.0.5 dst 10.2.0.1")
        self.run_flows()
        assert self.traced() == 7
        # Without `filter` every packet is traced again; `del` removes the filter.
        self.trace_cmd = "trace add pg-input 100"
        self.send_and_expect(self.pg0, self.flows(), self.pg1)
        assert self.traced() == 85
        self.vpp.cli("classify filter trace del")
        self.trace_cmd = "trace add pg-input 100 filter"
        self.send_and_expect(self.pg0, self.flows(), self.pg1)
        assert self.traced() == 0, "no filter: nothing matches"

    def test_bad_filters_name_the_token(self):
        for cmd, want in [
            ("classify filter trace mask l3 ip4 bogus match l3 ip4 src 1.2.3.4", "`bogus'"),
            ("classify filter trace mask l3 ip4 src match l3 ip4 dst 1.2.3.4", "`dst'"),
            ("classify filter trace mask l3 ip4 src match l3 ip4 src 1.2.3", "`1.2.3'"),
            ("classify filter trace mask l3 ip4 proto match l3 ip4 proto 300", "`300'"),
        ]:
            with pytest.raises(CliError) as e:
                self.vpp.cli(cmd)
            assert want in str(e.value), (cmd, str(e.value))

    def test_trace_filter_include_exclude_node(self):
        """`trace filter include|exclude <node> <count>` shows only the traced packets that
        went (did not go) through the node, at most count; `none` shows all again."""
        self.trace_cmd = "trace add pg-input 200"
        IpRoute(self, "10.2.0.0/16", via=self.pg1.remote_ip4).add_config()
        dropped = [self.udp_from(self.pg0, "10.3.0.1")] * 6
        self.send_and_expect(self.pg0, self.flows() + dropped, self.pg1, n_rx=85)
        assert self.traced() == 91
        self.vpp.cli("trace filter include error-drop 100")
        assert self.traced() == 6
        out = self.vpp.cli("show trace max 1000")
        assert "no route to destination" in out and "ip4-rewrite" not in out, out
        self.vpp.cli("trace filter include error-drop 4")
        assert self.traced() == 4
        self.vpp.cli("trace filter exclude error-drop 1000")
        assert self.traced() == 85
        self.vpp.cli("trace filter include ip4-rewrite 10")
        assert self.traced() == 10
        self.vpp.cli("trace filter none")
        assert self.traced() == 91
        with pytest.raises(CliError) as e:
            self.vpp.cli("trace filter include no-such-node 1")
        assert "`no-such-node'" in str(e.value)
        with pytest.raises(CliError) as e:
            self.vpp.cli("trace filter sideways ip4-lookup 1")
        assert "`sideways'" in str(e.value)
