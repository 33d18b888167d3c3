"""Reads of a real DuckDB store: region summaries (instrumented regions and sampled BBV functions),
PERFQL over them, and agent-supplied keys that are hostile to SQL and JSON paths."""

import json

import duckdb
import numpy as np
import pytest
from support import bbv_frames

from causewatch.analytics.fuzzy import Membership, PerfQLError, Query, TermSet
from causewatch.analytics.fuzzy.summaries import metric_name
from causewatch.daemon.readers.regions import perfql_matches, region_summaries
from causewatch.daemon.store import Store


@pytest.fixture
def con(tmp_path):
    store = Store(str(tmp_path / "store.duckdb"))
    con = store.con
    regions = [  # node, seq, app, region, t_start, duration, calls, cpu, counters, extra
        ("n1", 1, "pic", "main", 100.0, 10.0, 1, 9.0, {"cache_misses": 20, "cache-references": 100, "cpi": 1.0}, None),
        ("n1", 2, "pic", "solve", 101.0, 4.0, 2, 3.0, {"cache_misses": 10, "cache-references": 50, "cpi": 2.0},
         {"parent": "main"}),
        ("n1", 3, "pic", "solve", 106.0, 2.0, 1, 2.0, {"cache_misses": 5, "cache-references": 50, "cpi": 0.5},
         {"parent": "main"}),
        ("n2", 1, "pic", "main", 500.0, 5.0, 1, None, None, None),
    ]
    con.executemany("INSERT INTO regions VALUES (?, 'b', ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                    [(n, s, a, r, t, d, c, cpu, json.dumps(k) if k else None, json.dumps(e) if e else None)
                     for n, s, a, r, t, d, c, cpu, k, e in regions])
    bbv = [  # two 2-second intervals of target pic on n1: f has 3/4 then 1/2 of the samples
        ("n1", 10, 100.0, 102.0, "f", 3), ("n1", 10, 100.0, 102.0, "g", 1),
        ("n1", 11, 102.0, 104.0, "f", 1), ("n1", 11, 102.0, 104.0, "g", 1),
    ]
    store.commit_frames(bbv_frames([(n, "b", s, "pic", "native", t0, t1, k, c) for n, s, t0, t1, k, c in bbv]))
    yield con
    store.close()


def opened(path) -> duckdb.DuckDBPyConnection:
    """A connection to a store the daemon made: migrated, its views there."""
    Store(str(path)).close()
    return duckdb.connect(str(path))


def _row(df, node, region, source):
    sel = df[(df.node == node) & (df.region == region) & (df.source == source)]
    assert len(sel) == 1
    return sel.iloc[0]


def test_instrumented_regions_are_summed_per_node_and_region(con):
    f = region_summaries(con)
    solve = _row(f, "n1", "solve", "region")
    assert (solve.duration, solve.calls, solve.cpu_seconds) == (6.0, 3.0, 5.0)
    assert solve.cache_misses == 15 and solve.cache_references == 100   # '-' becomes '_'
    assert solve.cpi == pytest.approx((2.0 * 4 + 0.5 * 2) / 6)            # ratios: duration-weighted mean
    assert solve.parent == "main"
    assert solve.time_share == pytest.approx(6.0 / 10.0)                  # program n1/pic spans 100..110
    assert _row(f, "n2", "main", "region").time_share == 1.0
    assert np.isnan(_row(f, "n2", "main", "region").cpu_seconds)


def test_bbv_share_of_samples_is_share_of_time(con):
    f = region_summaries(con)
    fn, gn = _row(f, "n1", "f", "bbv"), _row(f, "n1", "g", "bbv")
    assert fn.duration == pytest.approx(0.75 * 2 + 0.5 * 2) and gn.duration == pytest.approx(0.25 * 2 + 0.5 * 2)
    assert fn.time_share == pytest.approx(2.5 / 4) and fn.samples == 4
    assert fn.app == "pic" and np.isnan(fn.cache_misses)


def test_window_nodes_and_metric_selection(con):
    f = region_summaries(con, since=101.0, until=200.0, nodes=["n1"], metrics={"cache_misses", "time_share"})
    assert sorted(zip(f.region, f.source)) == [("f", "bbv"), ("g", "bbv"), ("solve", "region")]
    assert "cpi" not in f.columns and "cache_misses" in f.columns
    assert _row(f, "n1", "f", "bbv").duration == pytest.approx(1.0)     # only the interval from 102


def test_empty_store(tmp_path):
    con = opened(tmp_path / "empty.duckdb")
    f = region_summaries(con)
    assert len(f) == 0 and {"node", "app", "region", "source", "duration", "time_share"} <= set(f.columns)


def test_metric_name():
    assert metric_name("cache-misses") == "cache_misses" and metric_name("L2_TCM") == "L2_TCM"


TERMS = {"ratio": TermSet("ratio", {"low": Membership("z", (0.2, 0.4)), "high": Membership("s", (0.5, 0.9))},
                          expr="a / b")}


def _store(path):
    con = opened(path)
    rows = [("n1", i, "app", f"r{i}", float(i), 1.0 + i, json.dumps({"a": i, "b": 10})) for i in range(10)]
    con.executemany("INSERT INTO regions VALUES (?, 'b', ?, ?, ?, ?, ?, 1, NULL, ?, NULL, NULL)", rows)
    return con


def test_perfql_against_duckdb(tmp_path):
    con = _store(tmp_path / "s.duckdb")
    duration = TermSet("duration", {"long": Membership("linear", (0, 10))})
    got = perfql_matches(con, Query("(ratio is high) AND (duration is long)", {**TERMS, "duration": duration}))
    # a/b = i/10 is high from 0.5; duration 1+i is long in proportion.
    assert got.region.tolist() == ["r9", "r8", "r7", "r6"]
    assert got.degree.iloc[0] == pytest.approx(1.0)


def test_misspelt_metric_in_a_store_is_an_error_and_an_empty_store_matches_nothing(tmp_path):
    con = _store(tmp_path / "s.duckdb")
    with pytest.raises(PerfQLError, match="found 'c'"):
        perfql_matches(con, Query("(a / c is high)", TERMS))
    con.execute("DELETE FROM regions")
    assert len(perfql_matches(con, Query("(a / c is high)", TERMS))) == 0


def test_region_counters_with_keys_hostile_to_sql_and_json_paths(tmp_path):
    con = opened(tmp_path / "s.duckdb")
    keys = ["x\\", "*", 'a"b', "it's", "a/b", "~1", "$", "cache-misses", "cache_misses"]
    counters = json.dumps({k: i + 1 for i, k in enumerate(keys)})
    con.execute("INSERT INTO regions VALUES ('n', 'b', 1, 'app', 'r', 1.0, 2.0, 1, NULL, ?, NULL, NULL)", [counters])
    f = region_summaries(con)
    row = f.iloc[0]
    assert row["x_"] == 1 and row["it_s"] == 4 and row["_1"] == 6
    assert row["a_b"] == 3 and row["_"] == 7       # the same name: a"b before a/b, $ before * (sorted keys)
    assert row["cache_misses"] == 8                                     # cache-misses sorts before cache_misses
    assert len(set(f.columns)) == len(f.columns)
    assert perfql_matches(con, Query("(cache_misses is high)", {"cache_misses": TermSet(
        "cache_misses", {"high": Membership("s", (0.0, 1.0))})})).region.tolist() == ["r"]
