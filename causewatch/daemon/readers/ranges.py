"""Range questions (daemon/rangeq.py) answered where the samples are: a few small queries, then the
answer finished from their rows (daemon/rangefinish.py).

1. The hot rows of the matchers' series under integer ms bounds, reduced into partials per (series,
   slice) (a slice: the step, or for a longer window the largest divisor of both): count, and sum,
   min, max or the newest time and its value as the function needs, each with its series' names; in
   the same query (one snapshot) the lake's files whose bounds meet the question's.
2. Those files' rows of the same series, reduced alike: a Parquet file is never rewritten in place (a
   merge or a move writes a new one), so the partials of a question over a list of files never change,
   and the last few are kept (COLD_CACHE_BYTES): a dashboard asking again reads no file.
A slice may straddle hot and cold: its two partials are joined with the rest. Points are at start + k *
step (k from 0), each over the rows with t - window < ts <= t (ms).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from causewatch.daemon import rangefinish
from causewatch.daemon.cursor import Cursor
from causewatch.daemon.rangeq import LABELS, Question
from causewatch.daemon.store.views import LAYOUTS, NAMES, value_of

_TEST = {"=": "{} = ?", "!=": "{} <> ?", "=~": "regexp_full_match({}, ?)", "!~": "NOT regexp_full_match({}, ?)"}
# the partials of a slice's raw rows: what each function needs, count always (an empty slice is one of nulls)
_PARTS = {"p_sum": "sum(value)", "p_min": "min(value)", "p_max": "max(value)", "p_last_t": "max(ts)",
          "p_last": "arg_max(value, ts)"}
_KINDS = {"p_sum": "DOUBLE", "p_min": "DOUBLE", "p_max": "DOUBLE", "p_last_t": "BIGINT", "p_last": "DOUBLE"}
_NEEDS = {"avg": ("p_sum",), "sum": ("p_sum",), "count": (), "min": ("p_min",), "max": ("p_max",),
          "last": ("p_last_t", "p_last")}
COLD_CACHE_BYTES = 32 * 2**20   # the lake's partials kept, at most (the API worker's, a process's own)


class Cache:
    """The newest answers by key, up to `max_bytes` of Arrow tables (the oldest used go first)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.tables: OrderedDict = OrderedDict()
        self.bytes = 0

    def get(self, key) -> pa.Table | None:
        table = self.tables.get(key)
        if table is not None:
            self.tables.move_to_end(key)
        return table

    def put(self, key, table: pa.Table) -> None:
        if key in self.tables or table.nbytes > self.max_bytes:
            return
        self.tables[key] = table
        self.bytes += table.nbytes
        while self.bytes > self.max_bytes:
            _, old = self.tables.popitem(last=False)
            self.bytes -= old.nbytes


COLD = Cache(COLD_CACHE_BYTES)


def matching(matchers) -> tuple[str, list]:
    """The WHERE clause over series' labels (checked: rangeq.LABELS) and its parameters."""
    tests = [_TEST[op].format(label) for label, op, _ in matchers]
    return " AND ".join(["TRUE", *tests]), [v for *_, v in matchers]


class _Reduction:
    """The SQL that reduces a question's rows of its series into partials per (series, slice)."""

    def __init__(self, q: Question):
        self.q = q

    def slice(self) -> str:
        q, g, m = self.q, self.q.grain, self.q.spans
        # slice k holds (start + (k - 1) * g, start + k * g]; `//` truncates: it divides positive numbers only
        return f"((ts - {q.start - (m + 2) * g} - 1) // {g} - {m + 1})"

    def rows(self) -> str:
        q = self.q
        rows = f"ts > {q.start - q.window} AND ts <= {q.end}"
        if q.window < q.step:                       # only the window's end of each step
            rows += f" AND {q.start} + {self.slice()} * {q.grain} - ts < {q.window}"
        return rows

    def chosen(self, column: str = "series_id") -> tuple[str, list]:
        where, params = matching(self.q.matchers)
        return f"{column} IN (SELECT series_id FROM series WHERE {where})", params

    def parts(self) -> str:
        return ", ".join(["count(value)::DOUBLE AS p_count", *(f"{_PARTS[c]} AS {c}" for c in _NEEDS[self.q.fn])])

    def nulls(self) -> str:
        return ", ".join(["NULL::DOUBLE AS p_count", *(f"NULL::{_KINDS[c]} AS {c}" for c in _NEEDS[self.q.fn])])

    def reduced(self, source: str) -> str:
        """`source` (rows: series_id, ts, value) reduced: series_id, k, the partials, the series' names."""
        return f"""SELECT r.*, s.node, s.scope, s.metric FROM (SELECT series_id, {self.slice()} AS k, {self.parts()}
            FROM ({source}) GROUP BY ALL) r JOIN series s USING (series_id)"""


