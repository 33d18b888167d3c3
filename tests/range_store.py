"""A real store for the range questions' tests: two metrics of each node, 600 s of samples a second from
T0 (ms), the first 300 s moved to the lake, so every answer joins hot and lake rows."""

from __future__ import annotations

import functools

from causewatch.daemon import store

T0 = 1_700_000_000_000


def hot_and_lake_store(path, nodes=("n0", "n1", "n2"), ts_sql: str = "0", value_sql: str = "k") -> store.Store:
    """ts_sql: ms added to each second's time; value_sql: each sample's value, over the columns node, metric
    and k (the second)."""
    s = store.Store(str(path))
    s.con.execute("INSERT INTO series SELECT row_number() OVER (ORDER BY n, m), n, 'node', 'm' || m "
                  "FROM unnest(?) a(n), range(2) b(m)", [list(nodes)])
    s.con.execute(f"INSERT INTO samples_hot SELECT series_id, {T0} + k * 1000 + ({ts_sql}), {value_sql} "
                  "FROM series, range(600) t(k)")
    s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=T0 + 300_000))
    return s
