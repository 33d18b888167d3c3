"""`causewatch demo` end to end: every capability that has landed shows up in its report."""

import json

import pyarrow as pa
from support import run_cli

from causewatch.commands import demo
from causewatch.daemon.store import Store, results


def test_demo_reports_every_part(tmp_path):
    r = run_cli("demo", "--seconds", "4", "--dir", str(tmp_path / "demo"), "--json", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.splitlines()[-1])
    frames = rep["frames_by_type"]
    assert frames["hello"] == 2 and frames["samples"] > 0 and frames["task"] > 0 and frames["region"] > 0
    assert rep["sample_values"] > 0 and any(m.startswith("node/") for m in rep["rows_per_metric"])
    tiers = rep["store_tiers"]      # the demo's 20 s hot window: the probes' minute of samples went cold
    assert tiers["hot_values"] + tiers["cold_values"] == rep["sample_values"] and tiers["cold_values"] > 0
    assert 0 < tiers["cold_bytes_per_value"] < 16 and rep["store_bytes"] > tiers["cold_bytes"]
    assert {n["node"] for n in rep["nodes"]} == {"demo-node-1", "demo-node-2"}
    assert all(n["counters"].get("ok", 0) >= 4 for n in rep["nodes"])  # software events always open
    assert {p["kind"] for p in rep["phase_vectors"]} >= {"native", "python"}
    assert rep["tasks"][0]["app"] == "demo" and rep["tasks"][0]["tasks"] == frames["task"]
    assert rep["causal_edges"], "the causal job learned no model from the task records"
    assert all(1 <= e["held_by"] <= e["versions"] and e["stable"] == (e["held_by"] >= demo.STABLE * e["versions"]
               and e["strength_bits"] >= 0.1) for e in rep["causal_edges"])
    assert rep["causal_submodels"] and all(s["formula"] for s in rep["causal_submodels"])
    assert rep["bottlenecks"], "the fuzzy job scored no region"
    pictures = rep["model_pictures"]
    assert [p["scope"] for p in pictures] == ["app:demo"]
    assert open(pictures[0]["svg"]).read().lstrip().startswith(("<?xml", "<svg"))
    (hog,) = rep["contention_hog"]   # 80 tasks are too few for the hog's stretch: the report says why
    assert hog["cpus"] and hog["shown"].startswith(("yes:", "in part:", "no"))
    assert all(a["when"] and (a["rows"] is None or a["rows"] > 0) for a in rep["anomalies"])
    assert {p["node"] for p in rep["probe_ranking"]} == {"demo-node-1", "demo-node-2"}
    assert all(0 <= p["cpu_bound_phases"] <= p["phases"] and p["phases"] >= 1 and p["ratio"] > 0
               and p["lo"] <= p["s_per_task"] <= p["hi"] and p["age_s"] >= 0 and p["kit"]
               for p in rep["probe_ranking"])


def test_the_report_times_each_anomaly_against_the_hog(tmp_path):
    """A real store holding what the demo's hog should cause: a new dependency on the CPU wait raised
    while the hog ran and resolved after it stopped, and a model edge still open."""
    st = Store(str(tmp_path / "cw.duckdb"))
    origin = 1_000.0
    row = {"scope": "app:demo", "baseline_id": 3, "model_id": 7, "score": 1.43, "threshold": 1.06}

    def write(con):
        raised = results.raise_anomaly(con, dict(row, kind="markov_violation", src="cpu_seconds", dst=demo.WAIT,
                                               opened=origin + 41.0, evidence={"rows": 44}))
        results.resolve_anomaly(con, raised, origin + 82.5)
        results.raise_anomaly(con, dict(row, kind="edge_appeared", src="cpu_seconds", dst=demo.WAIT,
                                      opened=origin + 50.0, evidence={"strength_bits": 0.2}))
    st.run(write)
    graph = lambda *edges: {"nodes": ["a", "b", "c", "d"], "edges": [   # noqa: E731
        {"src": s, "dst": d, "directed": True, "strength": v} for s, d, v in edges]}
    for scope, edges in (("app:demo", [("a", "b", 0.9), ("b", "c", 0.3)]), ("app:other", [("a", "b", 1.0)]),
                         ("app:demo", [("b", "a", 0.8), ("c", "d", 0.05)])):
        st.run(lambda con: results.insert_model(con, scope, (origin, origin + 9), 100, origin + 9, graph(*edges),
                                              pa.Table.from_pylist([dict(src=s, dst=d, strength=v, directed=True)
                                                                    for s, d, v in edges])))
    hog = demo.Hog(origin, "http://127.0.0.1:9")   # no daemon: the test sets the stretch itself
    hog.started, hog.stopped = 35.0, 72.0
    try:
        rep = json.loads(json.dumps(demo.report(st.cursor(), 90.0, tmp_path, hog)))
    finally:
        st.close()
    first, second = rep["anomalies"]
    assert first == {"scope": "app:demo", "kind": "markov_violation", "src": "cpu_seconds", "dst": demo.WAIT,
                     "state": "resolved", "opened_s": 41.0, "resolved_s": 82.5, "score": 1.43, "threshold": 1.06,
                     "rows": 44, "when": "raised +6.0 s from the hog's start, resolved +10.5 s from its stop"}
    assert second["state"] == "open" and second["resolved_s"] is None and second["when"].endswith("still open")
    # the newest model's edges, counted over its scope's versions either way round; weak ones are not stable
    assert rep["causal_edges"] == [
        {"src": "b", "dst": "a", "strength_bits": 0.8, "directed": True, "held_by": 2, "versions": 2, "stable": True},
        {"src": "c", "dst": "d", "strength_bits": 0.05, "directed": True, "held_by": 1, "versions": 2, "stable": False}]
    (shown,) = rep["contention_hog"]
    assert (shown["started_s"], shown["stopped_s"]) == (35.0, 72.0) and shown["shown"].startswith("yes:")
