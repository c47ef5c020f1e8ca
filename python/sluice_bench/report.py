"""Report generation from a run's raw JSON: CSV files, a markdown report and PNG plots.

Everything here is a pure function of `results.json.gz` (so `python -m sluice_bench report DIR`
regenerates a report, and the unit tests compare against golden files). Tables are shaped
config x frame size like the research's: a row per (scenario, DUT), a column per frame size.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from . import rawdata

NS = "n/s"      # not supported
ERR = "error"

PLOTS = {
    "throughput_vs_frame_size.png": "NDR and PDR per scenario (small multiples, log scale)",
    "latency_vs_load.png": "latency at 50 % of NDR per scenario and DUT (box plots)",
    "loss_vs_load.png": "loss of every search trial vs offered load, per scenario",
    "cpu_per_packet.png": "DUT CPU-seconds per million packets at NDR, per scenario",
    "fib_size.png": "FIB scale: throughput ÷ the 1-route throughput, Sluice and VPP",
    "node_clocks.png": "clocks/packet per node, stacked, Sluice beside VPP",
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
        for p in r.get("fixed_loss", []):
            w.writerow(_trial_row(r, "fixed", None, p["trial"]))
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
    lines = ["Tester Sluice <-memif-> DUT (Sluice or VPP) <-memif-> tester: no kernel on the data path, "
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


def vpp_headline(data: dict) -> list[str]:
    """Sluice / VPP for the same driver (af_packet, af_xdp, memif), scenario and frame size."""
    lines = []
    duts = {d for _, d in configs(data)}
    for sc, _ in dict.fromkeys((s, None) for s, _ in configs(data)):
        for size in sizes(data):
            for vd in sorted(d for d in duts if d.startswith("vpp-")):
                sd = "sluice-" + vd[len("vpp-"):]
                sl, vp = find(data, sc, sd, size), find(data, sc, vd, size)
                if not (sl and vp and sl.get("status") == "ok" and vp.get("status") == "ok"):
                    continue
                a, b = metrics(sl), metrics(vp)

                def ratio(x, y):
                    return f"{x / y:.2f}" if x is not None and y else "–"
                lim = (" (tester-limited)" if sl.get("tester_limited") or vp.get("tester_limited")
                       else "")
                lines.append(
                    f"| {sc} | {size} B | {vd[len('vpp-'):]} | "
                    f"{ratio(a['ndr_mpps'], b['ndr_mpps'])}{lim} | "
                    f"{ratio(a['pdr_mpps'], b['pdr_mpps'])} | "
                    f"{ratio(a['lat_avg_us'], b['lat_avg_us'])} | "
                    f"{ratio(a['cpu_s_per_mpkt'], b['cpu_s_per_mpkt'])} |")
    if lines:
        lines = ["| scenario | frame | driver | NDR ratio | PDR ratio | avg latency ratio at 50 % NDR | CPU per packet ratio |",
                 "|---|---|---|---|---|---|---|"] + lines
    return lines


_NOT_DRIVER_INPUT = ("ethernet-input", "ip4-input", "ip6-input", "l2-input", "ip4-input-no-checksum",
                     "nat44", "tester-")


def io_split(runtime_text: str) -> dict | None:
    """Seed 002's split of a dataplane's `show runtime` (Sluice or VPP, cumulative over a
    case): clocks per forwarded packet in the driver's rx nodes (`*-input` of a driver), its
    tx nodes (`*-tx`), and everything else (processing), per packet received by the drivers."""
    from .vpp import parse_runtime
    rt = parse_runtime(runtime_text or "")
    if not rt:
        return None
    rx = {n: v for n, v in rt.items() if n.endswith("-input") and not n.startswith(_NOT_DRIVER_INPUT)}
    tx = {n: v for n, v in rt.items() if n.endswith("-tx")}
    pkts = sum(v["vectors"] for v in rx.values())
    if not pkts:
        return None
    proc = {n: v for n, v in rt.items() if n not in rx and n not in tx}
    out = {k: sum(v["clocks_total"] for v in d.values()) / pkts
           for k, d in (("rx", rx), ("tx", tx), ("processing", proc))}
    out["packets"] = pkts
    return out


def io_table(data: dict) -> list[str]:
    lines = []
    for r in ok_entries(data):
        rt = (r.get("counters") or {}).get("show runtime")
        sp = io_split(rt) if rt else None
        if not sp:
            continue
        tot = sp["rx"] + sp["tx"] + sp["processing"]
        lines.append(f"| {r['scenario']} | {r['dut']} | {fmt(sp['rx'], 0)} | {fmt(sp['tx'], 0)} | "
                     f"{fmt(sp['processing'], 0)} | {100 * (sp['rx'] + sp['tx']) / tot:.0f} % |")
    if lines:
        lines = ["Clocks per packet from each dataplane's own `show runtime`, summed over the whole "
                 "case (every trial; polling rx nodes include their empty polls, so at low rates "
                 "rx is inflated), per packet its drivers received. Linux has no per-node clocks.",
                 "", "| scenario | DUT | driver rx clk/pkt | driver tx clk/pkt | processing clk/pkt "
                 "| I/O share |", "|---|---|---|---|---|---|"] + lines
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


def fixed_loss_table(data: dict) -> list[str]:
    """Seed 000's view: loss % of each case when offered the same fixed aggregate rates. A
    rate the tester could not offer is marked "≥" with what it did offer (tester-limited)."""
    rates = sorted({p["rate_pps"] for r in ok_entries(data) for p in r.get("fixed_loss", [])})
    if not rates:
        return []
    lines = ["| scenario | DUT | frame | " + " | ".join(f"{x / 1e6:g} Mpps" for x in rates) + " |",
             "|---|---|---|" + "---|" * len(rates)]
    for r in ok_entries(data):
        got = {p["rate_pps"]: p["trial"] for p in r.get("fixed_loss", [])}
        if not got:
            continue
        cells = []
        for x in rates:
            t = got.get(x)
            if t is None:
                cells.append("–")
                continue
            c = f"{100 * t['loss_ratio']:.2f}"
            if t["offered_pps"] < t["target_pps"] * 0.97:
                c += f" (offered ≥ {t['offered_pps'] / 1e6:.3f})"
            cells.append(c)
        lines.append(f"| {r['scenario']} | {r['dut']} | {r['frame_size']} | "
                     + " | ".join(cells) + " |")
    return lines


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
            "waited for its core more than 5 % of the trial (`cpu_wait_ratio` in results.json.gz, "
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
        lines.append(f"TSC {eng['tsc_ghz']:.3f} GHz, `sluice-bench <ip4|ip6|l2|memif> {' '.join(eng.get('args', []))}`, "
                     "one core, pg -> graph path -> pg-tx.\n")
    lines += ["| path | case | routes | Mpps min | median | max | path clk/pkt | clocks/packet per node |",
              "|---|---|---|---|---|---|---|---|"]
    for c in eng.get("cases", []):
        nodes = ", ".join(f"{k} {v:.1f}" for k, v in c.get("nodes", []))
        lo, med, hi = c["mpps"]
        lines.append(f"| {c['family']} | {c['name']} | {c.get('routes') or ''} | {lo:.2f} | "
                     f"{med:.2f} | {hi:.2f} | {fmt(path_clocks(c), 1)} | {nodes} |")
    for what, err in sorted((eng.get("errors") or {}).items()):
        lines.append(f"\n`{what}` failed: `{err.strip().splitlines()[-1] if err.strip() else '?'}`")
    return lines


def path_clocks(c: dict) -> float | None:
    """A case's clocks/packet over its path: recorded, else the sum of its nodes."""
    if c.get("path_clocks") is not None:
        return c["path_clocks"]
    nodes = c.get("nodes") or []
    return sum(v for _, v in nodes) if nodes else None


