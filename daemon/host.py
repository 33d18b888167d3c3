"""The daemon's side of its workers' asks (calls.Ask): a query on a new store cursor, a write on the
writer thread, a command to an agent, gauges to the exporter; one handler each, dispatched by a dict.

The daemon stays the only process that opens the DuckDB file: a query's rows go back as Python rows or as
an Arrow table, so pandas is loaded only in the worker.
"""

from __future__ import annotations

from collections.abc import Callable

from causewatch.daemon.calls import Ask
from causewatch.daemon.cursor import Cursor
from causewatch.daemon.worker import WorkerError


class Host:
    """host(kind, *args) answers a worker's ask; its exception is raised in the worker."""

    def __init__(self, cursor: Callable[[], Cursor], write: Callable, send: Callable, exporter):
        self.cursor = cursor
        self.handlers: dict[Ask, Callable] = {Ask.ROWS: self.rows, Ask.ARROW: self.arrow, Ask.WRITE: write,
                                              Ask.SEND: send, Ask.PUBLISH: exporter.publish}

    def __call__(self, kind: Ask, *args):
        handler = self.handlers.get(kind)
        if handler is None:
            raise WorkerError(f"ask({kind!r}): the daemon answers {', '.join(self.handlers)}")
        return handler(*args)

    def rows(self, sql: str, params) -> tuple[list, list]:
        """(description as [(name,)], rows) of a query."""
        with self.cursor() as con:
            cur = con.execute(sql, params)
            return [(d[0],) for d in cur.description or []], cur.fetchall()

    def arrow(self, sql: str, params):
        with self.cursor() as con:
            return con.sql(sql, params=params).to_arrow_table()
