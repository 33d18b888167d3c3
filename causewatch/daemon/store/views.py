"""The store's outward tables as views over its base tables, made in one place at every open and in
every transaction that changes the lake's file list.

Readers (verbs, routes, analyses, PERFQL) name `samples`, `samples_minute` and `bbv` with the columns
they always had (range questions, `samples_cold`: the lake's rows as the hot ones are, series id and
ms, with their day); the base tables under them key each row by an integer id (`series`, `bbv_keys`)
and keep times of samples as integer milliseconds.
`samples` is hot ∪ cold: the DuckDB rows and the lake's listed Parquet files (daemon/store/lake.py). The
views are not migrations: `create_views` runs at each `Store` open (CREATE OR REPLACE), so the lake's
files are named where the store is opened; a read-only open makes them as its connection's temporary
views (readers.shared.open_store).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from causewatch.daemon.store import mantissas

# Every view create_views makes (schema.TABLES lists them after the base tables).
VIEWS = ("samples", "samples_raw", "samples_minute", "bbv", "samples_cold", "lake_paths")
# A lake file's layout (lake_files.layout): its rows by names only (the first), with the series id too, or
# also with decimal values as mantissas (daemon/store/mantissas.py: what moves and merges write).
NAMES, IDS, MANTISSAS = 1, 2, 3
LAYOUTS = (NAMES, IDS, MANTISSAS)

# samples_hot.ts and samples_minute_agg.minute are integer ms; `/ 1000` (BIGINT / INTEGER) is DOUBLE
# division, correctly rounded: the seconds a sender wrote to the millisecond come back as that double.
_HOT_SAMPLES = """SELECT s.node, h.ts / 1000 AS ts, s.scope, s.metric, h.value
    FROM samples_hot h JOIN series s USING (series_id)"""
# What roll-ups aggregate: the raw samples in the base tables' terms (series id, ms), hot and cold.
_HOT_RAW = "SELECT series_id, ts, value FROM samples_hot"
_SAMPLES_MINUTE = """SELECT s.node, s.scope, s.metric, a.minute / 1000 AS minute, a.count, a.mean, a.min, a.max
    FROM samples_minute_agg a JOIN series s USING (series_id)"""
# The lake's rows in the hot rows' terms (series id, ms) and their day, empty while none is listed: what a
# range query reads cold, its ids, ms bounds and days pruning the files, row groups and pages. A file of
# the first layout (names only) is read by its names joined to the series.
_NO_COLD = "SELECT NULL::INTEGER AS series_id, NULL::BIGINT AS ts, NULL::DOUBLE AS value, NULL::DATE AS day WHERE FALSE"
# The lake's listed files that are there, by absolute path, with their layout and bounds: what a reader
# that names the files of its range itself reads (readers.ranges), from the same snapshot as the hot rows.
_NO_PATHS = "SELECT NULL::VARCHAR AS file, NULL::INTEGER AS layout, NULL::DATE AS day, NULL::BIGINT AS ts_min, " \
            "NULL::BIGINT AS ts_max WHERE FALSE"
_BBV = """SELECT v.node, v.boot, v.seq, v.target, v.kind, v.t_start, v.t_end, k.key, c.count, v.pid, v.lost
    FROM bbv_counts c JOIN bbv_vectors v USING (vector_id) JOIN bbv_keys k USING (key_id)"""


def value_of(layout: int) -> str:
    """The SQL of a value in a lake file of `layout`, from its own columns."""
    return mantissas.VALUE if layout == MANTISSAS else "value"


def listed(con: duckdb.DuckDBPyConnection, layout: int | None = None) -> list[str]:
    """The lake's files in its catalog (paths relative to the lake folder), oldest day first; those of
    one layout (of LAYOUTS), or all. A store not migrated yet (read-only, by an older daemon) lists
    the first layout's only."""
    if layout is not None and not _has_layouts(con):
        return listed(con) if layout == NAMES else []
    where, params = ("WHERE layout = ?", [layout]) if layout is not None else ("", [])
    return [p for (p,) in con.execute(f"SELECT path FROM lake_files {where} ORDER BY day, path", params).fetchall()]


def _has_layouts(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = 'lake_files' "
                            "AND column_name = 'layout'").fetchall()[0][0])


def cold_files(con: duckdb.DuckDBPyConnection, lake: Path | None, layout: int) -> str | None:
    """read_parquet over the lake's listed files of one layout, None while none is listed. The files
    are spelled out, not globbed: a file counts only from the transaction that listed it."""
    files = [p for p in listed(con, layout) if (lake / p).exists()] if lake is not None else []
    if not files:
        return None
    quoted = ", ".join("'" + str(lake / p).replace("'", "''") + "'" for p in files)
    return f"read_parquet([{quoted}], hive_partitioning = true)"


def _cold(con: duckdb.DuckDBPyConnection, lake: Path | None, select) -> str | None:
    """`select(layout, files)` (the SQL of those files' rows) over each layout's files, in one; None
    while none is listed."""
    parts = [select(layout, files) for layout in LAYOUTS if (files := cold_files(con, lake, layout))]
    return " UNION ALL ".join(parts) or None


def _by_id(layout: int, files: str) -> str:
    """A layout's rows as (series_id, ts, value, day): files of the first by their names."""
    if layout == NAMES:
        return f"SELECT s.series_id, c.ts, c.value, c.day FROM {files} c JOIN series s USING (node, scope, metric)"
    return f"SELECT series_id, ts, {value_of(layout)} AS value, day FROM {files}"


def _by_names(layout: int, files: str) -> str:
    return f"SELECT node, ts / 1000 AS ts, scope, metric, {value_of(layout)} AS value FROM {files}"


def _paths(con: duckdb.DuckDBPyConnection, lake: Path | None) -> str:
    if lake is None:
        return _NO_PATHS
    prefix = (str(lake) + "/").replace("'", "''")
    layout = "layout" if _has_layouts(con) else f"{NAMES}"
    missing = ", ".join("'" + p.replace("'", "''") + "'" for p in listed(con) if not (lake / p).exists())
    return f"""SELECT '{prefix}' || path AS file, {layout} AS layout, day, ts_min, ts_max FROM lake_files
        {f'WHERE path NOT IN ({missing})' if missing else ''}"""


def create_views(con: duckdb.DuckDBPyConnection, lake: Path | None = None, temporary: bool = False) -> None:
    """(Re)create every view of VIEWS over the migrated base tables and the lake's listed files;
    `temporary`: as this connection's own views, which shadow the file's (a read-only open cannot
    replace those, and they name the lake where the store was last opened for writing)."""
    cold, by_id = _cold(con, lake, _by_names), _cold(con, lake, _by_id)
    samples, raw = _HOT_SAMPLES, _HOT_RAW
    if cold:
        samples += f" UNION ALL {cold}"
        raw += f" UNION ALL SELECT series_id, ts, value FROM ({by_id})"
    create = "CREATE OR REPLACE TEMP VIEW" if temporary else "CREATE OR REPLACE VIEW"
    con.execute(f"{create} samples AS {samples}")
    con.execute(f"{create} samples_raw AS {raw}")
    con.execute(f"{create} samples_minute AS {_SAMPLES_MINUTE}")
    con.execute(f"{create} bbv AS {_BBV}")
    con.execute(f"{create} samples_cold AS {by_id or _NO_COLD}")
    con.execute(f"{create} lake_paths AS {_paths(con, lake)}")


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