def _hot_and_files(con: Cursor, r: _Reduction) -> tuple[pa.Table, list[tuple[str, int]]]:
    """The hot rows' partials, and the lake files [(path, layout)] whose bounds meet the question's,
    from one snapshot."""
    q = r.q
    chosen, params = r.chosen()
    hot = r.reduced(f"SELECT series_id, ts, value FROM samples_hot WHERE {chosen} AND {r.rows()}")
    sql = f"""SELECT *, NULL::VARCHAR AS file, NULL::INTEGER AS layout FROM ({hot})
        UNION ALL SELECT NULL::INTEGER, NULL::BIGINT, {r.nulls()}, NULL, NULL, NULL, file, layout FROM lake_paths
        WHERE ts_max > {q.start - q.window} AND ts_min <= {q.end}"""
    table = con.sql(sql, params=params).to_arrow_table()
    listed = pc.is_valid(table["file"])
    files = table.filter(listed).select(["file", "layout"]).to_pylist()
    return table.filter(pc.invert(listed)).drop_columns(["file", "layout"]), [(f["file"], f["layout"]) for f in files]


def _quoted(files: list[str]) -> str:
    return "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"


def _cold(con: Cursor, r: _Reduction, files: list[tuple[str, int]]) -> pa.Table:
    """The partials of the lake files' rows, each layout's files read by its own columns (the first's by
    their names)."""
    sources, params = [], []
    for layout in LAYOUTS:
        paths = [f for f, of in files if of == layout]
        if not paths:
            continue
        if layout == NAMES:
            chosen, more = r.chosen("s.series_id")
            sources.append(f"""SELECT s.series_id, c.ts, c.value FROM read_parquet({_quoted(paths)}) c
                JOIN series s USING (node, scope, metric) WHERE {chosen} AND {r.rows()}""")
        else:
            chosen, more = r.chosen()
            sources.append(f"SELECT series_id, ts, {value_of(layout)} AS value FROM read_parquet({_quoted(paths)}) "
                           f"WHERE {chosen} AND {r.rows()}")
        params += more
    sql = r.reduced(" UNION ALL ".join(sources))
    key = (sql, tuple(params))
    table = COLD.get(key)
    if table is None:
        table = con.sql(sql, params=params).to_arrow_table()
        COLD.put(key, table)
    return table


def partials(con: Cursor, q: Question) -> pa.Table:
    """(series_id, k, p_count and the partials q.fn needs, node, scope, metric) of the rows of the
    series q's matchers select under q's bounds, hot and cold."""
    r = _Reduction(q)
    hot, files = _hot_and_files(con, r)
    if not files:
        return hot
    return pa.concat_tables([hot, _cold(con, r, files).cast(hot.schema)])


def answer(con: Cursor, q: Question, partial: bool = False) -> pa.Table:
    """The answer to `q` (labels, t in seconds, value), sorted by them; `partial`: its PARTS in place of
    the value, for a cluster to join (rangeq.join_partials)."""
    parts = partials(con, q)
    first = np.unique(parts["series_id"].to_numpy(), return_index=True)[1]
    return rangefinish.finish(q, parts.select(["series_id", *LABELS]).take(pa.array(first)), parts, partial)
