"""Command line: `python -m sluice_bench run --suite ...` and `python -m sluice_bench report DIR`."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from . import engine, latsweep, rawdata, report, suites
from .scenarios import SCENARIOS

REPO_ROOT = Path(__file__).resolve().parents[2]


def _list(conv):
    return lambda s: [conv(x) for x in s.split(",") if x]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice-bench run",
                                description="RFC 2544 benchmarks: Sluice tester, Sluice and Linux DUTs")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a suite (root: creates network namespaces)")
    r.add_argument("--suite", default="default", choices=["smoke", "default", "full"])
    r.add_argument("--out", type=Path, help="output directory (default bench/results/<date>-<suite>)")
    r.add_argument("--scenarios", type=_list(str), help=f"subset of: {', '.join(SCENARIOS)}")
    r.add_argument("--duts", type=_list(str), help=f"subset of: {', '.join(suites.ALL_DUTS)}")
    r.add_argument("--sizes", type=_list(int), help="frame sizes (bytes without FCS), e.g. 64,1518")
    r.add_argument("--trial-seconds", dest="trial_s", type=float)
    r.add_argument("--warmup-seconds", dest="warmup_s", type=float)
    r.add_argument("--repeat", type=int, help="searches per case (RFC 2544 trials)")
    r.add_argument("--max-rate", dest="max_rate", type=float, help="first trial's rate, pps")
    r.add_argument("--resolution", type=float, help="search resolution, ratio (0.02 = 2 %%)")
    r.add_argument("--pdr-loss", dest="pdr_loss", type=float, help="PDR loss ratio (0.005)")
    r.add_argument("--max-trials", dest="max_trials", type=int)
    r.add_argument("--latency-fractions", type=_list(float), help="of NDR, e.g. 0.1,0.5,0.9")
    r.add_argument("--latency-pps", type=int)
    r.add_argument("--loss-rates", type=_list(float),
                   help="fixed offered rates for the loss table, aggregate pps, e.g. 1e5,5e5")
    r.add_argument("--tester-cores", type=_list(int), default=None)
    r.add_argument("--dut-cores", type=_list(int), default=None)
    r.add_argument("--rps", choices=["on", "off"], default="on",
                   help="steer each veth's receive work to its owner's cores (default on)")
    r.add_argument("--priority", choices=["normal", "high", "realtime"], default="high",
                   help="scheduling of the Sluice tester and DUT daemons (default high: own "
                        "session at autogroup nice -20, so a shared machine's other work "
                        "does not preempt the pollers; see docs/benchmarking.md)")
    r.add_argument("--sluice-bin", type=Path, help="sluice binary (default: the release build)")
    r.add_argument("--bench-bin", type=Path, help="sluice-bench binary for the engine benchmarks")
    r.add_argument("--no-build", action="store_true", help="do not run cargo build first")
    r.add_argument("--no-engine", action="store_true", help="skip the engine benchmarks")
    r.add_argument("--no-plots", action="store_true")
    r.add_argument("--vpp-prefix", type=Path, default=None,
                   help="FD.io VPP install prefix (DIR/bin/vpp, DIR/bin/vppctl) for the vpp-* "
                        "DUTs and the engine rows (default: $VPP_PREFIX; without one the VPP "
                        "rows are skipped with that reason)")
    r.add_argument("--vpp-packets", type=int, default=10_000_000,
                   help="packets per VPP engine run (wall time is polled through vppctl: "
                        "runs of a second or more keep that error under 1 %%)")
    r.add_argument("--no-vpp-engine", action="store_true",
                   help="skip VPP on the engine paths (vpp-pg)")
    r.add_argument("-v", "--verbose", action="store_true")
    e = sub.add_parser("engine", help="(re-)run the engine paths, Sluice and VPP on the same "
                                      "inputs, into DIR/results.json.gz (its RFC 2544 results kept)")
    e.add_argument("dir", type=Path)
    e.add_argument("--engine-args", default="--runs 3 --packets 4000000",
                   help="sluice-bench arguments (e.g. add --quick: 1-route FIBs, no 1M MACs)")
    e.add_argument("--families", default=",".join(engine.WHAT),
                   help="which engine benchmarks, comma-separated (default: all of "
                        f"{','.join(engine.WHAT)})")
    e.add_argument("--vpp-prefix", type=Path, default=None)
    e.add_argument("--vpp-packets", type=int, default=10_000_000)
    e.add_argument("--bench-bin", type=Path)
    e.add_argument("--no-build", action="store_true")
    e.add_argument("--no-plots", action="store_true")
    latsweep.parser(sub)
    g = sub.add_parser("report", help="regenerate CSV, markdown and plots from DIR/results.json.gz")
    g.add_argument("dir", type=Path)
    g.add_argument("--no-plots", action="store_true")
    return p


def default_out(suite: str) -> Path:
    base = REPO_ROOT / "bench" / "results"
    stem = f"{dt.date.today().isoformat()}-{suite}"
    out, n = base / stem, 2
    while out.exists():
        out, n = base / f"{stem}-{n}", n + 1
    return out


def binaries(a) -> tuple[Path, Path]:
    """(sluice, sluice-bench): explicit paths, else next to the calling sluice-bench
    (SLUICE_BENCH_BIN_DIR), else the cargo target directory's release build; built with cargo
    unless --no-build."""
    env_dir = os.environ.get("SLUICE_BENCH_BIN_DIR")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target")
    bin_dir = Path(env_dir) if env_dir else target / "release"
    if not a.no_build and not (a.sluice_bin and (a.bench_bin or a.no_engine)):
        cmd = ["cargo", "build", "-q", "-p", "sluice", "-p", "sluice-bench"]
        if bin_dir.name != "debug":
            cmd.insert(2, "--release")
        print(f"sluice-bench: {' '.join(cmd)}", file=sys.stderr, flush=True)
        subprocess.run(cmd, cwd=REPO_ROOT, check=True)
    return a.sluice_bin or bin_dir / "sluice", a.bench_bin or bin_dir / "sluice-bench"


def cmd_run(a) -> int:
    if os.geteuid() != 0:
        print("sluice-bench run: needs root (it creates network namespaces and veth pairs)",
              file=sys.stderr)
        return 2
    suite = suites.get(a.suite)
    cases = suite.cases
    if a.scenarios:
        bad = [s for s in a.scenarios if s not in SCENARIOS]
        if bad:
            print(f"sluice-bench run: unknown scenario `{bad[0]}' ({', '.join(SCENARIOS)})",
                  file=sys.stderr)
            return 2
        known = dict(cases)
        cases = [(s, known.get(s, [64])) for s in a.scenarios]
    if a.sizes:
        cases = [(s, a.sizes) for s, _ in cases]
    ncpu = os.cpu_count() or 1
    tester_cores = a.tester_cores or [0]
    dut_cores = a.dut_cores or ([1] if ncpu > 1 else [0])
    suite = suite.with_overrides(
        cases=cases, duts=a.duts, trial_s=a.trial_s, warmup_s=a.warmup_s, repeat=a.repeat,
        latency_fractions=a.latency_fractions, latency_pps=a.latency_pps,
        loss_rates=a.loss_rates, max_rate=a.max_rate, resolution=a.resolution, pdr_loss=a.pdr_loss,
        max_trials=a.max_trials)
    if a.no_engine:
        suite.engine = None
    from . import vpp
    from .runner import Runner, make_dut
    vpp_prefix = vpp.prefix_from(a.vpp_prefix)
    for d in suite.duts:
        make_dut(d, Path("sluice"), vpp_prefix)  # unknown names fail before anything is set up
    if (why := vpp.prefix_problem(vpp_prefix)) and any(
            d.startswith("vpp-") for d in suite.duts):
        print(f"sluice-bench run: VPP rows skipped: {why}", file=sys.stderr)
    sluice_bin, bench_bin = binaries(a)
    if not sluice_bin.is_file():
        print(f"sluice-bench run: {sluice_bin} does not exist (build it, or --sluice-bin)",
              file=sys.stderr)
        return 2
    out = a.out or default_out(suite.name)

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)  # unwinds the context managers: namespaces, daemons
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    runner = Runner(suite, out, sluice_bin, bench_bin, tester_cores, dut_cores,
                    rps=a.rps == "on", priority=a.priority, vpp_prefix=vpp_prefix,
                    vpp_engine=not a.no_vpp_engine, vpp_packets=a.vpp_packets)
    rc = 0
    try:
        runner.run()
    except (KeyboardInterrupt, SystemExit) as e:
        print(f"sluice-bench run: interrupted ({e!r}); the report covers what was measured",
              file=sys.stderr)
        rc = 130
    files = report.generate(out, runner.data, plots=not a.no_plots)
    print(f"report: {out / 'report.md'} ({len(files)} files in {out})")
    return rc


def cmd_engine(a) -> int:
    """Engine paths only: Sluice, then VPP on the same pcaps and routes, into an existing run's
    results.json.gz (the engine section it had is kept as `engine_before`)."""
    from . import vpp
    from .runner import Runner
    families = tuple(f for f in a.families.split(",") if f)
    bad = [f for f in families if f not in engine.WHAT]
    if bad or not families:
        print(f"sluice-bench engine: unknown family `{bad[0] if bad else a.families}' in "
              f"--families (one of {', '.join(engine.WHAT)})", file=sys.stderr)
        return 2
    a.sluice_bin = None
    _, bench_bin = binaries(a)
    runner = Runner(suites.get("default"), a.dir, Path("sluice"), bench_bin, [0], [1],
                    vpp_prefix=vpp.prefix_from(a.vpp_prefix), vpp_packets=a.vpp_packets)
    if rawdata.exists(a.dir):
        runner.data = rawdata.load(a.dir)
        if runner.data.get("engine"):
            runner.data["engine_before"] = runner.data["engine"]
    runner.data.setdefault("vpp", {})["prefix"] = str(runner.vpp_prefix or "")
    try:
        runner.run_engine(a.engine_args.split(), families=families)
    finally:
        runner.save()
        report.generate(a.dir, runner.data, plots=not a.no_plots)
    return 0


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(a, "verbose", False) else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if a.cmd == "report":
        files = report.generate(a.dir, plots=not a.no_plots)
        print(f"report: {a.dir / 'report.md'} ({len(files)} files)")
        return 0
    if a.cmd == "engine":
        return cmd_engine(a)
    if a.cmd == "latency":
        return latsweep.cmd_latency(a)
    return cmd_run(a)
