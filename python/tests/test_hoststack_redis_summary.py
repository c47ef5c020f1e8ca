"""scripts/hoststack-redis-summary.py: the per-run row of docs/hoststack.md's modes table."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "hoststack-redis-summary.py"


def summod():
    spec = importlib.util.spec_from_file_location("hoststack_redis_summary", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


# Two runs of 1000 requests, clients 1 and 4, 64 B: written as the bench writes them.
SAMPLES = """\
# scripts/hoststack-redis-bench.sh 2 1000 "1 4" "64"; MODES="kernel sluice" RXMODE=polling
# 2026-11-30T07:00:00Z, load average before: 1.0 1.0 1.0
mode,clients,payload,run,p50,p95,p99,p99.9
kernel,1,64,1,0.040,0.1,0.1,1.0
sluice,1,64,1,0.020,0.1,0.1,0.5
kernel,4,64,1,0.100,0.1,0.1,2.0
sluice,4,64,1,0.200,0.1,0.1,1.0
kernel,1,64,2,0.040,0.1,0.1,1.0
sluice,1,64,2,0.040,0.1,0.1,0.5
kernel,4,64,2,0.100,0.1,0.1,4.0
sluice,4,64,2,0.300,0.1,0.1,5.0
# load average after: 1.0 1.0 1.0; 9 s
"""
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
    cols = [c.strip() for c in row.strip("|").split("|")]
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
