"""Report generation from a run's raw JSON: CSV files, a markdown report and PNG plots.

Everything here is a pure function of `results.json` (so `python -m sluice_bench report DIR`
regenerates a report, and the unit tests compare against golden files). Tables are shaped
config x frame size like the research's: a row per (scenario, DUT), a column per frame size.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

NS = "n/s"      # not supported
ERR = "error"

PLOTS = {
    "throughput_vs_frame_size.png": "NDR (solid) and PDR (dashed) throughput vs frame size",
    "latency_vs_load.png": "average (solid) and p99 (dashed) latency vs offered load",
    "loss_vs_load.png": "loss ratio of every search trial vs offered load",
    "cpu_per_packet.png": "DUT CPU per delivered packet: at NDR, and vs offered load",
    "fib_size.png": "throughput vs number of routes (end to end and engine)",
    "node_clocks.png": "engine benchmarks: clocks/packet per node, stacked",
}


# -- metrics of one result entry -------------------------------------------------------------

def ok_entries(data: dict) -> list[dict]:
    return [r for r in data["results"] if r.get("status") == "ok"]


def configs(data: dict) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for r in data["results"]:
        k = (r["scenario"], r["dut"])
        if k not in seen:
            seen.append(k)
    return seen


def sizes(data: dict) -> list[int]:
    return sorted({r["frame_size"] for r in data["results"]})


def find(data: dict, scenario: str, dut: str, size: int) -> dict | None:
    for r in data["results"]:
        if r["scenario"] == scenario and r["dut"] == dut and r["frame_size"] == size:
            return r
    return None


def latency_point(r: dict, fraction: float = 0.5) -> dict | None:
    """The latency trial at `fraction` of NDR (else the middle one measured)."""
    pts = r.get("latency") or []
    if not pts:
        return None
    for p in pts:
        if abs(p["fraction"] - fraction) < 1e-9:
            return p
    return pts[len(pts) // 2]


def trial_latency(p: dict | None) -> dict | None:
    if not p:
        return None
    return p["trial"].get("extra", {}).get("latency")


def cpu_per_mpkt(trial: dict | None) -> float | None:
    """DUT CPU-seconds per million delivered packets in a trial."""
    if not trial or not trial.get("rx"):
        return None
    c = trial.get("extra", {}).get("cpu", {})
    if "dut_s" not in c:
        return None
    return c["dut_s"] / (trial["rx"] / 1e6)


def energy_per_wh(trial: dict | None) -> tuple[float, float] | None:
    """(packets per Wh, bytes per Wh) of delivered traffic, when RAPL measured the trial."""
    if not trial:
        return None
    e = trial.get("extra", {}).get("energy_j")
    if not e:
        return None
    wh = e / 3600.0
    return trial["rx"] / wh, trial.get("extra", {}).get("rx_bytes", 0) / wh


def metrics(r: dict) -> dict:
    """The numbers the tables show for one entry (None where not measured)."""
    m: dict = {"ndr_mpps": None, "pdr_mpps": None, "overload_loss_pct": None,
               "overload_offered_mpps": None, "lat_avg_us": None, "lat_p99_us": None,
               "jitter_us": None, "cpu_s_per_mpkt": None, "ppwh": None, "bpwh": None}
    if r.get("status") != "ok":
        return m
    m["ndr_mpps"] = r["ndr_pps"] / 1e6
    m["pdr_mpps"] = r["pdr_pps"] / 1e6
    ov = r.get("overload")
    if ov:
        m["overload_loss_pct"] = 100.0 * ov["loss_ratio"]
        m["overload_offered_mpps"] = ov["offered_pps"] / 1e6
    lat = trial_latency(latency_point(r))
    if lat:
        m["lat_avg_us"] = lat["avg"] / 1e3
        m["lat_p99_us"] = lat["p99"] / 1e3 if lat.get("p99") is not None else None
        m["jitter_us"] = lat["jitter_ns"] / 1e3 if lat.get("jitter_ns") is not None else None
    m["cpu_s_per_mpkt"] = cpu_per_mpkt(r.get("ndr_trial"))
    e = energy_per_wh(r.get("ndr_trial"))
    if e:
        m["ppwh"], m["bpwh"] = e
    return m


def fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "–"
    return f"{v:.{digits}f}"


def cell(r: dict | None, key: str, digits: int = 3) -> str:
    if r is None:
        return ""
    if r.get("status") == "not supported":
        return NS
    if r.get("status") != "ok":
        return ERR
    v = metrics(r)[key]
    s = fmt(v, digits)
    if key in ("ndr_mpps", "pdr_mpps") and r.get("tester_limited") and v is not None:
        s = "≥ " + s
    return s


# -- CSV ---------------------------------------------------------------------------------------

RESULT_COLS = ["scenario", "dut", "frame_size", "status", "ndr_mpps", "pdr_mpps",
               "tester_limited", "overload_offered_mpps", "overload_loss_pct", "lat_avg_us",
               "lat_p99_us", "jitter_us", "cpu_s_per_mpkt", "ppwh", "bpwh", "reason"]
TRIAL_COLS = ["scenario", "dut", "frame_size", "kind", "fraction", "target_pps", "offered_pps",
              "tx", "rx", "loss_ratio", "tx_fail", "dut_cpu_s", "lat_avg_ns", "lat_p99_ns",
              "jitter_ns"]


def _num(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def results_csv(data: dict) -> str:
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(RESULT_COLS)
    for r in data["results"]:
        m = metrics(r)
        row = {**m, **{k: r.get(k) for k in ("scenario", "dut", "frame_size", "status",
                                             "tester_limited", "reason")}}
        w.writerow([_num(row.get(c)) for c in RESULT_COLS])
    return f.getvalue()


def _trial_row(r: dict, kind: str, fraction, t: dict) -> list[str]:
    ex = t.get("extra", {})
    lat = ex.get("latency") or ex.get("latency_main") or {}
    return [_num(x) for x in (
        r["scenario"], r["dut"], r["frame_size"], kind, fraction, t["target_pps"],
        t["offered_pps"], t["tx"], t["rx"], t["loss_ratio"], t.get("tx_fail", 0),
        ex.get("cpu", {}).get("dut_s"), lat.get("avg"), lat.get("p99"), lat.get("jitter_ns"))]


def trials_csv(data: dict) -> str:
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(TRIAL_COLS)
    for r in ok_entries(data):
        for t in r.get("trials", []):
            w.writerow(_trial_row(r, "search", None, t))
        for p in r.get("latency", []):
            w.writerow(_trial_row(r, "latency", p["fraction"], p["trial"]))
    return f.getvalue()


def engine_csv(data: dict) -> str:
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["family", "case", "routes", "mpps_min", "mpps_median", "mpps_max",
                "path_clocks", "node", "node_clocks"])
    for c in (data.get("engine") or {}).get("cases", []):
        for node, clk in c.get("nodes", []):
            w.writerow([_num(x) for x in (c["family"], c["name"], c.get("routes"), *c["mpps"],
                                           c.get("path_clocks"), node, clk)])
    return f.getvalue()


# -- markdown ----------------------------------------------------------------------------------

def _table(data: dict, key: str, digits: int = 3) -> list[str]:
    sz = sizes(data)
    lines = ["| scenario | DUT | " + " | ".join(f"{s} B" for s in sz) + " |",
             "|---|---|" + "---|" * len(sz)]
    for sc, dut in configs(data):
        cells = [cell(find(data, sc, dut, s), key, digits) for s in sz]
        if all(c in (NS, "") for c in cells):
            continue  # listed under "not supported"
        lines.append(f"| {sc} | {dut} | " + " | ".join(cells) + " |")
    return lines


def is_memif(dut: str) -> bool:
    return "memif" in dut


def frame_note(cfg: dict) -> str:
    if cfg.get("frame_size") == "rfc2544":
        return ("frame sizes are RFC 2544's, FCS included: the tester hands size − 4 bytes to "
                "its driver (1518 → 1514, a 1500-byte IP packet at the standard MTU 1500), "
                "except 64, sent as 64 bytes + FCS (68 on the wire: the tester's 22-byte "
                "signature does not fit a 60-byte frame)")
    return "frame size is the frame without FCS"


def memif_section(data: dict) -> list[str]:
    """Sluice over memif on its own: throughput, no Linux ratio."""
    cfgs = [(sc, d) for sc, d in configs(data) if is_memif(d)]
    if not any(find(data, sc, d, z) and find(data, sc, d, z).get("status") == "ok"
               for sc, d in cfgs for z in sizes(data)):
        return []
    lines = ["Tester Sluice <-memif-> DUT Sluice <-memif-> tester: no kernel on the data path, "
             "so there is no Linux equivalent and no ratio; compare it with the Sluice veth "
             "DUTs to see what the veth/kernel I/O costs.", "",
             "| scenario | DUT | frame | NDR Mpps | PDR Mpps | avg latency µs at 50 % NDR | "
             "CPU s/Mpkt |", "|---|---|---|---|---|---|---|"]
    for sc, d in cfgs:
        for z in sizes(data):
            r = find(data, sc, d, z)
            if not r or r.get("status") != "ok":
                continue
            m = metrics(r)
            ge = "≥ " if r.get("tester_limited") else ""
            lines.append(f"| {sc} | {d} | {z} B | {ge}{fmt(m['ndr_mpps'])} | "
                         f"{fmt(m['pdr_mpps'])} | {fmt(m['lat_avg_us'], 1)} | "
                         f"{fmt(m['cpu_s_per_mpkt'])} |")
    return lines


def headline(data: dict) -> list[str]:
    """Sluice / Linux ratios for every (scenario, size) both ran."""
    lines = []
    duts = {d for _, d in configs(data)}
    # memif has no kernel equivalent (no veth, no Linux on the path): never a Linux ratio.
    sluices = sorted(d for d in duts if d.startswith("sluice") and not is_memif(d))
    if "linux" not in duts:
        return lines
    for sc, _ in dict.fromkeys((s, None) for s, _ in configs(data)):
        for size in sizes(data):
            lx = find(data, sc, "linux", size)
            for sd in sluices:
                sl = find(data, sc, sd, size)
                if not (lx and sl and lx.get("status") == "ok" and sl.get("status") == "ok"):
                    continue
                a, b = metrics(sl), metrics(lx)

                def ratio(x, y):
                    return f"{x / y:.2f}" if x is not None and y else "–"
                lim = " (tester-limited)" if sl.get("tester_limited") or lx.get("tester_limited") else ""
                lines.append(
                    f"| {sc} | {size} B | {sd} | {ratio(a['ndr_mpps'], b['ndr_mpps'])}{lim} | "
                    f"{ratio(a['pdr_mpps'], b['pdr_mpps'])} | "
                    f"{ratio(a['lat_avg_us'], b['lat_avg_us'])} | "
                    f"{ratio(a['cpu_s_per_mpkt'], b['cpu_s_per_mpkt'])} |")
    if lines:
        lines = ["| scenario | frame | Sluice DUT | NDR ratio | PDR ratio | avg latency ratio at 50 % NDR | CPU per packet ratio |",
                 "|---|---|---|---|---|---|---|"] + lines
    return lines


def latency_table(data: dict) -> list[str]:
    lines = ["| scenario | DUT | frame | load (% NDR) | offered Mpps | loss % | min µs | avg µs | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | jitter µs | DUT CPU s/Mpkt |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    n = 0
    for r in ok_entries(data):
        for p in r.get("latency", []):
            t = p["trial"]
            lat = t.get("extra", {}).get("latency") or {}

            def us(k):
                v = lat.get(k)
                return fmt(v / 1e3 if v is not None else None, 1)
            lines.append(
                f"| {r['scenario']} | {r['dut']} | {r['frame_size']} | {100 * p['fraction']:.0f} | "
                f"{fmt(t['offered_pps'] / 1e6)} | {fmt(100 * t['loss_ratio'], 3)} | {us('min')} | "
                f"{us('avg')} | {us('p50')} | {us('p90')} | {us('p99')} | {us('p999')} | "
                f"{us('max')} | {us('jitter_ns')} | {fmt(cpu_per_mpkt(t), 3)} |")
            n += 1
    return lines if n else []


#: Counter names that say where a frame was dropped or delayed (substrings).
DROP_WORDS = ("drop", "miss", "full", "fail", "empty", "error", "earlier run", "not a tester",
              "squeeze")


def drops(counters: dict | None) -> str:
    """The drop counters of a trial's counter deltas, `name +n` joined."""
    items = [(k, v) for k, v in (counters or {}).items()
             if any(w in k for w in DROP_WORDS) and not k.endswith("bytes")
             and "received" not in k]
    return "; ".join(f"{k} +{v}" for k, v in items) or "–"


