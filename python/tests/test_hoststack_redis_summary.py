"""scripts/hoststack-redis-summary.py: the per-run row of docs/hoststack.md's modes table."""

import script_module


def summod():
    return script_module.load("hoststack-redis-summary.py")


def samples(head, rows):
    """The bench's latency CSV: comment lines `head`, then a row per (mode, clients, run,
    p50, p99.9) of 64 B (p95 and p99 0.1, which the summary does not read)."""
    body = "".join(f"{m},{c},64,{r},{p50:.3f},0.1,0.1,{p999:.1f}\n" for m, c, r, p50, p999 in rows)
    return (f"{head}\nmode,clients,payload,run,p50,p95,p99,p99.9\n{body}"
            "# load average after: 1.0 1.0 1.0; 9 s\n")


def cells(row):
    """The cells of a markdown table row."""
    return [c.strip() for c in row.strip("|").split("|")]


# Two runs of 1000 requests, clients 1 and 4, 64 B: written as the bench writes them.
SAMPLES = samples(
    """\
# scripts/hoststack-redis-bench.sh 2 1000 "1 4" "64"; MODES="kernel sluice" RXMODE=polling
# 2026-11-30T07:00:00Z, load average before: 1.0 1.0 1.0""",
    [
        ("kernel", 1, 1, 0.04, 1.0),
        ("sluice", 1, 1, 0.02, 0.5),
        ("kernel", 4, 1, 0.1, 2.0),
        ("sluice", 4, 1, 0.2, 1.0),
        ("kernel", 1, 2, 0.04, 1.0),
        ("sluice", 1, 2, 0.04, 0.5),
        ("kernel", 4, 2, 0.1, 4.0),
        ("sluice", 4, 2, 0.3, 5.0),
    ],
)
SCHED = """\
# scripts/hoststack-redis-bench.sh 2 1000 "1 4" "64"; MODES="kernel sluice" RXMODE=polling
# 2026-11-30T07:00:00Z, load average before: 1.0 1.0 1.0
# per process (main thread): ...
mode,clients,payload,run,process,elapsed_ms,cpu_ms,wait_ms,slices,vcsw,ivcsw
kernel,1,64,1,redis-benchmark,100,9,9,9,9,9
kernel,4,64,1,redis-benchmark,100,10,2,10,1,1
kernel,4,64,1,redis-server,100,10,4,20,1,1
kernel,4,64,2,redis-benchmark,100,10,2,10,1,1
kernel,4,64,2,redis-server,100,10,4,20,1,1
sluice,4,64,1,redis-benchmark,100,10,10,10,1,1
sluice,4,64,1,redis-server,100,10,20,100,1,1
sluice,4,64,1,sluice,100,15,30,300,1,1
sluice,4,64,2,redis-benchmark,100,10,10,10,1,1
sluice,4,64,2,redis-server,100,10,20,100,1,1
sluice,4,64,2,sluice,100,25,30,300,1,1
"""


def test_row(tmp_path):
    (tmp_path / "r.csv").write_text(SAMPLES)
    (tmp_path / "r-sched.csv").write_text(SCHED)
    (row,) = summod().summary(tmp_path / "r.csv")
    cols = cells(row)
    assert cols[0] == "r"
    # p99.9 medians: kernel 3.0, sluice 3.0 -> ratio 1, met (<=); p50 0.25 / 0.1.
    assert cols[1] == "1.00 / 1.00 / 1.00" and cols[2] == "1"
    assert cols[3] == "2.50 / 2.50 / 2.50"
    # 1-client p50: 0.03 / 0.04; the 1-client scheduling rows are left out.
    assert cols[4] == "0.75"
    assert cols[5] == "3.0 / 3.0"
    # Path wait per request: kernel (2+4)*2 ms / 2000 requests = 6 us; sluice 60 us.
    assert cols[6] == "6 / 60"
    # Wait per slice: kernel server 8 ms / 40 = 200 us; sluice server 200; Sluice 100.
    assert cols[7] == "200 / 200 / 100"
    # Sluice CPU per request: 40 ms / 2000 = 20 us.
    assert cols[8] == "20.0"


