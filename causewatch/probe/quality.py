"""How far a probe kit can be trusted: the build machine's quietness around its reference runs, the
runs' spread, the verdict that refuses a noisy reference, and the one-line text rankings show.
"""

from __future__ import annotations

import os
import resource
import time

import psutil

# A kit is refused when its reference is noisier than this (both documented in docs/probes.md):
MAX_SPREAD = 0.10      # relative sd of the reference runs' task-seconds; noisier gives useless intervals
#                        (docs/perf-log.md, "A kit's reference spread")
MAX_OTHER_CPU = 0.25   # share of the machine's CPU time other processes used during the reference runs
QUIET_WINDOW = 0.5     # seconds of idle measurement before the first attempt
RETRY_WAIT = 2.0       # seconds measured idle before a retry (transient load may pass)
FIELDS = ("spread", "other_cpu", "other_cpu_before", "cpu_bound_phases", "phases", "retries")  # what rankings show


def _own_cpu() -> float:
    """CPU seconds of this process and its reaped descendants (pool workers, timing interpreters)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _machine() -> tuple[float, float, float]:
    """(busy, steal, total) CPU seconds of the whole machine since boot; guest time is inside user."""
    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    steal = getattr(t, "steal", 0.0)
    return busy, steal, busy + steal + t.idle + getattr(t, "iowait", 0.0)


class CpuMeter:
    """Other processes' share of the machine's CPU time from its start to `read()`: all busy time
    less this process tree's. Read it when every child has been reaped (their time counts then)."""

    def __init__(self):
        self._start = (time.perf_counter(), _own_cpu(), *_machine())

    def read(self) -> dict:
        w0, own0, busy0, steal0, total0 = self._start
        busy, steal, total = (now - then for now, then in zip(_machine(), (busy0, steal0, total0)))
        own = _own_cpu() - own0
        share = (lambda x: max(0.0, min(1.0, x / total))) if total > 0 else (lambda x: 0.0)
        return {"seconds": time.perf_counter() - w0, "other_cpu": share(busy - own), "steal": share(steal),
                "load1": os.getloadavg()[0]}


def idle_window(seconds: float = QUIET_WINDOW) -> dict:
    """Measure the machine while this process sleeps `seconds`: the load others put on it."""
    meter = CpuMeter()
    time.sleep(seconds)
    return meter.read()


def noise(spread: float | None, other_cpu: float, max_spread: float, max_other_cpu: float,
          when: str = "during them") -> list[str]:
    """Why a reference is too noisy to trust (nothing when it is quiet enough); `spread` None: not run."""
    reasons = []
    if spread is not None and spread > max_spread:
        reasons.append(f"the reference runs spread by {100 * spread:.1f} % "
                       f"(relative sd; limit {100 * max_spread:.0f} %)")
    if other_cpu > max_other_cpu:
        reasons.append(f"other processes used {100 * other_cpu:.0f} % of the machine's CPU {when} "
                       f"(limit {100 * max_other_cpu:.0f} %)")
    return reasons


def format_quality(manifest: dict) -> str:
    """One line on how far a kit can be trusted, for rankings and `probe build`."""
    q = manifest.get("quality")
    if not q:
        return "quality not recorded (kit built before causewatch measured it)"
    retries = q["retries"]
    return (f"reference spread {100 * q['spread']:.1f} % over {manifest.get('reference_runs', '?')} runs, "
            f"others used {100 * q['other_cpu']:.0f} % CPU (idle before: {100 * q['other_cpu_before']:.0f} %), "
            f"{q['cpu_bound_phases']}/{q['phases']} phases CPU-bound, "
            + ("no retry" if not retries else f"{retries} {'retry' if retries == 1 else 'retries'}"))
