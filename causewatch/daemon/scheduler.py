"""Job scheduler: runs the jobs of a runner on their intervals, on one thread, and the runners: where
jobs run, in this process (LocalJobs: tests, benches, `daemon --jobs-here`) or in a worker process
(WorkerJobs, the daemon's). A distributed runner is one more class with a runner's three methods.

A runner's `schedule()` builds its jobs and names them with their intervals; `run(name)` and
`hello(name, hellos)` call one job's hook and return when it is done. Hellos go first, all that are
waiting in one call, then whichever jobs are due. A job that raises is logged and counted; the daemon
and the other jobs carry on. A job that cannot keep up is never queued: a run that ends after its next
run was due is an overrun (counted, said once at WARNING until it keeps up again), the intervals it
missed are skipped, and the next run starts at once, on whatever is newest then.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from typing import Protocol

from causewatch.daemon.calls import Entry
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.worker import POLL_SECONDS, Worker

log = logging.getLogger("causewatch.daemon.scheduler")
# Hellos handed to the jobs in one call at most (a fleet's reconnection is handled in slices of this).
HELLOS_AT_ONCE = 4096


class Runner(Protocol):
    def schedule(self) -> list[tuple[str, float]]: ...

    def run(self, name: str) -> None: ...

    def hello(self, name: str, hellos: list[tuple[str, dict]]) -> None: ...


class LocalJobs:
    """`jobs` run here, each hook with `ctx`, one at a time (as a worker takes one request at a time)."""

    def __init__(self, jobs: list[Job], ctx: JobContext):
        self.jobs = {job.name: job for job in jobs}
        self.ctx = ctx
        self._lock = threading.Lock()

    def schedule(self) -> list[tuple[str, float]]:
        return [(job.name, job.interval) for job in self.jobs.values()]

    def run(self, name: str) -> None:
        with self._lock:
            self.jobs[name].run(self.ctx)

    def hello(self, name: str, hellos: list[tuple[str, dict]]) -> None:
        with self._lock:
            self.jobs[name].on_hellos(self.ctx, hellos)


class WorkerJobs:
    """The jobs of a worker process: `setup` (its first request in each new child) is
    (Entry.INSTALL_JOBS, (cfg, jobs)), so a child that died is rebuilt before its next run."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.intervals: dict[str, float] = {}
        self._overran: set[str] = set()   # jobs whose latest run took longer than their interval

    def schedule(self) -> list[tuple[str, float]]:
        schedule = self.worker.start()
        self.intervals = dict(schedule)
        return schedule

    def run(self, name: str) -> None:
        # a run is starved once it has taken its own interval (its next run is due), or the worker's
        # starved_after if sooner, and from its start after a run that overran (it is late already);
        # 0 (never raise) stays 0
        interval = self.intervals.get(name, float("inf"))
        limit = self.worker.starved_after and min(self.worker.starved_after, interval)
        if name in self._overran:
            limit = limit and POLL_SECONDS
        began = time.monotonic()
        try:
            self.worker(Entry.RUN_JOB, name, starved_after=limit)
        finally:
            if time.monotonic() - began > interval:
                self._overran.add(name)
            else:
                self._overran.discard(name)

    def hello(self, name: str, hellos: list[tuple[str, dict]]) -> None:
        self.worker(Entry.JOB_HELLO, name, hellos)


class Scheduler:
    """One thread: the waiting hellos first, then whichever jobs are due. `errors` is the counter a failed
    hook increments, `runs` the one each finished run does, `lag` the gauge of how overdue a job's next run
    is (read at each scrape: it grows while a run overruns), `overruns` the counter of runs that ended after
    the next was due, each labelled by job (the exporter's causewatch_job_errors_total,
    causewatch_job_runs_total, causewatch_job_lag_seconds and causewatch_job_overruns_total). `clock`:
    monotonic seconds."""

    def __init__(self, runner: Runner, errors, runs, lag, overruns, clock=time.monotonic):
        self.runner, self.errors, self.runs, self.lag, self.overruns = runner, errors, runs, lag, overruns
        self.clock = clock
        self.intervals: dict[str, float] = {}
        self.due: dict[str, float] = {}   # job -> when its next run is due
        self._behind: set[str] = set()   # jobs whose latest run overran
        self._hellos: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def build(self) -> None:
        """Build the runner's jobs: a config they refuse raises here."""
        self.intervals = dict(self.runner.schedule())
        for name in self.intervals:
            self.lag.labels(name).set_function(functools.partial(self._overdue, name))

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

    def run_due(self, now: float) -> None:
        """Run the jobs due at `now`, each once however many of its intervals passed; the next is due an
        interval after this start."""
        for name, interval in self.intervals.items():
            if now >= self.due.get(name, 0.0):
                self.due[name] = now + interval
                self.run(name)
                self._keep_pace(name, interval)

    def run_all(self) -> None:
        """Every job once now, on the caller's thread, its schedule left as it is (tests: a cycle on demand)."""
        for name in self.intervals:
            self.run(name)

    def run(self, name: str) -> None:
        self._guard(name, self.runner.run, name)
        self.runs.labels(name).inc()

    def _overdue(self, name: str) -> float:
        due = self.due.get(name)
        return 0.0 if due is None else max(0.0, self.clock() - due)

    def _keep_pace(self, name: str, interval: float) -> None:
        """Count a run that ended after the next was due; say so when the job falls behind and when it
        keeps up again."""
        late = self._overdue(name)
        if not late:
            if name in self._behind:
                self._behind.discard(name)
                log.info("analysis job %s keeps up again (every %g s)", name, interval)
            return
        self.overruns.labels(name).inc()
        if name not in self._behind:
            self._behind.add(name)
            log.warning("analysis job %s falls behind: a run ended %.1f s after the next was due (every %g s); "
                        "the intervals it missed are skipped and the next run takes the newest data "
                        "(causewatch_job_lag_seconds, causewatch_job_overruns_total)", name, late, interval)

    def _loop(self) -> None:
        self.due = {name: self.clock() + interval for name, interval in self.intervals.items()}
        while not self._stop.is_set():
            hellos = self._waiting_hellos(timeout=0.2)
            if hellos:
                for name in self.intervals:
                    self._guard(name, self.runner.hello, name, hellos)
            self.run_due(self.clock())

    def _waiting_hellos(self, timeout: float) -> list[tuple[str, dict]]:
        """The hellos queued so far (at most HELLOS_AT_ONCE), after waiting up to `timeout` for the first.
        One hook call per burst: a call each (a worker round trip per job, the probe job's two reads)
        cost the daemon and its workers 3.7-4.4 CPU-s when 1,000 agents reconnected (bench/hellos.py)."""
        try:
            hellos = [self._hellos.get(timeout=timeout)]
        except queue.Empty:
            return []
        while len(hellos) < HELLOS_AT_ONCE:
            try:
                hellos.append(self._hellos.get_nowait())
            except queue.Empty:
                break
        return hellos

    def _guard(self, name: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            if self._stop.is_set():
                log.info("analysis job %s cut short by the daemon's stop", name)
                return
            self.errors.labels(name).inc()
            log.exception("analysis job %s failed", name)
