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
