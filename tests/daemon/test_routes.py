"""The API's routes in this process, on a real DuckDB file, through the very path the API worker takes
(remote.answer, its reads and writes asked of a worker.Host): no daemon, no socket, no child process."""

import json
import time

import pyarrow as pa
import pytest

from causewatch import wire
from causewatch.daemon import remote, verbs
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.store import Store
from causewatch.daemon.store.results import insert_model
from causewatch.daemon.worker import Host


@pytest.fixture
def host(tmp_path):
    store = Store(str(tmp_path / "r.duckdb"))
    now = time.time()
    store.commit_frames([wire.Frame("region", "n1", "b", i, now, {
        "app": "3dpic", "region": name, "start": now - 5, "duration": 1.0, "calls": 1,
        "counters": {"L2_TCM": ratio, "L2_TCA": 1.0}}) for i, (name, ratio) in enumerate(
        [("PARTICLE_LOAD", 0.95), ("MPI_SEND", 0.655), ("FIELD_SOLVE", 0.2)], 1)])
    store.commit_frames([wire.Frame("task", "n1", "b", 10 + i, now, {
        "app": "3dpic", "task_id": f"t{i}", "start": now - 4 + i, "duration": 0.5 + i, "params": {"size": 10 * i},
        "counters": {"instructions": 1e6 * i} if i else {}}) for i in range(3)])
    store.commit_frames([
        wire.Frame("samples", "n1", "b", 20, now, wire.samples_body([now - 2, now - 1, now], ["cpu", "rss"],
                                                                     [[0.1, 1e6], [0.2, float("nan")], [0.3, 2e6]])),
        *(wire.Frame("bbv", "n1", "b", 21 + i, now, {"target": target, "kind": "python", "start": now - 1,
                                                       "end": now, "vector": {"keys": ["a.py:f"], "counts": [3]}})
          for i, target in enumerate(["app:3dpic", "app:3dpic", "app:lu", "app:mw"])),
        *(wire.Frame("probe_result", node, "b", 30 + i, now, {"app": app, "kit": "k1", "predicted_seconds": 5.0,
                                                              "lo": 4.5, "hi": 5.5, "ratio": 1.0, "probe_seconds": 0.2})
          for i, (node, app) in enumerate([("n1", "mw"), ("n2", "mw"), ("n1", "lu")]))])
    edges = pa.table({"src": ["a"], "dst": ["b"], "strength": [0.5], "directed": [True]})
    store.run(lambda con: insert_model(con, "app:3dpic", (0.0, 1.0), 10, now, {"nodes": ["a", "b"]}, edges))
    yield Host(store.cursor, store.run, lambda *a: False, Exporter())
    store.close()


def ask(host, method, path, raw=b"", accept="", **params):
    code, body, ctype = remote.answer(method, path, {k: [str(v)] for k, v in params.items()}, raw, accept, call=host)
    return code, json.loads(body) if ctype == "application/json" else body, ctype


def test_a_get_route_reads_the_store_through_the_host(host):
    code, rows, _ = ask(host, "GET", "/api/query", q="(L2_TCM/L2_TCA is high)", min_degree=0.1)
    assert code == 200 and [r["region"] for r in rows] == ["PARTICLE_LOAD"]
    code, stats, _ = ask(host, "GET", "/api/stats")
    assert stats["tables"]["regions"] == 3 and stats["tables"]["models"] == 1
    code, counts, _ = ask(host, "GET", "/api/counts")
    assert code == 200 and (counts["regions"], counts["tasks"], counts["phase vectors"]) == (3, 3, 4)
    code, overview, _ = ask(host, "GET", "/api/overview")
    assert code == 200 and overview["tasks"] == [{"app": "3dpic", "tasks": 3, "mean_seconds": 1.5}]
    assert [(e["src"], e["dst"], e["versions"]) for e in overview["causal_edges"]] == [("a", "b", 1)]


def test_a_dataframe_route_answers_json_records_unless_arrow_is_accepted(host):
    code, rows, ctype = ask(host, "GET", "/api/regions")   # what curl gets
    assert code == 200 and ctype == "application/json"
    regions = [r for r in rows if r["source"] == "region"]
    assert sorted(r["region"] for r in regions) == ["FIELD_SOLVE", "MPI_SEND", "PARTICLE_LOAD"]
    assert all(r["samples"] is None for r in regions)   # NaN is null
    code, body, ctype = ask(host, "GET", "/api/regions", accept=f"{verbs.ARROW}, application/json")
    assert code == 200 and ctype == verbs.ARROW
    assert pa.ipc.open_stream(body).read_all().to_pylist() == rows


def test_every_dataframe_route_answers_json(host):
    code, body, ctype = ask(host, "GET", "/api/samples", metric="rss")
    assert code == 200 and ctype == "application/json" and [r["value"] for r in body] == [1e6, None, 2e6]
    code, body, ctype = ask(host, "GET", "/api/bbv-targets")
    assert code == 200 and body[0] == {"target": "app:3dpic", "kind": "python", "vectors": 2}
    code, body, ctype = ask(host, "GET", "/api/bbv", target="app:lu", kind="python")
    assert code == 200 and [(r["key"], r["count"]) for r in body] == [("a.py:f", 3)]
    code, body, _ = ask(host, "GET", "/api/tasks")   # the key map travels beside the rows
    assert body["attrs"] == {"params": {"p0": "size"}, "counters": {"c0": "instructions"}}
    assert [(r["p0"], r["c0"], r["duration"]) for r in body["records"]] == \
        [("0", None, 0.5), ("10", 1e6, 1.5), ("20", 2e6, 2.5)]