def lowrate_table(data: dict) -> list[str]:
    """Every case's warm-up trial (a low rate any DUT must forward without loss): loss, how
    long the daemons waited for their cores, and the drop counters that moved."""
    lines = ["| scenario | DUT | frame | offered kpps | loss % | CPU wait % | drained | "
             "DUT drop counters | tester drop counters |",
             "|---|---|---|---|---|---|---|---|---|"]
    n = 0
    for r in ok_entries(data):
        w = r.get("warmup")
        if not w or "dut_counters" not in w.get("extra", {}):
            continue
        e = w["extra"]
        loss = 100 * (w["tx"] - w["rx"]) / w["tx"] if w["tx"] else 0.0
        lines.append(f"| {r['scenario']} | {r['dut']} | {r['frame_size']} | "
                     f"{w['offered_pps'] / 1e3:.1f} | {loss:.3f} | "
                     f"{100 * e.get('cpu_wait_ratio', 0.0):.1f} | "
                     f"{'yes' if e.get('drained') else 'no'} | {drops(e.get('dut_counters'))} | "
                     f"{drops(e.get('tester_counters'))} |")
        n += 1
    return lines if n else []


def contention_note(data: dict) -> str:
    ts = [t for r in ok_entries(data) for t in [r.get("warmup")] + r.get("trials", [])
          + [p["trial"] for p in r.get("latency", [])] if t and "cpu_wait_ratio" in t.get("extra", {})]
    if not ts:
        return ""
    busy = sum(1 for t in ts if t["extra"]["cpu_wait_ratio"] > 0.05)
    return (f"**CPU contention**: in {busy} of {len(ts)} trials the DUT or the tester process "
            "waited for its core more than 5 % of the trial (`cpu_wait_ratio` in results.json, "
            "from /proc/<pid>/task/*/schedstat). Every trial also records the non-zero deltas "
            "of the DUT's and the tester's counters (`dut_counters`, `tester_counters`: "
            "`show errors`, `show interface`, af_xdp kernel ring counters, the kernel's veth "
            "and backlog counters), so every loss can be traced to where it happened.")


