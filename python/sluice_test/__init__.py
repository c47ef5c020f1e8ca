"""Functional test framework for Sluice (VPP test-framework style): a real daemon per test,
scapy packets in and out through packet-generator interfaces, counter deltas, leak checks."""

from .checks import assert_icmp_checksum, assert_ip4_checksum, assert_udp_checksum
from .config import (Feature, InterfaceAddress, InterfaceTable, IpNeighbor, IpRoute, IpTable,
                     SluiceObject)
from .instance import CliError, SluiceError, SluiceInstance, sluice_binary
from .pcap import count_pcap_records, read_pcap, write_pcap
from .pg import PgInterface, Stream
from .testcase import SluiceTestCase

__all__ = [
    "CliError", "Feature", "InterfaceAddress", "InterfaceTable", "IpNeighbor", "IpRoute", "IpTable",
    "PgInterface", "SluiceError",
    "SluiceInstance", "SluiceObject", "SluiceTestCase", "Stream", "assert_icmp_checksum",
    "assert_ip4_checksum", "assert_udp_checksum", "count_pcap_records", "read_pcap",
    "sluice_binary", "write_pcap",
]
