"""Retention's writes (daemon/job_retention.py), on the writer thread: per-minute roll-ups of the
raw samples, Parquet exports and deletions of rows past their keep, and the ingest log's trim."""

from __future__ import annotations

import duckdb

RAW_TYPES = ("samples", "bbv")   # frame types whose rows retention deletes (tasks, regions stay)


def rollup_minutes(con: duckdb.DuckDBPyConnection, lo: float, hi: float, merge: bool = False) -> int:
    """Aggregate the raw samples with lo <= ts < hi (minute-aligned bounds) into `samples_minute`.

    merge=False replaces the aggregate of every (node, scope, metric, minute) that has raw rows there
    (its raw rows are all present); merge=True folds them into the stored aggregate instead (rows that
    arrived after their minute's raw rows were deleted). Returns the aggregates written."""
    con.execute("""CREATE OR REPLACE TEMP TABLE rollup_new AS
        SELECT node, scope, metric, floor(ts / 60) * 60 AS minute, count(value) AS count, avg(value) AS mean,
               min(value) AS min, max(value) AS max
        FROM samples WHERE ts >= ? AND ts < ? GROUP BY ALL""", [lo, hi])
    # Replacing: the stored aggregate takes no part (a join that never matches leaves its columns NULL).
    on = "USING (node, scope, metric, minute)" if merge else "ON FALSE"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE rollup_out AS
        SELECT n.node, n.scope, n.metric, n.minute, n.count + coalesce(o.count, 0) AS count,
               (coalesce(n.mean * n.count, 0) + coalesce(o.mean * o.count, 0))
                   / nullif(n.count + coalesce(o.count, 0), 0) AS mean,
               least(n.min, o.min) AS min, greatest(n.max, o.max) AS max
        FROM rollup_new n LEFT JOIN samples_minute o {on}""")
    con.execute("""DELETE FROM samples_minute s USING rollup_new n WHERE s.node = n.node AND s.scope = n.scope
                   AND s.metric = n.metric AND s.minute = n.minute""")
    con.execute("INSERT INTO samples_minute SELECT * FROM rollup_out")
    written = con.execute("SELECT count(*) FROM rollup_out").fetchone()[0]
    con.execute("DROP TABLE rollup_new")
    con.execute("DROP TABLE rollup_out")
    return written


# What each table's retention deletes: rows whose time column is below the cutoff.
RETAINED = {"samples": "ts", "bbv": "t_start", "samples_minute": "minute"}


def delete_before(con: duckdb.DuckDBPyConnection, table: str, cutoff: float, export: str | None = None) -> int:
    """Delete `table`'s rows older than `cutoff` (RETAINED names the column), first copying them to
    `export`/<table>-<cutoff>.parquet when a folder is given. Returns the rows deleted."""
    where = f"{RETAINED[table]} < ?"
    n = con.execute(f"SELECT count(*) FROM {table} WHERE {where}", [cutoff]).fetchone()[0]
    if n and export:
        path = f"{export.rstrip('/')}/{table}-{cutoff:.0f}.parquet".replace("'", "''")
        # COPY takes no bound parameters: the cutoff is a float formatted here, the folder the operator's
        con.execute(f"COPY (SELECT * FROM {table} WHERE {RETAINED[table]} < {cutoff!r}) TO '{path}' "
                    "(FORMAT parquet)")
    return con.execute(f"DELETE FROM {table} WHERE {where}", [cutoff]).fetchone()[0] if n else 0


def trim_ingest_log(con: duckdb.DuckDBPyConnection, cutoff: float) -> int:
    """Delete the log rows of raw frames (RAW_TYPES) received before `cutoff`, except the newest of each
    (node, boot): Store rebuilds its per-boot high-water mark from those at open (exactly-once)."""
    return con.execute(f"""DELETE FROM ingest_log WHERE type IN {RAW_TYPES} AND received < ?
        AND seq < (SELECT max(m.seq) FROM ingest_log m WHERE m.node = ingest_log.node AND m.boot = ingest_log.boot)
        """, [cutoff]).fetchone()[0]


def retain(con: duckdb.DuckDBPyConnection, lo: float | None, current: float, first: float | None, finalised: float,
           cut: dict[str, float], export: str | None, log_cut: float | None) -> dict[str, int]:
    """A retention run's writes (daemon/job_retention.py): roll up the minutes from `lo` to `current`;
    give the minutes about to lose their raw samples (from `first` to cut["samples"]) their final
    aggregate, merged into it before `finalised`; delete each table's rows before its cut (copied to
    Parquet in `export` first) and the ingest log before `log_cut`. Returns rows deleted per table."""
    if lo is not None and lo < current:
        rollup_minutes(con, lo, current)
    raw_cut = cut.get("samples")
    if raw_cut is not None and first is not None and first < raw_cut:
        merged_to = min(finalised, raw_cut)
        if first < merged_to:
            rollup_minutes(con, first, merged_to, merge=True)
        rollup_minutes(con, max(first, merged_to), raw_cut)
    deleted = {t: delete_before(con, t, c, export) for t, c in cut.items()}
    if log_cut is not None:
        deleted["ingest_log"] = trim_ingest_log(con, log_cut)
    return deleted
