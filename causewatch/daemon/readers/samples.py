"""The stored samples, raw (long form, per metric counts) and as per-minute aggregates, and where
the next roll-up of them resumes."""

from __future__ import annotations

import pandas as pd

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared
from causewatch.daemon.store.views import MANTISSAS, NAMES, samples_filter


def samples_per_metric(con: Cursor) -> dict[str, int]:
    return dict(con.execute("SELECT metric, count(*) FROM samples GROUP BY metric ORDER BY metric").fetchall())


def samples_df(con: Cursor, metrics: list[str] | None = None, scope: str | None = None,
               limit: int | None = None) -> pd.DataFrame:
    """Stored samples in their long form (node, ts, scope, metric, value), oldest first (rows of one
    time by node, scope and metric: the order they were stored in is not kept), the first `limit`
    (all: None)."""
    where, params = samples_filter(metrics, scope)
    return con.execute(f"SELECT node, ts, scope, metric, value FROM samples WHERE {where} "
                       "ORDER BY ts, node, scope, metric LIMIT ?", [*params, limit]).df()


def samples_minute(con: Cursor, since: float | None = None, until: float | None = None) -> pd.DataFrame:
    """Per-minute aggregates (node, scope, metric, minute, count, mean, min, max) with since <= minute
    < until, oldest first."""
    where, params = shared.where(since, until, None, "minute")
    return con.execute(f"SELECT * FROM samples_minute WHERE {where} ORDER BY minute, node, scope, metric",
                       params).df()


def rollup_bounds(con: Cursor) -> tuple[float | None, float | None]:
    """(oldest raw sample ts, end of the newest aggregated minute): where a roll-up resumes. Read off the
    base tables and the lake's catalog (store.retention rolls up `samples_raw`: both), in seconds as the
    views show them."""
    lo = con.execute("SELECT least((SELECT min(ts) FROM samples_hot), (SELECT min(ts_min) FROM lake_files)) / 1000"
                     ).fetchone()[0]
    end = con.execute("SELECT max(minute) / 1000 + 60 FROM samples_minute_agg").fetchone()[0]
    return lo, end


def tiers(con: Cursor) -> dict[str, float]:
    """How the samples are split: values hot (DuckDB) and cold (the lake's listed files), the lake's
    files and bytes, and the cold bytes per value."""
    hot = con.execute("SELECT count(*) FROM samples_hot").fetchone()[0]
    files, cold, nbytes = con.execute("SELECT count(*), coalesce(sum(rows), 0), coalesce(sum(bytes), 0) "
                                      "FROM lake_files").fetchone()
    return {"hot_values": hot, "cold_values": cold, "cold_files": files, "cold_bytes": nbytes,
            "cold_bytes_per_value": nbytes / cold if cold else None}


def lake_days_to_merge(con: Cursor, before: str) -> list[tuple[str, list[tuple[str, int]]]]:
    """The lake's days before `before` (YYYY-MM-DD: no regular move adds to them) that have more than
    one file or a file of an older layout than the newest (a merge writes the newest), oldest first,
    each with its files as (path, layout)."""
    return [(day, list(zip(paths, layouts))) for day, paths, layouts in con.execute(
        "SELECT day::VARCHAR, list(path ORDER BY path), list(layout ORDER BY path) FROM lake_files "
        "WHERE day < ?::DATE GROUP BY day HAVING count(*) > 1 OR min(layout) < ? ORDER BY day",
        [before, MANTISSAS]).fetchall()]


def series_to_name(con: Cursor, files: list[str]):
    """The store's series (series_id, node, scope, metric, as Arrow) when any of the lake's `files` is
    of the first layout (names only), which a merge gives ids from; else None."""
    if not con.execute("SELECT count(*) FROM lake_files WHERE list_contains(?, path) AND layout = ?",
                       [files, NAMES]).fetchall()[0][0]:
        return None
    return con.sql("SELECT series_id, node, scope, metric FROM series").to_arrow_table()


def series_between(con: Cursor, start: float, end: float, metrics: list[str], patterns: list[str] = (),
                   nodes: list[str] | None = None, limit: int = 1_000_000) -> pd.DataFrame:
    """The raw samples (node, scope, metric, ts, value) with start <= ts <= end (seconds) of the metrics
    named in `metrics` or LIKE one of `patterns` (a labelled series: `node_cpu_seconds_total.%`), of
    `nodes` (all: None), by series and time; the first `limit`. The hot rows are found through their
    series ids, the lake's too, both under their ms bounds."""
    lo, hi = int(start * 1000), int(end * 1000) + 1
    names = ("(list_contains(?::VARCHAR[], metric) OR "
             "len(list_filter(?::VARCHAR[], lambda p: metric LIKE p)) > 0)")
    of_nodes = "(?::VARCHAR[] IS NULL OR list_contains(?::VARCHAR[], node))"
    picked = [list(metrics), list(patterns), nodes, nodes]
    sql = f"""WITH sel AS (SELECT series_id, node, scope, metric FROM series WHERE {names} AND {of_nodes})
        SELECT s.node, s.scope, s.metric, h.ts / 1000 AS ts, h.value FROM samples_hot h JOIN sel s USING (series_id)
        WHERE h.ts BETWEEN ? AND ?
        UNION ALL
        SELECT s.node, s.scope, s.metric, c.ts / 1000 AS ts, c.value FROM samples_cold c JOIN sel s USING (series_id)
        WHERE c.ts BETWEEN ? AND ?
        ORDER BY node, scope, metric, ts LIMIT ?"""
    return shared.fetch(con, sql, [*picked, lo, hi, lo, hi, limit])


def sampled_nodes(con: Cursor) -> list[str]:
    """The nodes whose agents have sent node samples, by name."""
    return [r[0] for r in con.execute("SELECT DISTINCT node FROM series WHERE scope = 'node' ORDER BY node").fetchall()]