def engine_pairs(data: dict) -> list[tuple[dict, dict | None]]:
    """(Sluice case, the VPP case on the same pcap and routes or None), in Sluice's order."""
    eng = data.get("engine") or {}
    vpp = {(c["family"], c["name"]): c for c in (eng.get("vpp") or {}).get("cases", [])}
    return [(c, vpp.get((c["family"], c["name"]))) for c in eng.get("cases", [])]


def _ratio_to_first(cases: list[dict], fam: str) -> dict[str, float]:
    base = next((c["mpps"][1] for c in cases if c["family"] == fam and c.get("routes") == 1), None)
    return {c["name"]: c["mpps"][1] / base for c in cases
            if base and c["family"] == fam and c.get("routes")}


def vpp_engine_table(data: dict) -> list[str]:
    """Sluice and VPP on the same engine paths, same run (seed 001's table 6.1 shape)."""
    eng = data.get("engine") or {}
    v = eng.get("vpp")
    if not v:
        return []
    if v.get("skipped"):
        return [f"VPP rows skipped: {v['skipped']}."]
    pairs = [(s, x) for s, x in engine_pairs(data) if x]
    lines = [f"{v.get('version') or 'VPP'}, one thread on core 0 (as sluice-bench), the same pcap (pg0 → "
             "ethernet-input), routes and MACs as Sluice's case, "
             f"{v.get('packets', 0) / 1e6:g}M packets per run, {v.get('runs')} runs after a "
             "warm-up; Mpps = packets / wall time from `packet-generator enable-stream` to "
             "the stream's end (polled through vppctl); clocks per node from VPP's `show "
             "runtime`. Path clocks exclude pg-input for both (Sluice does not report it). "
             "VPP's L2 cross-connect is configured both ways (its l2-output needs the output "
             "interface in L2 mode).", "",
             "| path | case | routes | Sluice Mpps min / median / max | VPP Mpps min / median / max "
             "| Sluice / VPP | Sluice × 1 route | VPP × 1 route | path clk/pkt Sluice | VPP |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    sl = [s for s, _ in pairs]
    vp = [x for _, x in pairs]
    for s, x in pairs:
        rs = _ratio_to_first(sl, s["family"]).get(s["name"])
        rv = _ratio_to_first(vp, x["family"]).get(x["name"])
        lines.append(
            f"| {s['family']} | {s['name']} | {s.get('routes') or ''} | "
            f"{' / '.join(f'{m:.2f}' for m in s['mpps'])} | "
            f"{' / '.join(f'{m:.2f}' for m in x['mpps'])} | "
            f"**{s['mpps'][1] / x['mpps'][1]:.2f}** | {fmt(rs, 2)} | {fmt(rv, 2)} | "
            f"{fmt(path_clocks(s), 1)} | {fmt(path_clocks(x), 1)} |")
    lines += ["", "Clocks/packet per node, Sluice | VPP:", "",
              "| path | case | Sluice nodes | VPP nodes |", "|---|---|---|---|"]
    for s, x in pairs:
        lines.append(f"| {s['family']} | {s['name']} | "
                     + ", ".join(f"{k} {c:.1f}" for k, c in s.get("nodes", [])) + " | "
                     + ", ".join(f"{k} {c:.1f}" for k, c in x.get("nodes", [])) + " |")
    missing = [f"{s['family']} {s['name']}" for s, x in engine_pairs(data) if x is None]
    for k, why in sorted((v.get("errors") or {}).items()):
        lines.append(f"\nVPP `{k}` failed: {why.strip().splitlines()[0][:400]}")
    if missing:
        lines.append(f"\nNo VPP row for: {', '.join(missing)}.")
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
    out += ["**DUT CPU**: Sluice and VPP = the daemon's utime+stime (/proc/<pid>/stat); Linux = "
            "system+irq+softirq time of the DUT cores (/proc/stat). See docs/benchmarking.md "
            "for what each includes.", ""]

    hl = headline(data)
    if hl:
        out += ["## Headline: Sluice / Linux", "", *hl, ""]
    if vh := vpp_headline(data):
        out += ["## Headline: Sluice / VPP (same driver, same scenario, same run)", "", *vh, ""]
    mf = memif_section(data)
    if mf:
        out += ["## memif DUTs (their own class, not compared with Linux)", "", *mf, ""]
    out += ["## Throughput: NDR (Mpps, zero loss)", "", *_table(data, "ndr_mpps"), ""]
    out += ["## Throughput: PDR (Mpps, loss ≤ "
            f"{100 * s['pdr_loss']:.2f} %)", "", *_table(data, "pdr_mpps"), ""]
    out += ["## Loss % when offered the first trial's rate (overload)", "",
            *_table(data, "overload_loss_pct", 2), ""]
    if fl := fixed_loss_table(data):
        out += ["## Loss % at fixed offered rates (seed 000's method)", "",
                "Every DUT offered the same aggregate rates for one trial each; \"offered ≥\" "
                "marks a rate the tester could not reach (its own limit), with what it sent.",
                "", *fl, ""]
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
    if it := io_table(data):
        out += ["## Cycles per packet: driver I/O vs processing (seed 002's split)", "", *it, ""]
    out += ["## Engine benchmarks (clocks/packet per node)", "", *engine_table(data), ""]
    if vt := vpp_engine_table(data):
        out += ["## Engine paths: Sluice and VPP in the same run", "", *vt, ""]
    if plots:
        out += ["## Plots", ""]
        for p in plots:
            out += [f"- {PLOTS[p]}: ![{p}]({p})"]
        out.append("")
    out += ["Raw data: `results.json.gz` (gzipped); tables: `results.csv`, `trials.csv`, "
            "`engine.csv`.", ""]
    return "\n".join(out)


# -- plots -------------------------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


#: One colour per DUT in every figure (Sluice blues/greens, VPP oranges/reds, Linux grey).
DUT_COLORS = {
    "sluice-af_packet": "#1f77b4", "sluice-af_xdp": "#17becf", "sluice-memif": "#2ca02c",
    "linux": "#7f7f7f",
    "vpp-af_packet": "#ff7f0e", "vpp-af_xdp": "#bcbd22", "vpp-memif": "#d62728",
    "sluice": "#1f77b4", "vpp": "#ff7f0e",
}
_EXTRA_COLORS = ["#9467bd", "#8c564b", "#e377c2", "#393b79", "#637939"]


def dut_color(dut: str) -> str:
    dut = dut.removesuffix(" (engine)")
    if dut in DUT_COLORS:
        return DUT_COLORS[dut]
    base = dut.rsplit("-", 1)[0]  # sluice-af_packet-1w -> sluice-af_packet's family
    return DUT_COLORS.get(base, _EXTRA_COLORS[hash(dut) % len(_EXTRA_COLORS)])


#: Node colours for the stacked per-node bars: one per stage, the same for Sluice and VPP.
STAGES = [("pg-input", "rx (pg)", "#c7c7c7"), ("memif-input", "memif rx", "#98df8a"),
          ("ethernet-input", "ethernet-input", "#1f77b4"),
          ("ip4-input", "ip-input", "#aec7e8"), ("ip6-input", "ip-input", "#aec7e8"),
          ("l2-input", "l2-input", "#ffbb78"), ("l2-learn", "l2 learn/fwd", "#ff9896"),
          ("l2-fwd", "l2 learn/fwd", "#ff9896"), ("lookup", "lookup", "#2ca02c"),
          ("load-balance", "load-balance", "#bcbd22"), ("rewrite", "rewrite", "#9467bd"),
          ("l2-output", "l2-output", "#c5b0d5"),
          ("interface-output", "interface-output", "#e377c2"),
          ("-output", "interface-output", "#e377c2"), ("memif", "memif tx", "#8c564b"),
          ("tx", "tx (pg-tx / pgN-tx)", "#7f7f7f")]


def node_stage(node: str) -> tuple[str, str]:
    for key, label, color in STAGES:
        if key in node:
            return label, color
    return node, "#17becf"


def machine(data: dict) -> str:
    h = data.get("host", {})
    return f"{(h.get('cpu_model') or 'CPU ?').split(' Processor')[0]}, {h.get('cores')} cores, " \
           f"{str(data.get('started', ''))[:10]}"


def _label(ax, xlabel: str, ylabel: str, title: str, log: bool = False,
           legend: bool = False, xlog: bool = False) -> None:
    """Axis labels, title, grid, optional log scales and a small legend (if anything is labelled)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    if log:
        ax.set_yscale("log")
    if xlog:
        ax.set_xscale("log")
    ax.grid(alpha=0.3)
    _plain_ticks(ax)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _plain_ticks(ax) -> None:
    """Log axes labelled 0.5, 1, 2 ... instead of 5×10^-1."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    for axis, scale in ((ax.yaxis, ax.get_yscale()), (ax.xaxis, ax.get_xscale())):
        if scale == "log":
            axis.set_major_formatter(FuncFormatter(lambda v, _: _human(v)))
            axis.set_minor_formatter(NullFormatter())


def _human(v: float) -> str:
    for div, suf in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:g}{suf}"
    return f"{v:g}"


