"""Devices under test: small classes that configure the DUT namespace for a scenario.

A DUT is used as a context manager per (scenario, topology):

    with dut.running(topo, scenario):
        dut.cpu_begin(); ...trial...; dut.cpu_end()

Adding a DUT (another dataplane driven by its own CLI) is one subclass of `Dut`:

- `name`, and `cpu_metric` (which field of the CPU accounting is "the DUT's CPU": the
  process's own time, or the kernel time on the DUT cores);
- `unsupported(scenario)`: None, or the reason it cannot run it (printed in the report);
- `start(topo, scenario)`: start the dataplane in `topo.dut_ns` on `topo.dut_cores`, attach
  it to `topo.a.dut_if` / `topo.b.dut_if`, configure the scenario (addresses, static
  neighbours for the tester ports, routes, L2 ...), and return the MAC it answers on each
  port (`{dut_if: mac}`);
- `stop()`: stop it and undo what `start` did outside the namespace (the namespace itself is
  deleted by the topology);
- optionally `pid()` (for process CPU), `counters()` (text or dicts kept in the raw JSON)
  and `counter_snapshot()` (flat {name: count}; the harness records the non-zero deltas of
  every trial, so every loss can be traced to a drop counter),
  `max_rate` (the first trial's rate when the suite's is far too low for it) and
  `tester_args()` (how the tester attaches: af_packet on the veths by default, memif).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from sluice_test.instance import SluiceInstance

from .counters import kernel_counters, sched_counters, sluice_counters
from .scenarios import (TESTER_LIMITS, VXLAN_VNI, Scenario, acl_commands, acl_nft_ruleset,
                        filler6_prefixes, filler_prefixes)
from .topology import Topology, nsexec, sh

log = logging.getLogger("sluice_bench")


class Dut:
    name = "dut"
    cpu_metric = "kernel_s"

    def unsupported(self, sc: Scenario) -> str | None:
        return TESTER_LIMITS.get(sc.kind)

    def start(self, topo: Topology, sc: Scenario) -> dict[str, str]:
        raise NotImplementedError

    def stop(self, failed: bool = False) -> None:
        pass

    def pid(self) -> int | None:
        return None

    def counters(self) -> dict:
        return {}

    def counter_snapshot(self) -> dict[str, int]:
        """Cumulative counters as {name: count} (drops, errors, per-interface packets)."""
        return {}

    def alive(self) -> bool:
        """False when the dataplane process died (checked after every trial)."""
        return True

    def log_tail(self) -> str:
        """The end of the dataplane's log (for a crash report)."""
        return ""

    def restart(self, topo: Topology, sc: Scenario) -> dict[str, str]:
        """After a crash: clean up and start again with the same configuration."""
        self.stop(failed=True)
        return self.start(topo, sc)

    #: First trial's rate for this DUT, pps (None: the suite's `max_rate`).
    max_rate: float | None = None

    def tester_args(self) -> dict:
        """Extra arguments for the tester (`tester.Tester`): how it attaches to the ports."""
        return {}

    @contextlib.contextmanager
    def running(self, topo: Topology, sc: Scenario):
        macs = self.start(topo, sc)
        ok = False
        try:
            yield macs
            ok = True
        finally:
            self.stop(failed=not ok)


