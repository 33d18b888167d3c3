"""What every reader shares: opening a stopped daemon's store file read-only, its tables by name,
and the helpers the readers build and run their queries with.

Agent-supplied names (counter, parameter and metric keys) reach SQL only as bound parameters: a key
becomes a JSON Pointer (`json_pointer`), never a path or identifier spliced into the SQL text.
"""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.store.lake import READS, folder_for
from causewatch.daemon.store.views import create_views
from causewatch.errors import InputError


def json_pointer(key: str) -> str:
    """The one rule for addressing an agent-supplied key inside a JSON column (RFC 6901)."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def open_store(path: str, need: tuple[str, ...] = ()) -> duckdb.DuckDBPyConnection:
    """A stopped daemon's store, read-only; a locked file or one without the `need`ed tables is refused
    by name (a running daemon is read through its HTTP API instead)."""
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error as e:
        hint = " (a running daemon holds its store: read it through the daemon's HTTP API)" \
            if "lock" in str(e).lower() else ""
        raise InputError(f"{path}: cannot open the DuckDB store read-only ({e}){hint}") from None
    con.execute(READS)
    missing = set(need) - set(table_names(con))
    if missing:
        con.close()
        raise InputError(f"{path}: not a causewatch store (no table {', '.join(sorted(missing))})")
    _views_over_lake_beside(con, path)
    return con


def _views_over_lake_beside(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """The views over the lake beside the file (`x.lake/`), as this connection's own: the file's views
    name the lake where the store was last opened for writing, which a store moved or restored
    elsewhere no longer is."""
    lake = folder_for(path)
    if lake is not None and lake.is_dir() and "lake_files" in table_names(con):
        create_views(con, lake, temporary=True)


def table_names(con: Cursor) -> list[str]:
    """The file's tables and views (a view a connection shadows with its own, once)."""
    return [r[0] for r in con.execute("SELECT DISTINCT table_name FROM information_schema.tables "
                                      "ORDER BY 1").fetchall()]


def read_table(con: Cursor, table: str) -> pd.DataFrame:
    """A whole table of any DuckDB file (e.g. `causewatch experiment`'s output), named by a checked name."""
    if table not in table_names(con):
        raise InputError(f"no table {table!r} (tables: {', '.join(table_names(con)) or 'none'})")
    return con.execute(f'SELECT * FROM "{table}"').df()   # the name is one of the file's own tables


def records(cur) -> list[dict]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def where(since, until, nodes_, time_col: str) -> tuple[str, list]:
    clauses, params = ["TRUE"], []
    if since is not None:
        clauses.append(f"{time_col} >= ?")
        params.append(float(since))
    if until is not None:
        clauses.append(f"{time_col} < ?")
        params.append(float(until))
    if nodes_:
        clauses.append(f"node IN ({', '.join('?' * len(nodes_))})")
        params += list(nodes_)
    return " AND ".join(clauses), params


def json_keys(con: Cursor, table: str, column: str, where: str, params: list) -> list[str]:
    rows = con.execute(f"SELECT DISTINCT unnest(json_keys({column})) FROM {table} "
                       f"WHERE {column} IS NOT NULL AND {where}", params).fetchall()
    return sorted(r[0] for r in rows)


def _strings_as_arrow(t: pa.DataType):
    return pd.ArrowDtype(t) if pa.types.is_string(t) or pa.types.is_large_string(t) else None


def fetch(con: Cursor, sql: str, params: list) -> pd.DataFrame:
    """A query's rows as a DataFrame whose text columns stay Arrow strings: a million region names
    as Python str objects would cost more than the whole aggregation."""
    return con.sql(sql, params=params).to_arrow_table().to_pandas(types_mapper=_strings_as_arrow)
