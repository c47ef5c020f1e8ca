"""Runs a suite: for every scenario and DUT a fresh topology, a Sluice tester and the DUT;
per frame size a warm-up, the NDR/PDR search, latency at fractions of the NDR; then the engine
benchmarks. Writes the raw JSON after every case (an interrupted run keeps what it measured).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from . import cpu as cpuacct
from . import engine, latency, rawdata, rfc2544, vpp
from .counters import counter_delta
from .duts import Dut, LinuxRouter, SluiceAfPacket, SluiceAfXdp, SluiceMemif
from .scenarios import SCENARIOS, Scenario, streams, tester_size
from .suites import Suite
from .tester import Tester
from .topology import Topology

log = logging.getLogger("sluice_bench")

SCHEMA = 1


class Progress:
    """One line per event on stderr: elapsed time, case counter, what is happening."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.done = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr

    def say(self, what: str) -> None:
        el = int(time.monotonic() - self.t0)
        bar_w = 20
        filled = bar_w * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (bar_w - filled)
        print(f"[{el // 60:02d}:{el % 60:02d}] [{bar}] {self.done}/{self.total} {what}",
              file=self.stream, flush=True)


# sluice-bench's default `--packets` (bench/src/main.rs `Opts::packets`).
SLUICE_BENCH_PACKETS = 20_000_000


def engine_packets(args: list[str]) -> int:
    """The packets per run sluice-bench used (its JSON does not record them): `--packets`
    of `args`, else sluice-bench's default."""
    if "--packets" in args:
        return int(args[args.index("--packets") + 1])
    return SLUICE_BENCH_PACKETS


def make_dut(name: str, sluice_bin: Path, vpp_prefix: Path | None = None) -> Dut:
    if name in vpp.VPP_DUTS:
        return vpp.make_vpp_dut(name, vpp_prefix)
    if name == "linux":
        return LinuxRouter()
    if name == "sluice-af_packet":
        return SluiceAfPacket(sluice_bin)
    if name.startswith("sluice-af_packet-") and name.endswith("w"):
        return SluiceAfPacket(sluice_bin, workers=int(name.rsplit("-", 1)[1][:-1]))
    if name == "sluice-memif":
        return SluiceMemif(sluice_bin)
    if name == "sluice-af_xdp":
        return SluiceAfXdp(sluice_bin)
    raise ValueError(f"unknown DUT `{name}' (linux, sluice-af_packet[-Nw], sluice-memif, sluice-af_xdp, "
                     f"{', '.join(vpp.VPP_DUTS)})")


def tester_counters(tester) -> dict[str, int]:
    snap = getattr(tester, "counter_snapshot", None)
    return snap() if snap else {}


def host_info(tester_cores: list[int], dut_cores: list[int], rps: bool = True,
              priority: str = "normal") -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kernel": platform.release(), "cpu_model": model, "cores": os.cpu_count(),
            "pinning": {"tester_cores": tester_cores, "dut_cores": dut_cores, "rps": rps,
                        "priority": priority}}