def test_limit_cuts_the_frame_verbs(host):
    everything = ask(host, "GET", "/api/regions")[1]
    assert len(everything) == 6 and ask(host, "GET", "/api/regions", limit=2)[1] == everything[:2]
    assert [r["time_share"] for r in everything] == sorted((r["time_share"] for r in everything), reverse=True)
    assert [r["duration"] for r in ask(host, "GET", "/api/tasks", limit=2)[1]["records"]] == [0.5, 1.5]
    assert ask(host, "GET", "/api/tasks", limit=0)[1]["records"] == []
    assert [r["value"] for r in ask(host, "GET", "/api/samples", metric="cpu", limit=2)[1]] == [0.1, 0.2]
    assert [r["target"] for r in ask(host, "GET", "/api/bbv-targets", limit=2)[1]] == ["app:3dpic", "app:lu"]
    code, body, ctype = ask(host, "GET", "/api/tasks", accept=verbs.ARROW, limit=1)
    assert ctype == verbs.ARROW and pa.ipc.open_stream(body).read_all().num_rows == 1


@pytest.mark.parametrize("path,params,message", [
    ("/api/tasks", {"limit": "-1"}, "limit: expected a count, got '-1'"),
    ("/api/regions", {"limit": "two"}, "limit: expected a count, got 'two'"),
    ("/api/anomalies", {"limit": "-5"}, "limit: expected a count, got '-5'"),
    ("/api/learn", {"data": "tasks", "rows": "-1"}, "rows: expected a count, got '-1'"),
    ("/api/bbv", {"target": "app:3dpic", "kind": "python", "limit": "2"},
     "limit: /api/bbv takes no such parameter (takes target, kind)"),
])
def test_a_bad_or_unknown_parameter_is_a_400_naming_it(host, path, params, message):
    code, reply, _ = ask(host, "GET", path, **params)
    assert code == 400 and reply["error"] == message


def test_a_post_route_writes_through_the_host(host):
    code, reply, _ = ask(host, "POST", "/api/baseline", scope="app:3dpic", model_id=1)
    assert code == 200 and reply == {"scope": "app:3dpic", "baseline": 1}
    assert ask(host, "GET", "/api/model", scope="app:3dpic")[1]["baseline"]["how"] == "pinned"


def test_bad_input_is_a_400_or_404_naming_it(host):
    assert ask(host, "GET", "/api/query", q="(L2_TCM is )")[:2][0] == 400
    code, reply, _ = ask(host, "GET", "/api/rank")
    assert code == 400 and reply["error"] == "GET /api/rank needs ?app=NAME"
    code, reply, _ = ask(host, "POST", "/api/baseline", scope="app:3dpic", model_id=9)
    assert code == 400 and "no model 9" in reply["error"]
    code, reply, _ = ask(host, "POST", "/api/kits", raw=b"{not json")
    assert code == 400 and reply["error"].startswith("body: not JSON")
    code, reply, _ = ask(host, "GET", "/api/nothing")
    assert code == 404 and "/api/stats" in reply["error"]


def test_what_is_not_there_is_a_404_naming_what_is(host, tmp_path):
    code, reply, _ = ask(host, "GET", "/api/rank", app="mw")
    assert code == 200 and [n["node"] for n in reply["nodes"]] == ["n1", "n2"]
    code, reply, _ = ask(host, "GET", "/api/rank", app="nosuchapp")
    assert (code, reply["error"]) == (404, "no probe results for app 'nosuchapp'; apps with results: lu, mw")
    code, reply, _ = ask(host, "GET", "/api/model", scope="app:nope")
    assert (code, reply["error"]) == (404, "scope 'app:nope' has no model (scopes with models: app:3dpic)")
    assert ask(host, "GET", "/api/model", scope="app:3dpic", model_id=9)[0] == 404
    empty = Store(str(tmp_path / "empty.duckdb"))
    try:
        nothing = Host(empty.cursor, empty.run, lambda *a: False, Exporter())
        code, reply, _ = ask(nothing, "GET", "/api/model")
        assert (code, reply["error"]) == \
            (404, "no model learnt yet (the causal job learns one per app once its tasks arrive)")
        code, reply, _ = ask(nothing, "GET", "/api/rank", app="mw")
        assert (code, reply["error"]) == (404, "no probe results for app 'mw'; no app has any yet: build a kit "
                                                "(causewatch probe build) and register it (probe register)")
        kit = {"format": "causewatch-probe-kit/1", "app": "mw", "kit": "k1", "reference_seconds": 10.0,
               "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"},
               "phases": [{"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 100, "seed": 1},
                           "ref_seconds": 0.01, "ref_se": 0.001}]}
        assert ask(nothing, "POST", "/api/kits", raw=json.dumps({"manifest": kit}).encode())[0] == 200
        code, reply, _ = ask(nothing, "GET", "/api/rank", app="mw")
        assert (code, reply["error"]) == \
            (404, "no probe results for app 'mw'; its kit is registered, and the nodes' probes have not come back yet "
                  "(causewatch probe status)")
    finally:
        empty.close()
