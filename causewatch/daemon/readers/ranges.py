"""Range questions (daemon/rangeq.py) answered in one DuckDB query over the hot rows and the lake.

Each side is reduced where it lies before anything meets: the hot rows by series id (the names joined
after, on a few rows), the lake's rows under ms bounds and name filters that prune its row groups; each
side gives per (series, slice) partials (a slice: the step, or for a longer window the largest divisor
of both) (sum, count, min, max, the newest time and its value), joined
across the sides (a slice may straddle them), spread over the points whose windows hold them, finished into the
function's value, then aggregated across series. Points are at start + k * step (k from 0), each over
the rows with t - window < ts <= t (ms).
"""

from __future__ import annotations

import pyarrow as pa

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.rangeq import NEEDS, PARTS, Question

# a partial of raw rows, and the same joined over partials
_RAW = {"p_sum": "sum(value)", "p_count": "count(value)::DOUBLE", "p_min": "min(value)", "p_max": "max(value)",
        "p_last_t": "max(ts)", "p_last": "arg_max(value, ts)"}
_JOINED = {"p_sum": "sum(p_sum)", "p_count": "sum(p_count)::DOUBLE", "p_min": "min(p_min)", "p_max": "max(p_max)",
           "p_last_t": "max(p_last_t)", "p_last": "arg_max(p_last, p_last_t)"}
_NULL = {"p_last_t": "NULL::BIGINT"}
_FINISH = {"avg": "p_sum / p_count", "sum": "p_sum", "count": "p_count", "min": "p_min", "max": "p_max",
           "last": "p_last"}
# across series: the finished values `v` aggregated, or their partials for a cluster to join
_ACROSS = {"avg": "avg(v)", "sum": "sum(v)", "count": "count(v)::DOUBLE", "min": "min(v)", "max": "max(v)"}
_ACROSS_PARTS = {"p_sum": "sum(v)", "p_count": "count(v)::DOUBLE", "p_min": "min(v)", "p_max": "max(v)"}
_TEST = {"=": "{} = ?", "!=": "{} <> ?", "=~": "regexp_full_match({}, ?)", "!~": "NOT regexp_full_match({}, ?)"}


def _parts(exprs: dict, needed: tuple[str, ...]) -> str:
    return ", ".join(f"{exprs[c] if c in needed else _NULL.get(c, 'NULL::DOUBLE')} AS {c}" for c in PARTS)


def _matching(q: Question) -> tuple[str, list]:
    tests = [_TEST[op].format(label) for label, op, _ in q.matchers]   # labels checked: rangeq.LABELS
    return " AND ".join(["TRUE", *tests]), [v for *_, v in q.matchers]


def answer(con: Cursor, q: Question, partial: bool = False) -> pa.Table:
    """The answer to `q` (labels, t in seconds, value), sorted by them; `partial`: its PARTS in place of
    the value, for a cluster to join (rangeq.join_partials)."""
    sql, params = _sql(q, partial)
    return con.sql(sql, params=params).to_arrow_table()


def _sql(q: Question, partial: bool) -> tuple[str, list]:
    match, match_params = _matching(q)
    needed = NEEDS[q.fn]
    g, m, r = q.grain, q.spans, q.step // q.grain
    # slice k holds (start + (k - 1) * g, start + k * g]; `//` truncates, so it divides positive numbers only
    k = f"((ts - {q.start - (m + 2) * g} - 1) // {g} - {m + 1})"
    rows = f"ts > {q.start - q.window} AND ts <= {q.end}"
    if q.window < q.step:                       # only the window's end of each step
        rows += f" AND {q.start} + {k} * {g} - ts < {q.window}"
    last = (q.end - q.start) // q.step
    spread = f", range({m}) w(j)" if m > 1 else ""
    at = f"(k + j) // {r}" if m > 1 else "k"     # the point a slice counts at (each window's m slices)
    keep = f"(k + j) % {r} = 0 AND {at} BETWEEN 0 AND {last}" if m > 1 else f"k BETWEEN 0 AND {last}"
    sql = f"""WITH sel AS (SELECT series_id, node, scope, metric FROM series WHERE {match}),
hot AS (SELECT series_id, {k} AS k, {_parts(_RAW, needed)} FROM samples_hot
        WHERE {rows} AND series_id IN (SELECT series_id FROM sel) GROUP BY ALL),
parts AS (SELECT s.node, s.scope, s.metric, h.k, {', '.join('h.' + c for c in PARTS)}
          FROM hot h JOIN sel s USING (series_id)
          UNION ALL
          SELECT node, scope, metric, {k} AS k, {_parts(_RAW, needed)} FROM samples_cold
          WHERE {rows} AND {match} GROUP BY ALL),
joined AS (SELECT node, scope, metric, {at} AS k, {_parts(_JOINED, needed)} FROM parts{spread}
           WHERE {keep} GROUP BY ALL)"""
    t = f"({q.start} + k * {q.step}) / 1000 AS t"
    if q.agg is None:
        labels = "node, scope, metric"
        tail = ", ".join(PARTS) if partial else f"{_FINISH[q.fn]} AS value"
        sql += f"\nSELECT {labels}, {t}, {tail} FROM joined ORDER BY {labels}, k"
    else:
        labels = ", ".join(q.by)
        keys = f"{labels}, k" if q.by else "k"
        across = (_parts(_ACROSS_PARTS, NEEDS[q.agg]) if partial else f"{_ACROSS[q.agg]} AS value")
        sql += f""",
finished AS (SELECT node, scope, metric, k, {_FINISH[q.fn]} AS v FROM joined)
SELECT {labels + ', ' if q.by else ''}{t}, {across} FROM finished GROUP BY {keys} ORDER BY {keys}"""
    return sql, match_params * 2
