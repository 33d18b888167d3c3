"""`causewatch demo` end to end: every capability that has landed shows up in its report."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support import StoreVerbs, run_cli

from causewatch.commands.demo import report, sections, shards
from causewatch.commands.demo.parts import SCOPE

# numpy's own Python frames a reduction called by the workload spends its time in
NUMPY_FILES = ("_methods.py", "fromnumeric.py", "numeric.py", "_function_base_impl.py")


def test_demo_reports_every_part(tmp_path):
    """A short run with no time to wait for a baseline (--wait 0): every part shows in the report, the
    story is cut short before the hog, and the last line says so and why (exit 3); then two shards."""
    r = run_cli("demo", "--seconds", "4", "--wait", "0", "--dir", str(tmp_path / "demo"), "--json", "--shards", "2",
                timeout=400)
    assert r.returncode == 3, r.stderr[-3000:]
    rep = json.loads(r.stdout.splitlines()[-1])
    assert rep["story"]["shown"] == "no" and rep["story"]["bound_s"] > 0
    assert r.stderr.splitlines()[-1] == rep["story"]["line"]
    assert rep["story"]["line"].startswith("story NOT shown: the hog never ran; no baseline model within the "
                                           "calm start's 1 s")
    frames = rep["frames_by_type"]
    assert frames["hello"] == 2 and frames["samples"] > 0 and frames["task"] > 0 and frames["region"] > 0
    assert rep["sample_values"] > 0 and any(m.startswith("node/") for m in rep["rows_per_metric"])
    tiers = rep["store_tiers"]      # a run this short may end before its 20 s hot window moves anything
    assert tiers["hot_values"] + tiers["cold_values"] == rep["sample_values"] and rep["store_bytes"] > 0
    assert tiers["cold_values"] == 0 or 0 < tiers["cold_bytes_per_value"] < 16
    assert {n["node"] for n in rep["nodes"]} == {"demo-node-1", "demo-node-2"}
    assert all(n["counters"].get("ok", 0) >= 4 for n in rep["nodes"])  # software events always open
    assert {p["kind"] for p in rep["phase_vectors"]} >= {"native", "python"}
    # the heaviest phases are the workload's code: one of its functions, or numpy's under one of them
    # (the CPU-clock sampler sees the time inside a reduction, which a GIL-bound timer thread never did;
    # a loaded run's phase may be all reduction: "_methods.py:_sum 89%, masterworker.py:_random 11%")
    heaviest = [p["top_functions"] for p in rep["phases"][:3]]
    assert heaviest and sum("masterworker.py:_" in t for t in heaviest) >= min(2, len(heaviest)), heaviest
    assert all(f.split(":")[0] in ("masterworker.py", *NUMPY_FILES) for t in heaviest
               for f in t.replace(",", " ").split() if ":" in f), heaviest
    assert rep["tasks"][0]["app"] == "demo" and rep["tasks"][0]["tasks"] == frames["task"]
    assert rep["causal_edges"], "the causal job learned no model from the task records"
    assert all(1 <= e["held_by"] <= e["versions"] and e["stable"] == (e["held_by"] >= report.STABLE * e["versions"]
               and e["strength_bits"] >= 0.1) for e in rep["causal_edges"])
    assert rep["causal_submodels"] and all(s["formula"] for s in rep["causal_submodels"])
    assert rep["bottlenecks"], "the fuzzy job scored no region"
    pictures = rep["model_pictures"]
    assert [p["scope"] for p in pictures] == ["app:demo"]
    assert open(pictures[0]["svg"]).read().lstrip().startswith(("<?xml", "<svg"))
    assert all(p["severity"] == "page" and p["picture"].endswith("/api/model?scope=app%3Ademo&format=svg")
               for p in rep["page"])   # the alerts its anomalies would page with (none in a run this short)
    (hog,) = rep["contention_hog"]
    assert hog["cpus"] and hog["started_s"] is None and hog["shown"].startswith("no: the hog never ran")
    assert all(a["when"] == "the hog never ran" and not a["cause"].startswith("the hog")
               and (a["rows"] is None or a["rows"] > 0) for a in rep["anomalies"])
    assert rep["causes"] == []   # no story's anomaly to rank the causes of (tests/integration/test_live_path.py)
    (where,) = rep["analysis"]   # no cluster in the demo: the learns ran in the daemon's jobs worker
    assert where["runs_on"] == "local" and where["learns_local"] >= 1 and where["learns_cluster"] == 0
    assert {p["node"] for p in rep["probe_ranking"]} == {"demo-node-1", "demo-node-2"}
    assert all(0 <= p["cpu_bound_phases"] <= p["phases"] and p["phases"] >= 1 and p["ratio"] > 0
               and p["lo"] <= p["s_per_task"] <= p["hi"] and p["age_s"] >= 0 and p["kit"]
               for p in rep["probe_ranking"])
    told, best = rep["brokers"], rep["probe_ranking"][0]["node"]          # in rank order
    assert told["slurm"][0] == (f"scontrol update NodeName={best} Weight=1 AvailableFeatures=cw_demo_best "
                                "ActiveFeatures=cw_demo_best") and len(told["slurm"]) == 2
    assert set(told["htcondor"]) == {"demo-node-1", "demo-node-2"} and all(
        set(a) == {f"causewatch_demo_{k}" for k in ("seconds", "seconds_hi", "tasks_per_hour", "probe_time")}
        for a in told["htcondor"].values())
    assert {h["Host"]: h["Score"] for h in told["kubernetes"]}[best] == 10
    check_shards(rep["shards"])


def check_shards(rep: dict) -> None:
    """Every node held by the shard its name hashes to, asked through shard a for both; each shard wrote
    its own lake folder; with b stopped, the answer is partial and names it."""
    assert rep["shards"] == ["a", "b"] and rep["answered"] == {"shards": ["a", "b"], "missing": {}, "partial": False}
    assert rep["header"] == "a,b" and rep["frames"] > 0 and rep["samples"] > 0
    where = rep["nodes"]
    assert len(where) == shards.NODES and all(w["shard"] == w["hashed_to"] for w in where.values())
    assert {w["shard"] for w in where.values()} == {"a", "b"}   # the six names hash to both (fixed names)
    assert set(rep["lake_files"]) == {"a", "b"} and all(n > 0 for n in rep["lake_files"].values())
    then = rep["then"]
    assert then["cluster"]["partial"] is True and list(then["cluster"]["missing"]) == ["b"]
    assert then["header"].startswith("b: ") and then["nodes"] == sum(w["shard"] == "a" for w in where.values())


def test_the_report_names_each_phase_s_top_functions(tmp_path):
    """The phases section says what each phase does, heaviest first, the rest counted."""
    from support import bbv_frames

    from causewatch.daemon.store import Store
    kinds = [{"masterworker.py:_float": 95, "numeric.py:ones": 5}, {"masterworker.py:_dict": 60, "x.py:<listcomp>": 40},
             {"masterworker.py:_integer": 100}]
    store = Store(str(tmp_path / "cw.duckdb"))
    store.commit_frames(bbv_frames([("n", "b", i + 1, SCOPE, "python", float(i), i + 1.0, key, count)
                                    for i in range(60) for key, count in kinds[min(i // 10, 2)].items()]))
    with store.cursor():
        api = StoreVerbs(store)
        rows = sections.phases(api)
        assert [(r["weight"], r["intervals"]) for r in rows] == [(0.667, 40), (0.167, 10), (0.167, 10)]
        assert rows[0]["top_functions"] == "masterworker.py:_integer 100%"
        assert {r["top_functions"] for r in rows[1:]} == {"masterworker.py:_float 95%, numeric.py:ones 5%",
                                                          "masterworker.py:_dict 60%, x.py:<listcomp> 40%"}
        assert sections.phases(api, shown=1)[-1]["more"].startswith("2 lighter phases: causewatch phases")
    store.close()


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_one_ctrl_c_while_the_kit_builds_stops_the_demo_with_a_summary(tmp_path, inherited):
    """A terminal's Ctrl-C (SIGINT to the demo's whole process group) while the probe kit builds: the demo
    stops at once, with a line saying what it was doing and had done, no figures of the cut run and no
    tracebacks, exit 130; also where its shell left SIGINT ignored (a script's background job)."""
    demo_dir = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "demo", "--seconds", "4", "--wait", "0",
                             "--dir", str(demo_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            process_group=0, preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
    try:
        seen = [proc.stdout.readline()]
        while seen[-1] and "building the probe kit" not in seen[-1]:
            seen.append(proc.stdout.readline())
        assert seen[-1], "".join(seen)
        time.sleep(3)   # the build under way: its reference runs' workers started
        os.killpg(proc.pid, signal.SIGINT)
        out = "".join(seen) + proc.communicate(timeout=20)[0]   # a generous bound: it stops in about a second
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("demo interrupted after") and "while building the probe kit" in last, out
    assert "values/s" not in out and "Traceback" not in out, out
    assert not [p for p in os.listdir("/proc") if p.isdigit() and str(demo_dir) in _cmdline(p)], \
        "the kit build outlived the demo"


def _cmdline(pid: str) -> str:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    return ""
