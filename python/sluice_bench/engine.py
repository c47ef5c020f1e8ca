"""Engine benchmarks: `sluice-bench ip4|ip6|l2 --json FILE` (pg -> graph path -> pg-tx, one
core, the real nodes configured through the real CLI), read back as per-case Mpps and
clocks/packet per node (the numbers `show runtime` prints), so the cost of every node is
recorded with each harness run.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

WHAT = ("ip4", "ip6", "l2", "memif")
#: Extra arguments per benchmark (the memif loop at 64 bytes only, as the other paths).
EXTRA = {"memif": ["--only", "64"]}


def parse(what: str, raw: dict) -> list[dict]:
    """Turns one `sluice-bench <what> --json` object into a list of cases
    {family, name, routes, mpps: [min, median, max], path_clocks, nodes: [[node, clk/pkt], ...]}."""
    cases = []
    for key, v in raw.items():
        if not isinstance(v, dict) or "mpps" not in v:
            continue
        # The key is the name made JSON-key safe; a case that carries its name keeps `/ ( +`.
        name = v.get("name") or re.sub(r"^(ip4|ip6|l2|memif)_", "", key).replace("_", " ")
        cases.append({
            "family": what, "name": name, "routes": v.get("routes"),
            "mpps": v["mpps"], "path_clocks": v.get("path_clocks"),
            "ratio": v.get("ratio"),
            # A list, not an object: path order survives JSON files written with sort_keys.
            "nodes": [[n, c] for n, c in v.get("nodes", {}).items()],
        })
    return cases


def run(bench_bin: Path | None, args: list[str], keep_inputs: Path | None = None,
        families: tuple[str, ...] = WHAT) -> dict:
    """Runs the engine benchmarks of `families` (default all); returns {tsc_ghz, args, cases,
    errors}. `keep_inputs`: a directory where each case's pcap and routes are kept (for the
    VPP rows)."""
    out: dict = {"args": args, "cases": [], "errors": {}, "tsc_ghz": None}
    if bench_bin is None or not bench_bin.is_file():
        out["errors"]["all"] = f"sluice-bench binary not found ({bench_bin})"
        return out
    for what in families:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            # The benchmark pins its main thread itself (core 0).
            cmd = [str(bench_bin), what, *args, *EXTRA.get(what, []), "--json", f.name]
            if keep_inputs is not None:
                cmd += ["--keep-inputs", str(keep_inputs)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                out["errors"][what] = (p.stderr or p.stdout)[-2000:]
                continue
            raw = json.loads(Path(f.name).read_text())
        out["tsc_ghz"] = raw.get("tsc_ghz", out["tsc_ghz"])
        out["cases"] += parse(what, raw)
    return out
