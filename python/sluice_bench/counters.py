"""Counter snapshots of the DUT and the tester, taken around every trial: the harness keeps
the non-zero deltas in results.json.gz ("dut_counters", "tester_counters"), so a loss can be
traced to the counter that dropped the frames (a driver's rx-miss or tx-error, an error
node, the kernel's interface or backlog drops)."""

from __future__ import annotations

import json
import logging
import os
import re

from sluice_test.instance import SluiceInstance
from sluice_test.parsers import parse_errors, parse_interfaces

log = logging.getLogger("sluice_bench")


#: af_xdp's per-queue kernel statistics line in `show af_xdp`.
_XDP_Q = re.compile(r"queue (\d+):.*kernel rx dropped (\d+) ring full (\d+) fill ring empty (\d+) "
                    r"invalid rx/tx descs (\d+)/(\d+)")


def sluice_counters(vpp: SluiceInstance, driver_shows: tuple[str, ...] = ()) -> dict[str, int]:
    """A Sluice daemon's counters as {name: count}: `show errors` ("error <node>: <reason>"),
    `show interface` ("<if> <counter>") and af_xdp's per-queue kernel counters
    ("af_xdp <if> q<i> <counter>"). Driver `show`s run first: `show af_xdp` is what folds the
    kernel's socket drops into the interface's rx-miss."""
    out: dict[str, int] = {}
    for cmd in driver_shows:
        dev = ""
        for line in (vpp.cli_try(cmd) or "").splitlines():
            if line and not line[0].isspace():
                dev = line.split()[0]
            m = _XDP_Q.search(line)
            if m:
                q = m.group(1)
                for name, v in zip(("kernel rx dropped", "kernel rx ring full",
                                    "kernel fill ring empty", "kernel rx invalid descs",
                                    "kernel tx invalid descs"), m.groups()[1:]):
                    out[f"af_xdp {dev} q{q} {name}"] = int(v)
    try:
        for (node, reason), n in parse_errors(vpp.cli("show errors")).items():
            out[f"error {node}: {reason}"] = n
        for ifn, cs in parse_interfaces(vpp.cli("show interface")).items():
            for c, n in cs.items():
                out[f"{ifn} {c}"] = n
    except Exception as e:  # counters are diagnostics: never fail a trial over them
        log.warning("counters: %s", e)
    return out


def sched_counters(pid: int | None, who: str) -> dict[str, int]:
    """The scheduler's view of a process (all its threads, /proc/<pid>/task/*/schedstat and
    status): microseconds it ran, microseconds it was runnable but waited for a CPU (another
    process had its core: the machine is shared), and involuntary context switches. A
    polling dataplane that waits for a CPU cannot poll its rings: a large wait in a lossy
    trial explains a loss without any drop counter in the driver's path."""
    out: dict[str, int] = {}
    if not pid:
        return out
    run = wait = invol = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                r, w, _ = (int(x) for x in f.read().split()[:3])
            run += r
            wait += w
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
    except (OSError, ValueError):
        return out
    out[f"sched {who} run us"] = run // 1000
    out[f"sched {who} wait us"] = wait // 1000
    out[f"sched {who} involuntary switches"] = invol
    return out


def kernel_counters(ns: str) -> dict[str, int]:
    """The kernel's counters in namespace `ns`: every interface's stats64 ("kernel <if> rx
    dropped", ...) and the backlog drops and squeezes of /proc/net/softnet_stat (summed over
    CPUs)."""
    from .topology import nsexec
    out: dict[str, int] = {}
    try:
        links = json.loads(nsexec(ns, "ip", "-s", "-j", "link", "show"))
        for link in links:
            for d, st in link.get("stats64", {}).items():
                for k, v in st.items():
                    if isinstance(v, int):
                        out[f"kernel {link['ifname']} {d} {k}"] = v
        rows = [r.split() for r in nsexec(ns, "cat", "/proc/net/softnet_stat").splitlines()]
        out["kernel softnet dropped"] = sum(int(r[1], 16) for r in rows if len(r) > 2)
        out["kernel softnet time_squeeze"] = sum(int(r[2], 16) for r in rows if len(r) > 2)
    except Exception as e:  # diagnostics only
        log.warning("kernel counters of %s: %s", ns, e)
    return out


def counter_delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """The counters that changed from snapshot a to snapshot b (b - a)."""
    return {k: v - a.get(k, 0) for k, v in sorted(b.items()) if v != a.get(k, 0)}
