"""The calls that cross between the daemon and its worker processes, named once: the entry points the
daemon asks a worker to run (registered by reference in daemon/entrypoints.py) and what a worker asks back
(answered by worker.Host). A key travels pickled; "find usages" of a member finds both ends."""

from __future__ import annotations

from enum import StrEnum


class Entry(StrEnum):
    """Daemon -> worker: run the function daemon/entrypoints.py registers under this key."""
    INSTALL_JOBS = "install_jobs"   # build the jobs (entrypoints.install); returns their (name, interval)
    RUN_JOB = "run_job"             # one run of a job (entrypoints.run)
    JOB_HELLO = "job_hello"         # a job's on_hellos for stored hellos (entrypoints.hello)
    ANSWER = "answer"               # one HTTP API request (remote.answer)


class Ask(StrEnum):
    """Worker -> daemon: what worker.Host answers while the worker's request runs."""
    ROWS = "rows"         # a query's description and rows
    ARROW = "arrow"       # a query's rows as an Arrow table
    WRITE = "write"       # fn(con) on the writer thread, in one transaction
    READ = "read"         # fn(cursor) on a new store cursor, off the writer (work that streams rows out)
    SEND = "send"         # a command to a node's agent
    PUBLISH = "publish"   # a job's gauges to the exporter
