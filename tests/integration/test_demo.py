"""`causewatch demo` end to end: every capability that has landed shows up in its report."""

import json

from support import run_cli


def test_demo_reports_every_part(tmp_path):
    r = run_cli("demo", "--seconds", "4", "--dir", str(tmp_path / "demo"), "--json", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout.splitlines()[-1])
    frames = rep["frames_by_type"]
    assert frames["hello"] == 2 and frames["samples"] > 0 and frames["task"] > 0 and frames["region"] > 0
    assert rep["sample_values"] > 0 and any(m.startswith("node/") for m in rep["rows_per_metric"])
    assert {n["node"] for n in rep["nodes"]} == {"demo-node-1", "demo-node-2"}
    assert all(n["counters"].get("ok", 0) >= 4 for n in rep["nodes"])  # software events always open
    assert {p["kind"] for p in rep["phase_vectors"]} >= {"native", "python"}
    assert rep["tasks"][0]["app"] == "demo" and rep["tasks"][0]["tasks"] == frames["task"]
    assert rep["causal_edges"], "the causal job learned no model from the task records"
    assert rep["causal_submodels"] and all(s["formula"] for s in rep["causal_submodels"])
    assert rep["bottlenecks"], "the fuzzy job scored no region"
    pictures = rep["model_pictures"]
    assert [p["scope"] for p in pictures] == ["app:demo"]
    assert open(pictures[0]["svg"]).read().lstrip().startswith(("<?xml", "<svg"))
    assert {p["node"] for p in rep["probe_ranking"]} == {"demo-node-1", "demo-node-2"}
    assert all(0 <= p["cpu_bound_phases"] <= p["phases"] and p["phases"] >= 1 and p["ratio"] > 0
               and p["lo"] <= p["s_per_task"] <= p["hi"] and p["age_s"] >= 0 and p["kit"]
               for p in rep["probe_ranking"])
