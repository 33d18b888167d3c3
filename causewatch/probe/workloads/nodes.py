"""Heterogeneous nodes emulated on one machine, for benchmarks and tests of probe predictions:
a CPU quota (a cgroup, v1 or v2), a compute hog sharing a core, a memory-bandwidth hog, a neighbour
thrashing the caches and memory with random gathers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

MEMBW_HOG = ("import os, numpy as np; os.sched_setaffinity(0, {%d}); a = np.ones(40_000_000); b = np.empty_like(a)\n"
             "while True: np.copyto(b, a); np.copyto(a, b)")
CPU_HOG = "import os; os.sched_setaffinity(0, {%d})\nx = 0\nwhile True: x = (x * 31 + 7) %% 1000003"


def gather_hog(mib: int) -> str:
    """Code for `hog`: random 8-byte gathers over `mib` MiB without end, each a likely cache and TLB miss
    once the working set passes the caches (the neighbour that streams, MEMBW_HOG, the prefetcher hides)."""
    n = mib * 2**17
    return ("import os, numpy as np; os.sched_setaffinity(0, {%d}); a = np.ones(" + str(n) + ")\n"
            "idx = np.random.default_rng(0).integers(0, " + str(n) + ", 2**20)\n"
            "while True: a.take(idx).sum(); idx = (idx * 1103515245 + 12345) %% " + str(n))


@contextlib.contextmanager
def hog(code: str, cpu: int, settle: float = 3.0):
    """A hog process (MEMBW_HOG or CPU_HOG) pinned to `cpu` while the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", code % cpu])
    time.sleep(settle)  # steady state first: the bandwidth hog allocates and faults in 640 MB (~1 s)
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def cpu_quota(fraction: float):
    """Run this process (and the processes it starts) in a cgroup limited to `fraction` of a CPU.
    Raises OSError where cgroups are not writable."""
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cgroup.controllers")
    home = v1 if v1.is_dir() else Path("/sys/fs/cgroup")
    if not v1.is_dir() and not v2.exists():
        raise OSError("no cgroup CPU controller (v1 or v2) mounted at /sys/fs/cgroup")
    group = home / f"causewatch-quota-{os.getpid()}"
    group.mkdir()
    try:
        if v1.is_dir():
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text(str(int(100000 * fraction)))
        else:
            (group / "cpu.max").write_text(f"{int(100000 * fraction)} 100000")
        (group / "cgroup.procs").write_text(str(os.getpid()))
        try:
            yield
        finally:
            # this process and any child still winding down go back, or the group cannot be removed
            for pid in [os.getpid(), *(group / "cgroup.procs").read_text().split()]:
                with contextlib.suppress(OSError):
                    (home / "cgroup.procs").write_text(str(pid))
    finally:
        group.rmdir()


def quota_available() -> bool:
    try:
        with cpu_quota(0.5):
            return True
    except OSError:
        return False
