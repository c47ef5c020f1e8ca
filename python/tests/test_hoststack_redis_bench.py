"""scripts/hoststack-redis-bench.sh's helpers: hoststack-runstat.py's timeout."""

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