def _bar_scale(values: list[float]) -> bool:
    """Log scale for bars only when they differ by orders of magnitude (else linear from 0,
    so bar heights compare)."""
    vs = [v for v in values if v and v > 0]
    return bool(vs) and max(vs) / min(vs) > 30


def _grid(plt, n: int, w: float = 3.6, h: float = 2.9, cols: int = 3):
    cols = max(1, min(cols, n))
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows + 0.9), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def _shared_legend(fig, duts: list[str], extra: list | None = None) -> None:
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=dut_color(d), marker="o", lw=2, label=d) for d in duts]
    handles += extra or []
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=8,
               frameon=False)


def _scenarios(ok: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["scenario"] for r in ok))


def _duts(ok: list[dict]) -> list[str]:
    order = list(DUT_COLORS)
    ds = list(dict.fromkeys(r["dut"] for r in ok))
    return sorted(ds, key=lambda d: (order.index(d) if d in order else 99, d))


def plot_all(data: dict, out: Path) -> list[str]:
    """Writes the PNG plots there is data for; returns their file names. One question per
    figure, small multiples per scenario, one colour per DUT in all of them."""
    plt = _plt()
    from matplotlib.lines import Line2D
    made = []
    ok = ok_entries(data)
    small = min((r["frame_size"] for r in ok), default=None)
    where = machine(data)

    def save(fig, name, bottom=0.0):
        fig.tight_layout(rect=(0, bottom, 1, 0.92))
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        made.append(name)

    if ok:
        # NDR vs frame size: one panel per scenario; scenarios run at one size show a bar per DUT.
        scs = _scenarios(ok)
        duts = _duts(ok)
        fig, axes = _grid(plt, len(scs))
        for ax, sc in zip(axes, scs):
            rs = [r for r in ok if r["scenario"] == sc]
            multi = len({r["frame_size"] for r in rs}) > 1
            if multi:
                for d in duts:
                    pts = sorted((r["frame_size"], r["ndr_pps"] / 1e6, r["pdr_pps"] / 1e6,
                                  r.get("tester_limited")) for r in rs if r["dut"] == d)
                    if not pts:
                        continue
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=dut_color(d))
                    ax.plot([p[0] for p in pts], [p[2] for p in pts], ":", color=dut_color(d))
                    for p in pts:
                        if p[3]:
                            ax.plot(p[0], p[1], "^", color=dut_color(d), ms=9, mfc="none")
                _label(ax, "frame size (B, with FCS)", "Mpps", sc,
                       log=_bar_scale([r["ndr_pps"] for r in rs] + [r["pdr_pps"] for r in rs]))
                if ax.get_yscale() == "linear":
                    ax.set_ylim(bottom=0)
            else:
                ds = [d for d in duts if any(r["dut"] == d for r in rs)]
                ys = [next(r for r in rs if r["dut"] == d) for d in ds]
                ax.bar(range(len(ds)), [r["ndr_pps"] / 1e6 for r in ys],
                       color=[dut_color(d) for d in ds])
                ax.scatter(range(len(ds)), [r["pdr_pps"] / 1e6 for r in ys], marker="_",
                           s=300, color="black", zorder=3)
                for i, r in enumerate(ys):
                    if r.get("tester_limited"):
                        ax.text(i, r["ndr_pps"] / 1e6, "≥", ha="center", va="bottom")
                ax.set_xticks(range(len(ds)), [d.replace("sluice-", "S ").replace("vpp-", "V ")
                                               for d in ds], fontsize=7, rotation=30)
                _label(ax, "", f"Mpps ({rs[0]['frame_size']} B)", sc,
                       log=_bar_scale([r["ndr_pps"] for r in ys] + [r["pdr_pps"] for r in ys]))
        fig.suptitle(f"NDR per scenario (Mpps; PDR: dotted line / black tick; ≥ / ▲: "
                     f"tester-limited; log scale where DUTs differ by > 30×)\n{where}",
                     fontsize=10)
        _shared_legend(fig, duts)
        save(fig, "throughput_vs_frame_size.png", bottom=0.06)

        # Latency at 50 % NDR as boxes: p50–p90 box, min–p99 whiskers, max as a dot.
        lat = [(r, trial_latency(latency_point(r))) for r in ok if r["frame_size"] == small]
        lat = [(r, l) for r, l in lat if l and l.get("p50") is not None]
        if lat:
            scs = list(dict.fromkeys(r["scenario"] for r, _ in lat))
            fig, axes = _grid(plt, len(scs))
            for ax, sc in zip(axes, scs):
                rows = [(r, l) for r, l in lat if r["scenario"] == sc]
                rows.sort(key=lambda x: duts.index(x[0]["dut"]) if x[0]["dut"] in duts else 99)
                stats = []
                for r, l in rows:
                    q = {k: (l.get(k) or l.get("max") or l["avg"]) / 1e3
                         for k in ("min", "p50", "p90", "p99", "max")}
                    stats.append({"med": q["p50"], "q1": q["p50"], "q3": q["p90"],
                                  "whislo": q["min"], "whishi": q["p99"], "fliers": [q["max"]],
                                  "mean": l["avg"] / 1e3, "label": ""})
                bp = ax.bxp(stats, showmeans=True, patch_artist=True, widths=0.6,
                            medianprops={"color": "black"},
                            meanprops={"marker": "^", "markerfacecolor": "black",
                                       "markeredgecolor": "black"})
                for patch, (r, _) in zip(bp["boxes"], rows):
                    patch.set_facecolor(dut_color(r["dut"]))
                    patch.set_alpha(0.8)
                ax.set_xticks(range(1, len(rows) + 1),
                              [r["dut"].replace("sluice-", "S ").replace("vpp-", "V ")
                               for r, _ in rows], fontsize=7, rotation=30)
                _label(ax, "", "latency (µs)", sc, log=True)
            fig.suptitle(f"Latency at 50 % of NDR, {small}-byte frames (µs, log): box p50–p90, "
                         f"whiskers min–p99, ○ max, ▲ mean\n{where}", fontsize=10)
            _shared_legend(fig, [d for d in duts if any(r["dut"] == d for r, _ in lat)])
            save(fig, "latency_vs_load.png", bottom=0.06)

        # Loss of every search trial vs offered load, per scenario.
        scs = [sc for sc in _scenarios(ok)
               if any(r["scenario"] == sc and r["frame_size"] == small and r.get("trials")
                      for r in ok)]
        if scs:
            fig, axes = _grid(plt, len(scs))
            for ax, sc in zip(axes, scs):
                for r in ok:
                    if r["scenario"] != sc or r["frame_size"] != small:
                        continue
                    ts = sorted(r.get("trials", []), key=lambda t: t["offered_pps"])
                    ax.plot([t["offered_pps"] / 1e6 for t in ts],
                            [max(100 * t["loss_ratio"], 1e-4) for t in ts], "o-", ms=3,
                            color=dut_color(r["dut"]))
                _label(ax, "offered Mpps (log)", "loss % (0 at 1e-4)", sc, log=True, xlog=True)
            fig.suptitle(f"Loss vs offered load, every search trial, {small}-byte frames\n"
                         f"{where}", fontsize=10)
            _shared_legend(fig, duts)
            save(fig, "loss_vs_load.png", bottom=0.06)

        # CPU per packet at NDR: one panel per scenario, a bar per DUT (log).
        cp = [(r, cpu_per_mpkt(r.get("ndr_trial"))) for r in ok if r["frame_size"] == small]
        cp = [(r, v) for r, v in cp if v]
        if cp:
            scs = list(dict.fromkeys(r["scenario"] for r, _ in cp))
            fig, axes = _grid(plt, len(scs))
            for ax, sc in zip(axes, scs):
                rows = sorted(((r, v) for r, v in cp if r["scenario"] == sc),
                              key=lambda x: duts.index(x[0]["dut"]) if x[0]["dut"] in duts else 99)
                ax.bar(range(len(rows)), [v for _, v in rows],
                       color=[dut_color(r["dut"]) for r, _ in rows])
                ax.set_xticks(range(len(rows)),
                              [r["dut"].replace("sluice-", "S ").replace("vpp-", "V ")
                               for r, _ in rows], fontsize=7, rotation=30)
                _label(ax, "", "CPU-s per Mpkt", sc, log=_bar_scale([v for _, v in rows]))
            fig.suptitle(f"DUT CPU-seconds per million packets at NDR, {small}-byte frames "
                         f"(lower is better)\n{where}", fontsize=10)
            _shared_legend(fig, [d for d in duts if any(r["dut"] == d for r, _ in cp)])
            save(fig, "cpu_per_packet.png", bottom=0.06)

    # FIB scale: throughput as a ratio to the same DUT's 1-route rate, engine and end to end.
    eng = data.get("engine") or {}
    vcases = (eng.get("vpp") or {}).get("cases", [])
    fams = [f for f in ("ip4", "ip6")
            if sum(1 for c in eng.get("cases", []) if c["family"] == f and c.get("routes")) > 1]
    fib_sc = {"ip4-oneway": 1, "ip4-fib-255k": 255_000, "ip4-fib-1m": 1_000_000,
              "ip6-oneway": 1, "ip6-fib-255k": 255_000}
    e2e: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in ok:
        if r["scenario"] in fib_sc and r["frame_size"] == small:
            fam = r["scenario"][:3]
            e2e.setdefault((fam, r["dut"]), []).append((fib_sc[r["scenario"]], r["ndr_pps"]))
    e2e = {k: sorted(v) for k, v in e2e.items() if len(v) > 1 and v and min(v)[0] == 1}
    if fams or e2e:
        panels = [("engine", f) for f in fams] + [("e2e", f) for f in ("ip4", "ip6")
                                                   if any(k[0] == f for k in e2e)]
        fig, axes = _grid(plt, len(panels), w=4.2, h=3.2)
        used = []
        for ax, (kind, fam) in zip(axes, panels):
            if kind == "engine":
                for dut, cs in (("sluice", eng.get("cases", [])), ("vpp", vcases)):
                    r = _ratio_to_first(cs, fam)
                    # Synthetic tables as a line; the real table (its own prefix mix) a star.
                    pts = sorted((c["routes"], r[c["name"]], c["name"].startswith("real")) for c in cs
                                 if c["family"] == fam and c["name"] in r)
                    line = [p for p in pts if not p[2]]
                    if len(pts) > 1:
                        ax.plot([p[0] for p in line], [p[1] for p in line], "o-",
                                color=dut_color(dut), lw=2)
                        for x, y, real in pts:
                            if real:
                                ax.plot(x, y, "*", ms=13, color=dut_color(dut), mec="black")
                            ax.annotate(f"{y:.2f}" + (" real" if real else ""), (x, y),
                                        fontsize=7, xytext=(3, 3), textcoords="offset points")
                        used.append(f"{dut} (engine)")
                _label(ax, "routes (log)", "Mpps ÷ 1-route Mpps",
                       f"engine {fam}: pg → forwarding path, one core", xlog=True)
            else:
                for (f, dut), pts in sorted(e2e.items()):
                    if f != fam:
                        continue
                    base = pts[0][1]
                    if not base:
                        continue  # NDR 0 with one route: no ratio
                    ax.plot([p[0] for p in pts], [p[1] / base for p in pts], "o--",
                            color=dut_color(dut))
                    used.append(dut)
                _label(ax, "routes (log)", "NDR ÷ 1-route NDR",
                       f"end to end {fam} (NDR, {small} B)", xlog=True)
            ax.axhline(1.0, color="black", lw=0.6)
            ax.set_ylim(0, max(1.15, ax.get_ylim()[1]))
        fig.suptitle(f"FIB scale: throughput relative to 1 route (1.0 = no cost)\n{where}",
                     fontsize=10)
        star = Line2D([], [], color="black", marker="*", ls="", ms=10, label="real table")
        _shared_legend(fig, list(dict.fromkeys(used)), [star])
        save(fig, "fib_size.png", bottom=0.08)

    # Clocks per node: stacked bars, Sluice and VPP side by side per engine case.
    pairs = engine_pairs(data)
    if pairs:
        fams = list(dict.fromkeys(s["family"] for s, _ in pairs))
        fig, axes = _grid(plt, len(fams), w=max(4.0, 1.3 * max(
            sum(1 for s, _ in pairs if s["family"] == f) for f in fams) + 1.5), h=3.8, cols=2)
        stages: dict[str, str] = {}
        for ax, fam in zip(axes, fams):
            fp = [(s, v) for s, v in pairs if s["family"] == fam]
            x = 0.0
            ticks, labels = [], []
            for s, v in fp:
                for k, (dut, c) in enumerate((("sluice", s), ("vpp", v))):
                    if not c:
                        continue
                    xx = x + 0.42 * k
                    bottom = 0.0
                    for node, clk in c.get("nodes", []):
                        label, color = node_stage(node)
                        stages[label] = color
                        ax.bar(xx, clk, width=0.4, bottom=bottom, color=color,
                               edgecolor=dut_color(dut), linewidth=1.2)
                        bottom += clk
                    ax.text(xx, bottom, f"{bottom:.0f}", ha="center", va="bottom", fontsize=7)
                    ax.text(xx, 0, "S" if dut == "sluice" else "V", ha="center", va="bottom",
                            fontsize=7, color="white", fontweight="bold")
                ticks.append(x + (0.21 if v else 0))
                labels.append(s["name"])
                x += 1.0
            ax.set_xticks(ticks, labels, fontsize=7, rotation=20, ha="right")
            _label(ax, "", "TSC clocks per packet", f"{fam}: S = Sluice, V = VPP")
        handles = [Line2D([], [], color=c, lw=8, label=l) for l, c in stages.items()]
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7,
                   frameon=False)
        has_vpp = any(v for _, v in pairs)
        fig.suptitle("Clocks per packet per node, stacked" + (": Sluice (S) beside VPP (V), "
                     "same pcap, same run" if has_vpp else " (Sluice)") + f"\n{where}",
                     fontsize=10)
        save(fig, "node_clocks.png", bottom=0.1)
    return made