def engine_table(data: dict) -> list[str]:
    eng = data.get("engine")
    if not eng:
        return ["Not run in this suite (`sluice-bench ip4|ip6|l2` run them alone)."]
    lines = []
    if eng.get("tsc_ghz"):
        lines.append(f"TSC {eng['tsc_ghz']:.3f} GHz, `sluice-bench <ip4|ip6|l2> {' '.join(eng.get('args', []))}`, "
                     "one core, pg -> graph path -> pg-tx.\n")
    lines += ["| path | case | routes | Mpps min | median | max | path clk/pkt | clocks/packet per node |",
              "|---|---|---|---|---|---|---|---|"]
    for c in eng.get("cases", []):
        nodes = ", ".join(f"{k} {v:.1f}" for k, v in c.get("nodes", []))
        lo, med, hi = c["mpps"]
        lines.append(f"| {c['family']} | {c['name']} | {c.get('routes') or ''} | {lo:.2f} | "
                     f"{med:.2f} | {hi:.2f} | {fmt(c.get('path_clocks'), 1)} | {nodes} |")
    for what, err in sorted((eng.get("errors") or {}).items()):
        lines.append(f"\n`{what}` failed: `{err.strip().splitlines()[-1] if err.strip() else '?'}`")
    return lines


def markdown(data: dict, plots: list[str]) -> str:
    cfg = data["config"]
    s = cfg["search"]
    host = data["host"]
    pin = host["pinning"]
    en = data["energy"]
    out = [f"# Sluice benchmark report — suite `{data['suite']}`", ""]
    out += [f"Run {data['started']} – {data.get('finished', '?')}; {host.get('cpu_model') or 'CPU ?'}, "
            f"{host.get('cores')} cores, Linux {host.get('kernel')}.", ""]
    rps = ("RPS steers each veth's receive work to its owner's cores (the DUT's veths to the "
           "DUT cores, the tester's to the tester's)" if pin.get("rps", True) else
           "RPS off: a receiver's kernel work runs in its sender's transmit call")
    prio = {"high": " The Sluice daemons (tester and Sluice DUTs) run at high priority (their "
                    "own session at autogroup nice -20, `--priority high`), so other work on "
                    "this shared machine does not preempt the pollers.",
            "realtime": " The Sluice daemons run SCHED_FIFO (`--priority realtime`; the "
                        "kernel's RT throttling stops them 50 ms per second).",
            "normal": " The Sluice daemons run at normal priority (`--priority normal`): on "
                      "a shared machine they wait for their cores while other work runs.",
            }.get(pin.get("priority"), "")
    out += [f"**Pinning**: tester (Sluice) on core(s) {pin['tester_cores']}, DUT on core(s) "
            f"{pin['dut_cores']} (Sluice: `cpu {{ main-core }}`); {rps}.{prio} Tester, DUT and "
            "the kernel's veth work share this small machine: read ratios, not absolutes.", ""]
    if note := contention_note(data):
        out += [note, ""]
    out += [f"**Method**: RFC 2544 binary search, trials of {cfg['trial_s']} s after a "
            f"{cfg['warmup_s']} s warm-up, {cfg['repeat']} search(es) per case (median shown), "
            f"first trial at {s['max_rate'] / 1e6:.3f} Mpps, resolution {100 * s['resolution']:.1f} %, "
            f"at most {s['max_trials']} trials per search. NDR: zero loss; PDR: loss ≤ "
            f"{100 * s['pdr_loss']:.2f} %. Rates are aggregate offered rates measured by the tester "
            "(both directions summed for bidirectional scenarios); " + frame_note(cfg) + ". "
            "Latency: a 64-byte latency stream of "
            f"{cfg['latency_pps']} pps per direction beside the main stream at "
            + ", ".join(f"{100 * f:.0f} %" for f in cfg["latency_fractions"]) + " of NDR. "
            "\"≥\" marks a result capped by the tester, not by the DUT.", ""]
    if en.get("rapl"):
        out += ["**Energy**: RAPL package counters (whole machine, both cores), reported as "
                "packets and bytes per Wh of delivered traffic.", ""]
    else:
        out += [f"**Energy**: no RAPL on this machine ({en.get('reason')}): no energy figures, "
                "only DUT CPU-seconds per million delivered packets. No wattage is estimated.", ""]
    out += ["**DUT CPU**: Sluice = the daemon's utime+stime (/proc/<pid>/stat); Linux = "
            "system+irq+softirq time of the DUT cores (/proc/stat). See docs/benchmarking.md "
            "for what each includes.", ""]

    hl = headline(data)
    if hl:
        out += ["## Headline: Sluice / Linux", "", *hl, ""]
    mf = memif_section(data)
    if mf:
        out += ["## Sluice over memif (its own class, not compared with Linux)", "", *mf, ""]
    out += ["## Throughput: NDR (Mpps, zero loss)", "", *_table(data, "ndr_mpps"), ""]
    out += ["## Throughput: PDR (Mpps, loss ≤ "
            f"{100 * s['pdr_loss']:.2f} %)", "", *_table(data, "pdr_mpps"), ""]
    out += ["## Loss % when offered the first trial's rate (overload)", "",
            *_table(data, "overload_loss_pct", 2), ""]
    out += ["## Average latency (µs) at 50 % of NDR", "", *_table(data, "lat_avg_us", 1), ""]
    out += ["## p99 latency (µs) at 50 % of NDR", "", *_table(data, "lat_p99_us", 1), ""]
    out += ["## Jitter (µs, RFC 3550 mean |D|) at 50 % of NDR", "", *_table(data, "jitter_us", 2), ""]
    out += ["## DUT CPU-seconds per million delivered packets at NDR", "",
            *_table(data, "cpu_s_per_mpkt", 3), ""]
    if en.get("rapl"):
        out += ["## Packets per Wh at NDR", "", *_table(data, "ppwh", 0), ""]
        out += ["## Bytes per Wh at NDR", "", *_table(data, "bpwh", 0), ""]
    lt = latency_table(data)
    if lt:
        out += ["## Latency vs load", "", *lt, ""]
    ns = [r for r in data["results"] if r.get("status") != "ok"]
    if ns:
        out += ["## Not supported and errors", "", "| scenario | DUT | frame sizes | status | reason |",
                "|---|---|---|---|---|"]
        grouped: dict = {}
        for r in ns:
            k = (r["scenario"], r["dut"], r["status"], r.get("reason", ""))
            grouped.setdefault(k, []).append(str(r["frame_size"]))
        for (sc, dut, st, reason), szs in grouped.items():
            reason = reason.replace("|", "\\|").replace("\n", " ")
            out.append(f"| {sc} | {dut} | {', '.join(szs)} | {st} | {reason} |")
        out.append("")
    if lr := lowrate_table(data):
        out += ["## Loss at a low rate (each case's warm-up trial) and where it went", "",
                "A DUT must forward the warm-up rate without loss. Frames still in flight "
                "when the tester stops are waited for (drain: until all arrived, or nothing "
                "arrived for 0.25 s, at most 2 s); \"drained: no\" means some never came.", "",
                *lr, ""]
    out += ["## Engine benchmarks (clocks/packet per node)", "", *engine_table(data), ""]
    if plots:
        out += ["## Plots", ""]
        for p in plots:
            out += [f"- {PLOTS[p]}: ![{p}]({p})"]
        out.append("")
    out += ["Raw data: `results.json`; tables: `results.csv`, `trials.csv`, `engine.csv`.", ""]
    return "\n".join(out)


