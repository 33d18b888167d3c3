"""The store's outward tables as views over its base tables, made in one place at every open and in
every transaction that changes the lake's file list.

Readers (verbs, routes, analyses, PERFQL) name `samples`, `samples_minute` and `bbv` with the columns
they always had (range questions, `samples_cold`: the lake's rows as stored); the base tables under them
key each row by an integer id (`series`, `bbv_keys`) and keep times of samples as integer milliseconds.
`samples` is hot ∪ cold: the DuckDB rows and the lake's listed Parquet files (daemon/store/lake.py). The
views are not migrations: `create_views` runs at each `Store` open (CREATE OR REPLACE), so the lake's
files are named where the store is opened; a read-only open makes them as its connection's temporary
views (readers.shared.open_store).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

# Every view create_views makes (schema.TABLES lists them after the base tables).
VIEWS = ("samples", "samples_raw", "samples_minute", "bbv", "samples_cold")

# samples_hot.ts and samples_minute_agg.minute are integer ms; `/ 1000` (BIGINT / INTEGER) is DOUBLE
# division, correctly rounded: the seconds a sender wrote to the millisecond come back as that double.
_HOT_SAMPLES = """SELECT s.node, h.ts / 1000 AS ts, s.scope, s.metric, h.value
    FROM samples_hot h JOIN series s USING (series_id)"""
# What roll-ups aggregate: the raw samples in the base tables' terms (series id, ms), hot and cold.
_HOT_RAW = "SELECT series_id, ts, value FROM samples_hot"
_SAMPLES_MINUTE = """SELECT s.node, s.scope, s.metric, a.minute / 1000 AS minute, a.count, a.mean, a.min, a.max
    FROM samples_minute_agg a JOIN series s USING (series_id)"""
# The lake's rows in its own terms (ms times, the names as columns), empty while none is listed: what a
# range query reads cold, its ms bounds and name filters pruning the files' row groups.
_NO_COLD = "SELECT NULL::VARCHAR AS node, NULL::VARCHAR AS scope, NULL::VARCHAR AS metric, NULL::BIGINT AS ts, " \
           "NULL::DOUBLE AS value WHERE FALSE"
_BBV = """SELECT v.node, v.boot, v.seq, v.target, v.kind, v.t_start, v.t_end, k.key, c.count, v.pid, v.lost
    FROM bbv_counts c JOIN bbv_vectors v USING (vector_id) JOIN bbv_keys k USING (key_id)"""


def listed(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The lake's files in its catalog (paths relative to the lake folder), oldest day first."""
    return [p for (p,) in con.execute("SELECT path FROM lake_files ORDER BY day, path").fetchall()]


def cold_files(con: duckdb.DuckDBPyConnection, lake: Path | None) -> str | None:
    """read_parquet over the lake's listed files, None while none is listed. The files are spelled out,
    not globbed: a file counts only from the transaction that listed it."""
    files = [p for p in listed(con) if (lake / p).exists()] if lake is not None else []
    if not files:
        return None
    quoted = ", ".join("'" + str(lake / p).replace("'", "''") + "'" for p in files)
    return f"read_parquet([{quoted}], hive_partitioning = true)"


def create_views(con: duckdb.DuckDBPyConnection, lake: Path | None = None, temporary: bool = False) -> None:
    """(Re)create every view of VIEWS over the migrated base tables and the lake's listed files;
    `temporary`: as this connection's own views, which shadow the file's (a read-only open cannot
    replace those, and they name the lake where the store was last opened for writing)."""
    cold = cold_files(con, lake)
    samples, raw = _HOT_SAMPLES, _HOT_RAW
    if cold:
        samples += f" UNION ALL SELECT node, ts / 1000 AS ts, scope, metric, value FROM {cold}"
        raw += f" UNION ALL SELECT s.series_id, c.ts, c.value FROM {cold} c JOIN series s USING (node, scope, metric)"
    create = "CREATE OR REPLACE TEMP VIEW" if temporary else "CREATE OR REPLACE VIEW"
    con.execute(f"{create} samples AS {samples}")
    con.execute(f"{create} samples_raw AS {raw}")
    con.execute(f"{create} samples_minute AS {_SAMPLES_MINUTE}")
    con.execute(f"{create} bbv AS {_BBV}")
    lake_rows = f"SELECT node, scope, metric, ts, value FROM {cold}" if cold else _NO_COLD
    con.execute(f"{create} samples_cold AS {lake_rows}")


def samples_filter(metrics: list[str] | None = None, scope: str | None = None) -> tuple[str, list]:
    """The WHERE clause (and its parameters) of a read of the samples' columns: these metrics (all: None)
    of this scope (any: None)."""
    where, params = ["TRUE"], []
    if metrics:
        where.append(f"metric IN ({', '.join('?' * len(metrics))})")
        params += list(metrics)
    if scope is not None:
        where.append("scope = ?")
        params.append(scope)
    return " AND ".join(where), params