class Runner:
    def __init__(self, suite: Suite, out_dir: Path, sluice_bin: Path, bench_bin: Path | None,
                 tester_cores: list[int], dut_cores: list[int], rps: bool = True,
                 priority: str = "normal", vpp_prefix: Path | None = None,
                 vpp_engine: bool = True, vpp_packets: int = 10_000_000):
        self.suite = suite
        self.vpp_prefix = vpp_prefix
        self.vpp_engine = vpp_engine
        self.vpp_packets = vpp_packets
        self.out_dir = out_dir
        self.sluice_bin = sluice_bin
        self.bench_bin = bench_bin
        self.tester_cores = tester_cores
        self.dut_cores = dut_cores
        self.rps = rps
        self.priority = priority
        self.energy = cpuacct.energy_info()
        # Replaceable for tests of the run logic without root (python/tests/bench_fakes.py).
        self.topology_factory = Topology
        self.tester_factory = Tester
        self.data: dict = {
            "schema": SCHEMA,
            "suite": suite.name,
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "host": host_info(tester_cores, dut_cores, rps, priority),
            "energy": self.energy,
            "config": {
                "search": vars(suite.search), "trial_s": suite.trial_s,
                "warmup_s": suite.warmup_s, "repeat": suite.repeat,
                "latency_fractions": suite.latency_fractions,
                "latency_pps": suite.latency_pps,
                "frame_size": "rfc2544",  # with FCS; the tester sends max(size - 4, 64) bytes
                "cpu_method": {
                    "process_s": "utime+stime of the DUT process (/proc/<pid>/stat)",
                    "kernel_s": "system+irq+softirq of the DUT cores (/proc/stat)",
                },
            },
            "results": [],
            "engine": None,
            "vpp": {"prefix": str(vpp_prefix) if vpp_prefix else None,
                    "problem": vpp.prefix_problem(vpp_prefix)},
        }
        n_cases = sum(len(sizes) for _, sizes in suite.cases) * len(suite.duts)
        self.progress = Progress(n_cases + (1 if suite.engine else 0))

    # -- output -------------------------------------------------------------------------

    @property
    def raw_path(self) -> Path:
        return rawdata.path(self.out_dir)

    def save(self) -> None:
        rawdata.save(self.out_dir, self.data)

    # -- the run ------------------------------------------------------------------------

    def run(self) -> dict:
        try:
            for sc_name, sizes in self.suite.cases:
                sc = SCENARIOS[sc_name]
                for dut_name in self.suite.duts:
                    dut = make_dut(dut_name, self.sluice_bin, self.vpp_prefix)
                    self.run_scenario(sc, dut, sizes)
            if self.suite.engine:
                self.run_engine()
        finally:
            self.data["finished"] = dt.datetime.now().isoformat(timespec="seconds")
            self.save()
        self.progress.say(f"done: {self.raw_path}")
        return self.data

    def run_engine(self, args: list[str] | None = None,
                   families: tuple[str, ...] = engine.WHAT) -> None:
        """Sluice's engine benchmarks, then VPP over the same pcaps and routes (`vpp-pg`),
        or the reason it did not run."""
        import shutil
        import tempfile
        self.progress.say(f"engine benchmarks (sluice-bench {', '.join(families)})")
        inputs = Path(tempfile.mkdtemp(prefix="sb-engine-"))
        try:
            self.data["engine"] = engine.run(self.bench_bin, args or self.suite.engine,
                                             keep_inputs=inputs, families=families)
            self.save()
            problem = vpp.prefix_problem(self.vpp_prefix)
            if not self.vpp_engine:
                problem = "VPP engine rows not requested (--no-vpp-engine)"
            if problem:
                self.data["engine"]["vpp"] = {"skipped": problem}
            else:
                args = args or self.suite.engine
                runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 5
                # Work that depends on the count (the learning flood) replays Sluice's count.
                same = engine_packets(args)
                self.data["engine"]["vpp"] = {}
                vpp.run_engine(
                    self.vpp_prefix, inputs, self.data["engine"]["cases"], self.vpp_packets,
                    runs, main_core=0,  # where sluice-bench pins its own main thread
                    progress=self.progress.say, out=self.data["engine"]["vpp"],
                    on_case=self.save, count_bound_packets=same)
        finally:
            shutil.rmtree(inputs, ignore_errors=True)
        self.progress.done += 1

    def run_scenario(self, sc: Scenario, dut: Dut, sizes: list[int]) -> None:
        reason = dut.unsupported(sc)
        if reason:
            for size in sizes:
                self.data["results"].append({"scenario": sc.name, "dut": dut.name,
                                             "frame_size": size, "status": "not supported",
                                             "reason": reason})
                self.progress.done += 1
            self.progress.say(f"{sc.name} {dut.name}: not supported ({reason})")
            self.save()
            return
        self.progress.say(f"{sc.name} {dut.name}: setting up")
        pending = list(sizes)
        try:
            with self.topology_factory(self.tester_cores, self.dut_cores,
                                       rps=self.rps, priority=self.priority) as topo, \
                    self.tester_factory(self.sluice_bin, topo, **dut.tester_args()) as tester, \
                    dut.running(topo, sc) as macs:
                for size in sizes:
                    entry = self.run_case(sc, dut, topo, tester, macs, size)
                    entry["counters"] = dut.counters() if size == sizes[-1] else {}
                    self.data["results"].append(entry)
                    pending.remove(size)
                    self.progress.done += 1
                    self.save()
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # one broken case must not stop the suite
            log.exception("%s on %s failed", sc.name, dut.name)
            for size in pending:
                self.data["results"].append({"scenario": sc.name, "dut": dut.name,
                                             "frame_size": size, "status": "error",
                                             "reason": f"{type(e).__name__}: {e}"[:2000]})
                self.progress.done += 1
            self.progress.say(f"{sc.name} {dut.name}: ERROR {e}")
            self.save()

    def run_case(self, sc: Scenario, dut: Dut, topo: Topology, tester: Tester,
                 macs: dict, size: int) -> dict:
        s = self.suite
        label = f"{sc.name} {dut.name} {size}B"
        nonlocal_pid = [dut.pid()]  # a restarted DUT has a new pid
        cores = self.dut_cores

        def trial(rate: float, with_latency: bool = False, duration: float | None = None
                  ) -> rfc2544.Trial:
            main = streams(sc, topo, macs, tester_size(size, sc.ip6))
            for st in main:
                st.rate_pps = rate / len(main)
            lat = streams(sc, topo, macs, size, latency=True) if with_latency else []
            for st in lat:
                st.rate_pps = s.latency_pps
            snaps: dict = {}

            def before():
                snaps["ca"] = (dut.counter_snapshot(), tester_counters(tester))
                snaps["a"] = cpuacct.snapshot(nonlocal_pid[0])
                if self.energy["rapl"]:
                    snaps["ea"] = cpuacct.read_energy_uj(self.energy["domains"])

            def after():
                snaps["b"] = cpuacct.snapshot(nonlocal_pid[0])
                if self.energy["rapl"]:
                    snaps["eb"] = cpuacct.read_energy_uj(self.energy["domains"])
                snaps["cb"] = (dut.counter_snapshot(), tester_counters(tester))

            res = tester.run(main + lat, duration or s.trial_s, before, after)
            crash = None
            if not dut.alive():
                # The trial fails with the DUT's log; the search goes on with a fresh DUT.
                crash = dut.log_tail() or "(no log)"
                self.progress.say(f"{label}: DUT died during the trial; restarting it")
                macs.update(dut.restart(topo, sc))
                nonlocal_pid[0] = dut.pid()
            st_main = [res["streams"][m.name] for m in main]
            tx = sum(x["tx_packets"] for x in st_main)
            # rx_packets includes duplicates; loss is tx - (rx - duplicate) (tester contract).
            rx = sum(x["rx_packets"] - x.get("duplicate", 0) for x in st_main)
            elapsed = max((x.get("elapsed_s") or 0.0) for x in st_main) or res["wall_s"]
            c = cpuacct.delta(snaps["a"], snaps["b"], cores)
            c["dut_s"] = c.get(dut.cpu_metric, 0.0)
            dc = counter_delta(snaps["ca"][0], snaps["cb"][0])
            tc = counter_delta(snaps["ca"][1], snaps["cb"][1])
            # Share of the trial the DUT's or the tester's process waited for its core (a
            # polling daemon that waits cannot poll: loss without any drop counter).
            wait_us = max(dc.get("sched dut wait us", 0), tc.get("sched tester wait us", 0))
            wall = res["wall_s"] + (res.get("drain_s") or 0.0)
            extra: dict = {"cpu": c,
                           "rx_bytes": sum(x["rx_bytes"] for x in st_main),
                           "reordered": sum(x.get("reordered", 0) for x in st_main),
                           "duplicate": sum(x.get("duplicate", 0) for x in st_main),
                           "drain_s": res.get("drain_s"), "drained": res.get("drained"),
                           # Non-zero counter deltas of the trial: where frames were dropped.
                           "dut_counters": dc, "tester_counters": tc,
                           "cpu_wait_ratio": round(wait_us / 1e6 / wall, 4) if wall else 0.0}
            if crash:
                extra["failed"] = f"DUT crashed during the trial; its log ends: {crash}"
            if "ea" in snaps and snaps["eb"] >= snaps["ea"]:
                extra["energy_j"] = (snaps["eb"] - snaps["ea"]) / 1e6
            lm = latency.summarize(st_main)
            if lm:
                lm.pop("histogram")
                extra["latency_main"] = lm
            if lat:
                extra["latency"] = latency.summarize([res["streams"][x.name] for x in lat])
            t = rfc2544.Trial(target_pps=rate, offered_pps=tx / elapsed if elapsed else 0.0,
                              tx=tx, rx=rx, duration_s=elapsed,
                              tx_fail=sum(x.get("tx_fail", 0) for x in st_main), extra=extra)
            self.progress.say(f"{label}: trial {rate / 1e6:.3f} Mpps -> offered "
                              f"{t.offered_pps / 1e6:.3f}, loss {100 * t.loss_ratio:.3f} %"
                              + (" (tester-limited)" if t.tester_limited() else "")
                              + (" FAILED: DUT crashed" if crash else ""))
            return t

        search = s.search
        if dut.max_rate and dut.max_rate > search.max_rate:
            search = dataclasses.replace(search, max_rate=dut.max_rate)
        warm_rate = min(50_000.0, s.search.max_rate / 10)
        warm = trial(warm_rate, duration=s.warmup_s)
        if warm.rx == 0:
            raise RuntimeError(f"{label}: the DUT forwarded nothing during the warm-up "
                               f"({warm.tx} sent at {warm_rate:.0f} pps)")
        runs = []
        all_trials: list[rfc2544.Trial] = []
        for _ in range(s.repeat):
            ndr, pdr = rfc2544.ndr_pdr(trial, search)
            all_trials += pdr.trials + ndr.trials
            runs.append({"ndr": ndr.to_json(), "pdr": pdr.to_json()})
        ndr_rates = [r["ndr"]["rate_pps"] for r in runs]
        pdr_rates = [r["pdr"]["rate_pps"] for r in runs]
        ndr_pps = statistics.median(ndr_rates)
        best = max((r["ndr"]["best"] for r in runs if r["ndr"]["best"]),
                   key=lambda b: b["offered_pps"], default=None)
        lat_points = []
        for f in s.latency_fractions:
            if ndr_pps <= 0:
                break
            t = trial(ndr_pps * f, with_latency=True)
            lat_points.append({"fraction": f, "trial": t.to_json()})
        fixed = [{"rate_pps": r, "trial": trial(r).to_json()} for r in s.loss_rates]
        overload = all_trials[0] if all_trials else None
        return {
            "scenario": sc.name, "dut": dut.name, "frame_size": size, "status": "ok",
            "tester_size": tester_size(size, sc.ip6), "max_rate": search.max_rate,
            "directions": len(sc.directions), "cpu_metric": dut.cpu_metric,
            "ndr_pps": ndr_pps, "pdr_pps": statistics.median(pdr_rates),
            "ndr_pps_runs": ndr_rates, "pdr_pps_runs": pdr_rates,
            "tester_limited": any(r["ndr"]["tester_limited"] or r["pdr"]["tester_limited"]
                                  for r in runs),
            "ndr_trial": best,
            "overload": overload.to_json() if overload else None,
            "warmup": warm.to_json(),
            "runs": runs,
            "trials": [t.to_json() for t in all_trials],
            "latency": lat_points,
            "fixed_loss": fixed,
        }
