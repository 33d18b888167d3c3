"""What a store reader may call on its cursor: the six methods a DuckDB connection and remote.RemoteCursor
share. Readers (and the jobs and routes that call them) are written against these Protocols only."""

from __future__ import annotations

from typing import Any, Protocol


class Result(Protocol):
    """A query's answer: rows with their description, or the whole answer as Arrow or pandas."""

    @property
    def description(self) -> list | None: ...

    def fetchall(self) -> list[tuple]: ...

    def fetchone(self) -> tuple | None: ...

    def df(self) -> Any: ...

    def to_arrow_table(self) -> Any: ...


class Cursor(Protocol):
    """A read cursor: `execute(sql, params)` (or its alias `sql(sql, params=...)`), closed by `with`."""

    def execute(self, sql: str, params: Any = None) -> Result: ...

    def sql(self, sql: str, params: Any = None) -> Result: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Cursor": ...

    def __exit__(self, *exc) -> None: ...
