"""The faults bench/anomaly_live.py starts beside the application, each a process it names as the
culprit the daemon should rank first: `python faults.py KIND` (in bench/live/), the rest in the environment
(LIVE_PARENT: the bench's pid, each ends once that process is gone; LIVE_DIR; LIVE_AT, LIVE_FOR).

- hog: a busy loop (the bench starts one per CPU, pinned, for the fault's stretch);
- io: fsync'd 64 KiB appends to a file in LIVE_DIR, the application's disk;
- membw: passes over a 256 MiB numpy array (memory bandwidth);
- neighbour: a process there from the start at a light duty cycle, which from LIVE_AT for LIVE_FOR
  seconds forks one busy child per CPU (the same command line: one unit), then goes back to it.
"""

from __future__ import annotations

import os
import sys
import time

PARENT = int(os.environ.get("LIVE_PARENT", "0"))
CHUNK = 64 * 1024
ARRAY = 32 * 2**20          # doubles: 256 MiB
DUTY = (0.005, 0.095)       # the neighbour's light load: seconds busy, then idle


def alive() -> bool:
    return os.getppid() == PARENT


def busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(10_000):
            pass


def hog() -> None:
    while alive():
        busy(0.5)


def io() -> None:
    path = os.path.join(os.environ["LIVE_DIR"], "writer")
    block = os.urandom(CHUNK)
    with open(path, "wb") as f:
        while alive():
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
            if f.tell() > 256 * 2**20:
                f.seek(0)
                f.truncate()


def membw() -> None:
    import numpy as np
    a, b = np.ones(ARRAY), np.empty(ARRAY)
    while alive():
        np.multiply(a, 1.0000001, out=b)
        a, b = b, a


def neighbour() -> None:
    start, length = float(os.environ["LIVE_AT"]), float(os.environ["LIVE_FOR"])
    children = []
    while alive():
        now = time.time()
        if start <= now < start + length and not children:
            children = [_busy_child(start + length) for _ in sorted(os.sched_getaffinity(0))]
        if now >= start + length and children:
            for pid in children:
                os.waitpid(pid, 0)
            children = []
        busy(DUTY[0])
        time.sleep(DUTY[1])


def _busy_child(until: float) -> int:
    pid = os.fork()
    if pid == 0:
        busy(max(0.0, until - time.time()))
        os._exit(0)
    return pid


KINDS = {"hog": hog, "io": io, "membw": membw, "neighbour": neighbour}

if __name__ == "__main__":
    KINDS[sys.argv[1]]()
