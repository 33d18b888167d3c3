"""The contract between the daemon and its analysis jobs: the Job base class and the JobContext a job
gets, the same in a worker process (remote.context) and in a test's own process.

Where jobs run is a runner's business (daemon/scheduler.py); a job sees only its context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from causewatch.daemon.cursor import Cursor


class Publisher(Protocol):
    """Where a job's gauges go: one snapshot per run, replacing the job's previous one."""

    def publish(self, name: str, families: Iterable) -> None: ...


@dataclass(frozen=True)
class JobContext:
    """What a job may touch.

    read()      a new read cursor of the store, here in the job's process: each query and its result
                cross to it (close it, e.g. `with ctx.read() as cur`);
    write(fn)   runs fn(con) on the daemon's writer thread in one transaction and returns its result
                (fn crosses to the daemon pickled: a module-level function, its arguments bound by partial);
    send(node, type, body)  a command to a node's agent; False when the node is not connected;
    exporter    where the job publishes its gauges;
    read_at_store(fn)  runs fn(cursor) where the store is, on a new read cursor off the writer (fn crosses
                as write's does, only its result comes back): for work on the rows themselves, as the
                lake's export streaming them out.
    """
    read: Callable[[], Cursor]
    write: Callable[[Callable[[Any], Any]], Any]
    send: Callable[[str, str, dict], bool]
    exporter: Publisher
    run_at_store: Callable[[Callable[[Any], Any]], Any] | None = None   # the daemon's; None: fn(read()) here

    def read_at_store(self, fn: Callable[[Any], Any]) -> Any:
        if self.run_at_store is not None:
            return self.run_at_store(fn)
        with self.read() as cur:
            return fn(cur)


class Job:
    """Base of the daemon's analyses, after dask's SchedulerPlugin: a job overrides the hooks it needs,
    which are documented no-ops here. `name` is unique among a daemon's jobs; `run` comes every
    `interval` seconds. A hook that raises is logged and counted (causewatch_job_errors_total{analysis});
    the other jobs go on."""
    name: str = "job"
    interval: float = 60.0

    def run(self, ctx: JobContext) -> None:
        """The job's periodic work: read, compute, write, publish."""

    def on_hellos(self, ctx: JobContext, hellos: list[tuple[str, dict]]) -> None:
        """After agents' hellos are stored: (node, body) of each, in arrival order; the hellos stored
        while the hook last ran come together (a fleet reconnecting sends thousands at once)."""
