"""The store's outward tables as views over its base tables, made in one place at every open.

Readers (verbs, routes, analyses, PERFQL) name `samples`, `samples_minute` and `bbv` with the columns
they always had; the base tables under them key each row by an integer id (`series`, `bbv_keys`) and
keep times of samples as integer milliseconds. The views are not migrations: `create_views` runs at
each `Store` open (CREATE OR REPLACE), so what they read may depend on where the store is opened.
"""

from __future__ import annotations

import duckdb

# Every view create_views makes (schema.TABLES lists them after the base tables).
VIEWS = ("samples", "samples_minute", "bbv")

# samples_hot.ts and samples_minute_agg.minute are integer ms; `/ 1000` (BIGINT / INTEGER) is DOUBLE
# division, correctly rounded: the seconds a sender wrote to the millisecond come back as that double.
_SAMPLES = """CREATE OR REPLACE VIEW samples AS
    SELECT s.node, h.ts / 1000 AS ts, s.scope, s.metric, h.value
    FROM samples_hot h JOIN series s USING (series_id)"""
_SAMPLES_MINUTE = """CREATE OR REPLACE VIEW samples_minute AS
    SELECT s.node, s.scope, s.metric, a.minute / 1000 AS minute, a.count, a.mean, a.min, a.max
    FROM samples_minute_agg a JOIN series s USING (series_id)"""
_BBV = """CREATE OR REPLACE VIEW bbv AS
    SELECT v.node, v.boot, v.seq, v.target, v.kind, v.t_start, v.t_end, k.key, c.count, v.pid, v.lost
    FROM bbv_counts c JOIN bbv_vectors v USING (vector_id) JOIN bbv_keys k USING (key_id)"""


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every view of VIEWS over the migrated base tables."""
    for sql in (_SAMPLES, _SAMPLES_MINUTE, _BBV):
        con.execute(sql)
