"""Retention's writes (daemon/job_retention.py), on the writer thread: per-minute roll-ups of the
raw samples, Parquet exports and deletions of rows past their keep, and the ingest log's trim.

Times come in as unix seconds (what the views show); the base tables keep samples' times as integer
milliseconds, so a bound in seconds becomes `ms_bound`'s integer: the rows it keeps or takes are
exactly those the views' seconds put on either side of it.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb

from causewatch.daemon.store import lake as store_lake
from causewatch.daemon.store import units as store_units

RAW_TYPES = ("samples", "bbv")   # frame types whose rows retention deletes (tasks, regions stay)


def ms_bound(seconds: float) -> int:
    """The least integer ms whose seconds as the views show them (ms / 1000, a correctly rounded double
    division, as Python's) are >= `seconds`: `ts >= ms_bound(x)` on the base table is `ts >= x` on the view."""
    bound = math.ceil(seconds * 1000)
    while (bound - 1) / 1000 >= seconds:
        bound -= 1
    while bound / 1000 < seconds:
        bound += 1
    return bound


def rollup_minutes(con: duckdb.DuckDBPyConnection, lo: float, hi: float, merge: bool = False) -> int:
    """Aggregate the raw samples with lo <= ts < hi (minute-aligned bounds, seconds) into the per-minute
    aggregates (`samples_minute_agg`, shown by the view `samples_minute`).

    merge=False replaces the aggregate of every (series, minute) that has raw rows there (its raw rows
    are all present); merge=True folds them into the stored aggregate instead (rows that arrived after
    their minute's raw rows were deleted). Returns the aggregates written."""
    # The minute's first ms, floored (DuckDB's % keeps the dividend's sign).
    con.execute("""CREATE OR REPLACE TEMP TABLE rollup_new AS
        SELECT series_id, ts - ((ts % 60000) + 60000) % 60000 AS minute, count(value) AS count,
               avg(value) AS mean, min(value) AS min, max(value) AS max
        FROM samples_raw WHERE ts >= ? AND ts < ? GROUP BY ALL""", [ms_bound(lo), ms_bound(hi)])
    # Replacing: the stored aggregate takes no part (a join that never matches leaves its columns NULL).
    on = "USING (series_id, minute)" if merge else "ON FALSE"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE rollup_out AS
        SELECT n.series_id, n.minute, n.count + coalesce(o.count, 0) AS count,
               (coalesce(n.mean * n.count, 0) + coalesce(o.mean * o.count, 0))
                   / nullif(n.count + coalesce(o.count, 0), 0) AS mean,
               least(n.min, o.min) AS min, greatest(n.max, o.max) AS max
        FROM rollup_new n LEFT JOIN samples_minute_agg o {on}""")
    con.execute("""DELETE FROM samples_minute_agg s USING rollup_new n
                   WHERE s.series_id = n.series_id AND s.minute = n.minute""")
    con.execute("INSERT INTO samples_minute_agg SELECT * FROM rollup_out")
    written = con.execute("SELECT count(*) FROM rollup_out").fetchone()[0]
    con.execute("DROP TABLE rollup_new")
    con.execute("DROP TABLE rollup_out")
    return written


# What each table's retention deletes: rows whose time column (as the view shows it) is below the cutoff.
RETAINED = {"samples": "ts", "bbv": "t_start", "samples_minute": "minute", "units": "ended"}
# The deletion from the base tables under each view, its bound in their units: (statement, ms?).
_DELETE = {"samples": [("DELETE FROM samples_hot WHERE ts < ?", True)],
           "samples_minute": [("DELETE FROM samples_minute_agg WHERE minute < ?", True)],
           "units": [("DELETE FROM units WHERE ended < ?", False)],   # a running unit (ended NULL) stays
           "bbv": [("DELETE FROM bbv_counts WHERE vector_id IN (SELECT vector_id FROM bbv_vectors WHERE t_start < ?)",
                    False), ("DELETE FROM bbv_vectors WHERE t_start < ?", False)]}


def delete_before(con: duckdb.DuckDBPyConnection, table: str, cutoff: float, export: str | None = None,
                  lake: str | None = None) -> int:
    """Delete `table`'s rows older than `cutoff` (RETAINED names the view's column) from the base tables
    under it, and for samples the lake's days before it (`lake`: its folder; the cutoff then falls on a
    UTC midnight), first copying them, as the view shows them, to `export`/<table>-<cutoff>.parquet when
    a folder is given. Returns the view's rows deleted (a phase vector without keys has none, and goes too)."""
    where = f"{RETAINED[table]} < ?"
    n = con.execute(f"SELECT count(*) FROM {table} WHERE {where}", [cutoff]).fetchone()[0]
    if n and export:
        path = f"{export.rstrip('/')}/{table}-{cutoff:.0f}.parquet".replace("'", "''")
        # COPY takes no bound parameters: the cutoff is a float formatted here, the folder the operator's
        con.execute(f"COPY (SELECT * FROM {table} WHERE {RETAINED[table]} < {cutoff!r}) TO '{path}' "
                    "(FORMAT parquet)")
    for sql, in_ms in _DELETE[table]:
        con.execute(sql, [ms_bound(cutoff) if in_ms else cutoff])
    if table == "samples" and lake:
        store_lake.drop_before(con, Path(lake), store_lake.day_of(cutoff))
    return n