# Three runs of 1000 requests, two modes besides the kernel (one row each), clients 1 and 4,
# 64 B. Odd run count: each median is the middle sample, away from the mean (4-client
# p99.9: kernel 1 / 2 / 9 -> median 2, mean 4; sluice 3 / 1 / 4 -> 3; memif 10 / 1 / 1 -> 1).
SAMPLES3 = samples(
    '# scripts/hoststack-redis-bench.sh 3 1000 "1 4" "64"; MODES="kernel sluice both-memif"',
    [
        ("kernel", 1, 1, 0.04, 1.0),
        ("sluice", 1, 1, 0.02, 1.0),
        ("both-memif", 1, 1, 0.08, 1.0),
        ("kernel", 4, 1, 0.1, 1.0),
        ("sluice", 4, 1, 0.2, 3.0),
        ("both-memif", 4, 1, 0.9, 10.0),
        ("kernel", 1, 2, 0.1, 1.0),
        ("sluice", 1, 2, 0.2, 1.0),
        ("both-memif", 1, 2, 0.08, 1.0),
        ("kernel", 4, 2, 0.4, 9.0),
        ("sluice", 4, 2, 0.8, 1.0),
        ("both-memif", 4, 2, 0.05, 1.0),
        ("kernel", 1, 3, 0.04, 1.0),
        ("sluice", 1, 3, 0.02, 1.0),
        ("both-memif", 1, 3, 0.08, 1.0),
        ("kernel", 4, 3, 0.1, 2.0),
        ("sluice", 4, 3, 0.2, 4.0),
        ("both-memif", 4, 3, 0.05, 1.0),
    ],
)
SCHED3 = "mode,clients,payload,run,process,elapsed_ms,cpu_ms,wait_ms,slices,vcsw,ivcsw\n" + "".join(
    f"{m},{c},64,{r},{p},100,{cpu},{w},{sl},1,1\n"
    for r in (1, 2, 3)
    for c in (1, 4)
    for m, procs in (
        ("kernel", (("redis-benchmark", 5, 1, 10), ("redis-server", 5, 2, 10))),
        ("sluice", (("redis-benchmark", 5, 3, 10), ("redis-server", 5, 6, 20),
                    ("sluice", 30, 9, 30))),
        ("both-memif", (("redis-benchmark", 5, 1, 10), ("redis-server", 5, 1, 10),
                        ("sluice", 6, 2, 40), ("sluice-b", 6, 2, 40))),
    )
    # The 1-client samples are left out of the sums: make them stand out.
    for p, cpu, w, sl in (((p, 999, 999, 1) for p, *_ in procs) if c == 1 else procs)
)


def test_three_runs_two_modes(tmp_path):
    (tmp_path / "r.csv").write_text(SAMPLES3)
    (tmp_path / "r-sched.csv").write_text(SCHED3)
    memif, sluice = summod().summary(tmp_path / "r.csv")
    m, s = cells(memif), cells(sluice)
    assert m[0] == "r (both-memif)" and s[0] == "r (sluice)"
    # p99.9 medians 4 clients: kernel 2, sluice 3 (1.5, missed), memif 1 (0.5, met); with
    # means it would be 0.67 and 1.00.
    assert s[1] == "1.50 / 1.50 / 1.50" and s[2] == "0"
    assert m[1] == "0.50 / 0.50 / 0.50" and m[2] == "1"
    # p50 medians 4 clients: kernel 0.1, sluice 0.2, memif 0.05; 1 client: 0.04, 0.02, 0.08.
    assert s[3] == "2.00 / 2.00 / 2.00" and m[3] == "0.50 / 0.50 / 0.50"
    assert s[4] == "0.50" and m[4] == "2.00"
    assert s[5] == "2.0 / 3.0" and m[5] == "2.0 / 1.0"
    # Path wait per request: kernel (1+2) ms x 3 / 3000 = 3 us; sluice (3+6+9) -> 18;
    # memif (1+1+2+2) -> 6.
    assert s[6] == "3 / 18" and m[6] == "3 / 6"
    # Wait per slice: kernel server 6 ms / 30 = 200 us; sluice server 18 / 60 = 300, Sluice
    # 27 / 90 = 300; memif server 3 / 30 = 100, Sluice A 6 / 120 = 50.
    assert s[7] == "200 / 300 / 300" and m[7] == "200 / 100 / 50"
    # CPU per request of Sluice (A in (c)): 90 ms / 3000 = 30 us; 18 / 3000 = 6.
    assert s[8] == "30.0" and m[8] == "6.0"
