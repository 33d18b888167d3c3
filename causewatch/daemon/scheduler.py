"""Job scheduler: runs the jobs of a runner on their intervals, on one thread, and the runners: where
jobs run, in this process (LocalJobs, for tests and benches) or in a worker process (WorkerJobs, the
daemon's). A distributed runner is one more class with a runner's three methods.

A runner's `schedule()` builds its jobs and names them with their intervals; `run(name)` and
`hello(name, node, body)` call one job's hook and return when it is done. Hello events go first, then
whichever jobs are due. A job that raises is logged and counted; the daemon and the other jobs carry on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Protocol

from causewatch.daemon.calls import Entry
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.worker import Worker

log = logging.getLogger("causewatch.daemon.scheduler")


class Runner(Protocol):
    def schedule(self) -> list[tuple[str, float]]: ...

    def run(self, name: str) -> None: ...

    def hello(self, name: str, node: str, body: dict) -> None: ...


class LocalJobs:
    """`jobs` run here, each hook with `ctx`."""

    def __init__(self, jobs: list[Job], ctx: JobContext):
        self.jobs = {job.name: job for job in jobs}
        self.ctx = ctx

    def schedule(self) -> list[tuple[str, float]]:
        return [(job.name, job.interval) for job in self.jobs.values()]

    def run(self, name: str) -> None:
        self.jobs[name].run(self.ctx)

    def hello(self, name: str, node: str, body: dict) -> None:
        self.jobs[name].on_hello(self.ctx, node, body)


class WorkerJobs:
    """The jobs of a worker process: `setup` (its first request in each new child) is
    (Entry.INSTALL_JOBS, (cfg, jobs)), so a child that died is rebuilt before its next run."""

    def __init__(self, worker: Worker):
        self.worker = worker

    def schedule(self) -> list[tuple[str, float]]:
        return self.worker.start()

    def run(self, name: str) -> None:
        self.worker(Entry.RUN_JOB, name)

    def hello(self, name: str, node: str, body: dict) -> None:
        self.worker(Entry.JOB_HELLO, name, node, body)


class Scheduler:
    """One thread: hello events first, then whichever jobs are due. `errors` is the counter a failed
    hook increments, labelled by job (the exporter's causewatch_job_errors_total)."""

    def __init__(self, runner: Runner, errors):
        self.runner, self.errors = runner, errors
        self.intervals: dict[str, float] = {}
        self.runs: dict[str, int] = {}
        self._hellos: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def build(self) -> None:
        """Build the runner's jobs: a config they refuse raises here."""
        self.intervals = dict(self.runner.schedule())
        self.runs = dict.fromkeys(self.intervals, 0)

    def start(self) -> None:
        """Build the jobs, then run them on the scheduler's thread."""
        self.build()
        self._thread.start()

    def stop(self, interrupt=None) -> None:
        """Stop after the running job; `interrupt()` (the worker's stop) cuts a long one short."""
        self._stop.set()
        if interrupt is not None:
            interrupt()
        if self._thread.is_alive():
            self._thread.join()

    def hello(self, node: str, body: dict) -> None:
        """Called by ingest after a hello is committed."""
        self._hellos.put((node, body))

    def run_due(self, now: float, due: dict[str, float]) -> None:
        for name, interval in self.intervals.items():
            if now >= due.get(name, 0.0):
                self._guard(name, self.runner.run, name)
                self.runs[name] += 1
                due[name] = now + interval

    def _loop(self) -> None:
        due = {name: time.monotonic() + interval for name, interval in self.intervals.items()}
        while not self._stop.is_set():
            try:
                node, body = self._hellos.get(timeout=0.2)
                for name in self.intervals:
                    self._guard(name, self.runner.hello, name, node, body)
            except queue.Empty:
                pass
            self.run_due(time.monotonic(), due)

    def _guard(self, name: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            if self._stop.is_set():
                log.info("analysis job %s cut short by the daemon's stop", name)
                return
            self.errors.labels(name).inc()
            log.exception("analysis job %s failed", name)
