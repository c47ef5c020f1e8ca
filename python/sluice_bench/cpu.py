"""CPU time and energy accounting for a trial.

- A process (Sluice DUT): utime + stime of /proc/<pid>/stat, all its threads. On a kernel
  without CONFIG_IRQ_TIME_ACCOUNTING (this VM) softirq work that runs while the process is
  current (e.g. the veth receive path the process's own sendto() triggers) is charged to the
  process's stime too, so the process time already holds most of the kernel work done for it.
- Cores (Linux router): the DUT cores' `system + irq + softirq` from /proc/stat. With RPS
  steering the DUT's receive processing to its core, the kernel's forwarding runs there as
  NET_RX softirq (charged as softirq, or as system time when deferred to ksoftirqd). User
  time is left out so unrelated user-space work on the same core (compilers on a shared VM)
  does not count; system time of unrelated processes on that core still does.
- Both are also reported as "busy" (every non-idle field of the DUT cores) for reference.
- Energy: RAPL (`/sys/class/powercap/intel-rapl:*/energy_uj`) when present. Without it nothing
  is estimated: the report says RAPL is absent and shows CPU-seconds per million packets.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")

# /proc/stat cpuN fields: user nice system idle iowait irq softirq steal guest guest_nice
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def read_proc_stat(path: str = "/proc/stat") -> dict[int, dict[str, float]]:
    """Per-core times in seconds: {core: {field: s}}."""
    out: dict[int, dict[str, float]] = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            parts = line.split()
            core = int(parts[0][3:])
            out[core] = {k: int(v) / CLK_TCK for k, v in zip(_FIELDS, parts[1:])}
    return out


def read_pid_cpu(pid: int) -> float:
    """utime + stime of a process (all threads) in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # The command name may contain spaces and parentheses: fields start after the last ')'.
    rest = text[text.rindex(")") + 2:].split()
    utime, stime = int(rest[11]), int(rest[12])
    return (utime + stime) / CLK_TCK


@dataclass
class CpuSnapshot:
    cores: dict[int, dict[str, float]]
    pid_cpu: float | None


def snapshot(pid: int | None) -> CpuSnapshot:
    try:
        pid_cpu = read_pid_cpu(pid) if pid else None
    except OSError:  # the DUT died (the runner restarts it): no process time this trial
        pid_cpu = None
    return CpuSnapshot(read_proc_stat(), pid_cpu)


def delta(a: CpuSnapshot, b: CpuSnapshot, cores: list[int]) -> dict:
    """CPU seconds spent between two snapshots on `cores` (and by the process, if any)."""
    def s(field: str) -> float:
        return sum(b.cores[c][field] - a.cores[c][field] for c in cores if c in a.cores)
    kernel = s("system") + s("irq") + s("softirq")
    busy = sum(s(f) for f in ("user", "nice", "system", "irq", "softirq"))
    out = {"cores": cores, "kernel_s": kernel, "softirq_s": s("softirq"), "busy_s": busy}
    if a.pid_cpu is not None and b.pid_cpu is not None:
        out["process_s"] = b.pid_cpu - a.pid_cpu
    return out


def rapl_domains(root: str = "/sys/class/powercap") -> list[str]:
    """Readable RAPL energy counters (package domains), empty when the machine has none."""
    return sorted(p for p in glob.glob(os.path.join(root, "intel-rapl:*", "energy_uj"))
                  if os.access(p, os.R_OK))


def energy_info(root: str = "/sys/class/powercap") -> dict:
    doms = rapl_domains(root)
    if doms:
        return {"rapl": True, "domains": doms}
    reason = (f"{root} does not exist" if not os.path.isdir(root)
              else f"no readable intel-rapl:*/energy_uj under {root}")
    return {"rapl": False, "reason": reason}


def read_energy_uj(domains: list[str]) -> int:
    total = 0
    for d in domains:
        with open(d) as f:
            total += int(f.read())
    return total
