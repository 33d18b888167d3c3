"""Region summaries built in DuckDB from instrumented regions and sampled BBV functions (a function's
share of an interval's samples is its share of the interval's time); one frame for PERFQL and bottlenecks."""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

KEYS = ["node", "app", "region", "source"]
BASE_METRICS = ["duration", "calls", "cpu_seconds", "samples", "time_share"]
# Counters that are already ratios or rates are averaged (weighted by duration), the rest summed.
_RATIO = re.compile(r"(_ratio|_share|_rate|_per_second)$|^(ipc|cpi)$")


def metric_name(key: str) -> str:
    """A counter key as a metric (column) name: anything but letters, digits and _ becomes _."""
    return re.sub(r"\W", "_", key)


def _where(since, until, nodes, time_col: str) -> tuple[str, list]:
    clauses, params = ["TRUE"], []
    if since is not None:
        clauses.append(f"{time_col} >= ?")
        params.append(float(since))
    if until is not None:
        clauses.append(f"{time_col} < ?")
        params.append(float(until))
    if nodes:
        clauses.append(f"node IN ({', '.join('?' * len(nodes))})")
        params += list(nodes)
    return " AND ".join(clauses), params


def _counter_keys(con, where: str, params: list, metrics) -> list[str]:
    """Counter keys present in the window, those named in `metrics` only (compared as metric names,
    case-insensitively), so that a misspelt metric is missing rather than a column of nulls."""
    rows = con.execute(f"SELECT DISTINCT unnest(json_keys(counters)) FROM regions WHERE counters IS NOT NULL "
                       f"AND {where}", params).fetchall()
    keys = sorted(r[0] for r in rows)
    if metrics is None:
        return keys
    wanted = {m.lower() for m in metrics}
    return [k for k in keys if metric_name(k).lower() in wanted]


def _strings_as_arrow(t: pa.DataType):
    return pd.ArrowDtype(t) if pa.types.is_string(t) or pa.types.is_large_string(t) else None


def _fetch(con, sql: str, params: list) -> pd.DataFrame:
    """A query's rows as a DataFrame whose text columns stay Arrow strings: a million region names
    as Python str objects would cost more than the whole aggregation."""
    return con.sql(sql, params=params).to_arrow_table().to_pandas(types_mapper=_strings_as_arrow)


def _counter_sql(key: str, i: int) -> str:
    value = f"TRY_CAST(c[{i}] AS DOUBLE)"
    name = '"' + metric_name(key) + '"'
    if _RATIO.search(key):
        return f"sum({value} * duration) / nullif(sum(CASE WHEN {value} IS NULL THEN 0 ELSE duration END), 0) AS {name}"
    return f"sum({value}) AS {name}"


def _regions(con, since, until, nodes, metrics) -> pd.DataFrame:
    where, params = _where(since, until, nodes, "t_start")
    keys = _counter_keys(con, where, params, metrics)
    # One JSON parse per row for all the counters wanted (a list of paths), not one per key.
    paths = ", ".join("'$.\"" + k.replace("'", "''").replace('"', "") + "\"'" for k in keys)
    extract = f", json_extract_string(counters, [{paths}]) AS c" if keys else ""
    counters = "".join(", " + _counter_sql(k, i + 1) for i, k in enumerate(keys))
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
    return _fetch(con, sql, params)


def _bbv(con, since, until, nodes) -> pd.DataFrame:
    where, params = _where(since, until, nodes, "t_start")
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
    return _fetch(con, sql, params)


def region_summaries(con: duckdb.DuckDBPyConnection, since: float | None = None, until: float | None = None,
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
    frame = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    for col in BASE_METRICS:
        if col not in frame:
            frame[col] = np.nan
    numeric = [c for c in frame.columns if c not in KEYS and c != "parent"]
    frame[numeric] = frame[numeric].astype(float)
    return frame
