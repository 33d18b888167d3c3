"""What tests/daemon/test_worker.py's priority tests have a worker run: the standard library and the
job base class only, which the worker's fork server has loaded. A child at SCHED_IDLE on a busy machine
gets a fraction of a per cent of a core, so each module its request names costs it seconds; the test
module itself, imported to unpickle a function of it, brought pytest and the daemon's server along."""

import os
import time
from pathlib import Path

from causewatch.daemon.jobs import Job


def policy_after(seconds: float) -> tuple[int, int]:
    """In the child: its scheduling policy and niceness after `seconds` asleep."""
    time.sleep(seconds)
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


def spin(cpu_seconds: float) -> tuple[int, int]:
    """In the child: busy until it has used `cpu_seconds` of CPU; then its policy and niceness."""
    start = time.process_time()
    while time.process_time() - start < cpu_seconds:
        pass
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)


class Spinning(Job):
    """A job due every 0.3 s whose run needs 0.3 CPU-s; it reports its policy and niceness at the end."""
    name, interval = "spinning", 0.3

    def run(self, ctx):
        Path(self.report).write_text("%d %d" % spin(0.3))

    def __init__(self, report: str):
        self.report = report


class Overrunning(Job):
    """A job due every 3 s whose first run sleeps 3.5 s; each run reports its policy and niceness at its end."""
    name, interval = "overrunning", 3.0

    def __init__(self, report: str):
        self.report, self.runs = report, 0

    def run(self, ctx):
        self.runs += 1
        time.sleep(3.5 if self.runs == 1 else 0.2)
        Path(self.report).write_text("%d %d" % (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))
