"""scripts/hoststack-redis-bench.sh's helpers: hoststack-runstat.py's timeout and the checked
scheduling readings of hoststack-sched.sh."""

import os
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def runstat(tmp_path, limit, *cmd):
    out = tmp_path / "rs"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, SCRIPTS / "hoststack-runstat.py", out, str(limit), *cmd],
                       timeout=20)
    return p.returncode, time.monotonic() - t0, out.read_text().split()


def test_runstat_status_and_line(tmp_path):
    rc, _, f = runstat(tmp_path, 10, "sh", "-c", "exit 3")
    assert rc == 3
    assert len(f) == 6 and int(f[3]) >= 0  # elapsed cpu wait slices vcsw ivcsw


def test_runstat_timeout(tmp_path):
    rc, took, _ = runstat(tmp_path, 0.2, "sleep", "30")
    assert rc == 124 and took < 5


def test_runstat_exit_racing_the_timeout_is_no_timeout(tmp_path):
    # The command ignores SIGTERM and exits by itself after the alarm: it finished, it was
    # not killed, and it keeps its status.
    rc, _, _ = runstat(tmp_path, 0.1, "sh", "-c", "trap '' TERM; sleep 0.6; exit 5")
    assert rc == 5


def test_runstat_sigkill_after_sigterm(tmp_path):
    # SIGTERM ignored (kept across exec): killed GRACE seconds later.
    rc, took, _ = runstat(tmp_path, 0.2, "sh", "-c", "trap '' TERM; exec sleep 30")
    assert rc == 124 and took < 10


def sched(script):
    """Runs <script> after sourcing hoststack-sched.sh, as the bench does (set -euo pipefail)."""
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; source "{SCRIPTS}/hoststack-sched.sh"; {script}'],
        capture_output=True, text=True, timeout=20)


def test_snap():
    p = sched(f"snap {os.getpid()}")
    assert p.returncode == 0 and len(p.stdout.split()) == 5
    # No such process: fails, prints nothing.
    p = sched("snap 999999999 || echo rc=$?")
    assert p.stdout == "rc=1\n"


def test_sched_line():
    p = sched('sched_line redis-server 100 "1000000 0 1 2 3" "4500000 2000000 11 12 23"')
    assert p.returncode == 0 and p.stdout == "redis-server 100 3.5 2.0 10 10 20\n"
    # A reading missing (the process went away): a FAILED line, not an unbound ${10}.
    p = sched('sched_line sluice 100 "1 0 1 2 3" "" || echo rc=$?')
    assert p.stdout.startswith("FAILED: no scheduling reading of sluice") and "rc=1" in p.stdout
    # No CPU over the cell: not on the path.
    p = sched('sched_line redis-server 100 "5 0 1 2 3" "5 0 1 2 3" || echo rc=$?')
    assert p.stdout.startswith("FAILED: redis-server had 0 CPU") and "rc=1" in p.stdout


def test_rs_line(tmp_path):
    f = tmp_path / "rs"
    f.write_text("100.0 12.5 3.0 40 7 8\n")
    p = sched(f'rs_line "{f}"')
    assert p.stdout == "redis-benchmark 100.0 12.5 3.0 40 7 8\n"
    # runstat could not read schedstat: slices -1.
    f.write_text("100.0 12.5 -0.0 -1 7 8\n")
    p = sched(f'rs_line "{f}" || echo rc=$?')
    assert p.stdout.startswith("FAILED: no scheduling reading of redis-benchmark")
    f.write_text("100.0 0.0 3.0 40 7 8\n")
    p = sched(f'rs_line "{f}" || echo rc=$?')
    assert p.stdout.startswith("FAILED: redis-benchmark had 0 CPU")
