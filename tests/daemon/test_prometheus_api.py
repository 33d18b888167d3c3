"""Prometheus' HTTP API beyond query_range, as Grafana's Prometheus data source asks it, on a real store with
hot and lake rows: the instant query (a vector, or a scalar for its "Test" button's 1+1), the label names,
a label's values and the series (its metric browser), each in Prometheus' shapes and errors, asked by GET
or a POSTed form (Grafana's default), and joined across two shards."""

import functools
import io
import json
import urllib.parse
from wsgiref.util import setup_testing_defaults

import pytest
from range_store import T0, hot_and_lake_store

from causewatch.daemon import cluster, remote, routes, store, verbs
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.httpapi import Api
from causewatch.daemon.worker import Host

END = T0 / 1000 + 550


def _store(path, nodes=("n0", "n1", "n2")) -> store.Store:
    """Each sample's value k + 1000 * the metric's number."""
    return hot_and_lake_store(path, nodes, value_sql="k + 1000 * metric[2:]::INTEGER")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    s = _store(tmp_path_factory.mktemp("prometheus") / "x.duckdb")
    yield s
    s.close()


def _ask(con, path: str, **params):
    code, body, ctype = routes.answer("GET", path, {k: v if isinstance(v, list) else [str(v)]
                                                    for k, v in params.items()}, b"", con, None)
    assert ctype == "application/json"
    return code, json.loads(body)


def test_an_instant_query_is_a_vector_of_the_range_answer_at_its_time(full):
    for query in ("m1", "max_over_time(m0[100s])", "sum by (__name__) (avg_over_time({scope='node'}[30s]))"):
        code, instant = _ask(full.con, "/api/v1/query", query=query, time=END)
        assert code == 200 and instant["status"] == "success" and instant["data"]["resultType"] == "vector"
        _, ranged = _ask(full.con, "/api/v1/query_range", query=query, start=END - 60, end=END, step=60)
        want = [{"metric": s["metric"], "value": s["values"][-1]} for s in ranged["data"]["result"]]
        assert instant["data"]["result"] == want and want, query
    _, one = _ask(full.con, "/api/v1/query", query='m1{node="n2"}', time=END)
    assert one["data"]["result"] == [{"metric": {"node": "n2", "scope": "node", "__name__": "m1"},
                                      "value": [int(END), "1550"]}]


def test_a_number_is_a_scalar_as_grafana_s_test_asks(full):
    code, body = _ask(full.con, "/api/v1/query", query="1+1", time="2023-11-14T22:13:20Z")
    assert code == 200 and body == {"status": "success", "data": {"resultType": "scalar", "result": [1700000000, "2"]}}
    _, body = _ask(full.con, "/api/v1/query", query="(2 - 3) * 4 / 0")
    assert body["data"]["result"][1] == "-Inf"


def test_label_names_values_and_series_in_prometheus_shapes(full):
    assert _ask(full.con, "/api/v1/labels") == (200, {"status": "success", "data": ["__name__", "node", "scope"]})
    assert _ask(full.con, "/api/v1/labels", **{"match[]": ["nothing_here"]})[1]["data"] == []
    assert _ask(full.con, "/api/v1/label/__name__/values", start=0, end=END)[1]["data"] == ["m0", "m1"]
    assert _ask(full.con, "/api/v1/label/node/values", **{"match[]": ['m1{node=~"n[12]"}']})[1]["data"] == ["n1", "n2"]
    assert _ask(full.con, "/api/v1/label/job/values")[1] == {"status": "success", "data": []}
    code, body = _ask(full.con, "/api/v1/series", **{"match[]": ['{node="n0"}', "m0"]})
    want = [("m0", "n0"), ("m0", "n1"), ("m0", "n2"), ("m1", "n0")]
    assert code == 200 and body["data"] == [{"__name__": m, "node": n, "scope": "node"} for m, n in want]


