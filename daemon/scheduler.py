"""Analysis scheduler: runs the daemon's jobs (modules daemon/job_*.py) on their intervals.

Each job module defines `class Job` with `name`, `interval` (s), `run(ctx)` and optionally
`on_hello(ctx, node, body)` and a `from_config(cfg)` constructor (else `Job()`). Jobs read through `ctx.read()`, write through `ctx.write(fn)` (the
writer thread, one transaction) and publish gauges through `ctx.metrics`. A job that raises is
logged and counted; the daemon and the other jobs carry on.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

from causewatch import daemon as daemon_pkg
from causewatch.daemon.metrics import LatestState

log = logging.getLogger("causewatch.daemon.scheduler")


@dataclass
class JobContext:
    """What a job may touch: a read cursor, the writer, the agents, the metrics cache."""
    read: Callable
    write: Callable
    send: Callable[[str, str, dict], bool]
    metrics: LatestState


def discover_jobs(cfg=None) -> list:
    """One instance of every daemon/job_*.py; a module that cannot load is logged and left out."""
    jobs = []
    for info in sorted(pkgutil.iter_modules(daemon_pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("job_"):
            continue
        try:
            job_class = importlib.import_module(f"{daemon_pkg.__name__}.{info.name}").Job
            jobs.append(job_class.from_config(cfg) if cfg and hasattr(job_class, "from_config") else job_class())
        except Exception:
            log.exception("analysis job %s cannot load; the daemon runs without it", info.name)
    return jobs


class Scheduler:
    """One thread: hello events first, then whichever jobs are due."""

    def __init__(self, ctx: JobContext, jobs: list):
        self.ctx = ctx
        self.jobs = jobs
        self.runs: dict[str, int] = {job.name: 0 for job in self.jobs}
        self._hellos: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def hello(self, node: str, body: dict) -> None:
        """Called by ingest after a hello is committed."""
        self._hellos.put((node, body))

    def run_due(self, now: float, due: dict[str, float]) -> None:
        for job in self.jobs:
            if now >= due.get(job.name, 0.0):
                self._guard(job, job.run, self.ctx)
                self.runs[job.name] += 1
                due[job.name] = now + job.interval

    def _loop(self) -> None:
        due = {job.name: time.monotonic() + job.interval for job in self.jobs}
        while not self._stop.is_set():
            try:
                node, body = self._hellos.get(timeout=0.2)
                for job in self.jobs:
                    if hasattr(job, "on_hello"):
                        self._guard(job, job.on_hello, self.ctx, node, body)
            except queue.Empty:
                pass
            self.run_due(time.monotonic(), due)

    def _guard(self, job, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            self.ctx.metrics.job_errors.labels(job.name).inc()
            log.exception("analysis job %s failed", job.name)
