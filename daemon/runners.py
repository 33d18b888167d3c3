"""Where the scheduler's jobs run: in this process (LocalJobs, for tests and benches) or in a worker
process (WorkerJobs, the daemon's). A distributed runner is one more class with the same three methods.

A runner's `schedule()` builds its jobs and names them with their intervals; `run(name)` and
`hello(name, node, body)` call one job's hook and return when it is done.
"""

from __future__ import annotations

from typing import Protocol

from causewatch.daemon.calls import Entry
from causewatch.daemon.jobs import Job, JobContext
from causewatch.daemon.worker import Worker


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