@pytest.mark.parametrize("path,params,message", [
    ("/api/v1/series", {}, "match[]: give at least one series selector"),
    ("/api/v1/series", {"match[]": ["rate(m0[5m])"]}, "match[]: 'rate(m0[5m])' is not a series selector"),
    ("/api/v1/labels", {"match[]": ['m0{job="x"}']}, "unsupported PromQL: label 'job'"),
    ("/api/v1/query", {"query": "rate(m0[5m])"}, "unsupported PromQL: function rate()"),
    ("/api/v1/query", {"query": "m0", "time": "soon"}, "time: 'soon' is neither a Unix time nor an RFC 3339 one"),
    ("/api/v1/query", {"query": "m0", "when": "1"}, "when: /api/v1/query takes no such parameter"),
])
def test_bad_requests_are_refused_in_prometheus_shape(full, path, params, message):
    code, body = _ask(full.con, path, **params)
    assert code == 400 and body["status"] == "error" and body["errorType"] == "bad_data"
    assert message in body["error"], body


def _call(app, path, method="GET", query="", body=b"", ctype="application/x-www-form-urlencoded"):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "REMOTE_ADDR": "10.0.0.9",
               "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": ctype, "wsgi.input": io.BytesIO(body)}
    setup_testing_defaults(environ)
    started = {}
    data = b"".join(app(environ, lambda status, headers: started.update(status=status)))
    return started["status"], data


def test_a_posted_form_is_answered_as_its_get_from_any_host(full):
    exporter = Exporter()
    app = Api(exporter, functools.partial(remote.answer, call=Host(full.cursor, full.run, print, exporter)),
              token="s3cret")
    asked = {"query": "avg by (node) (avg_over_time(m1[1m]))", "start": str(END - 120), "end": str(END), "step": "60"}
    got = _call(app, "/api/v1/query_range", query=urllib.parse.urlencode(asked))
    assert got[0] == "200 OK" and json.loads(got[1])["data"]["result"]
    form = urllib.parse.urlencode({k: v for k, v in asked.items() if k != "step"}).encode()
    assert _call(app, "/api/v1/query_range", "POST", query="step=60", body=form) == got
    status, data = _call(app, "/api/v1/label/__name__/values", "POST", body=b"match%5B%5D=m0")
    assert status == "200 OK" and json.loads(data)["data"] == ["m0"]
    status, data = _call(app, "/api/v1/query", "POST", body=b"query=1%2B1&time=1700000000")
    assert json.loads(data)["data"] == {"resultType": "scalar", "result": [1700000000, "2"]}
    # not a form: no GET route takes it, and a POST from elsewhere needs the token
    status, data = _call(app, "/api/v1/query_range", "POST", body=json.dumps(asked).encode(), ctype="application/json")
    assert status == "403 Forbidden"


def test_two_shards_join_into_the_whole_store_s_answers(tmp_path, full):
    shards = [_store(tmp_path / "a.duckdb", ("n0",)), _store(tmp_path / "b.duckdb", ("n1", "n2"))]

    def whole_and_joined(path, params):
        verb, named = verbs.find("GET", path)
        asked = cluster.asked(verb, params)
        replies = [cluster.Reply(name, *routes.answer("GET", path, asked, b"", s.con, None, verbs.ARROW))
                   for name, s in zip("ab", shards)]
        code, data, _, _ = cluster.merge(verb, {**params, **named}, replies, "application/json")
        joined = json.loads(data)
        assert code == 200 and joined.pop("cluster")["shards"] == ["a", "b"]
        return _ask(full.con, path, **{k: v if len(v) > 1 else v[0] for k, v in params.items()})[1], joined

    for path, params in [("/api/v1/label/node/values", {}), ("/api/v1/labels", {}),
                         ("/api/v1/series", {"match[]": ["m1"]}),
                         ("/api/v1/query", {"query": ["max by (__name__) (m0)"], "time": [str(END)]}),
                         ("/api/v1/query", {"query": ["last_over_time({node=~'n[01]'}[10s])"], "time": [str(END)]})]:
        whole, joined = whole_and_joined(path, params)
        assert joined == whole and whole["data"], path
    for s in shards:
        s.close()
