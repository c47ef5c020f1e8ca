#!/usr/bin/env python3
"""Runs a command and writes what the scheduler did to it, for scripts/hoststack-redis-bench.sh.

Usage: hoststack-runstat.py <out file> <timeout s> <command...>

The command is exec'd directly (no shell, no `timeout` in between) so that its own process is
measured. After it exits, and before it is reaped, its /proc/<pid>/schedstat is read (time on a
CPU, time runnable but waiting on a run queue, number of time slices: its main thread), then
its rusage (voluntary and involuntary context switches, user + system CPU time: all threads).
Written to <out file> as one line:

    elapsed_ms cpu_ms wait_ms slices vcsw ivcsw

Exit status: the command's (124 when it was killed at the timeout, as timeout(1)).
"""

import os
import signal
import sys
import time


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, limit, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    timed_out = []

    def kill(_sig, _frame):
        timed_out.append(True)
        os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGALRM, kill)
    signal.setitimer(signal.ITIMER_REAL, limit)
    while True:
        try:
            # WNOWAIT: the child stays a zombie, so its /proc entry can still be read.
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
    signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = (time.monotonic() - t0) * 1e3
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            run_ns, wait_ns, slices = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        run_ns = wait_ns = slices = -1
    _, status, ru = os.wait4(pid, 0)
    cpu = (ru.ru_utime + ru.ru_stime) * 1e3
    with open(out, "w") as f:
        f.write(
            f"{elapsed:.1f} {cpu:.1f} {wait_ns / 1e6:.1f} {slices} {ru.ru_nvcsw} {ru.ru_nivcsw}\n"
        )
    if timed_out:
        sys.exit(124)
    sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
