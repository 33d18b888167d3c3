"""Analysis scheduler: runs the daemon's jobs (daemon.jobs.Job) on their intervals, on one thread.

Hello events go first, then whichever jobs are due. A job that raises is logged and counted; the
daemon and the other jobs carry on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from causewatch.daemon.jobs import Job, JobContext

log = logging.getLogger("causewatch.daemon.scheduler")


class Scheduler:
    """One thread: hello events first, then whichever jobs are due."""

    def __init__(self, ctx: JobContext, jobs: list[Job]):
        self.ctx = ctx
        self.jobs = jobs
        self.runs: dict[str, int] = {job.name: 0 for job in self.jobs}
        self._hellos: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, interrupt=None) -> None:
        """Stop after the running job; `interrupt()` (the analysis worker's stop) cuts a long one short."""
        self._stop.set()
        if interrupt is not None:
            interrupt()
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
                    self._guard(job, job.on_hello, self.ctx, node, body)
            except queue.Empty:
                pass
            self.run_due(time.monotonic(), due)

    def _guard(self, job: Job, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            if self._stop.is_set():
                log.info("analysis job %s cut short by the daemon's stop", job.name)
                return
            self.ctx.exporter.job_errors.labels(job.name).inc()
            log.exception("analysis job %s failed", job.name)
