"""Latency at fixed offered rates through one DUT (`python -m sluice_bench latency ...`).

The RFC 2544 run measures latency at fractions of a searched NDR; this measures it at rates
you name, for comparing driver changes (e.g. af_packet ring geometry) in paired runs:

    python -m sluice_bench latency --dut sluice-af_packet --rx-mode interrupt \\
        --rates 1000,10000,100000,300000 --runs 3 --seconds 3

Same topology, tester and DUT classes as `run` (tester ns on core 0, DUT on core 1, RPS,
`--priority high`). Per rate and run: a 64-byte main stream at `rate - latency_pps` (none when
the rate is the latency stream's) plus a `latency_pps` latency stream; the latency figures are
the latency stream's (the main stream's timestamps include the tester's own batching).
Prints, per rate, min / median / max over the runs of the offered rate, the loss and the
latency stream's min, average, p50, p99 and max (µs). `--json FILE` keeps every trial.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from . import latency
from .scenarios import SCENARIOS, streams, tester_size
from .tester import Tester
from .topology import Topology


def parser(sub) -> None:
    p = sub.add_parser("latency", help="latency at fixed rates through one DUT (root)")
    p.add_argument("--dut", default="sluice-af_packet")
    p.add_argument("--scenario", default="ip4-oneway", choices=list(SCENARIOS))
    p.add_argument("--rates", default="1000,10000,100000",
                   help="offered pps, comma separated (each includes the latency stream)")
    p.add_argument("--latency-pps", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--size", type=int, default=64, help="frame size with FCS (RFC 2544)")
    p.add_argument("--rx-mode", choices=["polling", "interrupt", "adaptive"],
                   help="the Sluice DUT's rx mode on both ports (default: its default)")
    p.add_argument("--create-args", default="",
                   help="extra words for the af_packet DUT's `create host-interface`")
    p.add_argument("--priority", choices=["normal", "high", "realtime"], default="high")
    p.add_argument("--sluice-bin", type=Path)
    p.add_argument("--json", type=Path, help="write every trial here")


def _mmm(xs: list[float], scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return " / ".join(fmt.format(v / scale) for v in (min(xs), statistics.median(xs), max(xs)))


def cmd_latency(a) -> int:
    if os.geteuid() != 0:
        print("sluice-bench latency: needs root (network namespaces)", file=sys.stderr)
        return 2
    from .cli import REPO_ROOT
    from .runner import make_dut
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target")
    binary = a.sluice_bin or target / "release" / "sluice"
    if not binary.is_file():
        print(f"sluice-bench latency: {binary} does not exist (cargo build --release, or "
              "--sluice-bin)", file=sys.stderr)
        return 2
    sc = SCENARIOS[a.scenario]
    dut = make_dut(a.dut, binary)
    if hasattr(dut, "rx_mode"):
        dut.rx_mode = a.rx_mode
        dut.create_args = a.create_args
    rates = [float(x) for x in a.rates.split(",") if x]
    ncpu = os.cpu_count() or 1
    rows, trials = [], []
    with Topology([0], [1] if ncpu > 1 else [0], rps=True, priority=a.priority) as topo, \
            Tester(binary, topo, **dut.tester_args()) as tester, \
            dut.running(topo, sc) as macs:
        for rate in rates:
            per = []
            for run in range(a.runs):
                lat = streams(sc, topo, macs, a.size, latency=True)
                main = streams(sc, topo, macs, tester_size(a.size, sc.ip6))
                lat_rate = min(float(a.latency_pps), rate)
                for s in lat:
                    s.rate_pps = lat_rate
                rest = rate - lat_rate * len(lat)
                if rest >= 1:
                    for s in main:
                        s.rate_pps = rest / len(main)
                else:
                    main = []
                res = tester.run(main + lat, a.seconds)
                st = [res["streams"][s.name] for s in main + lat]
                tx = sum(x["tx_packets"] for x in st)
                rx = sum(x["rx_packets"] - x.get("duplicate", 0) for x in st)
                el = max((x.get("elapsed_s") or 0.0) for x in st) or res["wall_s"]
                lm = latency.summarize([res["streams"][s.name] for s in lat]) or {}
                lm.pop("histogram", None)
                t = {"rate": rate, "run": run, "offered_pps": tx / el if el else 0.0,
                     "tx": tx, "rx": rx, "loss": (tx - rx) / tx if tx else 0.0,
                     "tx_fail": sum(x.get("tx_fail", 0) for x in st), "latency_ns": lm}
                per.append(t)
                trials.append(t)
                print(f"  {rate:>9.0f} pps run {run + 1}: offered {t['offered_pps']:.0f}, "
                      f"loss {100 * t['loss']:.3f} %, latency avg "
                      f"{(lm.get('avg') or 0) / 1e3:.1f} µs max {(lm.get('max') or 0) / 1e3:.1f} µs",
                      file=sys.stderr, flush=True)
            rows.append((rate, per))
    mode = a.rx_mode or "default"
    print(f"\n{a.dut} {a.scenario} {a.size} B, rx-mode {mode}"
          + (f", create args `{a.create_args}'" if a.create_args else "")
          + f", {a.runs} runs x {a.seconds:g} s, latency stream {a.latency_pps} pps"
          f" (min / median / max over runs; latency in µs)\n")
    print("| rate pps | offered pps | loss % | lat min | lat avg | lat p50 | lat p99 | lat max |")
    print("|---|---|---|---|---|---|---|---|")
    for rate, per in rows:
        def f(key):
            return [t["latency_ns"].get(key) for t in per]
        print(f"| {rate:.0f} | {_mmm([t['offered_pps'] for t in per], fmt='{:.0f}')} "
              f"| {_mmm([100 * t['loss'] for t in per], fmt='{:.3f}')} "
              f"| {_mmm(f('min'), 1e3)} | {_mmm(f('avg'), 1e3)} | {_mmm(f('p50'), 1e3)} "
              f"| {_mmm(f('p99'), 1e3)} | {_mmm(f('max'), 1e3)} |")
    if a.json:
        a.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                      "trials": trials}, indent=1) + "\n")
    return 0