# -- report.html ---------------------------------------------------------------------------------

def _inline(text: str) -> str:
    import html
    import re
    t = html.escape(text, quote=False)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return t


def markdown_to_html(md: str, out_dir: Path, title: str) -> str:
    """The report as one self-contained HTML page: the markdown's headings, paragraphs,
    lists and tables, every plot inlined as a base64 PNG (no network, no other file)."""
    import base64
    import re
    body: list[str] = []
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.startswith("#"):
            n = len(line) - len(line.lstrip("#"))
            body.append(f"<h{n}>{_inline(line[n:].strip())}</h{n}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split(" | ")])
                i += 1
            t = ["<table>"]
            for k, r in enumerate(rows):
                if k == 1 and all(set(c) <= set("-: ") for c in r):
                    continue
                tag = "th" if k == 0 else "td"
                t.append("<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in r) + "</tr>")
            t.append("</table>")
            body.append("\n".join(t))
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                item = lines[i][2:]
                m = re.search(r"!\[[^\]]*\]\(([^)]+)\)", item)
                if m and (out_dir / m.group(1)).is_file():
                    b64 = base64.b64encode((out_dir / m.group(1)).read_bytes()).decode()
                    cap = _inline(item[:m.start()].rstrip(": "))
                    items.append(f"<li><p>{cap}</p><img alt=\"{m.group(1)}\" "
                                 f"src=\"data:image/png;base64,{b64}\"></li>")
                else:
                    items.append(f"<li>{_inline(item)}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "- ")):
                para.append(lines[i])
                i += 1
            body.append(f"<p>{_inline(' '.join(para))}</p>")
    css = ("body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em;"
           "font-size:14px}table{border-collapse:collapse;margin:.5em 0;font-size:12px}"
           "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
           "td:first-child,td:nth-child(2),th{text-align:left}th{background:#eee}"
           "img{max-width:100%;border:1px solid #ddd}ul{list-style:none;padding:0}"
           "code{background:#f4f4f4}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{_inline(title)}"
            f"</title><style>{css}</style></head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def generate(out_dir: Path, data: dict | None = None, plots: bool = True) -> list[Path]:
    """Writes results.csv, trials.csv, engine.csv, the plots and report.md into `out_dir`
    (reading results.json.gz there unless `data` is given). Returns the files written."""
    out_dir = Path(out_dir)
    if data is None:
        data = rawdata.load(out_dir)
    written = []
    for name, text in (("results.csv", results_csv(data)), ("trials.csv", trials_csv(data)),
                       ("engine.csv", engine_csv(data))):
        (out_dir / name).write_text(text)
        written.append(out_dir / name)
    made = plot_all(data, out_dir) if plots else []
    written += [out_dir / p for p in made]
    md = markdown(data, made)
    (out_dir / "report.md").write_text(md)
    written.append(out_dir / "report.md")
    (out_dir / "report.html").write_text(
        markdown_to_html(md, out_dir, f"Sluice benchmark report — {data.get('suite')}"))
    written.append(out_dir / "report.html")
    return written
