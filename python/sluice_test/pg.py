"""Packet-generator (pg) interfaces: streams in from pcap, captures out to pcap."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from scapy.packet import Packet

from .pcap import Frame, count_pcap_records, read_pcap, write_pcap

if TYPE_CHECKING:
    from .testcase import SluiceTestCase


class Stream:
    """A pcap-replay stream created on a pg interface; `expected` is how many packets it
    sends before the generator disables it (its limit, or the pcap's length)."""

    def __init__(self, name: str, intf: "PgInterface", pcap: Path, expected: int):
        self.name = name
        self.intf = intf
        self.pcap = pcap
        self.expected = expected
        self.enabled = False


class PgInterface:
    """`pgN`: created by `create packet-generator interface pgN`, MAC 02:fe:00:00:00:NN.

    Addressing convention (VPP test framework style): the router owns 10.0.N.1/24 and
    fd01:N::1/64 on pgN (`config_ip4()`, `config_ip6()`), and "remote hosts" on those subnets
    are 10.0.N.H / fd01:N::H with MAC 02:00:00:00:NN:HH (`remote_ip4`/`remote_ip6`/
    `remote_mac` is host 2)."""

    def __init__(self, test: "SluiceTestCase", index: int):
        if not 0 <= index < 256:
            raise ValueError(f"pg interface index {index} out of range")
        self.test = test
        self.index = index
        self.name = f"pg{index}"
        self.local_mac = f"02:fe:00:00:00:{index:02x}"
        self.local_ip4 = f"10.0.{index}.1"
        self.local_ip4_prefix_len = 24
        self.remote_ip4 = self.remote_host_ip4(2)
        self.remote_mac = self.remote_host_mac(2)
        self.local_ip6 = str(ipaddress.IPv6Address(f"fd01:{index:x}::1"))
        self.local_ip6_prefix_len = 64
        self.remote_ip6 = self.remote_host_ip6(2)
        self.capture_path: Path | None = None
        self.capture_paths: list[Path] = []

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<PgInterface {self.name}>"

    # -- addressing ---------------------------------------------------------------------

    def remote_host_ip4(self, host: int) -> str:
        return f"10.0.{self.index}.{host}"

    def remote_host_ip6(self, host: int) -> str:
        return str(ipaddress.IPv6Address(f"fd01:{self.index:x}::{host:x}"))

    @property
    def local_ip6_prefix(self) -> str:
        return f"{self.local_ip6}/{self.local_ip6_prefix_len}"

    @property
    def local_ip6_ll(self) -> str:
        """The router's link-local address on this interface (EUI-64 of `local_mac`)."""
        b = bytes(int(x, 16) for x in self.local_mac.split(":"))
        iid = bytes([b[0] ^ 2, b[1], b[2], 0xff, 0xfe, b[3], b[4], b[5]])
        return str(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + iid))

    def remote_host_mac(self, host: int) -> str:
        return f"02:00:00:00:{self.index:02x}:{host:02x}"

    @property
    def local_ip4_prefix(self) -> str:
        return f"{self.local_ip4}/{self.local_ip4_prefix_len}"

    # -- configuration ------------------------------------------------------------------

    def create(self) -> "PgInterface":
        out = self.test.vpp.cli(f"create packet-generator interface {self.name}").strip()
        if out != self.name:
            raise AssertionError(f"create packet-generator interface {self.name} said {out!r}")
        return self

    def admin_up(self) -> None:
        self.test.vpp.cli(f"set interface state {self.name} up")

    def admin_down(self) -> None:
        self.test.vpp.cli(f"set interface state {self.name} down")

    def config_ip4(self):
        """Adds 10.0.N.1/24 (removed automatically at teardown); returns the config object."""
        from .config import InterfaceAddress

        return InterfaceAddress(self.test, self, self.local_ip4_prefix).add_config()

    def config_ip6(self):
        """Adds fd01:N::1/64 (and with it the link-local address); removed at teardown."""
        from .config import InterfaceAddress

        return InterfaceAddress(self.test, self, self.local_ip6_prefix).add_config()

    def resolve_ndp(self, host: int = 2):
        """Adds a static IPv6 neighbour for remote host `host` (removed at teardown)."""
        from .config import IpNeighbor

        return IpNeighbor(self.test, self, self.remote_host_ip6(host),
                          self.remote_host_mac(host)).add_config()

    def resolve_arp(self, host: int = 2):
        """Adds a static neighbour for remote host `host` (removed at teardown)."""
        from .config import IpNeighbor

        return IpNeighbor(self.test, self, self.remote_host_ip4(host),
                          self.remote_host_mac(host)).add_config()

    # -- streams ------------------------------------------------------------------------

    def add_stream(self, pkts: Iterable[Frame], node: str | None = None,
                   limit: int | None = None, rate: float | None = None,
                   worker: int | None = None) -> Stream:
        """Writes `pkts` to a pcap in the test's directory and creates a (disabled) stream
        replaying it into `node` (default ethernet-input) as if received on this interface.
        With `limit` larger than the pcap, the pcap is replayed in a loop. `worker`: the
        packets are received on that worker (handed to it by the main thread)."""
        pkts = list(pkts)
        if not pkts:
            raise ValueError("add_stream needs at least one packet")
        name = self.test.new_stream_name()
        pcap = self.test.new_file(f"{self.name}-in-{name}", "pcap")
        write_pcap(pcap, pkts)
        cmd = f"packet-generator new pcap {pcap} source {self.name} name {name}"
        if node:
            cmd += f" node {node}"
        if limit is not None:
            cmd += f" limit {limit}"
        if rate is not None:
            cmd += f" rate {rate}"
        if worker is not None:
            cmd += f" worker {worker}"
        self.test.vpp.cli(cmd)
        s = Stream(name, self, pcap, limit if limit is not None else len(pkts))
        self.test.register_stream(s)
        return s

    # -- captures -----------------------------------------------------------------------

    def enable_capture(self, count: int | None = None) -> Path:
        """Starts capturing what this interface transmits to a new pcap file (stopping by
        itself after `count` packets when given). Returns the file's path."""
        path = self.test.new_file(f"{self.name}-out", "pcap")
        cmd = f"packet-generator capture {self.name} pcap {path}"
        if count is not None:
            cmd += f" count {count}"
        self.test.vpp.cli(cmd)
        self.capture_path = path
        self.capture_paths.append(path)
        self.test.register_pcap(path)
        return path

    def disable_capture(self) -> None:
        self.test.vpp.cli(f"packet-generator capture {self.name} disable")

    def captured_count(self) -> int:
        return 0 if self.capture_path is None else count_pcap_records(self.capture_path)

    def get_capture(self, expected_count: int, timeout: float = 20.0,
                    remark: str = "") -> list[Packet]:
        """Waits until the capture holds `expected_count` packets, stops it and returns
        exactly that many packets (anything more or less fails). `timeout` only bounds the
        wait: it is reached only when packets are missing."""
        if self.capture_path is None:
            raise AssertionError(f"{self.name}: get_capture without enable_capture")
        path = self.capture_path
        deadline = time.monotonic() + timeout
        while count_pcap_records(path) < expected_count and time.monotonic() < deadline:
            time.sleep(0.02)
        self.disable_capture()
        self.capture_path = None
        pkts = read_pcap(path)
        if len(pkts) != expected_count:
            summary = "\n".join(f"  {p.summary()}" for p in pkts[:20])
            raise AssertionError(
                f"{remark + ': ' if remark else ''}{self.name} transmitted {len(pkts)} "
                f"packet(s), expected {expected_count} (capture {path}):\n{summary}")
        return pkts

    def stop_capture(self) -> list[Packet]:
        """Stops the capture and returns whatever it holds (call after the streams are done:
        with one thread, everything they caused has been transmitted by then)."""
        if self.capture_path is None:
            raise AssertionError(f"{self.name}: no capture enabled")
        path = self.capture_path
        self.disable_capture()
        self.capture_path = None
        return read_pcap(path)

    def assert_nothing_captured(self, remark: str = "") -> None:
        """Stops the capture and fails if it holds any packet."""
        if self.capture_path is None:
            raise AssertionError(f"{self.name}: no capture enabled")
        path = self.capture_path
        self.disable_capture()
        self.capture_path = None
        pkts = read_pcap(path)
        if pkts:
            summary = "\n".join(f"  {p.summary()}" for p in pkts[:20])
            raise AssertionError(
                f"{remark + ': ' if remark else ''}{self.name} transmitted {len(pkts)} "
                f"unexpected packet(s) (capture {path}):\n{summary}")
