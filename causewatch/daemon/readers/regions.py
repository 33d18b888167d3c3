"""Region summaries, one row per (node, app, region, source) from the instrumented `regions` and
the sampled `bbv` functions, and PERFQL over them (bottlenecks and the fuzzy job read them too)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from causewatch.analytics.fuzzy.summaries import BASE_METRICS, KEYS, metric_name
from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared

# Counters that are already ratios or rates are averaged (weighted by duration), the rest summed.
_RATIO = re.compile(r"(_ratio|_share|_rate|_per_second)$|^(ipc|cpi)$")


def _regions(con: Cursor, since, until, nodes_, metrics) -> pd.DataFrame:
    where, params = shared.where(since, until, nodes_, "t_start")
    keys = shared.json_keys(con, "regions", "counters", where, params)
    if metrics is not None:   # compared as metric names, case-insensitively: a misspelt one is missing
        wanted = {m.lower() for m in metrics}
        keys = [k for k in keys if metric_name(k).lower() in wanted]
    # Keys that name the same metric (cache-misses, cache_misses): the first in sorted order is kept.
    keys = list({metric_name(k): k for k in reversed(keys)}.values())[::-1]
    # One JSON parse per row for all the counters wanted (a list of pointers, bound), not one per key.
    extract = ", json_extract_string(counters, ?::VARCHAR[]) AS c" if keys else ""
    counters = "".join(_counter_sql(k, i + 1) for i, k in enumerate(keys))
    # The program's span per (node, app) is a small second aggregate joined back: cheaper than a window.
    sql = f"""
        WITH r AS (SELECT node, app, region, t_start, duration, calls, cpu_seconds, extra {extract}
                   FROM regions WHERE {where}),
        agg AS (SELECT node, app, region, 'region' AS source,
                       any_value(json_extract_string(extra, '$.parent')) AS parent, sum(duration) AS duration,
                       sum(calls)::DOUBLE AS calls, sum(cpu_seconds) AS cpu_seconds {counters}
                FROM r GROUP BY node, app, region),
        p AS (SELECT node, app, max(t_start + duration) - min(t_start) AS span FROM r GROUP BY node, app)
        SELECT agg.*, agg.duration / nullif(p.span, 0) AS time_share FROM agg JOIN p USING (node, app)"""
    df = shared.fetch(con, sql, ([[shared.json_pointer(k) for k in keys]] if keys else []) + params)
    return df.rename(columns={f"c{i + 1}": metric_name(k) for i, k in enumerate(keys)})


def _counter_sql(key: str, i: int) -> str:
    """The aggregate of counter i (a positional column c{i}, renamed after the query)."""
    value = f"TRY_CAST(c[{i}] AS DOUBLE)"
    if _RATIO.search(key):
        return (f", sum({value} * duration) / nullif(sum(CASE WHEN {value} IS NULL THEN 0 ELSE duration END), 0)"
                f" AS c{i}")
    return f", sum({value}) AS c{i}"


def _bbv(con: Cursor, since, until, nodes_) -> pd.DataFrame:
    where, params = shared.where(since, until, nodes_, "t_start")
    sql = f"""
        WITH b AS (SELECT * FROM bbv WHERE {where}),
        v AS (SELECT node, boot, seq, any_value(target) AS target, any_value(kind) AS kind,
                     any_value(t_end - t_start) AS span, sum(count) AS total
              FROM b GROUP BY node, boot, seq),
        f AS (SELECT b.node, v.target, v.kind, b.key, sum(b.count)::DOUBLE AS samples,
                     sum(b.count / v.total * v.span) AS duration
              FROM b JOIN v USING (node, boot, seq) GROUP BY ALL),
        t AS (SELECT node, target, kind, sum(span) AS total_time, sum(total) AS total_samples
              FROM v GROUP BY ALL)
        SELECT f.node, f.target AS app, f.key AS region, 'bbv' AS source, f.duration, f.samples,
               coalesce(f.duration / nullif(t.total_time, 0), f.samples / t.total_samples) AS time_share
        FROM f JOIN t USING (node, target, kind)"""
    return shared.fetch(con, sql, params)


def region_summaries(con: Cursor, since: float | None = None, until: float | None = None,
                     nodes: list[str] | None = None, metrics=None) -> pd.DataFrame:
    """One row per (node, app, region, source) over records starting in [since, until), instrumented
    regions first, in no particular order otherwise.

    Columns: node, app, region, source ('region' or 'bbv'), parent (instrumented regions whose extra
    names one), duration, calls, cpu_seconds, samples, time_share and one column per counter key of
    the regions' counters JSON (names made identifier-safe by metric_name). `metrics` limits the
    counter columns to those names (what a query needs); None means every key found in the window.
    A metric a row does not have is NaN.
    """
    parts = [_regions(con, since, until, nodes, metrics), _bbv(con, since, until, nodes)]
    df = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    for col in BASE_METRICS:
        if col not in df:
            df[col] = np.nan
    numeric = [c for c in df.columns if c not in KEYS and c != "parent"]
    df[numeric] = df[numeric].astype(float)
    return df


def perfql_matches(con: Cursor, query, since: float | None = None, until: float | None = None,
                   nodes: list[str] | None = None, min_degree: float = 0.0, top: int | None = None) -> pd.DataFrame:
    """A parsed PERFQL `query` (analytics.fuzzy.perfql.Query) over the region summaries it needs."""
    df = region_summaries(con, since, until, nodes, metrics=query.required_metrics())
    return query.evaluate(df, min_degree, top)


def region_rows(con: Cursor, app: str, start: float, end: float, limit: int = 200_000) -> pd.DataFrame:
    """The instrumented region records of `app` started in [start, end] (node, region, t_start, duration,
    calls, cpu_seconds), oldest first, the first `limit`."""
    return shared.fetch(con, "SELECT node, region, t_start, duration, calls::DOUBLE AS calls, cpu_seconds FROM regions "
                             "WHERE app = ? AND t_start BETWEEN ? AND ? ORDER BY t_start LIMIT ?",
                        [app, start, end, limit])


def region_spans(con: Cursor, app: str, start: float, end: float) -> pd.DataFrame:
    """The instrumented region records of `app` started in [start, end] with where they ran (node, boot,
    pid, thread: as a task's record names it) and their span (t_start, duration), oldest first."""
    return shared.fetch(con, "SELECT node, boot, extra->>'pid' AS pid, extra->>'thread' AS thread, region, t_start, "
                             "duration FROM regions WHERE app = ? AND t_start BETWEEN ? AND ? ORDER BY t_start",
                        [app, start, end])