class LinuxRouter(Dut):
    """The Linux kernel forwarding in the DUT namespace: ip_forward=1, rp_filter off, static
    neighbours for the tester ports, the routes as `ip route` (the FIB filler through
    `ip -batch`; IPv6: the kernel's IPv6 enabled on the two ports only, without DAD, router
    advertisements or autoconfiguration, forwarding=1, `ip -6` routes the same way), nftables masquerade for NAT44, `tc` u32 + mirred redirect for the cross-connect,
    a Linux bridge with static FDB entries for bridging. RPS steers the receive work to the
    DUT cores (topology). Its CPU is the kernel time on the DUT cores."""

    name = "linux"
    cpu_metric = "kernel_s"

    def unsupported(self, sc: Scenario) -> str | None:
        if reason := super().unsupported(sc):
            return reason
        if sc.kind in ("nat44", "acl") and not _have("nft"):
            return "nft (nftables) is not installed: apt-get install nftables"
        return None

    def start(self, topo: Topology, sc: Scenario) -> dict[str, str]:
        ns = topo.dut_ns
        self.ns = ns
        a, b = topo.a, topo.b
        for k in ("all", "default", a.dut_if, b.dut_if):
            nsexec(ns, "sysctl", "-qw", f"net.ipv4.conf.{k}.rp_filter=0")
        if sc.kind in ("ip4", "nat44", "acl"):
            nsexec(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            batch = []
            for p in (a, b):
                batch.append(f"addr add {p.dut_ip}/24 dev {p.dut_if}")
                batch.append(f"neigh replace {p.tester_ip} lladdr {p.tester_mac} "
                             f"dev {p.dut_if} nud permanent")
                batch.append(f"route add {p.behind} via {p.tester_ip} dev {p.dut_if}")
            batch += [f"route add {pfx} via {b.tester_ip} dev {b.dut_if}"
                      for pfx in filler_prefixes(sc.routes - 1)]
            nsexec(ns, "ip", "-batch", "-", input="\n".join(batch) + "\n")
            if sc.kind == "nat44":
                nsexec(ns, "nft", "-f", "-", input=(
                    "table ip sbnat {\n"
                    "  chain post { type nat hook postrouting priority srcnat; policy accept;\n"
                    f"    oifname \"{b.dut_if}\" masquerade\n  }}\n}}\n"))
            if sc.kind == "acl":
                nsexec(ns, "nft", "-f", "-", input=acl_nft_ruleset(sc, a.dut_if, b.dut_if))
        elif sc.kind == "ip6":
            for k in ("all", "default", a.dut_if, b.dut_if):
                for opt, v in (("accept_dad", 0), ("accept_ra", 0), ("autoconf", 0),
                               ("disable_ipv6", 0), ("forwarding", 1)):
                    nsexec(ns, "sysctl", "-qw", f"net.ipv6.conf.{k}.{opt}={v}")
            batch = []
            for p in (a, b):
                batch.append(f"addr add {p.dut_ip6}/64 dev {p.dut_if} nodad")
                batch.append(f"neigh replace {p.tester_ip6} lladdr {p.tester_mac} "
                             f"dev {p.dut_if} nud permanent")
                batch.append(f"route add {p.behind6_prefix} via {p.tester_ip6} "
                             f"dev {p.dut_if}")
            batch += [f"route add {pfx} via {b.tester_ip6} dev {b.dut_if}"
                      for pfx in filler6_prefixes(sc.routes - 1)]
            nsexec(ns, "ip", "-6", "-batch", "-", input="\n".join(batch) + "\n")
        elif sc.kind == "l2xc":
            for src, dst in ((a, b), (b, a)):
                nsexec(ns, "tc", "qdisc", "add", "dev", src.dut_if, "ingress")
                # u32 matching everything: matchall/flower are modules this kernel may lack.
                nsexec(ns, "tc", "filter", "add", "dev", src.dut_if, "ingress", "protocol", "all",
                       "u32", "match", "u32", "0", "0",
                       "action", "mirred", "egress", "redirect", "dev", dst.dut_if)
        elif sc.kind == "vxlan":
            # The kernel's VXLAN device to B's tester address; A's frames redirected into it
            # (the cross-connect's tc redirect, one way).
            nsexec(ns, "ip", "-batch", "-", input=(
                f"addr add {b.dut_ip}/24 dev {b.dut_if}\n"
                f"neigh replace {b.tester_ip} lladdr {b.tester_mac} dev {b.dut_if} "
                "nud permanent\n"
                f"link add sbvx0 type vxlan id {VXLAN_VNI} local {b.dut_ip} remote "
                f"{b.tester_ip} dstport 4789 dev {b.dut_if} nolearning\n"
                "link set sbvx0 up\n"))
            nsexec(ns, "tc", "qdisc", "add", "dev", a.dut_if, "ingress")
            nsexec(ns, "tc", "filter", "add", "dev", a.dut_if, "ingress", "protocol", "all",
                   "u32", "match", "u32", "0", "0",
                   "action", "mirred", "egress", "redirect", "dev", "sbvx0")
        elif sc.kind == "bridge":
            nsexec(ns, "ip", "link", "add", "br0", "type", "bridge")
            for p in (a, b):
                nsexec(ns, "ip", "link", "set", p.dut_if, "master", "br0")
            nsexec(ns, "ip", "link", "set", "br0", "up")
            for p in (a, b):
                nsexec(ns, "bridge", "fdb", "replace", p.tester_mac, "dev", p.dut_if,
                       "master", "static")
        else:
            raise ValueError(f"LinuxRouter cannot configure {sc.kind}")
        return {a.dut_if: a.dut_mac, b.dut_if: b.dut_mac}

    def counters(self) -> dict:
        try:
            links = json.loads(nsexec(self.ns, "ip", "-s", "-j", "link", "show"))
        except Exception as e:  # counters are informative only
            return {"error": str(e)}
        return {l["ifname"]: l.get("stats64", {}) for l in links}

    def counter_snapshot(self) -> dict[str, int]:
        return kernel_counters(self.ns)


class SluiceAfPacket(Dut):
    """Sluice in the DUT namespace, attached with `create host-interface` (af_packet) to the
    veth ends, configured through its CLI; `workers` > 0 adds worker threads (the DUT cores
    after the first). Its CPU is the daemon's own process time. The other Sluice DUTs change
    only how a port is attached (`attach`)."""

    cpu_metric = "process_s"
    driver = "af_packet"

    def __init__(self, binary: Path, workers: int = 0):
        self.binary = binary
        self.workers = workers
        self.name = f"sluice-{self.driver}" + (f"-{workers}w" if workers else "")
        self.vpp: SluiceInstance | None = None
        self.ns: str | None = None
        #: Extra words for `create host-interface` (af_packet only, e.g. "v2").
        self.create_args = ""
        #: `set interface rx-mode` for every port after configuration (None: the default).
        self.rx_mode: str | None = None

    def unsupported(self, sc: Scenario) -> str | None:
        if reason := super().unsupported(sc):
            return reason
        return None

    def mac(self, port_index: int) -> str:
        # Not the veth's own MAC: the kernel must see Sluice's frames as PACKET_OTHERHOST.
        return f"02:fe:5c:00:00:{port_index + 1:02x}"

    def dp_cli(self, cmd: str) -> str:
        return self.vpp.cli(cmd)

    def attach(self, port_index: int, port) -> str:
        """Creates the interface for a topology port; returns its Sluice name."""
        extra = f" {self.create_args}" if self.create_args else ""
        self.vpp.cli(f"create host-interface name {port.dut_if} "
                     f"hw-addr {self.mac(port_index)}{extra}")
        return f"host-{port.dut_if}"

    def start(self, topo: Topology, sc: Scenario) -> dict[str, str]:
        cores = topo.dut_cores
        cpu = f"cpu {{ main-core {cores[0]}"
        if self.workers:
            wk = cores[1:] or cores[:1]
            cpu += f" corelist-workers {','.join(str(c) for c in wk[:self.workers])}"
        self.ns = topo.dut_ns
        self.vpp = SluiceInstance(
            f"bench-dut-{sc.name}", extra_config=cpu + " }", binary=self.binary,
            wrapper=topo.wrapper(topo.dut_ns),
            buffers="buffers { buffers-per-numa 32768 page-size 4k }")
        self.vpp.start()
        try:
            self._configure(topo, sc)
        except BaseException:
            self.stop(failed=True)
            raise
        return {p.dut_if: self.mac(i) for i, p in enumerate(topo.ports)}

    def _configure(self, topo: Topology, sc: Scenario) -> None:
        cli = self.vpp.cli
        ifs = {}
        for i, p in enumerate(topo.ports):
            ifs[p.dut_if] = self.attach(i, p)
            cli(f"set interface state {ifs[p.dut_if]} up")
        for c in scenario_commands(topo, sc, ifs):
            cli(c)
        if self.rx_mode:
            for h in ifs.values():
                cli(f"set interface rx-mode {h} {self.rx_mode}")

    def pid(self) -> int | None:
        return self.vpp.proc.pid if self.vpp and self.vpp.proc else None

    def alive(self) -> bool:
        return self.vpp is not None and self.vpp.alive()

    def log_tail(self) -> str:
        return self.vpp.stderr_text()[-1500:].strip() if self.vpp else ""

    def counters(self) -> dict:
        if not self.vpp or not self.vpp.alive():
            return {}
        return {c: self.vpp.cli_try(c) for c in
                ("show interface", "show errors", "show runtime", "show buffers")
                + self.driver_shows}

    #: Driver `show` commands kept with the counters (text).
    driver_shows: tuple[str, ...] = ()

    def counter_snapshot(self) -> dict[str, int]:
        if not self.vpp or not self.vpp.alive():
            return {}
        # The daemon's counters and the kernel's under it (the veths and the backlog of the
        # DUT namespace: frames the kernel dropped before the driver saw them).
        out = sluice_counters(self.vpp, self.driver_shows)
        out.update(sched_counters(self.pid(), "dut"))
        if self.ns:
            out.update(kernel_counters(self.ns))
        return out

    def stop(self, failed: bool = False) -> None:
        if self.vpp is None:
            return
        vpp, self.vpp = self.vpp, None
        if failed or not vpp.alive():
            vpp.kill()
            vpp.remove_dir()
            return
        vpp.stop()  # fails on buffers still in use at exit
        vpp.remove_dir()


class SluiceAfXdp(SluiceAfPacket):
    """Sluice attached to the same veth ends with `create interface af_xdp host-if` (native
    XDP, copy mode on veth, default rings); the port MAC is set with `set interface mac
    address` (af_xdp picks a random one). The tester still uses af_packet."""

    driver = "af_xdp"
    driver_shows = ("show af_xdp",)

    def attach(self, port_index: int, port) -> str:
        name = f"xdp{port_index}"
        self.vpp.cli(f"create interface af_xdp host-if {port.dut_if} name {name}")
        self.vpp.cli(f"set interface mac address {name} {self.mac(port_index)}")
        return name


class MemifSlave:
    """Memif ports instead of the veths, for a DUT class that has `dp_cli` (its CLI) and
    `mac`: one memif socket in a private temp dir, the tester master, the DUT slave
    (`memif1/0` = port A, `memif1/1` = port B). Mixed in before the DUT class."""

    driver = "memif"
    max_rate = 20_000_000.0
    sock_dir: Path | None = None

    def tester_args(self) -> dict:
        self.sock_dir = Path(tempfile.mkdtemp(prefix="sb-memif-"))
        return {"attach": "memif", "memif_socket": self.sock_dir / "memif.sock"}

    def attach(self, port_index: int, port) -> str:
        if port_index == 0:
            self.dp_cli(f"create memif socket id 1 filename {self.sock_dir / 'memif.sock'}")
        self.dp_cli(f"create interface memif id {port_index} socket-id 1 slave "
                    f"hw-addr {self.mac(port_index)}")
        return f"memif1/{port_index}"

    def restart(self, topo: Topology, sc: Scenario) -> dict[str, str]:
        keep, self.sock_dir = self.sock_dir, None  # the tester's socket stays
        try:
            self.stop(failed=True)
        finally:
            self.sock_dir = keep
        return self.start(topo, sc)

    def stop(self, failed: bool = False) -> None:
        try:
            super().stop(failed)
        finally:
            if self.sock_dir:
                shutil.rmtree(self.sock_dir, ignore_errors=True)
                self.sock_dir = None


class SluiceMemif(MemifSlave, SluiceAfPacket):
    """Sluice with memif ports: tester Sluice <-memif-> DUT Sluice <-memif-> tester (`MemifSlave`)
    instead of the veths. No kernel on the data path, so no Linux equivalent: the report shows
    it on its own, never as a ratio to Linux. It searches from `max_rate` (the tester's own
    limit shows as "≥")."""

    driver_shows = ("show memif",)
    LINK_TIMEOUT_S = 10.0

    def _configure(self, topo: Topology, sc: Scenario) -> None:
        super()._configure(topo, sc)
        wait_memif_up(self.vpp, [f"memif1/{i}" for i in range(len(topo.ports))],
                      self.LINK_TIMEOUT_S)


def wait_memif_up(vpp: SluiceInstance, names: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        down = [n for n in names if "link up" not in vpp.cli(f"show memif {n}")]
        if not down:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"memif {', '.join(down)} not up after {timeout_s:.0f} s")
        time.sleep(0.1)


def scenario_commands(topo: Topology, sc: Scenario, ifs: dict[str, str]) -> list[str]:
    """The CLI lines that configure a scenario on a Sluice or VPP DUT (the same syntax) whose
    port interfaces are `ifs` ({veth name: dataplane interface name}): addresses, static
    neighbours for the tester ports, routes (the FIB filler as one `ip route add count`),
    NAT44-ED as Linux's masquerade, the cross-connect both ways (VPP's l2-output needs the
    output interface in L2 mode), a bridge domain with static MACs, the ACL lists
    (`scenarios.acl_commands`)."""
    a, b = topo.a, topo.b
    ha, hb = ifs[a.dut_if], ifs[b.dut_if]
    out = []
    if sc.kind in ("ip4", "ip6", "nat44", "acl"):
        ip6 = sc.kind == "ip6"
        for p in (a, b):
            h = ifs[p.dut_if]
            cidr, gw, behind = p.l3(ip6)
            out += [f"set interface ip address {h} {cidr}",
                    f"ip neighbor {h} {gw} {p.tester_mac} static",
                    f"ip route add {behind} via {gw} {h}"]
        if sc.routes > 1:
            first = (filler6_prefixes if ip6 else filler_prefixes)(1)[0]
            out.append(f"ip route add count {sc.routes - 1} {first} via {b.l3(ip6)[1]} {hb}")
        if sc.kind == "nat44":
            # As Linux's masquerade: A's traffic leaves B with B's address (NAT44-ED).
            out += ["nat44 plugin enable sessions 200000",
                    f"nat44 add interface address {hb}",
                    f"set interface nat44 in {ha} out {hb}"]
        if sc.kind == "acl":
            out += acl_commands(sc, ha, hb)
    elif sc.kind == "l2xc":
        out += [f"set interface l2 xconnect {ha} {hb}", f"set interface l2 xconnect {hb} {ha}"]
    elif sc.kind == "vxlan":
        # L2 over VXLAN (CSIT's l2xcbase-vxlan): A cross-connected into a tunnel to B's tester.
        out += [f"set interface ip address {hb} {b.dut_ip}/24",
                f"ip neighbor {hb} {b.tester_ip} {b.tester_mac} static",
                f"create vxlan tunnel src {b.dut_ip} dst {b.tester_ip} vni {VXLAN_VNI}",
                "set interface state vxlan_tunnel0 up",
                f"set interface l2 xconnect {ha} vxlan_tunnel0",
                f"set interface l2 xconnect vxlan_tunnel0 {ha}"]
    elif sc.kind == "bridge":
        out.append("create bridge-domain 1 learn 0")
        for p in (a, b):
            out += [f"set interface l2 bridge {ifs[p.dut_if]} 1",
                    f"l2fib add {p.tester_mac} 1 {ifs[p.dut_if]} static"]
    else:
        raise ValueError(f"no DUT configuration for scenario kind {sc.kind}")
    return out


class NotSupportedDut(Dut):
    """A DUT the harness knows about but cannot drive yet: every scenario reports the reason."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason

    def unsupported(self, sc: Scenario) -> str | None:
        return self.reason


def _have(cmd: str) -> bool:
    return sh("sh", "-c", f"command -v {cmd}", check=False).strip() != ""
