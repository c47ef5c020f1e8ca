"""FD.io VPP beside Sluice: a VPP process driven through its own CLI (`vppctl`), as an engine
path runner (`vpp-pg`: the same pcaps and routes as `sluice-bench ip4|ip6|l2|memif`) and as
RFC 2544 DUTs (`vpp-af_packet`, `vpp-af_xdp`, `vpp-memif`: the same scenarios, pinning and
counters as the Sluice DUTs).

VPP is never built or installed by the harness: the user points at an install prefix
(`--vpp-prefix DIR` or `VPP_PREFIX`; `DIR/bin/vpp` and `DIR/bin/vppctl`). Without one, or when
VPP does not start, every VPP row says why and the rest of the suite runs
(docs/benchmarking.md, "VPP beside Sluice", has the build).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sluice_test.parsers import parse_errors, parse_interfaces

from .counters import kernel_counters, sched_counters
from .duts import Dut, MemifSlave, scenario_commands
from .scenarios import Scenario

log = logging.getLogger("sluice_bench")

#: DUT names of the VPP rows.
VPP_DUTS = ("vpp-af_packet", "vpp-af_xdp", "vpp-memif")

#: Words in `vppctl` output that mean the command failed (vppctl itself exits 0).
_ERROR_RE = re.compile(r"unknown input|unknown interface|parse error|^\s*\S[^\n]*: (?:error|"
                       r"failed|invalid|no such|not found|cannot|could not)", re.I | re.M)


class VppError(RuntimeError):
    pass


def prefix_from(arg: Path | str | None) -> Path | None:
    """`--vpp-prefix`, else `VPP_PREFIX`, else None."""
    p = arg or os.environ.get("VPP_PREFIX")
    return Path(p) if p else None


def prefix_problem(prefix: Path | None) -> str | None:
    """None when `prefix` holds a runnable VPP, else why the VPP rows are skipped."""
    if prefix is None:
        return ("no VPP install given (--vpp-prefix DIR or VPP_PREFIX; "
                "docs/benchmarking.md: building VPP without DPDK)")
    for b in ("vpp", "vppctl"):
        f = prefix / "bin" / b
        if not f.is_file() or not os.access(f, os.X_OK):
            return f"VPP prefix {prefix}: {f} is missing or not executable"
    return None


def lib_path(prefix: Path) -> str:
    dirs = [prefix / "lib", prefix / "lib" / "x86_64-linux-gnu", prefix / "lib64"]
    return ":".join(str(d) for d in dirs if d.is_dir())


def plugin_path(prefix: Path) -> str | None:
    for d in (prefix / "lib" / "x86_64-linux-gnu" / "vpp_plugins", prefix / "lib" / "vpp_plugins",
              prefix / "lib64" / "vpp_plugins"):
        if d.is_dir():
            return str(d)
    return None


def has_plugin(prefix: Path, name: str) -> bool:
    d = plugin_path(prefix)
    return bool(d) and (Path(d) / f"{name}_plugin.so").is_file()


class VppInstance:
    """One VPP process with its own runtime directory, CLI socket and API segment prefix.

    startup.conf as docs/benchmarking.md gives it for this machine: no DPDK, 4 KiB pages,
    `statseg { size 1G }` (VPP aborts adding 1M routes with the default statistics segment),
    one thread on `main_core`."""

    def __init__(self, prefix: Path, tag: str, main_core: int = 0,
                 wrapper: list[str] | None = None, buffers: int = 32768,
                 heap: str = "1G", statseg: str = "1G"):
        self.prefix = prefix
        self.tag = "".join(c if c.isalnum() else "-" for c in tag)[:32]
        self.main_core = main_core
        self.wrapper = list(wrapper or [])
        self.buffers = buffers
        self.heap = heap
        self.statseg = statseg
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None
        self.vppctl = str(prefix / "bin" / "vppctl")

    @property
    def sock(self) -> Path:
        assert self.dir is not None
        return self.dir / "cli.sock"

    @property
    def log_path(self) -> Path:
        assert self.dir is not None
        return self.dir / "vpp.log"

    def startup_conf(self) -> str:
        plugins = "plugins {\n  plugin dpdk_plugin.so { disable }\n"
        if (pp := plugin_path(self.prefix)):
            plugins = f"plugins {{\n  path {pp}\n  plugin dpdk_plugin.so {{ disable }}\n"
        return (
            "unix {\n  nodaemon\n"
            f"  cli-listen {self.sock}\n  runtime-dir {self.dir}\n"
            f"  log {self.dir}/vpp-internal.log\n  full-coredump\n}}\n"
            f"api-segment {{ prefix sb{os.getpid()}{self.tag} }}\n"
            f"socksvr {{ socket-name {self.dir}/api.sock }}\n"
            f"cpu {{ main-core {self.main_core} }}\n"
            f"{plugins}}}\n"
            f"buffers {{ buffers-per-numa {self.buffers} page-size 4k }}\n"
            f"memory {{ main-heap-size {self.heap} main-heap-page-size 4k }}\n"
            f"statseg {{ size {self.statseg} page-size 4k socket-name {self.dir}/stats.sock }}\n"
        )

    def start(self, timeout: float = 30.0) -> "VppInstance":
        self.dir = Path(tempfile.mkdtemp(prefix=f"sb-vpp-{self.tag}-", dir="/tmp"))
        conf = self.dir / "startup.conf"
        conf.write_text(self.startup_conf())
        env = dict(os.environ)
        lp = lib_path(self.prefix)
        if lp:
            env["LD_LIBRARY_PATH"] = lp + (":" + env["LD_LIBRARY_PATH"]
                                           if env.get("LD_LIBRARY_PATH") else "")
        log.info("starting %s -c %s", self.prefix / "bin" / "vpp", conf)
        with open(self.log_path, "wb") as err:
            self.proc = subprocess.Popen(
                [*self.wrapper, str(self.prefix / "bin" / "vpp"), "-c", str(conf)],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env, cwd=self.dir)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.remove_dir()
                raise VppError(f"VPP exited with status {self.proc.returncode} during "
                               f"start-up: {tail}")
            if self.sock.exists():
                out = self._ctl("show version", check=False, timeout=5)
                if out is not None and "vpp" in out.lower():
                    break
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.kill()
                raise VppError(f"VPP did not answer on {self.sock} within {timeout:.0f} s: "
                               f"{tail}")
            time.sleep(0.1)
        self.version = out.strip()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pid(self) -> int | None:
        return self.proc.pid if self.alive() else None

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:].strip()
        except (OSError, AssertionError):
            return ""

    def _ctl(self, cmd: str, check: bool = True, timeout: float = 120.0) -> str | None:
        try:
            p = subprocess.run([self.vppctl, "-s", str(self.sock), cmd], capture_output=True,
                               text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            if check:
                raise VppError(f"vppctl `{cmd}' timed out after {timeout:.0f} s")
            return None
        if p.returncode != 0:
            if check:
                raise VppError(f"vppctl `{cmd}' failed ({p.returncode}): "
                               f"{(p.stderr or p.stdout).strip()[:500]}; "
                               f"VPP {'running' if self.alive() else 'exited'}: "
                               f"{self.log_tail(500)}")
            return None
        return p.stdout

    def cli(self, cmd: str, timeout: float = 120.0) -> str:
        """Runs a command; raises VppError when VPP reports an error."""
        out = self._ctl(cmd, timeout=timeout) or ""
        if _ERROR_RE.search(out):
            raise VppError(f"VPP `{cmd}': {out.strip()[:500]}")
        return out

    def cli_try(self, cmd: str) -> str | None:
        try:
            return self._ctl(cmd, check=False, timeout=30)
        except Exception:  # diagnostics only
            return None

    def exec_lines(self, lines, name: str = "script.cli") -> float:
        """Writes CLI lines to a file in the runtime dir and runs `exec` on it; returns the
        wall seconds it took."""
        assert self.dir is not None
        f = self.dir / name
        with open(f, "w") as fh:
            for line in lines:
                fh.write(line)
                fh.write("\n")
        t0 = time.monotonic()
        self.cli(f"exec {f}", timeout=1800)
        dt = time.monotonic() - t0
        f.unlink()
        return dt

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.remove_dir()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.remove_dir()

    def remove_dir(self) -> None:
        if self.dir is not None and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)


# -- show runtime -------------------------------------------------------------------------

_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_RT_ROW = re.compile(rf"^(\S+)\s+.*?\s({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM})\s*$")


def parse_runtime(text: str) -> dict[str, dict]:
    """`show runtime` (VPP or Sluice) → {node: {calls, vectors, clocks, vpc}} for the nodes
    that processed packets (main thread; per-worker tables are added up per node)."""
    out: dict[str, dict] = {}
    for line in text.splitlines():
        m = _RT_ROW.match(line.strip())
        if not m or m.group(1) in ("Name",):
            continue
        name = m.group(1)
        calls, vectors, _susp, clocks, vpc = (float(m.group(i)) for i in range(2, 7))
        if vectors <= 0:
            continue
        o = out.setdefault(name, {"calls": 0.0, "vectors": 0.0, "clocks_total": 0.0})
        o["calls"] += calls
        o["vectors"] += vectors
        o["clocks_total"] += clocks * vectors
    for o in out.values():
        o["clocks"] = o["clocks_total"] / o["vectors"]
        o["vpc"] = o["vectors"] / max(o["calls"], 1.0)
    return out


# -- engine paths (vpp-pg) ------------------------------------------------------------------

PG_MAC = {"pg0": "02:fe:00:00:00:00", "pg1": "02:fe:00:00:00:01"}


def _pg_setup(v: VppInstance) -> None:
    for i in ("pg0", "pg1"):
        v.cli(f"create packet-generator interface {i}")
        # pg has no MAC filter (ethernet-input accepts any destination on it); the MAC is
        # set as Sluice's pg interfaces have it, best effort.
        v.cli_try(f"set interface mac address {i} {PG_MAC[i]}")
        v.cli(f"set interface state {i} up")


def _l2_mac(i: int) -> str:
    b = [0x02, 0x10, (i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255, i & 255]
    return ":".join(f"{x:02x}" for x in b)


def case_setup(v: VppInstance, case: dict, inputs: Path) -> tuple[Path, float | None]:
    """Configures VPP for one of sluice-bench's engine cases (the same interfaces, neighbours,
    routes or MACs); returns (the case's pcap, route/MAC install seconds)."""
    fam, routes, name = case["family"], case.get("routes"), case["name"]
    if fam in ("ip4", "ip6"):
        _pg_setup(v)
        if fam == "ip4":
            v.cli("set interface ip address pg0 10.0.0.1/24")
            v.cli("set interface ip address pg1 10.0.1.1/24")
            v.cli("ip neighbor pg1 10.0.1.2 02:00:00:00:01:02 static")
            nh = "10.0.1.2"
        else:
            v.cli("set interface ip address pg0 fd01::1/64")
            v.cli("set interface ip address pg1 fd01:1::1/64")
            v.cli("ip neighbor pg1 fd01:1::2 02:00:00:00:01:02 static")
            nh = "fd01:1::2"
        rfile = inputs / f"{fam}-{routes}.routes"
        if not rfile.is_file():
            raise VppError(f"{rfile} missing (sluice-bench --keep-inputs did not write it)")
        with open(rfile) as fh:
            prefixes = [x.strip() for x in fh if x.strip()]
        dt = v.exec_lines(f"ip route add {p} via {nh} pg1" for p in prefixes)
        return inputs / f"{fam}-{routes}.pcap", dt
    if fam == "l2":
        _pg_setup(v)
        if "flood" in name:
            # Sluice's learning flood: 1M frames to the one static MAC, each from a new
            # source, learning on. `run_cli` (before every run) empties the table again.
            v.cli("create bridge-domain 1 learn 1")
            v.cli("set interface l2 bridge pg0 1")
            v.cli("set interface l2 bridge pg1 1")
            for c in run_cli(case):
                v.cli(c)
            return inputs / "l2-flood.pcap", None
        if name == "xconnect":
            # VPP's l2-output needs the output interface in L2 mode: both directions.
            v.cli("set interface l2 xconnect pg0 pg1")
            v.cli("set interface l2 xconnect pg1 pg0")
            return inputs / "l2-1.pcap", None
        n = 1_000_000 if "1M" in name else 1
        v.cli("create bridge-domain 1 learn 0")
        v.cli("set interface l2 bridge pg0 1")
        v.cli("set interface l2 bridge pg1 1")
        dt = v.exec_lines(f"l2fib add {_l2_mac(i)} 1 pg1 static" for i in range(n))
        return inputs / f"l2-{n}.pcap", dt
    if fam == "memif":
        _pg_setup(v)
        assert v.dir is not None
        sock = v.dir / "m.sock"
        link = v.dir / "m-link.sock"
        link.symlink_to(sock)
        v.cli(f"create memif socket id 1 filename {sock}")
        v.cli(f"create memif socket id 2 filename {link}")
        v.cli("create interface memif id 0 socket-id 1 master ring-size 1024")
        v.cli("create interface memif id 0 socket-id 2 slave ring-size 1024")
        for i in ("memif1/0", "memif2/0"):
            v.cli(f"set interface state {i} up")
        for a, b in (("pg0", "memif1/0"), ("memif1/0", "pg0"),
                     ("memif2/0", "pg1"), ("pg1", "memif2/0")):
            v.cli(f"set interface l2 xconnect {a} {b}")
        deadline = time.monotonic() + 20
        while True:
            s = v.cli("show memif")
            if s.count("connected") >= 2 and "disconnected" not in s:
                break
            if time.monotonic() > deadline:
                raise VppError(f"VPP memif pair did not connect: {s[-600:]}")
            time.sleep(0.2)
        return inputs / f"memif-{case.get('size', 64)}.pcap", None
    raise VppError(f"no VPP equivalent for engine case {fam} {name}")


def run_cli(case: dict) -> list[str]:
    """CLI lines run before every replay of a case (outside the timed part): the learning
    flood starts each run from an empty MAC table with only its static MAC, as Sluice's side
    does by ageing the learned MACs out. (`clear l2fib` removes static entries too.)"""
    if case["family"] == "l2" and "flood" in case["name"]:
        return ["clear l2fib", f"l2fib add {_l2_mac(0)} 1 pg1 static"]
    return []


def replay(v: VppInstance, pcap: Path, packets: int, runs: int, poll_s: float = 0.002,
           before_run: list[str] | None = None) -> tuple[list[float], list[dict[str, dict]], int]:
    """Replays `pcap` from pg0 into ethernet-input: one warm-up, then `runs` runs of
    `packets`; Mpps = packets / wall time from enable to the stream's end (polled);
    `before_run` CLI lines run before each run, untimed.
    Returns (Mpps per run, `show runtime` per run, packets dropped)."""
    if not pcap.is_file():
        raise VppError(f"{pcap} missing (sluice-bench --keep-inputs did not write it)")
    mpps, rts = [], []
    for run in range(runs + 1):
        for c in before_run or []:
            v.cli(c)
        v.cli_try("packet-generator delete s")
        v.cli(f"packet-generator new name s limit {packets} node ethernet-input "
              f"source pg0 pcap {pcap}")
        v.cli("clear runtime")
        v.cli("clear errors")
        t0 = time.monotonic()
        v.cli("packet-generator enable-stream s")
        deadline = t0 + 600
        while True:
            s = v.cli("show packet-generator")
            # "Name  Enabled  Count  Parameters": the stream disables itself at its limit.
            row = next((x for x in s.splitlines() if x.split()[:1] == ["s"]), "")
            if " No " in f" {row} " or "No" in row.split()[1:2]:
                break
            if time.monotonic() > deadline:
                raise VppError(f"pg stream not done after 600 s: {s[-300:]}")
            time.sleep(poll_s)
        dt = time.monotonic() - t0
        rt = parse_runtime(v.cli("show runtime"))
        if run == 0:
            continue
        mpps.append(packets / dt / 1e6)
        rts.append(rt)
    drops = int(sum(r.get("error-drop", {}).get("vectors", 0) for r in rts))
    return mpps, rts, drops


def _median_nodes(rts: list[dict[str, dict]], packets: int) -> list[list]:
    """Median clocks/packet of every node that handled at least a tenth of the packets
    (the path; the per-run node order is by first appearance)."""
    names: list[str] = []
    for rt in rts:
        for n, s in rt.items():
            if n not in names and s["vectors"] >= packets / 10:
                names.append(n)
    order = sorted(names, key=path_rank)
    return [[n, round(statistics.median(rt[n]["clocks"] for rt in rts if n in rt), 2)]
            for n in order]


_RANK = [("pg-input", 0), ("memif-input", 5), ("ethernet-input", 10), ("ip4-input", 20),
         ("ip6-input", 20), ("l2-input", 20), ("l2-learn", 21), ("l2-fwd", 22),
         ("ip4-lookup", 30), ("ip6-lookup", 30), ("load-balance", 35), ("rewrite", 40),
         ("l2-output", 50), ("interface-output", 55), ("-output", 56), ("memif-tx", 57),
         ("-tx", 60), ("error-drop", 90), ("drop", 91)]


def path_rank(node: str) -> int:
    for key, r in _RANK:
        if key in node:
            return r
    return 80


def run_engine(prefix: Path, inputs: Path, sluice_cases: list[dict], packets: int, runs: int,
               main_core: int, wrapper: list[str] | None = None, progress=None,
               out: dict | None = None, on_case=None,
               count_bound_packets: int | None = None) -> dict:
    """Runs VPP over every Sluice engine case it has an equivalent for; returns
    {version, packets, runs, cases: [...like engine.parse...], errors: {case: why}}, filled
    into `out` as it goes (`on_case()` after each case: an interrupted run keeps them).
    Cases whose work depends on the packet count (`run_cli`: the learning flood, where only
    the pcap's first pass learns) replay `count_bound_packets` (Sluice's count) when given."""
    out = {} if out is None else out
    out.update({"packets": packets, "runs": runs, "cases": [], "errors": {}, "version": None})
    base: dict[str, float] = {}
    for case in sluice_cases:
        key = f"{case['family']} {case['name']}"
        if case["family"] not in ("ip4", "ip6", "l2", "memif") or "features" in case["name"]:
            continue
        if progress:
            progress(f"vpp-pg {key}")
        v = VppInstance(prefix, f"pg{len(out['cases'])}", main_core=main_core, wrapper=wrapper)
        try:
            v.start()
            out["version"] = out["version"] or v.version.splitlines()[0]
            pcap, setup_s = case_setup(v, case, inputs)
            n = count_bound_packets if run_cli(case) and count_bound_packets else packets
            mpps, rts, drops = replay(v, pcap, n, runs, before_run=run_cli(case))
            all_nodes = _median_nodes(rts, n)
            # Sluice's engine paths start at ethernet-input (its pg-input is not in them).
            nodes = [x for x in all_nodes if x[0] != "pg-input"]
            pg_in = next((c for n, c in all_nodes if n == "pg-input"), None)
            path = [c for n, c in nodes]
            r = {"family": case["family"], "name": case["name"], "routes": case.get("routes"),
                 "dut": "vpp", "mpps": [round(min(mpps), 3), round(statistics.median(mpps), 3),
                                         round(max(mpps), 3)],
                 "path_clocks": round(sum(path), 2), "nodes": nodes, "dropped": drops,
                 "pg_input_clocks": pg_in,
                 "setup_s": round(setup_s, 2) if setup_s is not None else None}
            if n != packets:
                r["packets"] = n
            if drops:
                r["note"] = f"{drops} packets reached error-drop: {v.cli_try('show errors')}"
            if case.get("routes") == 1 or case["name"] in ("bridge, 1 MAC",):
                base[case["family"]] = r["mpps"][1]
            if case["family"] in base and case["family"] in ("ip4", "ip6", "l2") \
                    and case["name"] != "xconnect":
                r["ratio"] = round(r["mpps"][1] / base[case["family"]], 3)
            out["cases"].append(r)
        except Exception as e:  # one broken case must not stop the others
            log.exception("vpp-pg %s failed", key)
            out["errors"][key] = f"{type(e).__name__}: {e}"[:1500]
        finally:
            v.stop()
        if on_case:
            on_case()
    return out


# -- RFC 2544 DUTs (vpp-af_packet, vpp-af_xdp, vpp-memif) ---------------------------------



class VppAfPacket(Dut):
    """VPP in the DUT namespace on the DUT core (`cpu { main-core }`, one thread), attached
    with `create host-interface name d0/d1 hw-addr ...` (the Sluice DUTs' port MACs),
    configured with the same CLI lines as the Sluice DUTs (VPP's syntax: addresses,
    `ip neighbor ... static`, `ip route add [count N]`, xconnect both ways, bridge domain with
    static `l2fib add`, NAT44-ED). Its CPU is the process's own time. The other VPP DUTs
    change only how a port is attached."""

    cpu_metric = "process_s"
    driver = "af_packet"
    plugin = "af_packet"

    def __init__(self, prefix: Path | None):
        self.prefix = prefix
        self.name = f"vpp-{self.driver}"
        self.v: VppInstance | None = None
        self.ns: str | None = None

    def unsupported(self, sc: Scenario) -> str | None:
        if reason := super().unsupported(sc):
            return reason
        if reason := prefix_problem(self.prefix):
            return reason
        if not has_plugin(self.prefix, self.plugin):
            return (f"this VPP install has no {self.plugin} plugin "
                    f"({plugin_path(self.prefix) or self.prefix}: not built)")
        if sc.kind == "nat44" and not has_plugin(self.prefix, "nat"):
            return "this VPP install has no nat plugin"
        if sc.kind == "vxlan" and not has_plugin(self.prefix, "vxlan"):
            return "this VPP install has no vxlan plugin"
        return None

    def mac(self, port_index: int) -> str:
        return f"02:fe:5c:00:00:{port_index + 1:02x}"

    def dp_cli(self, cmd: str) -> str:
        return self.v.cli(cmd)

    def attach(self, port_index: int, port) -> str:
        self.v.cli(f"create host-interface name {port.dut_if} hw-addr {self.mac(port_index)}")
        return f"host-{port.dut_if}"

    def start(self, topo, sc: Scenario) -> dict[str, str]:
        self.ns = topo.dut_ns
        self.v = VppInstance(self.prefix, f"{self.driver}-{sc.name}",
                             main_core=topo.dut_cores[0], wrapper=topo.wrapper(topo.dut_ns))
        try:
            self.v.start()
            self._configure(topo, sc)
        except BaseException as e:
            tail = self.v.log_tail(800) if self.v.alive() else ""
            self.stop(failed=True)
            if isinstance(e, VppError) and tail:
                raise VppError(f"{e} (VPP log: {tail})") from e
            raise
        return {p.dut_if: self.mac(i) for i, p in enumerate(topo.ports)}

    def _configure(self, topo, sc: Scenario) -> None:
        cli = self.v.cli
        ifs = {}
        for i, p in enumerate(topo.ports):
            ifs[p.dut_if] = self.attach(i, p)
            cli(f"set interface state {ifs[p.dut_if]} up")
        for c in scenario_commands(topo, sc, ifs):
            cli(c, timeout=900)  # 255k routes, 1M MACs: seconds, on a busy machine more

    def pid(self) -> int | None:
        return self.v.pid() if self.v else None

    def alive(self) -> bool:
        return self.v is not None and self.v.alive()

    def log_tail(self) -> str:
        return self.v.log_tail() if self.v else ""

    #: Driver `show` commands kept with the counters (text).
    driver_shows: tuple[str, ...] = ("show hardware-interfaces",)

    def counters(self) -> dict:
        if not self.v or not self.v.alive():
            return {}
        return {c: self.v.cli_try(c) for c in
                ("show version", "show interface", "show errors", "show runtime",
                 "show buffers") + self.driver_shows}

    def counter_snapshot(self) -> dict[str, int]:
        if not self.v or not self.v.alive():
            return {}
        out: dict[str, int] = {}
        try:
            for (node, reason), n in parse_errors(self.v.cli_try("show errors") or "").items():
                out[f"error {node}: {reason}"] = n
            for ifn, cs in parse_interfaces(self.v.cli_try("show interface") or "").items():
                for c, n in cs.items():
                    out[f"{ifn} {c}"] = n
        except Exception as e:  # counters are diagnostics: never fail a trial over them
            log.warning("vpp counters: %s", e)
        out.update(sched_counters(self.pid(), "dut"))
        if self.ns:
            out.update(kernel_counters(self.ns))
        return out

    def stop(self, failed: bool = False) -> None:
        if self.v is None:
            return
        v, self.v = self.v, None
        if failed:
            v.kill()
        else:
            v.stop()


class VppAfXdp(VppAfPacket):
    """VPP attached with `create interface af_xdp host-if d0 name xdp0 no-zero-copy` (native
    XDP in copy mode on the veth; VPP loads its default XDP program) and `set interface mac
    address`. The tester stays on af_packet."""

    driver = "af_xdp"
    plugin = "af_xdp"

    def attach(self, port_index: int, port) -> str:
        name = f"xdp{port_index}"
        self.v.cli(f"create interface af_xdp host-if {port.dut_if} name {name} no-zero-copy")
        self.v.cli(f"set interface mac address {name} {self.mac(port_index)}")
        return name


class VppMemif(MemifSlave, VppAfPacket):
    """VPP with memif ports to the Sluice tester (tester master, VPP slave, `MemifSlave`), as
    `sluice-memif`: no kernel on the data path, no Linux ratio."""

    plugin = "memif"
    LINK_TIMEOUT_S = 15.0

    def _configure(self, topo, sc: Scenario) -> None:
        super()._configure(topo, sc)
        names = [f"memif1/{i}" for i in range(len(topo.ports))]
        deadline = time.monotonic() + self.LINK_TIMEOUT_S
        while True:
            s = self.v.cli("show memif")
            if s.count(" connected") >= len(names) and "disconnected" not in s:
                return
            if time.monotonic() > deadline:
                raise VppError(f"VPP memif {', '.join(names)} not connected after "
                               f"{self.LINK_TIMEOUT_S:.0f} s: {s[-600:]}")
            time.sleep(0.2)


def make_vpp_dut(name: str, prefix: Path | None) -> Dut:
    cls = {"vpp-af_packet": VppAfPacket, "vpp-af_xdp": VppAfXdp, "vpp-memif": VppMemif}[name]
    return cls(prefix)


# -- tunnels (scripts/tunnel-bench.sh --vpp) -----------------------------------------------

#: Sluice's peer on the underlay (bench/src/tunnel.rs `base`).
_PEER_MAC = "02:00:00:00:00:02"
_HOST_MAC = "02:aa:00:00:00:01"

#: The VPP plugin each tunnel case needs beside the core (SRv6 is in vnet).
_TUNNEL_PLUGIN = {"vxlan": "vxlan", "gre": "gre", "ipip": "ipip", "gtpu": "gtpu"}

#: VPP's names of the nodes that do a case's encap or decap (for the "tunnel node" column).
_TUNNEL_NODE_RE = re.compile(r"vxlan4-|gre4-|ipip4-|gtpu4-|sr-|midchain")


def tunnel_pcap(inputs: Path, case: str) -> Path:
    """The pcap `sluice-bench tunnel --keep-inputs` wrote for `case`."""
    return inputs / (case.replace(" ", "_").replace(",", "_") + ".pcap")


def vni_plus_one(src: Path, dst: Path) -> None:
    """A copy of a VXLAN-decap pcap with every VNI + 1: VPP refuses VNI 0 ("vni not
    specified"), so its tunnel t has VNI t + 1 where Sluice's has t."""
    d = bytearray(src.read_bytes())
    at = 24
    while at + 16 <= len(d):
        n = int.from_bytes(d[at + 8:at + 12], "little")
        off = at + 16 + 14 + 20 + 8 + 4
        vni = int.from_bytes(d[off:off + 3], "big") + 1
        d[off:off + 3] = vni.to_bytes(3, "big")
        at += 16 + n
    dst.write_bytes(bytes(d))


def _tunnel_peer(t: int) -> str:
    """bench/src/tunnel.rs `tunnel_peer`."""
    return "10.0.0.2" if t == 0 else f"10.1.{t // 250}.{t % 250 + 1}"


def _tunnel_proto(case: str) -> str:
    return case.split()[0]


def tunnel_cli(case: str, tunnels: int) -> list[str]:
    """VPP's CLI for one of `sluice-bench tunnel`'s cases (bench/src/tunnel.rs): the same
    interfaces, addresses, static neighbours, tunnels, routes, bridge or xconnects, in VPP's
    syntax. Where VPP needs more than Sluice: a decapsulating L3 tunnel is made unnumbered
    to pg1 (VPP's ip4-input drops on an interface with IPv4 off), the peers 10.1/16 of the
    many-tunnel decap cases get a route (VPP's ip4-local drops a packet from a source it
    cannot reach), GTP-U gets `decap-next ip4` (VPP's default is l2), VXLAN VNIs are t + 1 (see `vni_plus_one`), and pg1 is
    xconnected back into the first VXLAN tunnel (VPP's l2-output needs its output in L2
    mode)."""
    proto = _tunnel_proto(case)
    decap = "decap" in case or "end.dx4" in case
    underlay = "pg0" if decap else "pg1"
    lines = [f"set interface ip address {underlay} 10.0.0.1/24",
             f"ip neighbor {underlay} 10.0.0.2 {_PEER_MAC} static"]
    if case == "vxlan encap":
        return lines + ["create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni 13",
                        "set interface state vxlan_tunnel0 up",
                        "create bridge-domain 1 learn 0",
                        "set interface l2 bridge pg0 1",
                        "set interface l2 bridge vxlan_tunnel0 1",
                        "l2fib add 02:bb:00:00:00:02 1 vxlan_tunnel0 static"]
    if case.startswith("vxlan decap"):
        for t in range(tunnels):
            lines += [f"create vxlan tunnel src 10.0.0.1 dst 10.0.0.2 vni {t + 1} instance {t}",
                      f"set interface state vxlan_tunnel{t} up",
                      f"set interface l2 xconnect vxlan_tunnel{t} pg1"]
        return lines + ["set interface l2 xconnect pg1 vxlan_tunnel0"]
    if proto in ("gre", "ipip", "gtpu"):
        # bench/src/tunnel.rs `l3_tunnel`: tunnel t to `_tunnel_peer(t)` (GTP-U: to
        # 10.0.0.2 with TEID 7 + t), interfaces named in creation order.
        ifn = {"gre": "gre", "ipip": "ipip", "gtpu": "gtpu_tunnel"}[proto]
        for t in range(tunnels):
            if proto == "gtpu":
                lines.append(f"create gtpu tunnel src 10.0.0.1 dst 10.0.0.2 teid {7 + t} "
                             "decap-next ip4")
            else:
                lines.append(f"create {proto} tunnel src 10.0.0.1 dst {_tunnel_peer(t)}")
            lines.append(f"set interface state {ifn}{t} up")
        if decap:
            lines += ["set interface ip address pg1 198.51.100.1/24",
                      f"ip neighbor pg1 198.51.100.2 {_HOST_MAC} static"]
            if tunnels > 1:
                # VPP's ip4-local drops a packet whose source it has no route for
                # ("ip4 source lookup miss"); Sluice's does not look.
                lines.append("ip route add 10.1.0.0/16 via 10.0.0.2 pg0")
            return lines + [f"set interface unnumbered {ifn}{t} use pg1"
                            for t in range(tunnels)]
        lines += ["set interface ip address pg0 172.16.0.1/24",
                  f"ip neighbor pg0 172.16.0.2 {_HOST_MAC} static"]
        if tunnels == 1:
            return lines + [f"ip route add 198.51.100.0/24 via {ifn}0"]
        lines.append("ip route add 10.1.0.0/16 via 10.0.0.2 pg1")
        return lines + [f"ip route add 198.18.{t >> 8}.{t & 255}/32 via {ifn}{t}"
                        for t in range(tunnels)]
    if proto == "srv6":
        lines += [f"set interface ip address {underlay} 2001:db8::1/64",
                  f"ip neighbor {underlay} 2001:db8::2 {_PEER_MAC} static",
                  f"ip route add fc00:a::/32 via 2001:db8::2 {underlay}",
                  "set sr encaps source addr 2001:db8::1"]
        if case == "srv6 t.encaps":
            return lines + ["set interface ip address pg0 172.16.0.1/24",
                            "sr policy add bsid fc00:5::b1 next fc00:a::1 next fc00:a::2 encap",
                            "sr steer l3 198.51.100.0/24 via bsid fc00:5::b1"]
        return lines + ["set interface ip address pg1 198.51.100.1/24",
                        f"ip neighbor pg1 198.51.100.2 {_HOST_MAC} static",
                        "sr localsid address fc00:5::d4 behavior end.dx4 pg1 198.51.100.2"]
    raise VppError(f"no VPP equivalent for tunnel case {case}")


def _tunnel_count(case: str) -> int:
    m = re.search(r"(\d+) tunnels?", case)
    return int(m.group(1)) if m else 1


def run_tunnel_case(prefix: Path, inputs: Path, case: str, packets: int, runs: int,
                    main_core: int = 0) -> dict:
    """One tunnel case in VPP: a fresh VPP, `tunnel_cli`, Sluice's pcap from pg0 (`replay`).
    Returns {mpps: [min, median, max], path_clocks (without pg-input), nodes, tunnel_node,
    out (pg1-tx packets per run, median), dropped}. Raises VppError when VPP does not
    forward every packet out of pg1 (a broken setup is not a result)."""
    proto = _tunnel_proto(case)
    if (plugin := _TUNNEL_PLUGIN.get(proto)) and not has_plugin(prefix, plugin):
        raise VppError(f"this VPP install has no {plugin} plugin ({plugin_path(prefix)})")
    pcap = tunnel_pcap(inputs, case)
    if not pcap.is_file():
        raise VppError(f"{pcap} missing (sluice-bench tunnel --keep-inputs did not write it)")
    v = VppInstance(prefix, f"tun-{case}", main_core=main_core)
    try:
        v.start()
        _pg_setup(v)
        if case.startswith("vxlan decap"):
            vpcap = v.dir / "vni-plus-one.pcap"
            vni_plus_one(pcap, vpcap)
            pcap = vpcap
        v.exec_lines(tunnel_cli(case, _tunnel_count(case)))
        mpps, rts, drops = replay(v, pcap, packets, runs)
        out = statistics.median(rt.get("pg1-tx", {}).get("vectors", 0) for rt in rts)
        if drops or out < packets:
            raise VppError(f"VPP sent {out:.0f} of {packets} packets out of pg1 per run "
                           f"({drops} dropped): {(v.cli_try('show errors') or '')[-800:]}")
        nodes = [x for x in _median_nodes(rts, packets) if x[0] != "pg-input"]
        tun = [x for x in nodes if _TUNNEL_NODE_RE.search(x[0])]
        return {"mpps": [min(mpps), statistics.median(mpps), max(mpps)],
                "path_clocks": sum(c for _, c in nodes), "nodes": nodes,
                "tunnel_node": tun, "out": out, "dropped": drops,
                "version": v.version.splitlines()[0]}
    finally:
        v.stop()


def tunnel_cases(n: int) -> list[str]:
    """The cases of `sluice-bench tunnel` (bench/src/tunnel.rs, its order) with `n` tunnels
    in the many-tunnel ones (SLUICE_BENCH_TUNNELS)."""
    many = f", {n} tunnels"
    return (["vxlan encap", "vxlan decap, 1 tunnel", f"vxlan decap{many}"]
            + [f"{p} {d}" for p in ("gre", "ipip", "gtpu") for d in ("encap", "decap")]
            + [f"{p} {d}{many}" for p in ("gre", "ipip", "gtpu") for d in ("encap", "decap")]
            + ["srv6 t.encaps", "srv6 end.dx4"])


def tunnel_table(sluice_run, cases: list[str], prefix: Path, inputs: Path, packets: int,
                 runs: int, main_core: int = 0, out=print) -> list[dict]:
    """Each case first in Sluice (`sluice_run(case)`: runs `sluice-bench tunnel --only case
    --keep-inputs inputs --json ...` and returns its JSON object), then right after in VPP
    (`run_tunnel_case`), so that both sides of a case see about the same machine load;
    prints the side-by-side Markdown table (Sluice/VPP of the median Mpps) and returns its
    rows."""
    rows = []
    out("| case | Sluice Mpps min / med / max | VPP Mpps min / med / max | Sluice / VPP "
        "| path clk Sluice / VPP | tunnel node clk Sluice / VPP | VPP nodes (clk/pkt) |")
    out("|---|---|---|---|---|---|---|")
    fmt3 = lambda m: " / ".join(f"{x:.2f}" for x in m)  # noqa: E731
    for case in cases:
        key = "tunnel_" + case.replace(" ", "_").replace(",", "_")
        try:
            s = sluice_run(case)[key]
        except Exception as e:
            log.exception("sluice tunnel %s failed", case)
            out(f"| {case} | {type(e).__name__}: {str(e)[:300]} | | | | | |")
            continue
        s_tun = [(n, c) for n, c in s["nodes"].items() if _TUNNEL_NODE_RE.search(n)]
        try:
            r = run_tunnel_case(prefix, inputs, case, packets, runs, main_core)
        except Exception as e:  # one broken case must not stop the others
            log.exception("vpp tunnel %s failed", case)
            out(f"| {case} | {fmt3(s['mpps'])} | {type(e).__name__}: "
                f"{str(e)[:300].replace(chr(10), ' ')} | | | | |")
            continue
        ratio = s["mpps"][1] / r["mpps"][1]
        out(f"| {case} | {fmt3(s['mpps'])} | {fmt3(r['mpps'])} | {ratio:.2f}× "
            f"| {s['path_clocks']:.1f} / {r['path_clocks']:.1f} "
            f"| {', '.join(f'{n} {c:.1f}' for n, c in s_tun)} / "
            f"{', '.join(f'{n} {c:.1f}' for n, c in r['tunnel_node'])} "
            f"| {', '.join(f'{n} {c:.1f}' for n, c in r['nodes'])} |")
        rows.append({"case": case, "sluice": s, "vpp": r, "ratio": ratio})
    return rows
