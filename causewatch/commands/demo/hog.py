"""The demo's CPU hog: busy processes pinned to the CPUs the workload may use, sized on the calm
tasks' wait for a CPU and grown once if the first tasks under it wait too little more."""

from __future__ import annotations

import math
import os
import subprocess
import sys

from causewatch.agent.neighbours import command

# Busy processes, each pinned to one CPU; each stops by itself once the demo is gone, however it went
# (a killed demo must not leave busy processes behind); its first line is how the agents name it
# (agent/neighbours.py), and so how the report finds it among an anomaly's ranked causes.
HOG = ("# causewatch demo hog\nimport os, sys\nwhile os.getppid() == int(sys.argv[1]):\n"
       "    for _ in range(1_000_000): pass")
HOG_FACTOR = 4              # the wait the hog aims at, times the calm tasks' (see hog_size)
HOG_JUDGE = 20              # tasks started under the hog that judge its size, once: short of HOG_FACTOR, it grows
HOG_MAX = 3                 # ...to at most this many times its first size


def hog_size(calm_wait: float | None) -> int:
    """Busy processes per CPU for the hog to start with: the seconds the calm tasks waited for a CPU per
    CPU second (about the others sharing a task's CPU), rounded up, at least one: beside that many busy
    processes one per CPU would add a fraction of the wait they cause, too little for the mechanism
    test to see (docs/perf-log.md, "The demo's hog size"). `grown_size` aims at HOG_FACTOR, once
    HOG_JUDGE tasks have run under it."""
    return max(1, math.ceil(calm_wait or 0))


def grown_size(per_cpu: int, calm_wait: float | None, under: float) -> int:
    """Busy processes per CPU for the wait per CPU second to reach HOG_FACTOR times the calm one, from
    what `per_cpu` of them did (`under`: the median of the tasks started under them), linearly; at
    most HOG_MAX times as many, and never fewer."""
    if not calm_wait or under >= HOG_FACTOR * calm_wait:
        return per_cpu
    added = max(under - calm_wait, 1e-9) / per_cpu   # wait per CPU second each one added
    return max(per_cpu, min(math.ceil((HOG_FACTOR - 1) * calm_wait / added), HOG_MAX * per_cpu))


class Hog:
    """CPU contention for the workload: `per_cpu` busy processes pinned to each CPU it may use, from
    `start` to `stop` (always, by `stop`, on the way out)."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.cpus = sorted(os.sched_getaffinity(0))
        self.per_cpu = 0
        self.load: float | None = None       # the 1-minute load average when it started
        self.calm_wait: float | None = None  # the calm tasks' median wait per CPU second then
        self.started = self.stopped = None   # seconds after the workload started
        self.sized: str | None = None        # how its size was judged on the tasks under it

    def start(self, at: float, load: float, calm_wait: float | None) -> None:
        self.load, self.calm_wait, self.started = load, calm_wait, at
        self._add(hog_size(calm_wait))

    def _add(self, per_cpu: int) -> None:
        for cpu in self.cpus:
            for _ in range(per_cpu - self.per_cpu):
                self.procs.append(subprocess.Popen(self.argv()))
                os.sched_setaffinity(self.procs[-1].pid, {cpu})
        self.per_cpu = per_cpu

    def judge(self, under: float, tasks: int, at: float) -> None:
        """Grow to `grown_size` (once), `under` being the median wait per CPU second of the first
        `tasks` started under the hog."""
        first, calm = self.per_cpu, self.calm_wait
        self._add(grown_size(first, calm, under))
        self.sized = (f"{first} per CPU: its first {tasks} tasks waited {under:.3g} s per CPU second, the calm "
                      f"ones {calm if calm is None else f'{calm:.3g}'}" + (
                          f"; grown to {self.per_cpu} per CPU at {at:.0f} s to reach {HOG_FACTOR} times"
                          if self.per_cpu > first else ""))

    @staticmethod
    def argv() -> list[str]:
        return [sys.executable, "-c", HOG, str(os.getpid())]

    def unit(self, node: str) -> str:
        """The hog as the causal job ranks it among an anomaly's causes: its processes as `node`'s agent
        reports the busiest ones beside the watched workload (agent/neighbours.py)."""
        return f"process {command(self.argv(), os.path.basename(sys.executable)[:15])} on {node}"

    @property
    def running(self) -> bool:
        return bool(self.procs)

    def stop(self, at: float) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        if self.procs:
            self.stopped = at
        self.procs = []

    def span(self) -> tuple[float, float] | None:
        """(started, stopped) in seconds after the workload started, stopped infinite while it runs; None
        if it never ran."""
        return None if self.started is None else (self.started, math.inf if self.stopped is None else self.stopped)
