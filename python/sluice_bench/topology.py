"""The benchmark topology: a tester namespace and a DUT namespace joined by two veth pairs.

    tester ns                         DUT ns
    t0 (02:fe:7e:00:00:01) ---veth--- d0 (02:fe:d0:00:00:01)   port A, 198.18.1.0/24, 2001:2:0:1::/64
    t1 (02:fe:7e:00:00:02) ---veth--- d1 (02:fe:d0:00:00:02)   port B, 198.19.1.0/24, 2001:2:0:2::/64

Names carry the harness's pid so concurrent runs never collide; every address lives only in
these namespaces (RFC 2544 appendix C's 198.18.0.0/15 benchmark range, plus the FIB-scale
filler prefixes, which no frame is ever sent to outside them; IPv6: RFC 5180's benchmark
range 2001:2::/48). The kernel's IPv6 is disabled in both namespaces unless a Linux DUT
enables it on its ports for an IPv6 scenario. `Topology` is a context
manager: leaving it (also on an exception or a signal turned into one) deletes both
namespaces, which removes the veths with them.

RPS: veth delivers a frame on the CPU that transmitted it. To keep the DUT's receive work on
the DUT's cores (and the tester's on the tester's), each interface's rx queue is steered with
rps_cpus: d0/d1 to the DUT cores, t0/t1 to the tester cores. Without RPS (`--rps off`) a
receiver's kernel work runs in its sender's transmit call, on the sender's core.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass

log = logging.getLogger("sluice_bench")

#: veth MTU: Ethernet's standard 1500. Frame sizes are RFC 2544's, FCS included: the largest,
#: 1518, is 1514 bytes handed to the driver carrying a 1500-byte IP packet
#: (`scenarios.tester_size`), so every DUT forwards it at its default MTU. (An earlier harness
#: sent 1518 bytes without FCS, a 1504-byte packet, and raised the MTU to 1600 to make it fit.)
MTU = 1500


class CommandError(RuntimeError):
    pass


def sh(*args: str, check: bool = True, input: str | None = None) -> str:
    """Runs a command (no shell); raises CommandError with its stderr on failure."""
    p = subprocess.run(list(args), capture_output=True, text=True, input=input)
    if check and p.returncode != 0:
        raise CommandError(f"`{' '.join(args)}' failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def nsexec(ns: str, *args: str, check: bool = True, input: str | None = None) -> str:
    return sh("ip", "netns", "exec", ns, *args, check=check, input=input)


def cpu_mask(cores: list[int]) -> str:
    return format(sum(1 << c for c in cores), "x")


@dataclass
class Port:
    tester_if: str
    dut_if: str
    tester_mac: str
    dut_mac: str
    net: str        # link subnet prefix, e.g. "198.18.1"
    behind: str     # network behind the tester port, e.g. "198.18.128.0/17"
    net6: str = "2001:2:0:1"        # IPv6 link /64 prefix
    behind6: str = "2001:2:0:10"    # IPv6 /64 behind the tester port

    @property
    def dut_ip(self) -> str:
        return f"{self.net}.1"

    @property
    def tester_ip(self) -> str:
        return f"{self.net}.2"

    @property
    def dut_ip6(self) -> str:
        return f"{self.net6}::1"

    @property
    def tester_ip6(self) -> str:
        return f"{self.net6}::2"

    @property
    def behind6_prefix(self) -> str:
        return f"{self.behind6}::/64"

    def l3(self, ip6: bool) -> tuple[str, str, str]:
        """(DUT address with its prefix length, tester address, network behind the tester)
        of this port in one address family."""
        if ip6:
            return f"{self.dut_ip6}/64", self.tester_ip6, self.behind6_prefix
        return f"{self.dut_ip}/24", self.tester_ip, self.behind


#: Scheduling of the Sluice daemons (tester and Sluice DUTs), `--priority`:
#: - "normal": as started (CFS, nice 0, in the harness's session);
#: - "high": its own session (so its own autogroup: with kernel.sched_autogroup_enabled, nice
#:   only weighs inside a session's group) at autogroup nice -20: against nice-0 neighbours
#:   the pinned poller gets ~99 % of its core, and they still run;
#: - "realtime": SCHED_FIFO 10, never preempted by normal tasks, but the kernel's RT
#:   throttling (sched_rt_runtime_us, 950 ms per 1 s) stops a spinning poller for 50 ms
#:   every second: worse than "high" for loss.
#: On a shared machine a polling daemon that waits for its core cannot poll: its rings
#: overflow at any rate (docs/benchmarking.md, "Loss at low rates").
PRIORITIES = {
    "normal": [],
    "high": ["setsid", "sh", "-c", 'echo -20 > /proc/self/autogroup 2>/dev/null; exec nice -n -20 "$@"',
             "sh"],
    "realtime": ["chrt", "-f", "10"],
}


class Topology:
    """Creates `<p>t` (tester) and `<p>d` (DUT) namespaces with veth pairs t0-d0, t1-d1."""

    def __init__(self, tester_cores: list[int], dut_cores: list[int], tag: str | None = None,
                 rps: bool = True, priority: str = "normal"):
        p = tag or f"sb{os.getpid()}"
        self.prefix = p
        self.tester_ns = f"{p}t"
        self.dut_ns = f"{p}d"
        self.tester_cores = tester_cores
        self.dut_cores = dut_cores
        self.a = Port(f"{p}t0", f"{p}d0", "02:fe:7e:00:00:01", "02:fe:d0:00:00:01",
                      "198.18.1", "198.18.128.0/17", "2001:2:0:1", "2001:2:0:10")
        self.b = Port(f"{p}t1", f"{p}d1", "02:fe:7e:00:00:02", "02:fe:d0:00:00:02",
                      "198.19.1", "198.19.128.0/17", "2001:2:0:2", "2001:2:0:20")
        self.rps = rps
        self.priority = priority
        self.up = False

    def wrapper(self, ns: str) -> list[str]:
        """The command prefix that starts a daemon in namespace `ns` at the suite's priority."""
        return [*PRIORITIES[self.priority], "ip", "netns", "exec", ns]

    @property
    def ports(self) -> tuple[Port, Port]:
        return (self.a, self.b)

    def __enter__(self) -> "Topology":
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def create(self) -> None:
        self.destroy()  # leftovers of a killed run with the same pid
        for ns in (self.tester_ns, self.dut_ns):
            sh("ip", "netns", "add", ns)
            self.up = True
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # No IPv6 chatter (router solicitations, DAD) on the test links.
            nsexec(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            nsexec(ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        for port in self.ports:
            sh("ip", "link", "add", port.tester_if, "netns", self.tester_ns,
               "address", port.tester_mac, "mtu", str(MTU), "type", "veth",
               "peer", "name", port.dut_if, "netns", self.dut_ns, "address", port.dut_mac,
               "mtu", str(MTU))
            for ns, ifn, cores in ((self.tester_ns, port.tester_if, self.tester_cores),
                                   (self.dut_ns, port.dut_if, self.dut_cores)):
                sh("ip", "-n", ns, "link", "set", ifn, "up")
                if self.rps:
                    self.set_rps(ns, ifn, cores)

    def set_rps(self, ns: str, ifn: str, cores: list[int]) -> None:
        # /sys/class/net shows the namespace of the process that mounted sysfs: write it from
        # inside the namespace with a fresh sysfs view (ip netns exec remounts /sys).
        nsexec(ns, "sh", "-c",
               f"for q in /sys/class/net/{ifn}/queues/rx-*; do echo {cpu_mask(cores)} > $q/rps_cpus; done")

    def destroy(self) -> None:
        for ns in (self.tester_ns, self.dut_ns):
            sh("ip", "netns", "del", ns, check=False)
        self.up = False