def trim_ingest_log(con: duckdb.DuckDBPyConnection, cutoff: float) -> int:
    """Delete the log rows of raw frames (RAW_TYPES) received before `cutoff`, except the newest of each
    (node, boot): Store rebuilds its per-boot high-water mark from those at open. Each boot's highest
    trimmed seq becomes its watermark in `ingest_trimmed`, so a resend of a trimmed frame is still known."""
    doomed = f"""FROM ingest_log WHERE type IN {RAW_TYPES} AND received < ?
        AND seq < (SELECT max(m.seq) FROM ingest_log m WHERE m.node = ingest_log.node AND m.boot = ingest_log.boot)"""
    con.execute(f"""INSERT INTO ingest_trimmed SELECT node, boot, max(seq) {doomed} GROUP BY node, boot
        ON CONFLICT (node, boot) DO UPDATE SET seq = greatest(seq, excluded.seq)""", [cutoff])
    return con.execute(f"DELETE {doomed}", [cutoff]).fetchone()[0]


def retain(con: duckdb.DuckDBPyConnection, lo: float | None, current: float, first: float | None, finalised: float,
           cut: dict[str, float], export: str | None, log_cut: float | None, lake: str | None = None) -> dict[str, int]:
    """A retention run's writes (daemon/job_retention.py): roll up the minutes from `lo` to `current`;
    give the minutes about to lose their raw samples (from `first` to cut["samples"]) their final
    aggregate, merged into it before `finalised`; sum up the units whose samples go (`unit_summaries`);
    delete each table's rows before its cut (copied to
    Parquet in `export` first; samples' whole days from the `lake` folder) and the ingest log before
    `log_cut`. Returns rows deleted per table."""
    if lo is not None and lo < current:
        rollup_minutes(con, lo, current)
    raw_cut = cut.get("samples")
    if raw_cut is not None and first is not None and first < raw_cut:
        merged_to = min(finalised, raw_cut)
        if first < merged_to:
            rollup_minutes(con, first, merged_to, merge=True)
        rollup_minutes(con, max(first, merged_to), raw_cut)
    if raw_cut is not None:
        store_units.keep_summaries(con, raw_cut)
    deleted = {t: delete_before(con, t, c, export, lake) for t, c in cut.items()}
    if "units" in cut:
        deleted["unit_summaries"] = store_units.drop_summaries(con)
    if log_cut is not None:
        deleted["ingest_log"] = trim_ingest_log(con, log_cut)
    return deleted
