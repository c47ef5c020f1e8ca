"""Report generation from recorded JSON (tests/data/bench/results.json) against golden files.

After an intended change to the report, regenerate the golden files with
`SLUICE_BENCH_UPDATE_GOLDEN=1 .venv/bin/pytest python/tests/test_bench_report.py` and review
the diff."""

import json
import os
import shutil
from pathlib import Path

import pytest

from sluice_bench import report

DATA = Path(__file__).parent / "data" / "bench"
GOLDEN = DATA / "golden"
TEXT_FILES = ["report.md", "results.csv", "trials.csv", "engine.csv"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("report")
    shutil.copy(DATA / "results.json", tmp_path / "results.json")
    files = report.generate(tmp_path)
    return tmp_path, files


def test_report_matches_golden_files(generated):
    out, _ = generated
    if os.environ.get("SLUICE_BENCH_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        for f in TEXT_FILES:
            shutil.copy(out / f, GOLDEN / f)
    for f in TEXT_FILES:
        assert (out / f).read_text() == (GOLDEN / f).read_text(), f"{f} differs from golden"


def test_plots_are_png_files_linked_from_the_report(generated):
    out, files = generated
    pngs = sorted(p.name for p in files if p.suffix == ".png")
    assert pngs == sorted(report.PLOTS)  # the fixture has data for every plot
    md = (out / "report.md").read_text()
    for p in pngs:
        assert (out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({p})" in md


def test_report_never_prints_a_number_for_unsupported_cases(generated):
    out, _ = generated
    data = json.loads((out / "results.json").read_text())
    rows = {(r["scenario"], r["dut"]): r for r in data["results"] if r["status"] != "ok"}
    assert ("nat44-oneway", "sluice-af_packet") in rows
    md = (out / "report.md").read_text()
    ndr = md.split("## Throughput: NDR")[1].split("##")[0]
    assert "| nat44-oneway | sluice-af_packet |" not in ndr  # only in the not-supported list
    assert "| nat44-oneway | sluice-af_packet | 64 | not supported | Sluice has no NAT44 yet |" in md
    assert "| l2-bridge | linux | 64 | error |" in md
    assert "no RAPL on this machine" in md and "No wattage is estimated" in md
    csv_rows = [l.split(",") for l in (out / "results.csv").read_text().splitlines()]
    ns = [r for r in csv_rows if r[3] == "not supported"]
    assert ns and all(r[4] == "" and r[5] == "" for r in ns)


def test_headline_ratios_are_sluice_over_linux(generated):
    out, _ = generated
    data = json.loads((out / "results.json").read_text())
    r = {(x["scenario"], x["dut"], x["frame_size"]): x for x in data["results"]}
    want = (r[("ip4-oneway", "sluice-af_packet", 64)]["ndr_pps"]
            / r[("ip4-oneway", "linux", 64)]["ndr_pps"])
    md = (out / "report.md").read_text()
    assert f"| ip4-oneway | 64 B | sluice-af_packet | {want:.2f} |" in md


def test_low_rate_loss_is_explained_by_counters_and_cpu_wait():
    """The warm-up table and the contention note read the per-trial diagnostics."""
    def trial(tx, rx, wait, dut, tst, drained):
        return {"tx": tx, "rx": rx, "offered_pps": 50_000.0, "extra": {
            "cpu_wait_ratio": wait, "drained": drained, "dut_counters": dut,
            "tester_counters": tst}}
    xdp = {"af_xdp xdp0 q0 kernel fill ring empty": 350, "xdp0 rx-miss": 350,
           "xdp0 rx packets": 49650, "sched dut wait us": 450_000}
    data = {"results": [
        {"scenario": "ip4-oneway", "dut": "sluice-af_xdp", "frame_size": 64, "status": "ok",
         "warmup": trial(50_000, 49_650, 0.45, xdp, {"error tester-rx: tester frames "
                                                     "received": 49650}, False),
         "trials": [trial(1, 1, 0.01, {}, {}, True)], "latency": []},
        {"scenario": "ip4-oneway", "dut": "linux", "frame_size": 64, "status": "ok",
         "warmup": trial(50_000, 50_000, 0.0, {"kernel d0 rx packets": 50000}, {}, True),
         "trials": [], "latency": []},
    ]}
    rows = report.lowrate_table(data)
    assert len(rows) == 4
    assert rows[2] == ("| ip4-oneway | sluice-af_xdp | 64 | 50.0 | 0.700 | 45.0 | no | "
                       "af_xdp xdp0 q0 kernel fill ring empty +350; xdp0 rx-miss +350 | – |")
    assert rows[3].startswith("| ip4-oneway | linux | 64 | 50.0 | 0.000 | 0.0 | yes | – |")
    note = report.contention_note(data)
    assert note.startswith("**CPU contention**: in 1 of 3 trials")
    # Recorded JSON without the diagnostics (older runs) prints neither.
    old = {"results": [{"status": "ok", "warmup": {"tx": 1, "rx": 1, "extra": {}},
                        "trials": [], "latency": []}]}
    assert report.lowrate_table(old) == [] and report.contention_note(old) == ""


def test_report_html_is_self_contained(generated):
    out, files = generated
    html = (out / "report.html").read_text()
    assert out / "report.html" in files
    assert "http://" not in html and "https://" not in html and 'src="data:image/png;base64,' in html
    assert html.count("<img ") == len(report.PLOTS)
    assert "<table>" in html and "Sluice / VPP" in html


def test_engine_case_names_keep_their_punctuation():
    """A case's JSON key is made key-safe; the name it carries is what the report shows."""
    from sluice_bench.engine import parse

    raw = {
        "ip6_255k__real___48s_": {"name": "255k (real + /48s)", "routes": 255000,
                                   "mpps": [1, 2, 3], "nodes": {"ip6-lookup": 40.0}},
        "ip4_1_route": {"routes": 1, "mpps": [1, 2, 3], "nodes": {}},
        "tsc_ghz": 2.4,
    }
    names = [c["name"] for c in parse("ip6", raw)]
    assert names == ["255k (real + /48s)", "1 route"]


def test_fixed_rate_loss_table_marks_rates_the_tester_could_not_offer():
    def t(target, offered, tx, rx):
        return {"target_pps": target, "offered_pps": offered, "tx": tx, "rx": rx,
                "loss_ratio": (tx - rx) / tx}

    data = {"results": [
        {"scenario": "ip4-oneway", "dut": "sluice-af_packet", "frame_size": 64, "status": "ok",
         "fixed_loss": [{"rate_pps": 1e5, "trial": t(1e5, 1e5, 1000, 1000)},
                        {"rate_pps": 1e6, "trial": t(1e6, 7e5, 7000, 6930)}]},
        {"scenario": "ip4-oneway", "dut": "linux", "frame_size": 64, "status": "ok",
         "fixed_loss": [{"rate_pps": 1e5, "trial": t(1e5, 1e5, 1000, 990)}]},
    ]}
    lines = report.fixed_loss_table(data)
    assert lines[0] == "| scenario | DUT | frame | 0.1 Mpps | 1 Mpps |"
    assert lines[2] == "| ip4-oneway | sluice-af_packet | 64 | 0.00 | 1.00 (offered ≥ 0.700) |"
    assert lines[3] == "| ip4-oneway | linux | 64 | 1.00 | – |"
    assert report.fixed_loss_table({"results": []}) == []
