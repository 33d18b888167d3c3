"""Job scheduler: runs the jobs of a runner (daemon/runners.py) on their intervals, on one thread.

Hello events go first, then whichever jobs are due. A job that raises is logged and counted; the
daemon and the other jobs carry on.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from causewatch.daemon.runners import Runner

log = logging.getLogger("causewatch.daemon.scheduler")


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
