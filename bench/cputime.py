"""CPU time of processes from /proc, for the bench scripts (one place for the three ways they count).

`cpu_seconds` is what a process has used, ended threads included, in clock ticks; `live_cpu_seconds` is
exact to the nanosecond but counts only threads alive now, for short windows over long-lived threads."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import psutil

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (every thread, ended ones too; none of its children), /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()   # fields from the 3rd (state)
    return (int(fields[11]) + int(fields[12])) / TICK


def live_cpu_seconds(pid: int) -> float:
    """CPU time of the process's live threads, /proc/PID/task/*/schedstat (ns): psutil's 10 ms ticks
    cannot resolve an idle agent's second."""
    ns = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                ns += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):   # a thread that ended meanwhile
            pass
    return ns / 1e9


def tree_cpu_seconds(pid: int) -> float:
    """cpu_seconds of a process and its descendants (a daemon's fork server and workers)."""
    total = 0.0
    for p in [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]:
        try:
            total += cpu_seconds(p)
        except OSError:   # ended meanwhile
            pass
    return total