# -- plots -------------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _label(ax, xlabel: str, ylabel: str, title: str, log: bool = False,
           legend: bool = True, xlog: bool = False) -> None:
    """Axis labels, title, grid, optional log scales and a small legend (if anything is labelled)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    if xlog:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def plot_all(data: dict, out: Path) -> list[str]:
    """Writes the PNG plots there is data for; returns their file names."""
    plt = _plt()
    made = []
    ok = ok_entries(data)
    small = min((r["frame_size"] for r in ok), default=None)

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        made.append(name)

    if ok:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for sc, dut in configs(data):
            rs = sorted((r for r in ok if r["scenario"] == sc and r["dut"] == dut),
                        key=lambda r: r["frame_size"])
            if not rs:
                continue
            x = [r["frame_size"] for r in rs]
            line, = ax.plot(x, [r["ndr_pps"] / 1e6 for r in rs], "o-", label=f"{sc} / {dut}")
            ax.plot(x, [r["pdr_pps"] / 1e6 for r in rs], "--", color=line.get_color())
        _label(ax, "frame size (bytes" + (", with FCS)" if data["config"].get("frame_size") == "rfc2544" else ", without FCS)"), "throughput (Mpps)",
               "NDR (solid) / PDR (dashed) vs frame size")
        save(fig, "throughput_vs_frame_size.png")

        fig, ax = plt.subplots(figsize=(7, 4.5))
        any_lat = False
        for r in ok:
            if r["frame_size"] != small:
                continue
            pts = [(p["trial"]["offered_pps"] / 1e6, trial_latency(p)) for p in r.get("latency", [])]
            pts = [(x, l) for x, l in pts if l]
            if not pts:
                continue
            any_lat = True
            line, = ax.plot([x for x, _ in pts], [l["avg"] / 1e3 for _, l in pts], "o-",
                            label=f"{r['scenario']} / {r['dut']}")
            ax.plot([x for x, _ in pts], [(l.get("p99") or l["max"]) / 1e3 for _, l in pts],
                    "--", color=line.get_color())
        if any_lat:
            _label(ax, f"offered load (Mpps, {small}-byte frames)", "latency (µs)",
                   "latency vs load: average (solid), p99 (dashed)", log=True)
            save(fig, "latency_vs_load.png")
        else:
            plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in ok:
            if r["frame_size"] != small:
                continue
            ts = sorted(r.get("trials", []), key=lambda t: t["offered_pps"])
            if ts:
                ax.plot([t["offered_pps"] / 1e6 for t in ts],
                        [max(100 * t["loss_ratio"], 1e-4) for t in ts], "o-",
                        label=f"{r['scenario']} / {r['dut']}")
        _label(ax, f"offered load (Mpps, {small}-byte frames)", "loss % (0 drawn at 1e-4)",
               "loss vs offered load (every search trial)", log=True)
        save(fig, "loss_vs_load.png")

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
        labels, vals = [], []
        for r in ok:
            if r["frame_size"] != small:
                continue
            v = cpu_per_mpkt(r.get("ndr_trial"))
            if v is not None:
                labels.append(f"{r['scenario']}\n{r['dut']}")
                vals.append(v)
            pts = []
            for t in r.get("trials", []) + [p["trial"] for p in r.get("latency", [])]:
                c = cpu_per_mpkt(t)
                if c is not None and t["loss_ratio"] <= 0.5:
                    pts.append((t["offered_pps"] / 1e6, c))
            pts.sort()
            if pts:
                a2.plot([x for x, _ in pts], [c for _, c in pts], "o-",
                        label=f"{r['scenario']} / {r['dut']}")
        a1.bar(range(len(vals)), vals, color="tab:blue")
        a1.set_xticks(range(len(vals)), labels, fontsize=6, rotation=45, ha="right")
        a1.set_ylabel("DUT CPU-seconds per million packets")
        a1.set_title(f"at NDR, {small}-byte frames")
        _label(a2, "offered load (Mpps)", "DUT CPU-seconds per million packets",
               "vs offered load (trials with ≤ 50 % loss)", log=True)
        save(fig, "cpu_per_packet.png")

    # FIB size: end-to-end ip4 scenarios (1 route = ip4-oneway) and the engine cases.
    fib_sc = {"ip4-oneway": 1, "ip4-fib-255k": 255_000, "ip4-fib-1m": 1_000_000}
    e2e: dict[str, list[tuple[int, float]]] = {}
    for r in ok:
        if r["scenario"] in fib_sc and r["frame_size"] == 64:
            e2e.setdefault(r["dut"], []).append((fib_sc[r["scenario"]], r["ndr_pps"] / 1e6))
    eng = [c for c in (data.get("engine") or {}).get("cases", []) if c.get("routes")]
    if any(len(v) > 1 for v in e2e.values()) or eng:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
        for dut, pts in sorted(e2e.items()):
            pts.sort()
            a1.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=dut)
        _label(a1, "routes", "NDR (Mpps, 64 B)", "end to end (tester -> DUT -> tester)",
               xlog=True)
        for fam in ("ip4", "ip6"):
            pts = sorted((c["routes"], c["mpps"][1]) for c in eng if c["family"] == fam)
            if pts:
                a2.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"engine {fam}")
        _label(a2, "routes", "Mpps (median, one core)", "engine: pg -> forwarding path",
               xlog=True)
        save(fig, "fib_size.png")

    cases = (data.get("engine") or {}).get("cases", [])
    if cases:
        fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(cases) + 2), 5))
        nodes = list(dict.fromkeys(n for c in cases for n, _ in c.get("nodes", [])))
        bottom = [0.0] * len(cases)
        for n in nodes:
            v = [dict(c.get("nodes", [])).get(n, 0.0) for c in cases]
            ax.bar(range(len(cases)), v, bottom=bottom, label=n)
            bottom = [b + x for b, x in zip(bottom, v)]
        ax.set_xticks(range(len(cases)), [f"{c['family']}\n{c['name']}" for c in cases],
                      fontsize=6, rotation=45, ha="right")
        ax.set_ylabel("TSC clocks per packet")
        ax.set_title("engine benchmarks: clocks/packet per node")
        ax.legend(fontsize=6, ncol=2)
        save(fig, "node_clocks.png")
    return made


def generate(out_dir: Path, data: dict | None = None, plots: bool = True) -> list[Path]:
    """Writes results.csv, trials.csv, engine.csv, the plots and report.md into `out_dir`
    (reading results.json there unless `data` is given). Returns the files written."""
    out_dir = Path(out_dir)
    if data is None:
        raw = out_dir / "results.json"
        if not raw.exists() and raw.with_suffix(".json.gz").exists():
            import gzip  # committed runs keep the raw data gzipped
            data = json.loads(gzip.decompress(raw.with_suffix(".json.gz").read_bytes()))
        else:
            data = json.loads(raw.read_text())
    written = []
    for name, text in (("results.csv", results_csv(data)), ("trials.csv", trials_csv(data)),
                       ("engine.csv", engine_csv(data))):
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    made = plot_all(data, out_dir) if plots else []
    written += [out_dir / p for p in made]
    (out_dir / "report.md").write_text(markdown(data, made))
    written.append(out_dir / "report.md")
    return written
