"""A worker's window onto the daemon: a read cursor, a writer, a sender and a publisher, each answered
through `call` (worker.ask in a worker process; a worker.Host itself when a test runs the same code in one).

Entry points that run in a worker build their context here: `context()` for jobs, `answer()` for the API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from causewatch.daemon import routes
from causewatch.daemon.calls import Ask
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.worker import ask


class Result:
    """A query's answer, fetched from the daemon on first use (in the shape asked for)."""

    def __init__(self, call: Callable, sql: str, params):
        self.call, self.sql, self.params = call, sql, params
        self._description: list | None = None
        self._rows: list | None = None

    def _fetch(self) -> list:
        if self._rows is None:
            self._description, self._rows = self.call(Ask.ROWS, self.sql, self.params)
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
        return self.call(Ask.ARROW, self.sql, self.params)

    def df(self):
        return self.to_arrow_table().to_pandas()


class RemoteCursor:
    """A cursor.Cursor whose every query the daemon answers."""

    def __init__(self, call: Callable = ask):
        self.call = call

    def __enter__(self) -> "RemoteCursor":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def close(self) -> None:
        """Nothing to close here: the daemon closes the cursor of each query."""

    def execute(self, sql: str, params=None) -> Result:
        return Result(self.call, sql, params)

    sql = execute


class RemotePublisher:
    """A job's gauges go to the daemon's exporter."""

    def __init__(self, call: Callable = ask):
        self.call = call

    def publish(self, name: str, families: Iterable) -> None:
        self.call(Ask.PUBLISH, name, list(families))


def context(call: Callable = ask) -> JobContext:
    """The JobContext of jobs whose store, agents and exporter are the daemon's."""
    return JobContext(read=functools.partial(RemoteCursor, call), write=functools.partial(call, Ask.WRITE),
                      send=functools.partial(call, Ask.SEND), exporter=RemotePublisher(call),
                      run_at_store=functools.partial(call, Ask.READ))


def answer(method: str, path: str, params: dict, raw: bytes = b"", accept: str = "",
           call: Callable = ask) -> tuple[int, bytes, str]:
    """An HTTP API request (`accept` its Accept header) answered by routes.answer, reading and writing
    through the daemon."""
    return routes.answer(method, path, params, raw, RemoteCursor(call), functools.partial(call, Ask.WRITE), accept)
