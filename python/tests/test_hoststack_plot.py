"""scripts/hoststack-plot.py's reader of scripts/hoststack-redis-bench.sh's samples (CSV)."""

import re

import pytest

import script_module


def plotmod():
    return script_module.load("hoststack-plot.py")


SAMPLES = """\
# scripts/hoststack-redis-bench.sh 3 10000 "1" "64"; MODES="kernel sluice"
mode,clients,payload,run,p50,p95,p99,p99.9
kernel,1,64,1,0.039,0.055,0.119,0.327
sluice,1,64,1,0.055,0.367,3.903,12.007
kernel,1,64,2,0.047,0.063,0.111,0.5
sluice,1,64,2,0.063,0.2,0.3,0.4
kernel,1,64,3,0.031,0.071,0.2,0.4
sluice,1,64,3,0.071,0.3,1.0,2.0
# load average after: 1.0 1.0 1.0; 60 s
"""


def test_medians_and_ranges_per_cell():
    m = plotmod()
    comments, samples = m.load(SAMPLES.splitlines(keepends=True))
    assert comments[0].startswith("scripts/hoststack-redis-bench.sh 3 10000")
    assert len(comments) == 2
    s = m.summary(samples)
    assert s[("kernel", 1, 64, "p50")] == (0.031, 0.039, 0.047)
    assert s[("sluice", 1, 64, "p99.9")] == (0.4, 2.0, 12.007)
    assert len(s) == 2 * 4


def test_malformed_row_names_it():
    m = plotmod()
    bad = SAMPLES.replace("sluice,1,64,2,0.063", "sluice,1,64,2,fast")
    with pytest.raises(ValueError, match="^line 6: "):
        m.load(bad.splitlines(keepends=True))
    with pytest.raises(ValueError, match="header"):
        m.load(["mode,clients,p50\n", "kernel,1,0.1\n"])


def test_incomplete_run_is_refused():
    m = plotmod()
    cut = SAMPLES.replace("# load average after: 1.0 1.0 1.0; 60 s\n", "")
    with pytest.raises(ValueError, match="load average after"):
        m.load(cut.splitlines(keepends=True))
    # A mode without one of the cells another mode has.
    more = SAMPLES.replace("# load average", "kernel,4,64,1,0.1,0.2,0.3,0.4\n# load average")
    with pytest.raises(ValueError, match=r"mode sluice: .*\(4, 64\)"):
        m.load(more.splitlines(keepends=True))


def test_unknown_mode_is_refused():
    m = plotmod()
    bad = SAMPLES.replace("sluice,", "slice,")
    with pytest.raises(ValueError, match="^line 4: unknown mode 'slice'"):
        m.load(bad.splitlines(keepends=True))


def test_modes_are_the_bench_scripts():
    """The plot knows exactly the modes scripts/hoststack-redis-bench.sh runs."""
    text = (script_module.SCRIPTS / "hoststack-redis-bench.sh").read_text()
    default = re.search(r'modes=\$\{MODES:-"([^"]*)"\}', text).group(1).split()
    allowed = re.search(r"case \$m in ([\w|-]+)\)", text).group(1).split("|")
    assert tuple(default) == plotmod().MODES
    assert tuple(allowed) == plotmod().MODES


def test_plot_draws_every_mode_in_every_panel(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.container import BarContainer

    m = plotmod()
    # Two payloads, so 2 × 4 panels; two modes of one client each.
    more = "".join(
        f"{mode},1,1024,1,0.1,0.2,0.3,0.4\n" for mode in ("kernel", "sluice")
    )
    text = SAMPLES.replace("# load average", more + "# load average")
    comments, samples = m.load(text.splitlines(keepends=True))
    fig = m.plot(comments, samples, tmp_path / "s.png")
    assert len(fig.axes) == 2 * 4
    for ax in fig.axes:
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert [len(b) for b in bars] == [1, 1], ax.get_title()
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The command line writes the PNG beside the CSV.
    csv = tmp_path / "t.csv"
    csv.write_text(SAMPLES)
    m.main([str(csv)])
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
