"""The contract between the daemon and its analysis jobs: the Job protocol and the JobContext.

The daemon composes its jobs by name in server.default_jobs; the scheduler calls them on one thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import duckdb

from causewatch.daemon.exporter import Exporter


@dataclass(frozen=True)
class JobContext:
    """What a job may touch.

    read()      a new read cursor of the store (the caller closes it);
    write(fn)   runs fn(con) on the writer thread in one transaction and returns its result;
    send(node, type, body)  a command to a node's agent; False when the node is not connected;
    exporter    where the job publishes its gauges (one snapshot per run);
    compute(fn, *args)  fn(*args) where heavy numeric work belongs: in-process, since in the daemon the job
                itself runs in the analysis worker (daemon.analysis); a test or bench may hand it an
                AnalysisWorker to run that work in a child.
    """
    read: Callable[[], duckdb.DuckDBPyConnection]
    write: Callable[[Callable[[duckdb.DuckDBPyConnection], Any]], Any]
    send: Callable[[str, str, dict], bool]
    exporter: Exporter
    compute: Callable[..., Any] = field(default=lambda fn, *args: fn(*args))


@runtime_checkable
class Job(Protocol):
    """An analysis: `run` every `interval` seconds, `on_hello` after an agent's hello is stored.
    A job that raises is logged and counted (causewatch_job_errors_total{analysis}); the rest go on."""
    name: str
    interval: float

    def run(self, ctx: JobContext) -> None: ...

    def on_hello(self, ctx: JobContext, node: str, body: dict) -> None: ...
