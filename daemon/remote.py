"""The analysis worker's window onto the daemon: in the child, a read cursor, a writer, a sender and a
publisher that ask the daemon (worker.ask); in the daemon, the Host that answers them.

The daemon stays the only process that opens the DuckDB file: a query runs on the daemon's cursor and
its rows come back as Python rows (fetchall) or as an Arrow table (df, to_arrow_table), so pandas is
loaded only in the child. A write is a picklable callable (a store function with its arguments bound
by functools.partial) that the daemon's writer runs in its transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from causewatch.daemon.jobs import JobContext
from causewatch.daemon.worker import WorkerError, ask


class Result:
    """A query's answer, fetched from the daemon on first use (in the shape asked for)."""

    def __init__(self, sql: str, params):
        self.sql, self.params = sql, params
        self._description: list | None = None
        self._rows: list | None = None

    def _fetch(self) -> list:
        if self._rows is None:
            self._description, self._rows = ask("rows", self.sql, self.params)
        return self._rows

    @property
    def description(self) -> list:
        self._fetch()
        return self._description

    def fetchall(self) -> list:
        return self._fetch()

    def fetchone(self):
        rows = self._fetch()
        return rows[0] if rows else None

    def to_arrow_table(self):
        return ask("arrow", self.sql, self.params)

    def df(self):
        return self.to_arrow_table().to_pandas()


class RemoteCursor:
    """What daemon.tables needs of a DuckDB cursor (execute/sql, then fetchall, fetchone, description, df,
    to_arrow_table), each query answered by the daemon."""

    def __enter__(self) -> "RemoteCursor":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def close(self) -> None:
        """Nothing to close here: the daemon closes the cursor of each query."""

    def execute(self, sql: str, params=None) -> Result:
        return Result(sql, params)

    sql = execute


class RemotePublisher:
    """A job's gauges go to the daemon's exporter (publish is all a job uses of it)."""

    def publish(self, name: str, families: list) -> None:
        ask("publish", name, families)


def context() -> JobContext:
    """The JobContext of work running in the analysis worker; its heavy work runs right there."""
    return JobContext(read=RemoteCursor, write=functools.partial(ask, "write"), send=functools.partial(ask, "send"),
                      exporter=RemotePublisher())


class Host:
    """Answers the worker's asks in the daemon: `rows` and `arrow` on a new store cursor each, `write`
    on the writer thread, `send` to an agent, `publish` to the exporter."""

    def __init__(self, cursor: Callable, write: Callable, send: Callable, exporter):
        self.cursor, self.write, self.send, self.exporter = cursor, write, send, exporter

    def __call__(self, kind: str, *args):
        if kind == "rows":
            with self.cursor() as con:
                cur = con.execute(*args)
                return [(d[0],) for d in cur.description or []], cur.fetchall()
        if kind == "arrow":
            sql, params = args
            with self.cursor() as con:
                return con.sql(sql, params=params).to_arrow_table()
        if kind == "write":
            return self.write(*args)
        if kind == "send":
            return self.send(*args)
        if kind == "publish":
            return self.exporter.publish(*args)
        raise WorkerError(f"ask({kind!r}): the daemon answers rows, arrow, write, send and publish")


ANALYSIS = "causewatch.daemon.analysis"   # the child's side of the jobs, imported only there


class RemoteJob:
    """The daemon's handle on a job that lives in the analysis worker (built there by analysis.install):
    the scheduler runs it like a local one, each run one request to the worker."""

    def __init__(self, name: str, interval: float, worker: Callable):
        self.name, self.interval, self.worker = name, interval, worker

    def run(self, ctx: JobContext) -> None:
        self.worker(f"{ANALYSIS}:run", self.name)

    def on_hello(self, ctx: JobContext, node: str, body: dict) -> None:
        self.worker(f"{ANALYSIS}:hello", self.name, node, body)
