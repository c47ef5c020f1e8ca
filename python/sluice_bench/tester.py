"""The traffic tester: a Sluice daemon in the tester namespace driven through the `tester` CLI
(the contract between the tester and this harness: docs/benchmarking.md, "Tester CLI").

One `Tester` owns one daemon with one host-interface per topology port; every port both
transmits streams and receives (`set interface tester-rx`). A trial creates the streams at
their rates with `count = rate * duration`, clears the statistics, starts, waits for the
streams to finish, stops, drains (waits until every frame sent was received or reception
stopped, RFC 2544 §23: frames still in flight when the transmitter stops are not lost) and
reads `show tester json`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sluice_test.instance import CliError, SluiceInstance

from .counters import kernel_counters, sched_counters, sluice_counters

from .topology import Port, Topology

log = logging.getLogger("sluice_bench")

#: Drain after `tester stop`: at least this long (frames in flight reach the tester) ...
DRAIN_MIN_S = 0.02
#: ... then until every stream received what it sent, or its receive count did not move for
#: this long (the rest is lost) ...
DRAIN_IDLE_S = 0.25
#: ... but never longer than this (RFC 2544 §23's 2 s wait for residual frames).
DRAIN_MAX_S = 2.0
DRAIN_POLL_S = 0.025


@dataclass
class Stream:
    """One tester stream. `port` transmits; `rate_pps` and `count` are set per trial."""

    name: str
    port: Port
    dst_mac: str
    src: str            # "a.b.c.d" or "a.b.c.d-e.f.g.h" (IPv6 likewise)
    dst: str
    size: int
    flows: int = 1
    latency: bool = False
    rate_pps: float = 0.0
    sport: int = 1024
    dport: int = 1024
    ifname: str | None = None   # the tester's interface (default: host-<port.tester_if>)
    ip6: bool = False           # IPv6/UDP frames (src and dst are IPv6)

    def add_command(self, count: int) -> str:
        ifname = self.ifname or f"host-{self.port.tester_if}"
        cmd = (f"tester stream add name {self.name} interface {ifname} "
               f"size {self.size} rate {max(1, int(round(self.rate_pps)))} count {count} "
               f"dst-mac {self.dst_mac} src-mac {self.port.tester_mac} "
               f"{'ip6 ' if self.ip6 else ''}src {self.src} "
               f"dst {self.dst} sport {self.sport} dport {self.dport} flows {self.flows}")
        return cmd + (" latency" if self.latency else "")


class TesterError(RuntimeError):
    pass


class Tester:
    """`attach`: "af_packet" (a host-interface on each tester veth) or "memif" (memif master
    interfaces `memif1/<port>` on the socket `memif_socket`, for the memif DUT)."""

    def __init__(self, binary: Path, topo: Topology, buffers: int = 32768,
                 attach: str = "af_packet", memif_socket: Path | None = None):
        core = topo.tester_cores[0]
        self.topo = topo
        self.attach = attach
        self.memif_socket = memif_socket
        self.ifnames: dict[str, str] = {}
        self.vpp = SluiceInstance(
            "bench-tester",
            extra_config=f"cpu {{ main-core {core} }}",
            binary=binary,
            wrapper=topo.wrapper(topo.tester_ns),
            buffers=f"buffers {{ buffers-per-numa {buffers} page-size 4k }}",
        )
        self._streams: set[str] = set()

    def __enter__(self) -> "Tester":
        self.vpp.start()
        try:
            self.setup()
        except BaseException:
            self.vpp.kill()
            raise
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if not self.vpp.alive():
            return
        if exc_type is None:
            self.vpp.stop()  # checks a clean exit with no buffer in use
            self.vpp.remove_dir()
        else:
            self.vpp.kill()

    def cli(self, cmd: str) -> str:
        return self.vpp.cli(cmd)

    def setup(self) -> None:
        try:
            for i, port in enumerate(self.topo.ports):
                if self.attach == "memif":
                    if i == 0:
                        self.cli(f"create memif socket id 1 filename {self.memif_socket}")
                    self.cli(f"create interface memif id {i} socket-id 1 master "
                             f"hw-addr {port.tester_mac}")
                    ifn = f"memif1/{i}"
                else:
                    self.cli(f"create host-interface name {port.tester_if} "
                             f"hw-addr {port.tester_mac}")
                    ifn = f"host-{port.tester_if}"
                self.ifnames[port.tester_if] = ifn
                self.cli(f"set interface state {ifn} up")
                self.cli(f"set interface tester-rx {ifn}")
        except CliError as e:
            raise TesterError(f"the Sluice tester does not accept the tester CLI: {e}") from e

    def show(self) -> dict:
        text = self.cli("show tester json").strip()
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise TesterError(f"`show tester json' did not print JSON ({e}): {text[:200]!r}") from e

    def counter_snapshot(self) -> dict[str, int]:
        """The tester daemon's own counters (its drivers' drops, tester-rx errors) and, on
        veths, the kernel's in the tester namespace."""
        out = sluice_counters(self.vpp)
        out.update(sched_counters(self.vpp.proc.pid if self.vpp.proc else None, "tester"))
        if self.attach != "memif":
            out.update(kernel_counters(self.topo.tester_ns))
        return out

    def drain(self, streams: list[Stream]) -> dict:
        """Waits for frames still in flight after `tester stop` (see DRAIN_*); returns
        {"drain_s": waited, "drained": True if everything sent was received}."""
        t0 = time.monotonic()
        time.sleep(DRAIN_MIN_S)
        last, since = None, time.monotonic()
        while True:
            st = self.show()["streams"]
            now = time.monotonic()
            rx = tuple(st.get(s.name, {}).get("rx_packets", 0) for s in streams)
            done = all(x.get("rx_packets", 0) - x.get("duplicate", 0) >= x.get("tx_packets", 0)
                       for x in (st.get(s.name, {}) for s in streams))
            if rx != last:
                last, since = rx, now
            if done or now - since >= DRAIN_IDLE_S or now - t0 >= DRAIN_MAX_S:
                return {"drain_s": round(now - t0, 3), "drained": done}
            time.sleep(DRAIN_POLL_S)

    def clear_streams(self) -> None:
        for name in sorted(self._streams):
            self.vpp.cli_try(f"tester stream del name {name}")
        self._streams.clear()

    def run(self, streams: list[Stream], duration_s: float,
            before: Callable[[], None] | None = None,
            after: Callable[[], None] | None = None) -> dict:
        """Runs the streams together for `duration_s`; returns
        {"streams": {name: stats}, "wall_s": s, "drain_s": s, "drained": bool} (stats as `show tester json`). `before` runs
        just before `tester start`, `after` once late packets had their time (CPU and energy
        snapshots bracket the traffic)."""
        self.clear_streams()
        for s in streams:
            s.ifname = self.ifnames.get(s.port.tester_if, s.ifname)
            count = max(1, int(round(s.rate_pps * duration_s)))
            self.cli(s.add_command(count))
            self._streams.add(s.name)
        self.cli("tester clear")
        if before:
            before()
        t0 = time.monotonic()
        self.cli("tester start")
        time.sleep(duration_s)
        deadline = time.monotonic() + max(2.0, duration_s)
        while time.monotonic() < deadline:
            st = self.show()["streams"]
            if not any(st.get(s.name, {}).get("running") for s in streams):
                break
            time.sleep(0.05)
        self.cli("tester stop")
        wall = time.monotonic() - t0
        drain = self.drain(streams)
        if after:
            after()
        out = self.show()
        missing = [s.name for s in streams if s.name not in out.get("streams", {})]
        if missing:
            raise TesterError(f"`show tester json' lacks streams {missing}")
        return {"streams": {s.name: out["streams"][s.name] for s in streams}, "wall_s": wall,
                **drain}
