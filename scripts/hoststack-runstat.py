#!/usr/bin/env python3
"""Runs a command and writes what the scheduler did to it, for scripts/hoststack-redis-bench.sh.

Usage: hoststack-runstat.py <out file> <timeout s> <command...>

The command is exec'd directly (no shell, no `timeout` in between) so that its own process is
measured. After it exits, and before it is reaped, its /proc/<pid>/schedstat is read (time on a
CPU, time runnable but waiting on a run queue, number of time slices: its main thread), then
its rusage (voluntary and involuntary context switches, user + system CPU time: all threads).
Written to <out file> as one line:

    elapsed_ms cpu_ms wait_ms slices vcsw ivcsw

Exit status: the command's; 124, as timeout(1), when it was killed at the timeout: SIGTERM,
then SIGKILL if it is still running GRACE seconds later. A command that exits by itself while
the timeout fires (the alarm racing its exit) keeps its own status: a timeout counts only when
the command died of the signal sent.
"""

import os
import signal
import sys
import time

GRACE = 2.0  # seconds from SIGTERM to SIGKILL


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
    sent = []  # the signals sent at the timeout

    def kill(_sig, _frame):
        # The child is not reaped before the timer is stopped, so its pid is still its own
        # (a zombie ignores the signal).
        sig = signal.SIGKILL if sent else signal.SIGTERM
        sent.append(sig)
        os.kill(pid, sig)
        if sig == signal.SIGTERM:
            signal.setitimer(signal.ITIMER_REAL, GRACE)

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
    if sent and os.WIFSIGNALED(status) and os.WTERMSIG(status) in sent:
        sys.exit(124)
    sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    main()
