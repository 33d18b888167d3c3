"""Range questions (/api/range, /api/v1/query_range) on a real store with hot and lake rows: each answer
equals pandas' over the same rows, a cluster's join of shards' partials equals the whole store's answer,
and bad questions are refused naming what was wrong, in Prometheus' shape for its endpoint."""

import json

import numpy as np
import pandas as pd
import pytest
from range_store import T0, hot_and_lake_store

from causewatch.daemon import cluster, rangeq, readers, routes, store, verbs

START, END, STEP = T0 / 1000 + 100.5, T0 / 1000 + 550, 60
KEYS = ["node", "scope", "metric"]


def _store(path, nodes=("n0", "n1", "n2")) -> store.Store:
    """Jittered samples."""
    return hot_and_lake_store(path, nodes, ts_sql="hash(node, metric, k) % 700",
                              value_sql="(hash(k, node, metric) % 1000) / 10.0")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    s = _store(tmp_path_factory.mktemp("ranges") / "x.duckdb")
    yield s
    s.close()


def _pandas(df: pd.DataFrame, window: float, fn: str, agg, by) -> pd.DataFrame:
    out = []
    for k in range(int((END - START) // STEP) + 1):
        t = START + k * STEP
        rows = df[(df.ts > t - window) & (df.ts <= t)].sort_values("ts").groupby(KEYS).value
        v = getattr(rows, {"avg": "mean"}.get(fn, fn))().rename("value").reset_index()
        if agg:
            v = v.groupby(list(by)).value.agg(agg.replace("avg", "mean")).reset_index() if by else \
                pd.DataFrame({"value": [v.value.agg(agg.replace("avg", "mean"))]})
        out.append(v.assign(t=t))
    return pd.concat(out).sort_values([*(by if agg else KEYS), "t"]).reset_index(drop=True)


@pytest.mark.parametrize("fn,window,agg,by", [("avg", 60, None, ()), ("last", 30, None, ()), ("max", 150, None, ()),
                                              ("count", 60, "sum", ()), ("avg", 150, "avg", ("node",)),
                                              ("min", 60, "max", ("metric",))])
def test_an_answer_over_hot_and_lake_rows_is_pandas_over_the_same_rows(full, fn, window, agg, by):
    tiers = readers.samples.tiers(full.con)
    assert tiers["hot_values"] and tiers["cold_values"]
    df = full.con.execute("SELECT node, scope, metric, ts, value FROM samples WHERE metric = 'm1'").df()
    q = rangeq.question([("metric", "=", "m1")], START, END, STEP, window, fn, agg, by)
    got = readers.ranges.answer(full.con, q).to_pandas()
    want = _pandas(df, window, fn, agg, by)
    assert list(got.columns) == [*q.labels, "t", "value"] and len(got) == len(want) > 0
    for c in q.labels:
        assert list(got[c]) == list(want[c])
    assert np.allclose(got.t, want.t) and np.allclose(got.value, want.value)


def _ask(con, path: str, **params):
    code, body, _ = routes.answer("GET", path, {k: v if isinstance(v, list) else [str(v)] for k, v in params.items()},
                                  b"", con, None)
    return code, json.loads(body)


def test_query_range_answers_prometheus_matrix(full):
    code, body = _ask(full.con, "/api/v1/query_range", start="2023-11-14T22:15:00.5Z", end=END, step="1m",
                      query='avg by (node) (avg_over_time(m1{node=~"n[01]"}[1m]))')
    assert code == 200 and body["status"] == "success" and body["data"]["resultType"] == "matrix"
    result = body["data"]["result"]
    assert [s["metric"] for s in result] == [{"node": "n0"}, {"node": "n1"}]
    code, rows = _ask(full.con, "/api/range", metric="m1", node=["n0"], start=START, end=END, step=STEP)
    assert code == 200 and [[r["t"], repr(r["value"])] for r in rows] == \
        [[t, v] for t, v in result[0]["values"]]
    code, body = _ask(full.con, "/api/v1/query_range", query='m0{node="n2"}', start=START, end=END, step=STEP)
    assert body["data"]["result"][0]["metric"] == {"node": "n2", "scope": "node", "__name__": "m0"}


@pytest.mark.parametrize("params,message", [
    ({"query": "rate(m1[5m])"}, "unsupported PromQL: function rate()"),
    ({"query": "m1 + 1"}, "unsupported PromQL: '+' at character 3"),
    ({"query": "sum without (node) (m1)"}, "unsupported PromQL: without"),
    ({"query": 'm1{job="x"}'}, "unsupported PromQL: label 'job'"),
    ({"step": "0"}, "step: expected a positive duration"),
    ({"step": "soon"}, "'soon': not a duration"),
    ({"start": str(END + 1)}, "is before start"),
    ({"start": "yesterday"}, "start: 'yesterday' is neither a Unix time nor an RFC 3339 one"),
    ({"step": "0.001"}, "exceeded maximum resolution of 11,000 points per timeseries"),
    ({"end": None}, "end: missing"),
])
def test_query_range_refuses_bad_questions_in_prometheus_shape(full, params, message):
    asked = {"query": "m1", "start": str(START), "end": str(END), "step": "60", **params}
    code, body = _ask(full.con, "/api/v1/query_range", **{k: v for k, v in asked.items() if v is not None})
    assert code == 400 and body["status"] == "error" and body["errorType"] == "bad_data"
    assert message in body["error"], body


@pytest.mark.parametrize("params,message", [({"fn": "median"}, "fn: expected one of avg"),
                                            ({"by": ["node"]}, "by: groups an aggregation across series"),
                                            ({"agg": "avg", "by": ["job"]}, "by: no label 'job'"),
                                            ({"step": "x"}, "step: expected a float, got 'x'"),
                                            ({"window": "-5"}, "window: expected a positive duration")])
def test_the_range_verb_names_a_bad_parameter(full, params, message):
    code, body = _ask(full.con, "/api/range", start=START, end=END, **params)
    assert code == 400 and message in body["error"]


@pytest.mark.parametrize("query", ["avg by (__name__) (avg_over_time(m0[2m]))", "count(m1)",
                                   "max_over_time({scope='node'}[1m])", "last_over_time(m1[90s])"])
def test_shards_partials_join_into_the_whole_store_s_answer(tmp_path, full, query):
    """Nodes split over two shards: the cluster's joined answer is the one store's (avg as sum + count)."""
    shards = [_store(tmp_path / "a.duckdb", ("n0",)), _store(tmp_path / "b.duckdb", ("n1", "n2"))]
    params = {"query": [query], "start": [str(START)], "end": [str(END)], "step": ["60"]}
    asked = cluster.asked(verbs.PROMQL_RANGE, params)
    replies = [cluster.Reply(name, *routes.answer("GET", verbs.PROMQL_RANGE.path, asked, b"", s.con, None, verbs.ARROW))
               for name, s in zip("ab", shards)]
    code, data, _, _ = cluster.merge(verbs.PROMQL_RANGE, params, replies, "application/json")
    joined = json.loads(data)
    _, whole = _ask(full.con, verbs.PROMQL_RANGE.path, **{k: v[0] for k, v in params.items()})
    assert code == 200 and joined["cluster"]["shards"] == ["a", "b"] and whole["data"]["result"]
    for got, want in zip(joined["data"]["result"], whole["data"]["result"], strict=True):
        assert got["metric"] == want["metric"]
        assert np.allclose([float(v) for _, v in got["values"]], [float(v) for _, v in want["values"]])
    for s in shards:
        s.close()


def test_raw_samples_between_two_times_come_from_hot_and_lake_rows(full):
    """readers.samples.series_between (the live causes' windows): one node's metric over a range that
    straddles the lake's cutoff is every stored row of it there, lake rows included."""
    t0 = T0 / 1000
    with full.cursor() as con:
        got = readers.samples.series_between(con, t0 + 250, t0 + 350, ["m0"], nodes=["n1"])
        want = con.execute("SELECT ts, value FROM samples WHERE node = 'n1' AND metric = 'm0' AND ts BETWEEN ? AND ? "
                           "ORDER BY ts", [t0 + 250, t0 + 350]).df()
    assert set(got["node"]) == {"n1"} and set(got["metric"]) == {"m0"}
    assert (got["ts"] < t0 + 300).any() and (got["ts"] >= t0 + 300).any()
    np.testing.assert_allclose(got["ts"], want["ts"])
    np.testing.assert_allclose(got["value"], want["value"])
